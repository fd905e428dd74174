"""A worker's reads as it stops, on a real Valkey (tierpool.runtime.reads): a stop ends a blocking read at once, and an
entry the server delivered as the worker stopped or was cancelled is handed back, claimable at once, never left
pending on a consumer that will not run it (until claimIdle)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import GROUP, RETRY_CONSUMER
from tierpool.model.resource import AgentPool
from tierpool.protocol.dispatch import TakePlan
from tierpool.runtime.metrics import WorkerMetrics
from tierpool.runtime.reads import Reads
from tierpool.runtime.settings import WorkerSettings
from tierpool.runtime.worker import Worker
from tierpool.store.connection import RedisSettings
from tierpool.store.streams import PoolStreams

from .support import Recorder, async_wait_until, make_pool, running_worker, sync_redis

pytestmark = pytest.mark.redis
SLOW_CLAIM = {"claimIdle": "30s", "heartbeat": "1s", "retryBackoff": "50ms", "sweepInterval": "1s"}


def slow_claim_pool(name: str) -> AgentPool:
    return make_pool(name, tiers=[{"name": "p0", "weight": 1}], recovery=SLOW_CLAIM)


async def test_a_stop_ends_a_blocking_read_at_once(client: aioredis.Redis, redis_url: str, pool_name: str) -> None:
    pool = slow_claim_pool(pool_name)
    async with running_worker(pool, redis_url, Recorder(), block_ms=5_000) as worker:
        await asyncio.sleep(0.5)  # idle: blocked on XREADGROUP for up to 5 s
        began = time.monotonic()
        worker.request_stop()
    assert time.monotonic() - began < 1.0, "the stop waited for the blocking read to time out"


async def test_an_entry_delivered_as_the_read_stops_is_handed_back_uncounted(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = slow_claim_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    streams = PoolStreams(client, producer.keys, pool.spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()
    stop = asyncio.Event()
    reads = Reads(streams, "w1", 30_000, stop)
    read = asyncio.create_task(reads.wait_for_work(TakePlan((1,), (1,)), 5_000, asyncio.Event()))
    await asyncio.sleep(0.3)
    # delivered to the blocked read by the server as the stop comes: a sync client blocks the loop, so the read
    # cannot see its reply before the stop is set
    task_id = Client(sync_redis(redis_url), pool).submit("p0", {})
    stop.set()
    assert await asyncio.wait_for(read, 2) == []
    await reads.close()
    pending: Any = await client.xpending_range(producer.keys.tier("p0"), GROUP, "-", "+", 10)
    assert [(p["consumer"], p["times_delivered"]) for p in pending] == [(RETRY_CONSUMER, 0)]
    assert pending[0]["time_since_delivered"] >= 30_000  # any worker's next reclaim takes it
    assert reads.handed_back == 1 and task_id


async def test_a_cancelled_worker_hands_back_what_its_read_was_given(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """The worker's task is cancelled (an embedding application, Ctrl-C) as the server delivers an entry to its
    blocking read: the entry is handed back, so another worker runs it at once instead of after claimIdle (30 s)."""
    pool = slow_claim_pool(pool_name)
    first = Recorder()
    worker_client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    settings = WorkerSettings(pool, RedisSettings(url=redis_url), "test", 4, "w1", 5.0, block_ms=5_000)
    worker = Worker(settings, first, worker_client, WorkerMetrics(CollectorRegistry()))
    run = asyncio.create_task(worker.run())
    assert await async_wait_until(lambda: _true(worker.ready), 5)
    await asyncio.sleep(0.3)  # blocked on XREADGROUP
    task_id = Client(sync_redis(redis_url), pool).submit("p0", {})  # blocks the loop: the reply waits unread
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await worker_client.aclose()
    second = Recorder()
    async with running_worker(pool, redis_url, second, consumer="w2"):
        assert await async_wait_until(lambda: _true(bool(first.calls) or bool(second.calls)), 8), (
            "the entry stayed pending on the cancelled worker"
        )
    assert [call.id for call in [*first.calls, *second.calls]] == [task_id]


async def _true(value: bool) -> bool:
    return value
