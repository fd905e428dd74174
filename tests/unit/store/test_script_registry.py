"""How tierpool runs its scripts (tierpool.store.script_registry): by SHA1, loading them when the server answers
NOSCRIPT and sending only the refused calls again."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from tierpool import scripts
from tierpool.store import script_registry
from tierpool.store.replication import Wait, WaitGate


class Server:
    """Knows the scripts loaded into it; a call of any other script is refused with NOSCRIPT."""

    def __init__(self, known: Iterable[str] = ()) -> None:
        self.known = set(known)
        self.loaded: list[str] = []
        self.calls: list[tuple[Any, ...]] = []

    def answer(self, command: tuple[Any, ...]) -> Any:
        self.calls.append(command)
        if command[0] == "WAIT":
            return 1
        if command[0] == "EVALSHA" and command[1] not in self.known:
            return NoScriptError("NOSCRIPT No matching script.")
        if command[3] == "broken":
            return ResponseError("OOM command not allowed")
        return f"ran {command[1]}"

    async def script_load(self, source: str) -> str:
        self.known.add(scripts.sha1_hex(source))
        self.loaded.append(next(name for name, s in scripts.by_name().items() if s.source == source))
        return scripts.sha1_hex(source)

    async def evalsha(self, *command: Any) -> Any:
        reply = self.answer(("EVALSHA", *command))
        if isinstance(reply, Exception):
            raise reply
        return reply

    def pipeline(self, transaction: bool) -> Pipe:
        return Pipe(self)


class Pipe:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.queued: list[tuple[Any, ...]] = []

    def execute_command(self, *command: Any) -> None:
        self.queued.append(command)

    async def execute(self, raise_on_error: bool) -> list[Any]:
        assert not raise_on_error
        return [self.server.answer(command) for command in self.queued]


def known(*names: str) -> set[str]:
    return {scripts.sha(name) for name in names}


def test_a_call_is_queued_by_sha_and_by_command_name() -> None:
    pipe = Pipe(Server())
    script_registry.queue(pipe, "LEASE", ["k"], ["me", 100])
    assert pipe.queued == [("EVALSHA", scripts.sha("LEASE"), 1, "k", "me", 100)]
    assert scripts.eval_command("CANCEL", ["r", "m"], [5]) == ("EVAL", scripts.source("CANCEL"), 2, "r", "m", 5)


async def test_a_known_script_runs_without_loading() -> None:
    server: Any = Server(known("LEASE"))
    reply = await script_registry.run_async(server, "LEASE", ["k"], ["me", 100])
    assert reply == f"ran {scripts.sha('LEASE')}"
    assert server.loaded == []


async def test_after_noscript_the_script_and_the_others_named_are_loaded_and_it_runs_again() -> None:
    server: Any = Server()
    reply = await script_registry.run_async(server, "LEASE", ["k"], ["me"], reload=["TAKE", "LEASE"])
    assert reply == f"ran {scripts.sha('LEASE')}"
    assert server.loaded == ["TAKE", "LEASE"]
    assert [call[1] for call in server.calls] == [scripts.sha("LEASE")] * 2


async def test_a_batch_sends_again_only_the_calls_refused_with_noscript() -> None:
    server: Any = Server(known("LEASE", "RELEASE"))
    calls = [("LEASE", ["a"], ["x"]), ("TAKE", ["b"], ["y"]), ("RELEASE", ["broken"], []), ("TRIM", ["c"], ["z"])]
    replies = await script_registry.run_batch_async(server, calls, reload=["LEASE"])
    assert replies[0] == f"ran {scripts.sha('LEASE')}" and replies[1] == f"ran {scripts.sha('TAKE')}"
    assert isinstance(replies[2], ResponseError) and not isinstance(replies[2], NoScriptError)
    assert replies[3] == f"ran {scripts.sha('TRIM')}"
    assert server.loaded == ["LEASE", "TAKE", "TRIM"]
    assert [call[3] for call in server.calls] == ["a", "b", "broken", "c", "b", "c"]


async def test_a_batch_gives_up_after_its_second_round() -> None:
    server: Any = Server()
    server.script_load = _forgetful
    [reply] = await script_registry.run_batch_async(server, [("TAKE", ["a"], [])])
    assert isinstance(reply, NoScriptError)
    assert len(server.calls) == script_registry.BATCH_ROUNDS


async def _forgetful(source: str) -> str:
    return scripts.sha1_hex(source)


async def test_a_batchs_wait_goes_last_each_round_and_its_reply_is_taken_off() -> None:
    server: Any = Server(known("LEASE"))
    calls: list[script_registry.ScriptCall] = [("LEASE", ["a"], []), ("TAKE", ["b"], [])]
    replies = await script_registry.run_batch_async(server, calls, WaitGate(Wait(1, 250)))
    assert replies == [f"ran {scripts.sha('LEASE')}", f"ran {scripts.sha('TAKE')}"]
    assert [call[0] for call in server.calls] == ["EVALSHA", "EVALSHA", "WAIT", "EVALSHA", "WAIT"]
