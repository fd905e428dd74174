"""The handler for bench/hostile_producers.py: records what it was given, so the bench can check the limits.

Per run it counts the task's runs (``runs`` hash, by the payload's ``bench_id``), the largest payload it saw, the
tier it ran in, the start of each run of a rate-limited task (``starts:<limit>``), and, for a task with a tenant,
the run's interval (``intervals:<tenant>``: start, end, and whether the worker stopped it). The bench finds each
tenant's concurrency from the intervals. A run of a SIGKILLed worker records none: it ended with its process.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import redis.asyncio as aioredis

_client: aioredis.Redis | None = None


def _redis() -> aioredis.Redis:
    global _client
    if _client is None:
        _client = aioredis.Redis.from_url(os.environ["BENCH_REDIS_URL"], decode_responses=True)
    return _client


async def handle(task: Any) -> dict[str, Any]:
    payload = task.payload if isinstance(task.payload, dict) else {}
    bench_id = str(payload.get("bench_id", "?"))
    client = _redis()
    tenant = getattr(task, "tenant", None)
    size = len(json.dumps(task.payload))
    pipe = client.pipeline(transaction=False)
    pipe.hincrby("bench:runs", bench_id, 1)
    pipe.hset("bench:tier", bench_id, task.tier)
    pipe.hset("bench:size", bench_id, size)
    if task.rate_limit:  # each start of a limited run, to count them per window
        pipe.zadd(f"bench:starts:{task.rate_limit}", {f"{bench_id}:{task.attempt}:{os.getpid()}": time.time() * 1000})
    await pipe.execute()
    started, stopped = time.time() * 1000, False
    try:
        await asyncio.sleep(float(payload.get("work_ms", 20)) / 1000)
    except asyncio.CancelledError:  # stopped by the worker: cancelled, timed out, or its entry taken over
        stopped = True
        raise
    finally:
        if tenant:
            run = {"id": bench_id, "start": started, "end": time.time() * 1000, "stopped": stopped}
            await client.rpush(f"bench:intervals:{tenant}", json.dumps(run))
    return {"bench_id": bench_id}
