"""Cancel reaches tasks that wait in the due-time index (protocol 5): delayed ones and throttled ones are in
``…:due`` / ``…:throttled``, not in a stream, so a scan of the streams alone reported them unknown and they ran."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.protocol.members import member_task_id
from tierpool.protocol.submission import TaskRequest
from tierpool.protocol.task_state import CancelState

from .support import FAST_RECOVERY, Recorder, make_pool, running_worker

pytestmark = pytest.mark.redis


async def test_a_delayed_task_cancelled_before_it_is_due_never_runs(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    later = await producer.submit("p1", {}, delay=1.0)
    kept = await producer.submit("p1", {}, delay=1.0)
    report = await producer.cancel(later)
    assert report.state is CancelState.WAITING, report
    assert await client.pttl(producer.keys.cancel(later)) > 24 * 3600 * 1000 - 60_000  # outlives its due time
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder):
        assert (await producer.wait_result(kept, 10)).status == "succeeded"
        assert (await producer.wait_result(later, 10)).status == "cancelled"
    assert recorder.count(later) == 0


async def test_a_throttled_task_cancelled_while_it_waits_never_runs(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, rateLimits=[{"name": "ai", "perMinute": 60}])
    producer = AsyncClient(client, pool, pool.spec)
    await producer.submit_many([TaskRequest("p1", {"n": i}, rate_limit="ai") for i in range(3)])
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder):
        # 1/s: one runs, the other two wait in …:throttled; which ones is up to the order the worker's runs draw
        waiting: list[str] = []
        for _ in range(250):
            members = await client.zrange(producer.keys.throttled, 0, -1)
            if len(members) == 2:
                waiting = [str(member_task_id(m)) for m in members]
                break
            await asyncio.sleep(0.02)
        assert len(waiting) == 2, "the two tasks beyond the limit never waited in …:throttled"
        cancelled, kept = waiting[1], waiting[0]  # the later reservation: the most time to cancel it in
        report = await producer.cancel(cancelled)
        assert report.state is CancelState.WAITING, report
        assert (await producer.wait_result(cancelled, 10)).status == "cancelled"
        assert (await producer.wait_result(kept, 10)).status == "succeeded"
    assert recorder.count(cancelled) == 0
