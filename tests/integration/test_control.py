"""Task control (issue #12) against a real Valkey: error classes (NonRetryable, RetryAfter) and time limits,
in-process and with whole worker processes killed mid-way."""

from __future__ import annotations

import asyncio
import itertools
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from tierpool import NonRetryable, RetryAfter
from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import GROUP, RETRY_CONSUMER, PoolKeys
from tierpool.protocol.envelope import Task

from .support import (
    FAST_RECOVERY,
    async_wait_until,
    killed_on_exit,
    make_pool,
    running_worker,
    spawn_worker,
    sync_redis,
    wait_until,
)

pytestmark = pytest.mark.redis

FAST = {**FAST_RECOVERY, "claimIdle": "2s"}


class Runs:
    """Records each run (attempt, monotonic start) and behaves as ``behave(run number, task)`` says."""

    def __init__(self, behave: Any) -> None:
        self.calls: list[tuple[int, float]] = []
        self.behave = behave

    async def __call__(self, task: Task) -> Any:
        self.calls.append((task.attempt, time.monotonic()))
        return await self.behave(len(self.calls), task)


# --- error classes -----------------------------------------------------------------------------------------


async def test_non_retryable_goes_to_the_dlq_at_once(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = make_pool(pool_name, recovery={**FAST, "maxDeliveries": 5})
    producer = AsyncClient(client, pool, pool.spec)

    async def refuse(run: int, task: Task) -> Any:
        raise NonRetryable("context too long")

    runs = Runs(refuse)
    async with running_worker(pool, redis_url, runs):
        task_id = await producer.submit("p0", {})
        outcome = await producer.wait_result(task_id, 20)
    assert outcome.status == "dead_lettered" and outcome.attempts == 1
    assert outcome.reason == "non-retryable: context too long"
    assert outcome.error == "NonRetryable: context too long"
    assert len(runs.calls) == 1
    [(_, dead)] = await client.xrange(PoolKeys.parse(pool.ref).dlq)
    assert dead["task_id"] == task_id and dead["reason"] == "non-retryable: context too long"


async def test_retry_after_runs_again_no_earlier_and_counts_no_delivery(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """maxDeliveries 1: a single counted failure would dead-letter it. Three deferrals of 0.5 s do not."""
    pool = make_pool(pool_name, recovery={**FAST, "maxDeliveries": 1})
    producer = AsyncClient(client, pool, pool.spec)

    async def busy_provider(run: int, task: Task) -> Any:
        if run <= 3:
            raise RetryAfter(0.5, "429 from the provider")
        return "ok"

    runs = Runs(busy_provider)
    async with running_worker(pool, redis_url, runs):
        task_id = await producer.submit("p0", {})
        outcome = await producer.wait_result(task_id, 30)
    assert outcome.ok and outcome.attempts == 1, outcome
    assert [attempt for attempt, _ in runs.calls] == [1, 1, 1, 1]
    starts = [start for _, start in runs.calls]
    assert all(later - earlier >= 0.5 for earlier, later in itertools.pairwise(starts)), starts
    keys = PoolKeys.parse(pool.ref)
    assert await client.get(keys.deferrals(task_id)) == "3"
    assert await client.hexists(keys.errors, task_id) == 0  # a deferral is not a failure to remember


async def test_deferrals_past_max_deferrals_count_as_failed_deliveries(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery={**FAST, "maxDeliveries": 2, "maxDeferrals": 2})
    producer = AsyncClient(client, pool, pool.spec)

    async def always_busy(run: int, task: Task) -> Any:
        raise RetryAfter(0.1, f"busy on run {run}")

    runs = Runs(always_busy)
    async with running_worker(pool, redis_url, runs):
        task_id = await producer.submit("p0", {})
        outcome = await producer.wait_result(task_id, 30)
    # two free deferrals, then a counted failure on attempt 1, then attempt 2 (the last) fails as well
    assert [attempt for attempt, _ in runs.calls] == [1, 1, 1, 2]
    assert outcome.status == "dead_lettered" and outcome.attempts == 2
    assert outcome.error == "RetryAfter: busy on run 4"


async def test_retry_after_longer_than_claim_idle_waits_in_the_due_index(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """Protocol 5: an hour asked for is an hour, no longer cut to claimIdle (1 s): the entry is acked and the task
    waits in the pool's due set, its deferral not counted as a delivery."""
    pool = make_pool(pool_name, recovery={**FAST, "claimIdle": "1s"})
    producer = AsyncClient(client, pool, pool.spec)
    keys = PoolKeys.parse(pool.ref)

    async def later(run: int, task: Task) -> Any:
        if run == 1:
            raise RetryAfter(3600)
        return "ok"

    runs = Runs(later)
    async with running_worker(pool, redis_url, runs):
        await producer.submit("p0", {})
        assert await async_wait_until(lambda: _due_count(client, keys), 10)
        asked_at = await _server_ms(client)
        await asyncio.sleep(2.5)  # more than twice claimIdle: the parked-entry route would have run it again
        assert len(runs.calls) == 1
        ((member, due),) = await client.zrange(keys.due, 0, -1, withscores=True)
        assert (await client.xpending(keys.tier("p0"), GROUP))["pending"] == 0
    assert 3_590_000 <= due - asked_at <= 3_600_000
    assert '"attempts","0"' in member  # the deferral counted no delivery


async def _due_count(client: aioredis.Redis, keys: PoolKeys) -> bool:
    return bool(await client.zcard(keys.due))


async def _server_ms(client: aioredis.Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


# --- time limits ---------------------------------------------------------------------------------------------


async def test_async_run_past_the_pool_timeout_is_cancelled_and_fails(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery={**FAST, "maxDeliveries": 2}, tasks={"timeout": "300ms"})
    producer = AsyncClient(client, pool, pool.spec)
    cancelled: list[int] = []

    async def runaway(run: int, task: Task) -> Any:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(run)
            raise

    runs = Runs(runaway)
    async with running_worker(pool, redis_url, runs):
        task_id = await producer.submit("p0", {})
        outcome = await producer.wait_result(task_id, 30)
    assert outcome.status == "dead_lettered" and outcome.attempts == 2
    assert outcome.error == "timed out after 0.3s"
    assert cancelled == [1, 2]


async def test_submit_timeout_applies_to_its_task_only(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = make_pool(pool_name, recovery={**FAST, "maxDeliveries": 1})  # no tasks.timeout: none by default
    producer = AsyncClient(client, pool, pool.spec)

    async def sleeper(run: int, task: Task) -> Any:
        await asyncio.sleep(task.payload["sleep"])
        return "ok"

    async with running_worker(pool, redis_url, Runs(sleeper)):
        limited = await producer.submit("p0", {"sleep": 60}, timeout=0.25)
        unlimited = await producer.submit("p0", {"sleep": 1.0})
        limited_outcome = await producer.wait_result(limited, 30)
        unlimited_outcome = await producer.wait_result(unlimited, 30)
    assert limited_outcome.status == "dead_lettered" and limited_outcome.error == "timed out after 0.25s"
    assert unlimited_outcome.ok


async def test_a_handlers_own_timeout_error_is_an_ordinary_failure(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery={**FAST, "maxDeliveries": 1}, tasks={"timeout": "30s"})
    producer = AsyncClient(client, pool, pool.spec)

    async def upstream_timeout(run: int, task: Task) -> Any:
        raise TimeoutError("model API read timeout")

    async with running_worker(pool, redis_url, Runs(upstream_timeout)):
        outcome = await producer.wait_result(await producer.submit("p0", {}), 30)
    assert outcome.status == "dead_lettered" and outcome.error == "TimeoutError: model API read timeout"


async def test_sync_handler_past_its_time_limit_fails_while_its_thread_runs_on(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """A thread cannot be stopped: the worker stops waiting for it and records the timeout; the thread ends later."""
    pool = make_pool(pool_name, recovery={**FAST, "maxDeliveries": 1}, tasks={"timeout": "300ms"})
    producer = AsyncClient(client, pool, pool.spec)
    release, ended = threading.Event(), threading.Event()

    def stuck(task: Task) -> str:
        release.wait(60)
        ended.set()
        return "late"

    async with running_worker(pool, redis_url, stuck):
        outcome = await producer.wait_result(await producer.submit("p0", {}), 30)
        still_running = not ended.is_set()
        release.set()
        assert await asyncio.to_thread(ended.wait, 30)
    assert outcome.status == "dead_lettered" and outcome.error == "timed out after 0.3s"
    assert still_running


# --- whole processes, killed --------------------------------------------------------------------------------


@pytest.mark.slow
def test_time_limit_survives_a_worker_sigkill(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    """The limit travels in the envelope: the worker that reclaims a killed worker's task enforces it too."""
    pool = make_pool(
        pool_name,
        worker={"handler": "support_handlers:counting"},
        recovery={"claimIdle": "3s", "heartbeat": "500ms", "maxDeliveries": 2},
    )
    client = sync_redis(redis_url)
    executions = f"test:executions:{pool.metadata.name}"
    first = spawn_worker(pool, redis_url, "--consumer", "first", log=tmp_path / "first.log")
    with killed_on_exit(first):
        task_id = Client(client, pool).submit("p0", {"work_ms": 600_000}, timeout=5)
        assert wait_until(lambda: client.hget(executions, task_id) == "1", 30)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    second = spawn_worker(pool, redis_url, "--consumer", "second", log=tmp_path / "second.log")
    with killed_on_exit(second):
        outcome = Client(client, pool).wait_result(task_id, 90)
    assert outcome.status == "dead_lettered" and outcome.attempts == 2, outcome
    assert outcome.error == "timed out after 5s" and outcome.worker is None
    assert client.hget(executions, task_id) == "2"


@pytest.mark.slow
def test_deferral_survives_a_worker_sigkill(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    """A worker defers a task and is killed while the task waits: another worker runs it after the delay, and the
    deferral still counts no delivery (maxDeliveries 1)."""
    pool = make_pool(
        pool_name,
        worker={"handler": "support_handlers:deferring"},
        recovery={"claimIdle": "10s", "heartbeat": "500ms", "maxDeliveries": 1},
    )
    client = sync_redis(redis_url)
    keys = PoolKeys.parse(pool.ref)
    executions = f"test:executions:{pool.metadata.name}"

    def parked() -> bool:
        try:
            pending = client.xpending_range(keys.tier("p0"), GROUP, "-", "+", 10)
        except ResponseError:  # no group until the worker has started
            return False
        return [p["consumer"] for p in pending] == [RETRY_CONSUMER]

    first = spawn_worker(pool, redis_url, "--consumer", "first", log=tmp_path / "first.log")
    with killed_on_exit(first):
        task_id = Client(client, pool).submit("p0", {"defer_times": 1, "retry_after": 4})
        assert wait_until(parked, 30, interval=0.02)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    second = spawn_worker(pool, redis_url, "--consumer", "second", log=tmp_path / "second.log")
    with killed_on_exit(second):
        outcome = Client(client, pool).wait_result(task_id, 60)
    assert outcome.ok and outcome.worker == "second" and outcome.attempts == 1, outcome
    assert outcome.result == {"runs": 2, "attempt": 1}
    assert client.hget(executions, task_id) == "2"


async def test_async_run_waits_as_asked_even_when_no_worker_holds_it(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """The RetryAfter mark is in Redis, not in the worker: the entry waits parked, then any worker takes it."""
    pool = make_pool(pool_name, recovery={**FAST, "maxDeliveries": 1})
    producer = AsyncClient(client, pool, pool.spec)

    async def once_later(run: int, task: Task) -> Any:
        if run == 1:
            raise RetryAfter(0.2)
        return "ok"

    keys = PoolKeys.parse(pool.ref)

    async def parked() -> bool:
        pending = await client.xpending_range(keys.tier("p0"), GROUP, "-", "+", 10)
        return [p["consumer"] for p in pending] == [RETRY_CONSUMER]

    runs = Runs(once_later)
    async with running_worker(pool, redis_url, runs, consumer="one"):
        task_id = await producer.submit("p0", {})
        assert await async_wait_until(parked, 20, interval=0.01)
    async with running_worker(pool, redis_url, runs, consumer="two"):
        outcome = await producer.wait_result(task_id, 30)
    assert outcome.ok and outcome.worker == "two" and outcome.attempts == 1
