"""Logs by task on a real Valkey: what a handler logs through the standard ``logging`` module, from an async
handler or from a sync one's thread, and what the worker logs about the run, carries the task's id, name, tier and
attempt, worker_log by the worker's own log set-up; lines outside a run carry none."""

from __future__ import annotations

import io
import json
import logging
import re
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.protocol.envelope import Task
from tierpool.runtime import logs

from .support import FAST_RECOVERY, make_pool, running_worker

pytestmark = pytest.mark.redis
app = logging.getLogger("app")


async def flaky(task: Task) -> str:
    app.info("working on %s", task.payload["n"])
    if task.attempt == 1:
        raise RuntimeError("first attempt fails")
    return "ok"


def flaky_sync(task: Task) -> str:
    app.info("working on %s", task.payload["n"])
    if task.attempt == 1:
        raise RuntimeError("first attempt fails")
    return "ok"


async def run_two(redis_url: str, pool_name: str, client: aioredis.Redis, handler: Any) -> list[str]:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, handler):
        ids = [await producer.submit(tier, {"n": n}) for n, tier in enumerate(["p0", "p2"])]
        for task_id in ids:
            assert (await producer.wait_result(task_id, 10)).attempts == 2
    return ids


@pytest.mark.parametrize("worker_log", ["json"], indirect=True)
@pytest.mark.parametrize("handler", [flaky, flaky_sync], ids=["async", "sync"])
async def test_json_lines_of_a_run_carry_its_fields(
    redis_url: str, pool_name: str, client: aioredis.Redis, worker_log: io.StringIO, handler: Any
) -> None:
    ids = await run_two(redis_url, pool_name, client, handler)
    lines = [json.loads(line) for line in worker_log.getvalue().splitlines()]
    mine = [(line["task_id"], line["task"], line["tier"], line["attempt"]) for line in lines if line["logger"] == "app"]
    assert sorted(mine) == sorted((i, "test", tier, n) for i, tier in zip(ids, ["p0", "p2"]) for n in (1, 2))
    retries = [line for line in lines if "will retry" in line["message"]]  # the worker's own line about the run
    assert sorted((line["task_id"], line["attempt"]) for line in retries) == sorted((i, 1) for i in ids)
    outside = [line for line in lines if "serving pool" in line["message"] or "stop requested" in line["message"]]
    assert len(outside) == 2 and not any(name in line for line in outside for name in logs.RUN_FIELDS)


@pytest.mark.parametrize("worker_log", ["text"], indirect=True)
@pytest.mark.parametrize("handler", [flaky, flaky_sync], ids=["async", "sync"])
async def test_text_lines_of_a_run_end_with_its_fields(
    redis_url: str, pool_name: str, client: aioredis.Redis, worker_log: io.StringIO, handler: Any
) -> None:
    ids = await run_two(redis_url, pool_name, client, handler)
    text = worker_log.getvalue()
    for task_id, tier, n in zip(ids, ["p0", "p2"], [0, 1], strict=True):
        for attempt in (1, 2):
            line = f"app: working on {n} [task_id={task_id} task=test tier={tier} attempt={attempt}]"
            assert text.count(line) == 1, text
    assert re.search(r"serving pool \S+ tiers \['p0', 'p1', 'p2'\]$", text, re.MULTILINE), text
