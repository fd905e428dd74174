"""Protocol 5's due-time index on a real Valkey: delayed submits, the exactly-once mover, long retries and
deferrals through the index, and the delivery counts they carry."""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.envelope import Task
from tierpool.protocol.errors import RetryAfter
from tierpool.protocol.submission import TaskRequest
from tierpool.store.due import DueMover
from tierpool.store.observe import observe, stranded_counts
from tierpool.store.streams import PoolStreams

from .support import FAST_RECOVERY, Recorder, async_wait_until, make_pool, running_worker
from .test_cli import tierpool

pytestmark = pytest.mark.redis


async def server_ms(client: aioredis.Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def stream_task_ids(client: aioredis.Redis, keys: PoolKeys, tiers: list[str]) -> list[str]:
    found: list[str] = []
    for tier in tiers:
        found += [fields["task_id"] for _, fields in await client.xrange(keys.tier(tier))]
    return found


async def test_a_delayed_task_stays_out_of_its_stream_until_due_then_runs_once(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    keys = PoolKeys.parse(pool.ref)
    producer = AsyncClient(client, pool, pool.spec)
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder) as worker:
        before = await server_ms(client)
        delayed = await producer.submit("p1", {"n": 1}, delay=1.5)
        at = datetime.fromtimestamp((before + 2000) / 1000, tz=UTC).isoformat()
        pinned = await producer.submit("p0", {"n": 2}, not_before=at)
        now = await producer.submit("p2", {"n": 3})
        assert await async_wait_until(lambda: _ran(recorder, now), 5)
        assert (await observe(client, keys, pool.spec.tier_names)).scheduled == 2
        assert await stream_task_ids(client, keys, ["p0", "p1"]) == []  # not visible before it is due
        assert recorder.count(delayed) == 0 and recorder.count(pinned) == 0
        assert await async_wait_until(lambda: _ran(recorder, delayed, pinned), 10)
        runs = {call.id: call for call in recorder.calls}
        # running within about a second of due (the worker's mover runs every 0.2 s; its read blocks up to 0.5 s):
        # the queue wait counts from the due time
        for task_id, due in ((delayed, before + 1500), (pinned, before + 2000)):
            assert runs[task_id].due_ms is not None and runs[task_id].due_ms >= due
            assert runs[task_id].attempt == 1
            result = await producer.wait_result(task_id, 5)
            assert result.queue_wait_ms is not None and 0 <= result.queue_wait_ms <= 1000, result
        assert worker.due.moved_total + worker.maintainer.mover.moved_total >= 2
    assert [recorder.count(t) for t in (delayed, pinned, now)] == [1, 1, 1]
    assert await client.zcard(keys.due) == 0
    assert await client.hgetall(keys.reentered) == {}  # delayed submits are new work: arrivals when due


async def _ran(recorder: Recorder, *task_ids: str) -> bool:
    return all(recorder.count(task_id) > 0 for task_id in task_ids)


async def test_racing_movers_move_each_due_task_exactly_once(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    producer = AsyncClient(client, pool, pool.spec)
    tiers = pool.spec.tier_names
    ids = await producer.submit_many(
        [TaskRequest(tiers[i % 3], {"i": i}, delay=0.3 + (i % 7) / 100) for i in range(3000)]
    )
    assert await client.zcard(keys.due) == 3000
    await asyncio.sleep(0.5)

    connections = [aioredis.Redis.from_url(redis_url, decode_responses=True) for _ in range(8)]
    movers = [DueMover(PoolStreams(c, keys, tiers)) for c in connections]

    async def drain(m: DueMover) -> int:
        total = 0
        while await client.zcard(keys.due):
            total += await m.move(limit=37)
        return total

    moved = await asyncio.gather(*(drain(m) for m in movers))
    for connection in connections:
        await connection.aclose()
    assert sum(moved) == 3000
    assert sum(1 for count in moved if count > 0) >= 2  # they did race
    in_streams = collections.Counter(await stream_task_ids(client, keys, tiers))
    assert set(in_streams) == set(ids) and set(in_streams.values()) == {1}


async def test_a_duplicate_task_id_is_scheduled_once(client: aioredis.Redis, pool_name: str) -> None:
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    for _ in range(3):
        await producer.submit("p1", {}, task_id="once", delay=timedelta(minutes=5))
    assert await client.zcard(PoolKeys.parse(pool.ref).due) == 1


async def test_not_before_in_the_past_enqueues_at_once(client: aioredis.Redis, pool_name: str) -> None:
    pool = make_pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    task_id = await AsyncClient(client, pool, pool.spec).submit("p1", {}, not_before="2020-01-01T00:00:00Z")
    assert await client.zcard(keys.due) == 0
    assert await stream_task_ids(client, keys, ["p1"]) == [task_id]


class Failing:
    """Fails the first ``fail`` runs of each task (RetryAfter ``defer`` seconds instead when set)."""

    def __init__(self, fail: int, defer: float | None = None) -> None:
        self.fail, self.defer = fail, defer
        self.calls: list[tuple[str, int, float]] = []

    async def __call__(self, task: Task) -> Any:
        self.calls.append((task.id, task.attempt, time.monotonic()))
        runs = sum(1 for call in self.calls if call[0] == task.id)
        if runs <= self.fail:
            if self.defer is not None:
                raise RetryAfter(self.defer)
            raise RuntimeError(f"failure {runs}")
        return {"attempt": task.attempt}


LONG_BACKOFF = {**FAST_RECOVERY, "claimIdle": "1s", "retryBackoff": "1500ms", "maxDeliveries": 3}
"""A first retry backoff longer than claimIdle: only the due-time index can hold it."""


async def test_a_retry_longer_than_claim_idle_goes_through_the_due_index(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name, recovery=LONG_BACKOFF)
    keys = PoolKeys.parse(pool.ref)
    handler = Failing(fail=1)
    async with running_worker(pool, redis_url, handler):
        task_id = await AsyncClient(client, pool, pool.spec).submit("p1", {})
        assert await async_wait_until(lambda: _scheduled(client, keys), 5)
        # the failed entry is acked (not parked on tierpool-retry) and the task waits in the due set
        assert (await client.xpending(keys.tier("p1"), GROUP))["pending"] == 0
        assert await client.hget(keys.errors, task_id) == "RuntimeError: failure 1"
        result = await AsyncClient(client, pool, pool.spec).wait_result(task_id, 10)
    assert result.ok and result.attempts == 2 and result.result == {"attempt": 2}
    (_, _, first), (_, attempt, second) = handler.calls
    assert attempt == 2 and second - first >= 1.4  # the whole 1.5 s backoff, longer than claimIdle
    assert await client.hget(keys.errors, task_id) is None
    assert await client.hget(keys.reentered, "p1") == "1"  # a retry coming back: not an arrival for the scaler
    observed = await observe(client, keys, pool.spec.tier_names)
    assert observed.tiers[1].reentered == 1


async def _scheduled(client: aioredis.Redis, keys: PoolKeys) -> bool:
    return bool(await client.zcard(keys.due))


async def test_the_due_index_keeps_the_delivery_count_and_dead_letters_on_time(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """maxDeliveries 3 and backoffs of 1.5 s and 3 s, both beyond claimIdle: the task runs exactly 3 times, with
    attempts 1, 2, 3, and is dead-lettered with its last error and 3 deliveries."""
    pool = make_pool(pool_name, recovery={**LONG_BACKOFF, "retryBackoff": "1s"})
    keys = PoolKeys.parse(pool.ref)
    handler = Failing(fail=99)
    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, handler):
        task_id = await producer.submit("p1", {})
        result = await producer.wait_result(task_id, 20)
    assert [attempt for _, attempt, _ in handler.calls] == [1, 2, 3]
    assert result.status == "dead_lettered" and result.attempts == 3
    assert result.reason == "handler failed on all 3 deliveries"
    (_, letter), *_ = await client.xrange(keys.dlq)
    assert letter["deliveries"] == "3" and letter["attempts"] == "2" and letter["error"] == "RuntimeError: failure 3"


async def test_a_retry_after_longer_than_claim_idle_waits_as_asked_and_counts_no_delivery(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name, recovery={**FAST_RECOVERY, "claimIdle": "1s", "maxDeliveries": 1})
    handler = Failing(fail=2, defer=1.2)
    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, handler):
        task_id = await producer.submit("p0", {})
        result = await producer.wait_result(task_id, 15)
    # maxDeliveries 1: had either deferral counted, the task would have been dead-lettered
    assert result.ok and result.attempts == 1
    times = [at for _, _, at in handler.calls]
    assert [attempt for _, attempt, _ in handler.calls] == [1, 1, 1]
    assert min(b - a for a, b in itertools.pairwise(times)) >= 1.1  # not cut to claimIdle (1 s)


async def test_a_due_task_for_a_tier_this_worker_lacks_is_kept_and_moved_by_one_that_has_it(
    client: aioredis.Redis, redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    """A rolling spec change (p1 renamed p2, workers of both specs side by side): a task scheduled for p1 that
    comes due on a worker of the new spec is kept (``…:stranded``, shown by ``tierpool status``), not
    dead-lettered, and a worker of the old spec moves it when it is tried again. Only an undecodable member goes
    to the DLQ."""
    old = make_pool(pool_name, tiers=[{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1}])
    new = make_pool(pool_name, tiers=[{"name": "p0", "weight": 1}, {"name": "p2", "weight": 1}])
    producer = AsyncClient(client, old, old.spec)
    keys = producer.keys
    ids = [await producer.submit("p1", {}, delay=0.05) for _ in range(3)]
    await client.zadd(keys.due, {"not an envelope": 0})
    await asyncio.sleep(0.1)
    new_streams = PoolStreams(client, keys, new.spec.tier_names)
    mover = DueMover(new_streams)
    mover.stranded_retry_ms = 200
    assert await mover.move() == 1  # the undecodable member, dead-lettered
    assert mover.stranded_total == 3 and await client.zcard(keys.stranded) == 3 and await client.zcard(keys.due) == 0
    dead: Any = await client.xrange(keys.dlq)
    assert len(dead) == 1 and dead[0][1]["reason"] == "scheduled task is not an envelope"
    assert mover.next_due is not None  # an idle worker wakes for the next try
    assert await mover.move() == 0 and mover.stranded_total == 3  # not due for another try yet
    assert await stranded_counts(client, keys) == {"total": 3, "tiers": {"p1": 3}}
    path = tmp_path / "pool.json"
    path.write_text(new.model_dump_json(by_alias=True))
    shown = tierpool("status", "-f", str(path), "--json", url=redis_url)
    assert json.loads(shown.stdout)["stranded"] == {"total": 3, "tiers": {"p1": 3}}, shown.stderr
    assert (await producer.cancel_many([ids[0]]))[0].state.value == "waiting"  # found there by a cancel
    assert await client.exists(keys.cancel(ids[0]))
    assert (await producer.wait_result(ids[0], 1)).status == "cancelled"  # taken out at once (protocol 8)
    await asyncio.sleep(0.25)
    old_streams = PoolStreams(client, keys, old.spec.tier_names)
    assert await DueMover(old_streams).move() == 2
    assert sorted(await stream_task_ids(client, keys, ["p1"])) == sorted(ids[1:])
    assert await client.zcard(keys.stranded) == 0
