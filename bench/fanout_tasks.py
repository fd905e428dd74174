"""The App bench/fanout.py runs (``fanout_tasks:app``, with bench/ on PYTHONPATH): a P0 parent fanning out to
children, by ``task.spawn`` + ``task.gather`` (``spawned``), or the way before them (``polled``): a plain client
submits the children at P2 and the parent polls their records, holding its slot. ``leaf`` is the child, and the
P2 backlog.

With ``FANOUT_NO_INHERITANCE=1`` in its environment, the worker's spawn takes no inheritance: a child runs in its
own default tier (``leaf``: P2), to measure what inheritance buys. Only this bench turns it off; tierpool has no
such switch."""

from __future__ import annotations

import asyncio
import os

from pydantic import BaseModel

import tierpool
from tierpool.runtime import gathering
from tierpool.runtime.settings import pool_without_redis

if os.environ.get("FANOUT_NO_INHERITANCE") == "1":
    gathering.inherited_tier = lambda tiers, own, parent: own


class Fan(BaseModel):
    children: int
    leaf_ms: float


class Leaf(BaseModel):
    ms: float


app = tierpool.App()


@app.task(tier="p2")
async def leaf(task: tierpool.Task, inp: Leaf) -> int:
    await asyncio.sleep(inp.ms / 1000)
    return 1


@app.task(tier="p0")
async def spawned(task: tierpool.Task, inp: Fan) -> int:
    children = [await task.spawn(leaf, Leaf(ms=inp.leaf_ms)) for _ in range(inp.children)]
    return sum(await task.gather(*children))


@app.task(tier="p0")
async def polled(task: tierpool.Task, inp: Fan) -> int:
    """Today's way: submit the children at P2 with a plain client and wait for them in the slot."""
    pool = pool_without_redis(os.environ)
    assert pool is not None
    async with tierpool.AsyncClient.from_url(os.environ["TIERPOOL_REDIS_URL"], pool) as client:
        ids = [f"{task.id}.p{n}" for n in range(inp.children)]
        requests = [tierpool.TaskRequest("p2", {"ms": inp.leaf_ms}, i, task="leaf") for i in ids]
        await client.submit_many(requests)
        while any([await client.result(i) is None for i in ids]):
            await asyncio.sleep(0.01)
    return inp.children
