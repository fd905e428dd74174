"""Loops that fail on every pass fail liveness; runs whose entries are no longer this worker's are stopped (and a
sync run's slot is kept until its thread returns); the drain never hangs on a run that will not stop; outcome
batches survive unexpected errors; a fresh worker holds off reclaiming."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from redis.exceptions import ResponseError

from tierpool.client.producer import AsyncClient
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.envelope import Task
from tierpool.runtime import supervise
from tierpool.runtime.drain import INTERRUPTED
from tierpool.runtime.health import HealthServer
from tierpool.runtime.worker import Worker

from .support import FAST_RECOVERY, async_wait_until, make_pool, running_worker

pytestmark = pytest.mark.redis

FAST = FAST_RECOVERY
OOM = "OOM command not allowed when used memory > 'maxmemory'."


@pytest.fixture
def quick_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Restarts far more often than the stall bound: a beat at the start of every pass would hide the failures."""
    monkeypatch.setattr(supervise, "FIRST_RESTART_DELAY", 0.05)
    monkeypatch.setattr(supervise, "MAX_RESTART_DELAY", 0.05)


def _when(check: Any) -> Any:
    async def probe() -> bool:
        return bool(check())

    return probe


class Blocking:
    def __init__(self) -> None:
        self.started: list[str] = []
        self.cancelled: list[str] = []

    async def __call__(self, task: Task) -> Any:
        self.started.append(task.id)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.cancelled.append(task.id)
            raise


async def _hold_one(client: aioredis.Redis, pool: Any, handler: Blocking) -> None:
    """A running task: the heartbeat has an entry to refresh."""
    task_id = await AsyncClient(client, pool, pool.spec).submit("p0", {})
    assert await async_wait_until(_when(lambda: task_id in handler.started), 10)


def _break_heartbeat(worker: Worker) -> None:
    async def heartbeat(tier_index: int, consumer: str, entry_ids: Any) -> list[str]:
        raise ResponseError(OOM)

    worker.streams.heartbeat = heartbeat  # type: ignore[method-assign]


async def test_liveness_fails_when_the_heartbeat_fails_on_every_pass(
    redis_url: str, pool_name: str, client: aioredis.Redis, quick_restarts: None
) -> None:
    pool = make_pool(pool_name, recovery=FAST)
    handler = Blocking()
    async with running_worker(pool, redis_url, handler, stall_seconds=0.5, grace=1) as worker:
        assert await async_wait_until(_when(worker.live), 10), worker.loops.problems()
        await _hold_one(client, pool, handler)
        _break_heartbeat(worker)
        assert await async_wait_until(_when(lambda: not worker.live()), 20)
        assert any(problem.startswith("heartbeat loop") for problem in worker.loops.problems())


def _healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return error.code


async def test_healthz_answers_503_while_the_heartbeat_fails_on_every_pass(
    redis_url: str, pool_name: str, client: aioredis.Redis, quick_restarts: None
) -> None:
    pool = make_pool(pool_name, recovery=FAST)
    handler = Blocking()
    async with running_worker(pool, redis_url, handler, stall_seconds=0.5, grace=1) as worker:
        server = HealthServer(
            CollectorRegistry(), live=worker.live, ready=lambda: worker.ready, host="127.0.0.1", port=0
        )
        server.start()
        try:
            assert await async_wait_until(lambda: asyncio.to_thread(lambda: _healthz(server.port) == 200), 10)
            await _hold_one(client, pool, handler)
            _break_heartbeat(worker)
            assert await async_wait_until(lambda: asyncio.to_thread(lambda: _healthz(server.port) == 503), 20)
        finally:
            server.stop()


async def _only_pending(client: aioredis.Redis, stream: str) -> dict[str, Any]:
    [entry] = await client.xpending_range(stream, GROUP, "-", "+", 10)
    return dict(entry)


@pytest.mark.parametrize("how", ["acked by another worker", "deleted"])
async def test_a_run_whose_entry_is_no_longer_pending_here_is_stopped_and_counted(
    redis_url: str, pool_name: str, client: aioredis.Redis, how: str
) -> None:
    pool = make_pool(pool_name, recovery=FAST)
    stream = PoolKeys.parse(pool.ref).tier("p0")
    handler = Blocking()
    async with running_worker(pool, redis_url, handler, consumer="a", concurrency=1) as worker:
        task_id = await AsyncClient(client, pool, pool.spec).submit("p0", {})
        assert await async_wait_until(_when(lambda: handler.started == [task_id]), 10)
        entry_id = (await _only_pending(client, stream))["message_id"]
        if how == "deleted":
            await client.xdel(stream, entry_id)
        else:
            await client.xclaim(stream, GROUP, "b", 0, [entry_id], justid=True)
            await client.xack(stream, GROUP, entry_id)
        assert await async_wait_until(_when(lambda: handler.cancelled == [task_id]), 10)
        assert await async_wait_until(_when(lambda: worker.series[0].lost_ownership.value == 1), 10)
        assert len(worker.ledger) == 0 and worker.ledger.running_total == 0  # the slot is free


async def test_a_sync_run_taken_over_keeps_its_slot_until_its_thread_returns(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST)
    stream = PoolKeys.parse(pool.ref).tier("p0")
    release = threading.Event()
    calls: list[str] = []

    def blocking(task: Task) -> None:
        calls.append(task.id)
        release.wait(60)

    try:
        async with running_worker(pool, redis_url, blocking, consumer="a", concurrency=1) as worker:
            task_id = await AsyncClient(client, pool, pool.spec).submit("p0", {})
            assert await async_wait_until(_when(lambda: calls == [task_id]), 10)
            entry_id = (await _only_pending(client, stream))["message_id"]
            await client.xclaim(stream, GROUP, "b", 0, [entry_id], justid=True)
            assert await async_wait_until(_when(lambda: worker.series[0].lost_ownership.value == 1), 10)
            # the thread still runs user code: its slot stays taken (not heartbeated, never started twice)
            assert worker.ledger.zombies() == [(0, entry_id)] and worker.ledger.running_total == 1
            assert worker.ledger.ids_by_tier() == {}
            release.set()
            assert await async_wait_until(
                _when(lambda: len(worker.ledger) == 0 and worker.ledger.running_total == 0), 10
            )
            assert worker.series[0].lost_ownership.value == 1
    finally:
        release.set()
    assert (await _only_pending(client, stream))["consumer"] == "b"


async def test_the_drain_does_not_hang_on_a_handler_that_swallows_its_cancellation(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery={**FAST, "claimIdle": "60s"})
    keys = PoolKeys.parse(pool.ref)
    done = asyncio.Event()
    started: list[str] = []

    async def stubborn(task: Task) -> None:
        started.append(task.id)
        while not done.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue

    try:
        async with running_worker(pool, redis_url, stubborn, consumer="a", grace=0.5) as worker:
            task_id = await AsyncClient(client, pool, pool.spec).submit("p0", {})
            assert await async_wait_until(_when(lambda: started == [task_id]), 10)
        entry = await _only_pending(client, keys.tier("p0"))
        assert worker.stuck == [(0, entry["message_id"])]
        assert await client.hget(keys.errors, task_id) == INTERRUPTED
        assert entry["time_since_delivered"] < 30_000  # not claimable at once: its user code may still run
    finally:
        done.set()


async def test_an_unexpected_error_writing_outcomes_loses_no_batch(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST)
    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, lambda task: {"ok": True}) as worker:
        real = worker.streams.run_batch
        failures: list[int] = []

        async def run_batch(calls: Any, *rest: Any) -> list[Any]:
            if not failures:
                failures.append(len(calls))
                raise RuntimeError("injected: not a connection error")
            return await real(calls, *rest)

        worker.streams.run_batch = run_batch  # type: ignore[method-assign]
        task_id = await producer.submit("p0", {})
        outcome = await producer.wait_result(task_id, 20)
        assert outcome.ok and failures == [1]
        assert await async_wait_until(_when(lambda: len(worker.ledger) == 0), 10)


async def test_a_fresh_worker_holds_off_reclaiming_for_two_heartbeats(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """Started right after an outage, every pending entry looks idle, those of healthy workers too."""
    pool = make_pool(pool_name, recovery={**FAST, "heartbeat": "1s", "claimIdle": "2s"})
    stream = PoolKeys.parse(pool.ref).tier("p0")
    await AsyncClient(client, pool, pool.spec).submit("p0", {})
    await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    [[_, [(entry_id, _)]]] = await client.xreadgroup(GROUP, "other", {stream: ">"}, count=1)
    await client.xclaim(stream, GROUP, "other", 0, [entry_id], idle=600_000, justid=True)
    ran_at: list[float] = []

    async def record(task: Task) -> None:
        ran_at.append(time.monotonic())

    began = time.monotonic()
    async with running_worker(pool, redis_url, record, consumer="fresh"):
        assert await async_wait_until(_when(lambda: ran_at), 20)
    assert ran_at[0] - began >= 2.0  # two heartbeat intervals after start-up, not at once
