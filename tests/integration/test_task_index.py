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
    assert await streams.escalate(1, (seconds + 1) * 1000, 0, 10) == 1
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


async def test_the_sweep_drops_places_that_do_not_check_out_and_keeps_the_others(
    client: aioredis.Redis, pool_name: str
) -> None:
    """What an older release's scripts leave behind (a task they finished, or moved without writing the index)
    and a lost entry are dropped, a page a sweep; live places and a tier this worker lacks are kept."""
    tiers = [{"name": "p0", "weight": 1, "tenantConcurrency": 1}, {"name": "p1", "weight": 1}]
    pool = make_pool(pool_name, tiers=tiers, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    streams = PoolStreams(client, keys, pool.spec.tier_names, pool.spec.tenant_limits)
    await streams.load_scripts()
    await streams.ensure_groups()
    live = [await producer.submit("p1", {}), await producer.submit("p1", {}, delay=60)]
    live += [await producer.submit("p0", {}, tenant="acme"), await producer.submit("p0", {}, tenant="acme")]
    finished = await producer.submit("p1", {})  # an old worker ran it: acked, its place left behind
    [(_, entries)] = await client.xreadgroup("workers", "old", {keys.tier("p1"): ">"})  # live[0] runs there
    [entry_id] = [entry_id for entry_id, fields in entries if fields["task_id"] == finished]
    assert await client.xack(keys.tier("p1"), "workers", entry_id) == 1
    assert await client.hget(keys.where, finished) == f"stream:p1:{entry_id}"
    await client.hset(keys.where, "moved", "due:12345")  # an old mover took it elsewhere
    await client.hset(keys.where, "lost", "stream:p1:1-1")  # its entry was deleted
    await client.hset(keys.where, "renamed", "stream:p9:1-1")  # a tier this spec lacks
    await client.hset(keys.where, "garbled", "nowhere")
    cursor, dropped = await streams.prune_index("0", count=2)
    while cursor != "0":
        cursor, more = await streams.prune_index(cursor, count=2)
        dropped += more
    assert dropped == 4
    assert sorted(await client.hkeys(keys.where)) == sorted([*live, "renamed"])
    assert await client.hget(keys.where, finished) is None


async def test_a_cancel_that_finds_a_stale_place_drops_it_and_scans(client: aioredis.Redis, pool_name: str) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    task_id = await producer.submit("p1", {}, delay=60)
    await client.hset(keys.where, task_id, "due:1")  # as if an older mover had moved it and back
    report = await producer.cancel(task_id)
    assert report.state.value == "waiting"  # found by the scan, in the due-time index
    assert await client.hget(keys.where, task_id) is None
    assert await client.zcard(keys.due) == 1  # the scan's cancel: the marker stops it when it comes due
    assert await client.pttl(keys.cancel(task_id)) > 60_000


async def test_a_plain_xadd_the_worker_holds_for_its_tenant_gets_a_place_and_a_cancel_at_once(
    client: aioredis.Redis, pool_name: str
) -> None:
    """ADMIT_ENTRIES holds a tenant's entry that bypassed the gate: from then on the index knows it."""
    tiers = [{"name": "p0", "weight": 1, "tenantConcurrency": 1}, {"name": "p1", "weight": 1}]
    pool = make_pool(pool_name, tiers=tiers, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    streams = PoolStreams(client, keys, pool.spec.tier_names, pool.spec.tenant_limits)
    await streams.load_scripts()
    await streams.ensure_groups()
    await producer.submit("p0", {}, tenant="acme")  # admitted: acme's one slot
    fields = {"task_id": "foreign-2", "tier": "p0", "payload": "{}", "created_at": "1", "tenant": "acme"}
    await client.xadd(keys.tier("p0"), fields)  # type: ignore[arg-type]
    assert await place(client, keys, "foreign-2") is None
    [(_, entries)] = await client.xreadgroup("workers", "w1", {keys.tier("p0"): ">"})
    statuses = await streams.admit_entries("w1", {0: [entry_id for entry_id, _ in entries]})
    assert sorted(statuses.values()) == [0, 1]  # the foreign one is held
    assert str(await place(client, keys, "foreign-2")).startswith("held:p0:acme\0")
    assert (await producer.cancel("foreign-2")).state.value == "waiting"
    assert (await producer.wait_result("foreign-2", 1)).status == "cancelled"
    assert await client.zcard(keys.held("p0")) == 0


async def test_the_sweep_reads_a_bounded_number_of_rows_when_many_tasks_share_a_due_time(
    client: aioredis.Redis, pool_name: str
) -> None:
    """A bulk not_before puts thousands of tasks on one score; checking each place read the score's members a page
    at a time from the start (found in review: 1.8 s of a blocked server per sweep at 20,000 tasks). A sweep now
    reads at most its budget of rows and keeps the places it did not reach."""
    from tierpool.protocol.submission import TaskRequest

    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    streams = PoolStreams(client, keys, pool.spec.tier_names, pool.spec.tenant_limits)
    await streams.load_scripts()
    at = "2099-01-01T00:00:00+00:00"
    for start in range(0, 4000, 1000):
        await producer.submit_many(
            [TaskRequest("p0", {}, f"bulk-{i}", not_before=at) for i in range(start, start + 1000)]
        )

    async def zrange_calls() -> int:
        stats = await client.info("commandstats")
        return int(stats.get("cmdstat_zrangebyscore", {}).get("calls", 0))

    before = await zrange_calls()
    _, dropped = await streams.prune_index("0", count=200)
    calls = await zrange_calls() - before
    assert dropped == 0 and await client.hlen(keys.where) == 4000
    assert calls <= 60, calls  # the 5,000-row budget in pages of 100, not 200 places x 20 pages
