"""The handler for bench/hostile_producers.py: records what it was given, so the bench can check the limits.

Per run it counts the task's runs (``runs`` hash, by the payload's ``bench_id``), the largest payload it saw, the
tier it ran in, the queue wait the worker measured, and each tenant's concurrency (``running:<tenant>``, with the
highest value ever reached in ``peak``).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import redis.asyncio as aioredis

_client: aioredis.Redis | None = None
PEAK = """
local n = redis.call('INCR', KEYS[1])
local peak = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if n > peak then redis.call('HSET', KEYS[2], ARGV[1], n) end
return n
"""


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
    await pipe.execute()
    if tenant:
        await client.eval(PEAK, 2, f"bench:running:{tenant}", "bench:peak", tenant)
    try:
        await asyncio.sleep(float(payload.get("work_ms", 20)) / 1000)
    finally:
        if tenant:
            await client.decr(f"bench:running:{tenant}")
    return {"bench_id": bench_id}
