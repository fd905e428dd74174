"""A paid rate-limit reservation holds only when its task starts on time: reserved tasks that all came back
late, behind busy slots, ran as one burst (four provider calls within 4 ms on a limit of one a second)."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.protocol.envelope import Task
from tierpool.protocol.submission import TaskRequest

from .support import FAST_RECOVERY, make_pool, running_worker

pytestmark = pytest.mark.redis


async def test_late_reservations_do_not_run_as_a_burst(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = make_pool(
        pool_name,
        tiers=[{"name": "p0", "weight": 1}],
        recovery={**FAST_RECOVERY, "claimIdle": "30s"},
        rateLimits=[{"name": "api", "perMinute": 60}],
    )
    producer = AsyncClient(client, pool, pool.spec)
    calls: list[float] = []
    started = time.monotonic()

    async def handler(task: Task) -> Any:
        if task.payload.get("long"):
            await asyncio.sleep(4)
        else:
            calls.append(time.monotonic() - started)
        return {}

    async with running_worker(pool, redis_url, handler, concurrency=4):
        await producer.submit_many([TaskRequest("p0", {"i": i}, rate_limit="api") for i in range(5)])
        await asyncio.sleep(0.3)  # the first ran; the other four hold reservations at 1, 2, 3 and 4 s
        await producer.submit_many([TaskRequest("p0", {"long": True}) for _ in range(4)])  # every slot, 4 s
        deadline = time.monotonic() + 15
        while len(calls) < 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert len(calls) == 5, calls
    assert min(gaps) > 0.45, f"provider calls at {calls}: the limit is one a second"
