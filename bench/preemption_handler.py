"""The handler for bench/preemption.py: a P2 "agent" task works in steps, checkpointing after each, and resumes
from its last checkpoint; any other task sleeps ``work_ms``. Each run records when it started (and the first one
its wait from the producer's send time) in its result, and each run's interval in ``bench:runs:<task_id>``."""

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
        _client = aioredis.Redis.from_url(os.environ["TIERPOOL_REDIS_URL"], decode_responses=True)
    return _client


async def agent(task: Any) -> dict[str, Any]:
    started = time.time()
    payload = task.payload if isinstance(task.payload, dict) else {}
    sent = float(payload.get("sent", started))
    stopped = False
    try:
        steps = int(payload.get("steps", 0))
        if steps:
            step = int((task.checkpoint_state or {}).get("step", 0))
            while step < steps:
                await asyncio.sleep(float(payload["step_ms"]) / 1000)
                step += 1
                await task.checkpoint({"step": step})
        else:
            await asyncio.sleep(float(payload.get("work_ms", 0)) / 1000)
    except asyncio.CancelledError:
        stopped = True
        raise
    finally:
        run = {"start": started, "end": time.time(), "pid": os.getpid(), "stopped": stopped}
        await _redis().rpush(f"bench:runs:{task.id}", json.dumps(run))
    return {"wait_ms": (started - sent) * 1000, "started": started}
