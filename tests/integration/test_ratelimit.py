"""Protocol 5's pool-wide rate limits on a real Valkey: one GCRA bucket shared by every worker process, throttled
tasks waiting without a slot and without a counted delivery, token costs, and the owner check."""

from __future__ import annotations

import itertools
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.envelope import Task
from tierpool.protocol.submission import TaskRequest
from tierpool.store.observe import observe
from tierpool.store.streams import PoolStreams

from .support import (
    FAST_RECOVERY,
    async_wait_until,
    killed_on_exit,
    make_pool,
    results,
    running_worker,
    spawn_worker,
    sync_redis,
    wait_until,
)

pytestmark = pytest.mark.redis


def starts(client: Any, pool_name: str) -> list[tuple[str, int, int]]:
    found = []
    for line in client.lrange(f"test:starts:{pool_name}", 0, -1):
        task_id, at, attempt = line.split()
        found.append((task_id, int(at), int(attempt)))
    return sorted(found, key=lambda start: start[1])


def assert_within_limit(times: list[int], per_ms: float, burst: int, slack_ms: int = 30) -> None:
    """GCRA: any run of n starts spans at least (n - burst) intervals."""
    for i in range(len(times)):
        for j in range(i + burst, len(times)):
            assert times[j] - times[i] >= (j - i + 1 - burst) * per_ms - slack_ms, (i, j, times)


@pytest.mark.slow
def test_one_bucket_for_every_worker_process_and_no_delivery_counted(
    redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    """Two worker processes share one limit of 120 a minute (2/s, a burst of 2). Twenty tasks take about nine
    seconds, never faster than the limit; maxDeliveries 1 proves that a throttled take counts no delivery."""
    pool = make_pool(
        pool_name,
        worker={"concurrency": 8, "handler": "support_handlers:provider"},
        recovery={**FAST_RECOVERY, "maxDeliveries": 1},
        rateLimits=[{"name": "provider", "perMinute": 120}],
    )
    client = sync_redis(redis_url)
    workers = [spawn_worker(pool, redis_url, log=tmp_path / f"w{i}.log") for i in range(2)]
    with killed_on_exit(*workers):
        ids = Client(client, pool).submit_many([TaskRequest("p1", {"work_ms": 50}) for _ in range(20)])
        throttled_seen = 0

        def done() -> bool:
            nonlocal throttled_seen
            throttled_seen = max(throttled_seen, int(client.zcard(PoolKeys.parse(pool.ref).throttled)))
            return len(results(client, pool, ids)) == len(ids)

        assert wait_until(done, 40, interval=0.1)
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        assert [worker.wait(20) for worker in workers] == [0, 0]
    found = results(client, pool, ids)
    assert {r["status"] for r in found.values()} == {"succeeded"} and {r["attempts"] for r in found.values()} == {1}
    runs = starts(client, pool.metadata.name)
    assert sorted(task_id for task_id, _, _ in runs) == sorted(ids)  # each ran once
    times = [at for _, at, _ in runs]
    assert_within_limit(times, 500, 2)
    assert times[-1] - times[0] <= 18 * 500 + 2500  # and close to the limit: (20 - burst) intervals, + slack
    assert throttled_seen > 5
    assert client.xlen(PoolKeys.parse(pool.ref).dlq) == 0


async def test_a_submit_names_its_limit_and_token_cost(client: aioredis.Redis, redis_url: str, pool_name: str) -> None:
    """tokensPerMinute 600 is 10 tokens a second (burst 10): four tasks of cost 10 start about a second apart."""
    pool = make_pool(
        pool_name,
        recovery=FAST_RECOVERY,
        rateLimits=[{"name": "ai", "perMinute": 6000, "tokensPerMinute": 600}],
    )
    seen: list[tuple[str, float]] = []

    async def handler(task: Task) -> None:
        seen.append((task.id, time.monotonic()))

    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, handler):
        ids = [await producer.submit("p0", {}, rate_limit="ai", cost=10) for _ in range(4)]
        free = await producer.submit("p0", {})  # no limit named: runs at once
        for task_id in [*ids, free]:
            assert (await producer.wait_result(task_id, 15)).attempts == 1
    order = [task_id for task_id, _ in seen]
    assert order.index(free) <= 1
    times = [at for task_id, at in seen if task_id != free]
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(times)), times


async def test_a_rate_limited_task_that_gets_a_429_draws_again(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """1 a second, burst 1: three tasks each answered once with a 429 (RetryAfter 0.1 s) make six runs, and every
    run draws from the bucket, retries included, so they span at least five seconds."""
    from tierpool.protocol.errors import RetryAfter

    pool = make_pool(pool_name, recovery=FAST_RECOVERY, rateLimits=[{"name": "one", "perMinute": 60}])
    runs: list[tuple[str, float]] = []

    async def handler(task: Task) -> None:
        runs.append((task.id, time.monotonic()))
        if sum(1 for task_id, _ in runs if task_id == task.id) == 1:
            raise RetryAfter(0.1, "429")

    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, handler):
        ids = [await producer.submit("p0", {}, rate_limit="one") for _ in range(3)]
        for task_id in ids:
            assert (await producer.wait_result(task_id, 20)).attempts == 1  # a 429 is no failed delivery
    times = sorted(at for _, at in runs)
    assert len(times) == 6
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(times)), times


async def test_observation_counts_throttled_tasks(client: aioredis.Redis, redis_url: str, pool_name: str) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, rateLimits=[{"name": "slow", "perMinute": 6}])
    keys = PoolKeys.parse(pool.ref)
    producer = AsyncClient(client, pool, pool.spec)

    async def handler(task: Task) -> None:
        return None

    async with running_worker(pool, redis_url, handler):
        ids = [await producer.submit("p1", {}, rate_limit="slow") for _ in range(5)]
        assert await async_wait_until(lambda: _throttled(client, keys, 4), 5)
        observed = await observe(client, keys, pool.spec.tier_names)
        assert observed.throttled == 4 and observed.to_status()["throttled"] == 4
        assert (await client.xpending(keys.tier("p1"), GROUP))["pending"] == 0  # no slot, no pending entry
        # the one the bucket let through at once (tasks taken together draw in any order)
        assert await async_wait_until(lambda: _finished(client, keys, ids, 1), 5)


async def _finished(client: aioredis.Redis, keys: PoolKeys, ids: list[str], count: int) -> bool:
    return sum(1 for found in await client.mget([keys.result(i) for i in ids]) if found) == count


async def _throttled(client: aioredis.Redis, keys: PoolKeys, count: int) -> bool:
    return int(await client.zcard(keys.throttled)) == count


async def test_only_the_owner_throttles_and_nothing_is_charged_otherwise(
    client: aioredis.Redis, pool_name: str
) -> None:
    pool = make_pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    streams = PoolStreams(client, keys, pool.spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()
    await AsyncClient(client, pool, pool.spec).submit("p0", {})
    (entry,) = await client.xreadgroup(GROUP, "owner", {keys.tier("p0"): ">"}, count=1)
    entry_id = entry[1][0][0]
    bucket = keys.rate_bucket("x")
    await client.hset(bucket, "tat", str(10**14))  # exhausted far into the future

    async def throttle(consumer: str) -> int:
        args = [GROUP, consumer, entry_id, "p0", "1000", "1", "0", "0", 1, "", "t", "", 1000]  # no tenant, no claim
        run_keys = [keys.tier("p0"), keys.throttled, bucket, keys.admitted("p0"), keys.reservation("t"), keys.where]
        return int(await streams.run("THROTTLE", run_keys, args))

    assert await throttle("intruder") == -1
    assert await client.hget(bucket, "tat") == str(10**14) and await client.zcard(keys.throttled) == 0
    assert await throttle("owner") > 0
    assert await client.zcard(keys.throttled) == 1
    assert (await client.xpending(keys.tier("p0"), GROUP))["pending"] == 0
    assert await throttle("owner") == -2  # acked already: no longer pending
    await client.delete(bucket)
    assert await throttle("owner") == -2  # even with room in the bucket: a retried call never runs it twice
    assert not await client.exists(bucket)  # and charges nothing


async def test_a_replayed_dead_letter_keeps_its_rate_limit_and_cost(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    from tierpool.protocol.errors import NonRetryable
    from tierpool.store import dlq

    pool = make_pool(pool_name, recovery=FAST_RECOVERY, rateLimits=[{"name": "ai", "perMinute": 600}])
    keys = PoolKeys.parse(pool.ref)

    async def refuse(task: Task) -> None:
        raise NonRetryable("no")

    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, refuse):
        task_id = await producer.submit("p1", {}, rate_limit="ai", cost=4)
        assert (await producer.wait_result(task_id, 10)).status == "dead_lettered"
    (letter_id, _), *_ = await client.xrange(keys.dlq)
    await dlq.replay(client, keys, [letter_id], None, pool.spec.tier_names)
    ((_, fields),) = [e for e in await client.xrange(keys.tier("p1")) if e[1]["task_id"] == task_id][-1:]
    assert (fields["rate_limit"], fields["cost"]) == ("ai", "4")
