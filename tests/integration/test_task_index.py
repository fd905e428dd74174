"""The task-id index ``…:where``: every script that moves a task writes where it is now, in the same step, and the
final outcomes drop it, so the hash holds only the tasks that have not finished."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.model.keys import PoolKeys
from tierpool.protocol.envelope import Task
from tierpool.protocol.errors import RetryAfter
from tierpool.store.due import DueMover
from tierpool.store.streams import PoolStreams

from .support import FAST_RECOVERY, make_pool, running_worker

pytestmark = pytest.mark.redis


async def place(client: aioredis.Redis, keys: PoolKeys, task_id: str) -> str | None:
    found = await client.hget(keys.where, task_id)
    return None if found is None else str(found)


async def entry_of(client: aioredis.Redis, keys: PoolKeys, tier: str, task_id: str) -> str:
    entries: Any = await client.xrange(keys.tier(tier))
    [entry_id] = [entry_id for entry_id, fields in entries if fields["task_id"] == task_id]
    return str(entry_id)


async def test_each_kind_of_submit_writes_the_tasks_place(client: aioredis.Redis, pool_name: str) -> None:
    tiers = [{"name": "p0", "weight": 1, "tenantConcurrency": 1}, {"name": "p1", "weight": 1}]
    pool = make_pool(pool_name, tiers=tiers, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    plain = await producer.submit("p1", {})
    chosen = await producer.submit("p1", {}, task_id="chosen/1")
    admitted = await producer.submit("p0", {}, tenant="acme")
    held = await producer.submit("p0", {}, tenant="acme")
    delayed = await producer.submit("p1", {}, delay=60)
    for task_id, tier in ((plain, "p1"), (chosen, "p1"), (admitted, "p0")):
        assert await place(client, keys, task_id) == f"stream:{tier}:{await entry_of(client, keys, tier, task_id)}"
    [member] = await client.zrange(keys.held("p0"), 0, -1)
    tenant, seq, _ = str(member).split("\0", 2)
    assert await place(client, keys, held) == f"held:p0:{tenant}\0{seq}"
    [(_, due)] = await client.zrange(keys.due, 0, -1, withscores=True)
    assert await place(client, keys, delayed) == f"due:{int(due)}"


async def test_the_place_follows_a_task_through_the_mover_and_the_escalator(
    client: aioredis.Redis, pool_name: str
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    streams = PoolStreams(client, keys, pool.spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()
    task_id = await producer.submit("p1", {}, delay=0.05)
    assert str(await place(client, keys, task_id)).startswith("due:")
    await asyncio.sleep(0.1)
    assert await DueMover(streams).move() == 1
    assert await place(client, keys, task_id) == f"stream:p1:{await entry_of(client, keys, 'p1', task_id)}"
    seconds, _ = await client.time()
    assert await streams.escalate(1, (seconds + 1) * 1000, 10) == 1
    assert await place(client, keys, task_id) == f"stream:p0:{await entry_of(client, keys, 'p0', task_id)}"


SEEN: set[str] = set()


async def handler(task: Task) -> Any:
    mode = task.payload.get("mode")
    if mode == "refuse":
        raise RuntimeError("fails every time")
    if mode == "later" and task.id not in SEEN:
        SEEN.add(task.id)
        raise RetryAfter(1.2, "busy")  # longer than claimIdle: through the due-time index
    if mode == "slow":
        await asyncio.sleep(10)
    return {"ok": True}


async def test_every_final_outcome_drops_the_tasks_place(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """Succeeded (after a long RetryAfter too), dead-lettered, cancelled before it started and while it ran: the
    index is empty once every task has its record."""
    pool = make_pool(pool_name, recovery={**FAST_RECOVERY, "maxDeliveries": 2})
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    doomed = await producer.submit("p1", {})
    await producer.cancel(doomed)
    ids = [await producer.submit("p1", {"mode": mode}) for mode in ("ok", "refuse", "later")]
    slow = await producer.submit("p1", {"mode": "slow"})
    assert await client.hlen(keys.where) == 5
    async with running_worker(pool, redis_url, handler):
        for task_id in ids:
            await producer.wait_result(task_id, 15)
        assert (await producer.cancel(slow)).state.value == "running"
        assert (await producer.wait_result(slow, 15)).status == "cancelled"
        assert (await producer.wait_result(doomed, 15)).status == "cancelled"
    results = [await producer.result(task_id) for task_id in ids]
    assert [result and result.status for result in results] == ["succeeded", "dead_lettered", "succeeded"]
    assert await client.hlen(keys.where) == 0
