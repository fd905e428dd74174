"""What a failed run leaves to diagnose it, through a real worker: its traceback, bounded to the last 8 KiB, in the
worker's log, in the result record and in the dead letter."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool import AsyncClient, Task
from tierpool.model.keys import PoolKeys
from tierpool.protocol.tracebacks import TRACEBACK_BYTES
from tierpool.runtime.logs import TextFormatter
from tierpool.store.dlq import list_dead

from .support import FAST_RECOVERY, make_pool, running_worker

pytestmark = pytest.mark.redis


async def explode_in_the_handler(task: Task) -> Any:
    raise RuntimeError("kaput")


def recurse(depth: int) -> None:
    if depth == 0:
        raise RuntimeError("kaput at the bottom, redis://app:s3cret@redis.internal:6379/0")
    recurse_again(depth - 1)


def recurse_again(depth: int) -> None:
    recurse(depth)  # two functions in turn: Python folds a run of one repeated frame into one line


async def fail_deep_down(task: Task) -> Any:
    recurse(150)


async def test_a_failed_run_records_its_traceback(
    redis_url: str, pool_name: str, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    pool = make_pool(pool_name, recovery={**FAST_RECOVERY, "maxDeliveries": 2})
    producer = AsyncClient(client, pool)
    caplog.set_level(logging.INFO, logger="tierpool.worker")
    async with running_worker(pool, redis_url, explode_in_the_handler):
        task_id = await producer.submit("p0", {})
        outcome = await producer.wait_result(task_id, 20)
    assert outcome.status == "dead_lettered" and outcome.attempts == 2, outcome
    assert outcome.error == "RuntimeError: kaput"
    assert outcome.traceback is not None and outcome.traceback.endswith("RuntimeError: kaput\n")
    assert "in explode_in_the_handler" in outcome.traceback
    assert outcome.traceback.startswith("Traceback (most recent call last):")
    [dead] = await list_dead(client, PoolKeys.parse(pool.ref))
    assert dead.task_id == task_id and dead.traceback == outcome.traceback
    assert dead.to_json()["traceback"] == outcome.traceback
    failed = [r for r in caplog.records if task_id in r.getMessage()]
    assert [r.levelname for r in failed] == ["INFO", "WARNING"]  # the retry, then the dead letter
    for record in failed:
        assert getattr(record, "traceback", "").endswith("RuntimeError: kaput\n")
        assert (
            TextFormatter()
            .format(record)
            .endswith('in explode_in_the_handler\n    raise RuntimeError("kaput")\nRuntimeError: kaput')
        )


async def test_a_long_traceback_keeps_its_last_8_kib_and_no_password(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery={**FAST_RECOVERY, "maxDeliveries": 1})
    async with running_worker(pool, redis_url, fail_deep_down):
        producer = AsyncClient(client, pool)
        outcome = await producer.wait_result(await producer.submit("p0", {}), 20)
    trace = outcome.traceback
    assert trace is not None and len(trace.encode()) <= TRACEBACK_BYTES
    assert trace.startswith("[... ") and "bytes of the traceback cut" in trace.splitlines()[0]
    assert trace.endswith("RuntimeError: kaput at the bottom, redis://app:***@redis.internal:6379/0\n")
    assert "in recurse" in trace and "s3cret" not in trace
    [dead] = await list_dead(client, PoolKeys.parse(pool.ref))
    assert dead.traceback == trace
