"""Handlers importable by worker subprocesses in tests (PYTHONPATH=tests)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import redis.asyncio as aioredis

from tierpool.handlers import simulate
from tierpool.protocol.envelope import Task
from tierpool.protocol.rate_limits import rate_limited

_client: aioredis.Redis | None = None


async def counting(task: Task) -> Any:
    """Records each execution start in the hash ``test:executions:<pool>``, then behaves like simulate."""
    global _client
    if _client is None:
        _client = aioredis.Redis.from_url(os.environ["TIERPOOL_REDIS_URL"], decode_responses=True)
    await _client.hincrby(f"test:executions:{os.environ.get('TEST_POOL', '')}", task.id, 1)
    return await simulate(task)


def sync_sleep(task: Task) -> dict[str, Any]:
    import time

    time.sleep(float(task.payload.get("work_ms", 0)) / 1000)
    return {"sync": True}


async def logged(task: Task) -> Any:
    """Appends the task id to the file ``$TEST_RUN_LOG`` when each run starts (no Redis needed, so it counts runs
    during a Redis outage too), then behaves like simulate."""
    with open(os.environ["TEST_RUN_LOG"], "a", encoding="utf-8") as runs:
        runs.write(f"{task.id} {os.getpid()}\n")
    return await simulate(task)


async def logged_while_broken(task: Task) -> Any:
    """:func:`logged`, then a failure while the file named in the payload's ``broken`` exists (an outage that the
    test ends by deleting it)."""
    with open(os.environ["TEST_RUN_LOG"], "a", encoding="utf-8") as runs:
        runs.write(f"{task.id} {os.getpid()}\n")
    broken = task.payload.get("broken") if isinstance(task.payload, dict) else None
    if broken and os.path.exists(broken):
        raise RuntimeError(f"broken while {broken} exists")
    return await simulate(task)


def sync_sleep_then_mark(task: Task) -> dict[str, Any]:
    """Sleeps ``work_ms`` in its thread, then creates the file named in ``mark``: proof that it ran to the end."""
    import pathlib
    import time

    time.sleep(float(task.payload.get("work_ms", 0)) / 1000)
    pathlib.Path(task.payload["mark"]).write_text("finished")
    return {"sync": True}


async def deferring(task: Task) -> Any:
    """Counts runs like :func:`counting`; raises RetryAfter(``retry_after``) on the first ``defer_times`` runs."""
    from tierpool.protocol.errors import RetryAfter

    global _client
    if _client is None:
        _client = aioredis.Redis.from_url(os.environ["TIERPOOL_REDIS_URL"], decode_responses=True)
    runs = await _client.hincrby(f"test:executions:{os.environ.get('TEST_POOL', '')}", task.id, 1)
    if runs <= int(task.payload.get("defer_times", 0)):
        raise RetryAfter(float(task.payload["retry_after"]), f"deferred on run {runs}")
    return {"runs": runs, "attempt": task.attempt}


async def checkpointing(task: Task) -> Any:
    """Counts runs like :func:`counting`; a run that starts without a checkpoint saves ``{"pid": <its pid>}``,
    then works ``work_ms``. Returns the state it started with."""
    global _client
    if _client is None:
        _client = aioredis.Redis.from_url(os.environ["TIERPOOL_REDIS_URL"], decode_responses=True)
    await _client.hincrby(f"test:executions:{os.environ.get('TEST_POOL', '')}", task.id, 1)
    started_with = task.checkpoint_state
    if started_with is None:
        await task.checkpoint({"pid": os.getpid()})
    await simulate(task)
    return {"started_with": started_with, "pid": os.getpid()}


@rate_limited("provider")
async def provider(task: Task) -> Any:
    """Records each run's start (``<task_id> <unix ms> <attempt>`` in the list ``test:starts:<pool>``), then
    behaves like simulate. Draws from the pool's rate limit ``provider`` (protocol 5)."""
    import time

    global _client
    if _client is None:
        _client = aioredis.Redis.from_url(os.environ["TIERPOOL_REDIS_URL"], decode_responses=True)
    entry = f"{task.id} {int(time.time() * 1000)} {task.attempt}"
    await _client.rpush(f"test:starts:{os.environ.get('TEST_POOL', '')}", entry)
    return await simulate(task)


_MAX_SCRIPT = """
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
if n > tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') then redis.call('HSET', KEYS[2], ARGV[1], n) end
return n
"""


async def tenant_probe(task: Task) -> Any:
    """Counts the running tasks of each tenant in ``test:running:<pool>`` and keeps each tenant's peak in
    ``test:peak:<pool>`` (one script, so the peak is exact across worker processes), counts runs like
    :func:`counting`, then behaves like simulate."""
    global _client
    if _client is None:
        _client = aioredis.Redis.from_url(os.environ["TIERPOOL_REDIS_URL"], decode_responses=True)
    pool, tenant = os.environ.get("TEST_POOL", ""), task.tenant or "-"
    running = f"test:running:{{{pool}}}"
    await _client.eval(_MAX_SCRIPT, 2, running, f"test:peak:{{{pool}}}", tenant)  # type: ignore[misc]
    await _client.hincrby(f"test:executions:{pool}", task.id, 1)
    try:
        return await simulate(task)
    finally:
        await _client.hincrby(running, tenant, -1)


async def progressing(task: Task) -> Any:
    """Reports each of ``payload["steps"]`` as a progress event (``work_ms`` apart), then returns how many it
    reported and its tier (the TypeScript client's cross-language test follows it)."""
    steps = list(task.payload.get("steps", []))
    for step in steps:
        await task.progress(step)
        await asyncio.sleep(float(task.payload.get("work_ms", 0)) / 1000)
    return {"steps": len(steps), "tier": task.tier, "payload": task.payload}


async def spawning(task: Task) -> Any:
    """Logs a line through ``logging`` (logger ``app``); a task with ``{"spawn": true}`` first submits a child task
    to p1, and returns its id (traces across processes: the child carries this run's span)."""
    import logging

    from tierpool.client.producer import AsyncClient

    global _client
    logging.getLogger("app").info("running %s", task.id)
    if not (isinstance(task.payload, dict) and task.payload.get("spawn")):
        return {"child": None}
    if _client is None:
        _client = aioredis.Redis.from_url(os.environ["TIERPOOL_REDIS_URL"], decode_responses=True)
    producer = await AsyncClient.create(_client, f"test/{os.environ['TEST_POOL']}")
    return {"child": await producer.submit("p1", {})}
