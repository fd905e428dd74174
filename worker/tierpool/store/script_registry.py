"""The one way tierpool runs its Lua scripts (tierpool.scripts): by SHA1 (EVALSHA), loading them (SCRIPT LOAD)
when the server answers NOSCRIPT (a fresh or restarted server, or in a cluster a primary that has not seen them),
then sending the refused calls again. A refused call did nothing, so sending it again is safe.

In pipelines every call is queued by its command name (redis-py's cluster pipelines refuse the ``.evalsha()``
method, not the command). SCRIPT LOAD goes to every primary in cluster mode. A pipeline that cannot go again after
a NOSCRIPT sends the whole source instead (:func:`eval_command`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from redis.exceptions import NoScriptError

from tierpool import scripts
from tierpool.scripts import evalsha_command
from tierpool.store.connection import AsyncRedis, SyncRedis
from tierpool.store.replication import WaitGate

ScriptCall = tuple[str, Sequence[str], Sequence[Any]]
"""(script name, keys, args)."""
BATCH_ROUNDS = 2
"""A batch goes once, then once more for the calls refused with NOSCRIPT after loading the scripts."""


def queue(pipe: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> None:
    """Queue one call by EVALSHA on a sync or async pipeline, plain or cluster."""
    pipe.execute_command(*evalsha_command(name, keys, args))


def load_sync(client: SyncRedis, names: Iterable[str]) -> None:
    for name in names:
        client.script_load(scripts.source(name))


async def load_async(client: AsyncRedis, names: Iterable[str]) -> None:
    for name in names:
        await client.script_load(scripts.source(name))


async def run_async(
    client: AsyncRedis, name: str, keys: Sequence[str], args: Sequence[Any], reload: Iterable[str] = ()
) -> Any:
    """Run one script; after a NOSCRIPT, load it and ``reload`` (the other scripts the caller runs, which the
    server lost too), and run it once more."""
    try:
        return await client.evalsha(scripts.sha(name), len(keys), *keys, *args)
    except NoScriptError:
        await load_async(client, dict.fromkeys([*reload, name]))
        return await client.evalsha(scripts.sha(name), len(keys), *keys, *args)


async def run_batch_async(
    client: AsyncRedis, calls: Sequence[ScriptCall], gate: WaitGate | None = None, reload: Iterable[str] = ()
) -> list[Any]:
    """Run many scripts in one pipelined round trip; each script stays atomic on its own. With ``gate``, its WAIT
    follows them in the same round trip (see tierpool.store.replication). The calls refused with NOSCRIPT go again
    once, after loading their scripts and ``reload``.

    Returns one result per call, an exception object where that call failed.
    """
    results: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    for _ in range(BATCH_ROUNDS):
        pipe = client.pipeline(transaction=False)
        for i in todo:
            queue(pipe, *calls[i])
        wait = gate.queue(pipe) if gate else None
        replies = await pipe.execute(raise_on_error=False)
        replies = gate.split(replies, wait, f"{len(todo)} outcome script(s)") if gate else replies
        for i, reply in zip(todo, replies, strict=True):
            results[i] = reply
        todo = [i for i in todo if isinstance(results[i], NoScriptError)]
        if not todo:
            break
        await load_async(client, dict.fromkeys([*reload, *(calls[i][0] for i in todo)]))
    return results
