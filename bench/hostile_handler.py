"""The handler for bench/hostile_producers.py: records what it was given, so the bench can check the limits.

Per run it counts the task's runs (``runs`` hash, by the payload's ``bench_id``), the largest payload it saw, the
tier it ran in, the queue wait the worker measured, and each tenant's concurrency (``running:<tenant>``, the set
of its runs going on as ``<pid>:<bench_id>``, with the highest size ever reached in ``peak``). A run of a worker
that was SIGKILLed never leaves the set, so each run first drops the runs of processes that are gone (the workers
are the bench's children, on this host): a counter would stay one too high for every run a kill cut short.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import redis.asyncio as aioredis

_client: aioredis.Redis | None = None
PEAK = """
redis.call('SADD', KEYS[1], ARGV[2])
local tasks, n, runs = {}, 0, 0
for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local id = string.match(member, '^[0-9]+:(.*)$')
  runs = runs + 1
  if not tasks[id] then tasks[id] = true; n = n + 1 end
end
local peak = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if n > peak then redis.call('HSET', KEYS[2], ARGV[1], n) end
if runs > n then redis.call('HINCRBY', KEYS[3], ARGV[1], 1) end
return n
"""
"""Adds this run to its tenant's running set; ``peak`` keeps the most distinct tasks of the tenant seen running at
once (what ``tenantConcurrency`` limits), ``overlaps`` counts the times a task was seen running twice at once (an
at-least-once redelivery whose first run had not ended: not a second task of the tenant)."""


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
    running, run = f"bench:running:{tenant}", f"{os.getpid()}:{bench_id}"
    if tenant:
        gone = [member for member in await client.smembers(running) if not _alive(int(member.split(":", 1)[0]))]
        if gone:
            await client.srem(running, *gone)
        await client.eval(PEAK, 3, running, "bench:peak", "bench:overlaps", tenant, run)
    try:
        await asyncio.sleep(float(payload.get("work_ms", 20)) / 1000)
    finally:
        if tenant:
            await client.srem(running, run)
    return {"bench_id": bench_id}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
