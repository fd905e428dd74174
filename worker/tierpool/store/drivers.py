"""The two drivers of every plan (tierpool.store.plans): one for a sync client, one for an async client.

Each runs the plan's steps in order and sends each reply back into the plan: a :class:`Command` is called on the
client (a blocking read blocks here, with the timeout the plan gave it), a :class:`Batch` is one pipeline, an
:class:`Emit` is handed to the caller of ``stream_*``. An error raised by a call ends the plan. ``run_*`` return
what the plan returns (dropping what it emits); ``stream_*`` yield what it emits.

Every reply reaches the plan as text, whether the client decodes (``decode_responses=True``, as tierpool's own
clients do) or not (redis-py's default, a producer's own client): bytes are decoded as tierpool's clients decode
them (tierpool.protocol.utf8), so a plan never sees ``b"1-0"`` where it expects a stream id.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from typing import Any

from tierpool.protocol.utf8 import as_text_reply
from tierpool.store.connection import AsyncRedis, SyncRedis
from tierpool.store.plans import Batch, Command, Emit, Plan, R


def _queue(pipe: Any, batch: Batch) -> Any:
    for name, args, kwargs in batch:
        getattr(pipe, name)(*args, **kwargs)
    return pipe


def _drive_sync(client: SyncRedis, plan: Plan[Any], returned: list[Any]) -> Iterator[Any]:
    try:
        reply: Any = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as done:
                returned.append(done.value)
                return
            if isinstance(step, Emit):
                reply = None
                yield step.item
            elif isinstance(step, Command):
                reply = as_text_reply(getattr(client, step.name)(*step.args, **step.kwargs))
            else:
                pipe = _queue(client.pipeline(transaction=step.transaction), step)
                reply = as_text_reply(pipe.execute(raise_on_error=step.raise_on_error))
    finally:
        plan.close()


async def _drive_async(client: AsyncRedis, plan: Plan[Any], returned: list[Any]) -> AsyncGenerator[Any, None]:
    try:
        reply: Any = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as done:
                returned.append(done.value)
                return
            if isinstance(step, Emit):
                reply = None
                yield step.item
            elif isinstance(step, Command):
                reply = as_text_reply(await getattr(client, step.name)(*step.args, **step.kwargs))
            else:
                pipe = _queue(client.pipeline(transaction=step.transaction), step)
                reply = as_text_reply(await pipe.execute(raise_on_error=step.raise_on_error))
    finally:
        plan.close()


def run_sync(client: SyncRedis, plan: Plan[R]) -> R:
    """Run the plan on a sync client; its result."""
    returned: list[R] = []
    for _ in _drive_sync(client, plan, returned):
        pass
    return returned[0]


def stream_sync(client: SyncRedis, plan: Plan[Any]) -> Iterator[Any]:
    """Run the plan on a sync client as the caller iterates, yielding what it emits."""
    return _drive_sync(client, plan, [])


async def run_async(client: AsyncRedis, plan: Plan[R]) -> R:
    """Run the plan on an async client; its result."""
    returned: list[R] = []
    async for _ in _drive_async(client, plan, returned):
        pass
    return returned[0]


def stream_async(client: AsyncRedis, plan: Plan[Any]) -> AsyncGenerator[Any, None]:
    """Run the plan on an async client as the caller iterates, yielding what it emits."""
    return _drive_async(client, plan, [])
