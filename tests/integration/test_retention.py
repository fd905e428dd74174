"""Retention on a real Valkey: acked entries leave their tier stream as they are acked (a task that never ends holds
nothing up), the lag stays exact, the sweep deletes what older workers left, and the dead-letter stream is bounded by
``spec.deadLetters`` (length and age)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.dispatch import UNLIMITED, TakePlan
from tierpool.protocol.envelope import Task, encode
from tierpool.protocol.errors import NonRetryable, RetryAfter
from tierpool.runtime.maintenance import Maintainer
from tierpool.store import streams as streams_module
from tierpool.store.observe import observe
from tierpool.store.streams import Completion, PoolStreams

from .support import FAST_RECOVERY, async_wait_until, make_pool, running_worker

pytestmark = pytest.mark.redis
TIERS = [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "escalateAfter": "1m"}]
DEFERRED: set[str] = set()


async def handler(task: Task) -> Any:
    mode = task.payload.get("mode") if isinstance(task.payload, dict) else None
    if mode == "hang":  # heartbeats for as long as it runs: the worker refreshes its entry
        await asyncio.sleep(3600)
    if mode == "refuse":
        raise NonRetryable("refused")
    if mode == "later" and task.id not in DEFERRED:  # longer than claimIdle: through the due-time index
        DEFERRED.add(task.id)
        raise RetryAfter(1.2, "come back later")
    if mode == "slow":
        await asyncio.sleep(10)
    return {"ok": True}


async def server_ms(client: aioredis.Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def group(client: aioredis.Redis, stream: str) -> dict[str, Any]:
    return next(g for g in await client.xinfo_groups(stream) if g["name"] == GROUP)


async def ids_in(client: aioredis.Redis, stream: str) -> list[str]:
    return [entry_id for entry_id, _ in await client.xrange(stream)]


@pytest.fixture
async def streams(client: aioredis.Redis, pool_name: str) -> PoolStreams:
    ops = PoolStreams(client, PoolKeys("test", pool_name), ["p0", "p1"])
    await ops.load_scripts()
    await ops.ensure_groups()
    return ops


async def fill(ops: PoolStreams, tier: int, count: int) -> list[str]:
    pipe = ops.client.pipeline(transaction=False)
    for i in range(count):
        pipe.xadd(ops.streams[tier], encode(f"t{tier}-{i}", ops.tiers[tier], "{}", 1))
    return [str(entry_id) for entry_id in await pipe.execute()]


async def test_a_task_that_never_ends_does_not_hold_retention_up(
    redis_url: str, client: aioredis.Redis, pool_name: str
) -> None:
    """Issue #23, item 5: one heartbeating task that never ends, then 300 short ones in its tier. Retention kept
    everything after the oldest pending entry; now only the pending one (and the last delivered one) remain."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    stream = producer.keys.tier("p0")
    async with running_worker(pool, redis_url, handler, concurrency=8, grace=0.5):
        await producer.submit("p0", {"mode": "hang"})
        assert await async_wait_until(lambda: pending_count(client, stream), 5)
        ids = [await producer.submit("p0", {}) for _ in range(300)]
        for task_id in ids:
            await producer.wait_result(task_id, 15)
        await async_wait_until(lambda: small(client, stream, 2), 5)
        assert await client.xlen(stream) <= 2, await client.xlen(stream)
        assert (await client.xpending(stream, GROUP))["pending"] == 1
        assert (await group(client, stream))["lag"] == 0  # exact, not nil
        p0 = (await observe(client, producer.keys, ["p0", "p1", "p2"])).tiers[0]
        assert p0.oldest_pending_age_seconds > 0 and p0.lag_exact


async def pending_count(client: aioredis.Redis, stream: str) -> bool:
    return bool(await client.exists(stream)) and (await client.xpending(stream, GROUP))["pending"] > 0


async def small(client: aioredis.Redis, stream: str, most: int) -> bool:
    return int(await client.xlen(stream)) <= most


async def test_every_outcome_leaves_a_bounded_stream_behind_a_task_that_never_ends(
    redis_url: str, client: aioredis.Redis, pool_name: str
) -> None:
    """Success, dead letter, a retry through the due-time index, a throttle, a cancel while running, and a
    tenant-gated tier (each outcome releases the tenant's next task though its entry is gone), behind one task
    that never ends: each stream keeps its pending entries and at most the group's last delivered one, and the lag
    stays exact."""
    tiers = [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "tenantConcurrency": 1}]
    limits = [{"name": "provider", "perMinute": 60}]
    pool = make_pool(pool_name, tiers=tiers, recovery=FAST_RECOVERY, rateLimits=limits)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    async with running_worker(pool, redis_url, handler, concurrency=8, grace=0.5):
        await producer.submit("p0", {"mode": "hang"})
        assert await async_wait_until(lambda: pending_count(client, keys.tier("p0")), 5)
        ids = [await producer.submit("p0", {"mode": mode}) for mode in ("ok", "refuse", "later")]
        ids += [await producer.submit("p0", {}, rate_limit="provider") for _ in range(3)]  # two are throttled
        ids += [await producer.submit("p1", {}, tenant="acme") for _ in range(3)]  # one admitted at a time
        slow = await producer.submit("p0", {"mode": "slow"})
        await asyncio.sleep(0.5)
        await producer.cancel(slow)  # running: stopped by the heartbeat's check
        statuses = {(await producer.wait_result(task_id, 15)).status for task_id in [*ids, slow]}
        assert statuses == {"succeeded", "dead_lettered", "cancelled"}
        await asyncio.sleep(0.5)  # a sweep (every 200 ms) takes the entries acked while they were the last read
        for tier, pending in (("p0", 1), ("p1", 0)):
            stream = keys.tier(tier)
            assert (await client.xpending(stream, GROUP))["pending"] == pending
            assert await client.xlen(stream) <= pending + 1, (tier, await ids_in(client, stream))
            assert (await group(client, stream))["lag"] == 0


async def test_completion_deletes_all_but_the_last_delivered_entry_so_the_lag_stays_exact(
    streams: PoolStreams,
) -> None:
    """A deletion at the group's last delivered entry makes XINFO GROUPS report the lag as nil: that one stays."""
    ids = await fill(streams, 0, 10)
    taken = await streams.take(TakePlan((5, 0), (UNLIMITED,) * 2), "c1")
    items = [Completion(0, e.id, e.fields["task_id"], b"{}", False) for e in taken]
    assert await streams.run_batch([streams.complete_many_call(0, "c1", 1000, items)]) == [[1] * 5]
    assert await ids_in(streams.client, streams.streams[0]) == ids[4:]
    assert (await group(streams.client, streams.streams[0]))["lag"] == 5
    await streams.take(TakePlan((5, 0), (UNLIMITED,) * 2), "c1")  # the group reads past it
    assert (await group(streams.client, streams.streams[0]))["lag"] == 0
    assert await streams.trim_acknowledged(0) == 1  # the sweep's trim takes it: below the oldest pending entry
    assert await ids_in(streams.client, streams.streams[0]) == ids[5:]


async def test_dead_letter_and_cancelled_outcomes_delete_their_entries(streams: PoolStreams) -> None:
    ids = await fill(streams, 0, 4)
    await streams.take(TakePlan((4, 0), (UNLIMITED,) * 2), "c1")
    dead = streams.dead_letter_call(0, "c1", ids[0], "t0-0", "refused", "no", 1, 1000)
    cancelled = streams.cancelled_call(0, "c1", ids[1], "t0-1", b"{}", 1000)
    assert await streams.run_batch([dead, cancelled]) == [1, 1]
    assert await ids_in(streams.client, streams.streams[0]) == ids[2:]
    assert (await group(streams.client, streams.streams[0]))["lag"] == 0


async def test_a_reschedule_and_a_throttle_delete_the_entries_they_ack(streams: PoolStreams) -> None:
    """RESCHEDULE (a retry into the due-time index) and THROTTLE (a rate limit's wait) ack their entry: it goes."""
    keys = streams.keys
    ids = await fill(streams, 0, 4)
    await streams.take(TakePlan((4, 0), (UNLIMITED,) * 2), "c1")
    retry = [GROUP, "c1", ids[0], "t0-0", "boom", "retry", 60_000, 60_000, 10, 60_000, "p0"]
    assert await streams.run("RESCHEDULE", [streams.streams[0], keys.due, keys.errors, keys.deferrals("t0-0")], retry)
    bucket = keys.rate_bucket("provider")
    for entry_id, task_id, wait in ((ids[1], "t0-1", False), (ids[2], "t0-2", True)):  # one a second: then a wait
        throttle_keys = [streams.streams[0], keys.throttled, bucket, keys.admitted("p0"), keys.reservation(task_id)]
        args = [GROUP, "c1", entry_id, "p0", 1000, 1, 0, 1, 1, "", task_id, "", 1000]
        assert (await streams.run("THROTTLE", [*throttle_keys, keys.where], args) > 0) is wait
    assert await ids_in(streams.client, streams.streams[0]) == [ids[1], ids[3]]  # pending: running, last read
    assert (await group(streams.client, streams.streams[0]))["lag"] == 0


async def test_escalation_deletes_the_entries_it_moves(streams: PoolStreams, pool_name: str) -> None:
    spec = make_pool(pool_name, tiers=TIERS).spec
    old = await server_ms(streams.client) - 600_000
    for i in range(5):
        await streams.client.xadd(streams.streams[1], encode(f"s{i}", "p1", "{}", 1), id=f"{old}-{i}")
    assert await Maintainer(streams, spec, "m1").escalate_all() == {"p1": 5}
    assert await ids_in(streams.client, streams.streams[1]) == [f"{old}-4"]  # the last delivered one stays
    assert (await group(streams.client, streams.streams[1]))["lag"] == 0
    assert (await group(streams.client, streams.streams[0]))["lag"] == 5


async def test_the_sweep_deletes_acked_entries_above_the_oldest_pending_one(
    streams: PoolStreams, pool_name: str
) -> None:
    """Entries acked by a worker that predates deletion on ack (XACK alone), behind a pending entry: the sweep
    deletes them, never a pending or undelivered entry, nor the last delivered one."""
    spec = make_pool(pool_name, tiers=TIERS).spec
    ids = await fill(streams, 0, 20)
    await streams.take(TakePlan((10, 0), (UNLIMITED,) * 2), "c1")
    await streams.client.xack(streams.streams[0], GROUP, *[i for i in ids[:10] if i not in (ids[0], ids[4])])
    report = await Maintainer(streams, spec, "m1").sweep()
    assert report.trimmed == 7
    assert await ids_in(streams.client, streams.streams[0]) == [ids[0], ids[4], *ids[9:]]
    assert (await group(streams.client, streams.streams[0]))["lag"] == 10


async def test_the_walk_of_the_pending_entries_goes_on_where_it_stopped(
    streams: PoolStreams, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams_module, "ACKED_WALK", 2)
    monkeypatch.setattr(streams_module, "ACKED_BUDGET", 3)
    ids = await fill(streams, 0, 20)
    await streams.take(TakePlan((12, 0), (UNLIMITED,) * 2), "c1")
    kept = [ids[0], ids[3], ids[6], ids[9]]
    await streams.client.xack(streams.streams[0], GROUP, *[i for i in ids[:12] if i not in kept])
    calls = [await streams.delete_acked(0, "-")]
    while calls[-1][1] != "-":
        calls.append(await streams.delete_acked(0, calls[-1][1]))
    assert calls == [(2, ids[3]), (3, ids[6]), (2, "-")]
    assert await ids_in(streams.client, streams.streams[0]) == [*kept, *ids[11:]]
    assert (await group(streams.client, streams.streams[0]))["lag"] == 8


async def test_each_sweep_call_reads_a_bounded_number_of_bytes_and_all_acked_entries_go(
    streams: PoolStreams, pool_name: str
) -> None:
    """40 entries of 256 KB behind a hung pending one, acked without deletion (a worker of an earlier release):
    one DELETE_ACKED call read them all, 10 MB, at once; now each call reads at most ACKED_BYTES (4 MiB) and one
    entry more, and sweeps going on from the cursor delete every acked entry (but the last delivered one)."""
    spec = make_pool(pool_name, tiers=TIERS).spec
    payload = '"' + "x" * (256 * 1024) + '"'
    pipe = streams.client.pipeline(transaction=False)
    for i in range(40):
        pipe.xadd(streams.streams[0], encode(f"big-{i}", "p0", payload, 1))
    ids = [str(entry_id) for entry_id in await pipe.execute()]
    await streams.take(TakePlan((40, 0), (UNLIMITED,) * 2), "c1")
    await streams.client.xack(streams.streams[0], GROUP, *ids[1:])
    most = streams_module.ACKED_BYTES // len(payload) + 1  # the budget's worth, and the entry that goes past it
    maintainer, per_sweep = Maintainer(streams, spec, "m1"), []
    for _ in range(10):
        per_sweep.append(await maintainer.trim_all())
        if await ids_in(streams.client, streams.streams[0]) == [ids[0], ids[-1]]:
            break
    assert all(0 < deleted <= most for deleted in per_sweep), (per_sweep, most)
    assert sum(per_sweep) == 38 and len(per_sweep) == 3, per_sweep
    assert await ids_in(streams.client, streams.streams[0]) == [ids[0], ids[-1]]  # pending; last delivered
    assert (await group(streams.client, streams.streams[0]))["lag"] == 0


async def test_dead_letters_stay_near_max_length(client: aioredis.Redis, pool_name: str) -> None:
    """Issue #23, item 6: 300 dead letters with maxLength 50. Trimming is approximate (whole stream nodes, 100
    entries by default), so at most one node more stays."""
    spec = make_pool(pool_name, tiers=TIERS, deadLetters={"maxLength": 50}).spec
    streams = PoolStreams(client, PoolKeys("test", pool_name), spec.tier_names, dead_letters=spec.dead_letters)
    await streams.load_scripts()
    await streams.ensure_groups()
    await fill(streams, 0, 300)
    taken = await streams.take(TakePlan((300, 0), (UNLIMITED,) * 2), "c1")
    calls = [streams.dead_letter_call(0, "c1", e.id, e.fields["task_id"], "refused", "no", 1, 1000) for e in taken]
    assert await streams.run_batch(calls) == [1] * 300
    assert 50 <= await client.xlen(streams.keys.dlq) <= 150


async def test_the_sweep_deletes_dead_letters_older_than_max_age(client: aioredis.Redis, pool_name: str) -> None:
    """250 dead letters two hours old (ids on Redis' clock) and a new one, with maxAge 1h: the sweep deletes the
    old ones (whole nodes, then the rest of the node that holds the cutoff) and keeps the new one."""
    spec = make_pool(pool_name, tiers=TIERS, deadLetters={"maxAge": "1h"}).spec
    streams = PoolStreams(client, PoolKeys("test", pool_name), spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()
    old = await server_ms(client) - 7_200_000
    for i in range(250):
        await client.xadd(streams.keys.dlq, {"reason": "old"}, id=f"{old}-{i}")
    new = await client.xadd(streams.keys.dlq, {"reason": "new"})
    report = await Maintainer(streams, spec, "m1").sweep()
    assert report.dead_letters_trimmed == 250
    assert await ids_in(client, streams.keys.dlq) == [new]


async def test_the_sweep_trims_dead_letters_written_without_a_max_length(
    client: aioredis.Redis, pool_name: str
) -> None:
    """Dead letters written by a worker that predates maxLength: the sweep trims them too."""
    spec = make_pool(pool_name, tiers=TIERS, deadLetters={"maxLength": 50, "maxAge": "0s"}).spec
    streams = PoolStreams(client, PoolKeys("test", pool_name), spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()
    pipe = client.pipeline(transaction=False)
    for _ in range(500):
        pipe.xadd(streams.keys.dlq, {"reason": "old worker"})
    await pipe.execute()
    await Maintainer(streams, spec, "m1").sweep()
    assert 50 <= await client.xlen(streams.keys.dlq) <= 150
