"""An App that spawns and gathers (tests/integration/test_gather*.py), importable as the pool's handler
``tests.integration.fanout_app:app`` by ``tierpool worker`` subprocesses. Each run counts itself in Redis
(``GATHER_TEST_URL``) under ``gathertest:<task id>:<what>``, so that a test can tell how often a handler started,
finished, or ran a child, across worker processes."""

from __future__ import annotations

import asyncio
import os

import redis.asyncio as aioredis
from pydantic import BaseModel

import tierpool
from tierpool.protocol.errors import NonRetryable


class Fan(BaseModel):
    n: int = 5
    fail: int | None = None
    """The child that fails (non-retryable)."""
    hold: float = 0.0
    """Seconds each child sleeps."""
    return_exceptions: bool = False
    tier: str | None = None
    """A tier asked for the children explicitly."""
    settle: float = 0.0
    """Seconds the parent sleeps after its gather returned, before it counts itself finished."""


class Num(BaseModel):
    x: int
    fail: bool = False
    hold: float = 0.0


class Tree(BaseModel):
    n: int = 2
    fan: Fan = Fan()
    """What each child (a ``parent``) fans out to."""


app = tierpool.App()


async def count(task_id: str, what: str) -> None:
    client = aioredis.Redis.from_url(os.environ["GATHER_TEST_URL"])
    try:
        await client.incr(f"gathertest:{task_id}:{what}")
    finally:
        await client.aclose()


@app.task(tier="p0", timeout="30s")
async def parent(task: tierpool.Task, inp: Fan) -> list[int | str]:
    await count(task.id, "started")
    options = {} if inp.tier is None else {"tier": inp.tier}
    children = [await task.spawn(square, Num(x=i, fail=i == inp.fail, hold=inp.hold), **options) for i in range(inp.n)]
    found = await task.gather(*children, return_exceptions=inp.return_exceptions)
    await asyncio.sleep(inp.settle)
    await count(task.id, "finished")
    return [value if isinstance(value, int) else f"{value.child_id}:{value.status}" for value in found]


@app.task(tier="p0", timeout="60s")
async def grandparent(task: tierpool.Task, inp: Tree) -> list[list[int | str]]:
    children = [await task.spawn(parent, inp.fan) for _ in range(inp.n)]
    found: list[list[int | str]] = await task.gather(*children)
    return found


@app.task(tier="p2", timeout="60s")
async def square(task: tierpool.Task, inp: Num) -> int:
    await count(task.id, "ran")
    if inp.hold:
        await asyncio.sleep(inp.hold)
    if inp.fail:
        raise NonRetryable(f"child {inp.x} fails")
    return inp.x * inp.x
