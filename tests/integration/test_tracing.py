"""OpenTelemetry traces on a real Valkey: each run is a span under its producer's, a child task's run joins its
parent's trace, and the span ends with the run's outcome (failure, time limit, cancel, preemption, hand-back)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from tests.otel_support import Tracing
from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import PoolKeys
from tierpool.protocol.envelope import Task, encode
from tierpool.protocol.submission import TaskRequest

from . import fanout_app
from .support import FAST_RECOVERY, killed_on_exit, make_pool, pool_env, running_worker
from .test_preemption import preempt_pool

pytestmark = pytest.mark.redis


def runs_of(spans: Tracing, task_id: str) -> list[ReadableSpan]:
    """The run spans of a task, in the order they ended."""
    finished = spans.exporter.get_finished_spans()
    return [s for s in finished if (s.attributes or {}).get("tierpool.task.id") == task_id]


def outcomes(found: Sequence[ReadableSpan]) -> list[Any]:
    return [(s.attributes or {}).get("tierpool.outcome") for s in found]


def is_child(child: ReadableSpan, parent: Any) -> bool:
    context = parent.get_span_context() if hasattr(parent, "get_span_context") else parent.context
    assert child.context is not None and child.parent is not None
    return child.context.trace_id == context.trace_id and child.parent.span_id == context.span_id


async def test_runs_join_the_producers_trace_and_a_childs_run_joins_its_parents(
    redis_url: str, pool_name: str, client: aioredis.Redis, spans: Tracing
) -> None:
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    children: dict[str, str] = {}

    async def handler(task: Task) -> str:
        if task.payload.get("child"):
            return "child"
        children[task.id] = await producer.submit("p1", {"child": True})
        return "parent"

    async with running_worker(pool, redis_url, handler):
        with spans.tracer.start_as_current_span("request") as request:
            parent_id = await producer.submit("p0", {})
        assert (await producer.wait_result(parent_id, 10)).result == "parent"
        assert (await producer.wait_result(children[parent_id], 10)).result == "child"
    [parent] = runs_of(spans, parent_id)
    [child] = runs_of(spans, children[parent_id])
    assert is_child(parent, request) and is_child(child, parent)
    assert parent.name == "tierpool.run p0" and child.name == "tierpool.run p1" and parent.kind is SpanKind.CONSUMER
    attributes = dict(parent.attributes or {})
    assert attributes.pop("tierpool.queue_wait_ms") >= 0  # type: ignore[operator]
    assert attributes == {
        "tierpool.pool": pool.ref,
        "tierpool.task.id": parent_id,
        "tierpool.task.name": "test",  # the handler's name (running_worker's settings.handler)
        "tierpool.tier": "p0",
        "tierpool.attempt": 1,
        "tierpool.outcome": "succeeded",
    }


async def test_spawned_children_join_the_parents_trace_and_a_park_is_no_failure(
    redis_url: str, pool_name: str, client: aioredis.Redis, spans: Tracing, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATHER_TEST_URL", redis_url)
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, fanout_app.app, concurrency=1):
        with spans.tracer.start_as_current_span("request") as request:
            handle = await producer.submit(fanout_app.parent, fanout_app.Fan(n=2))
        assert await handle.result(timeout=15) == [0, 1]
    parked, resumed = runs_of(spans, handle.id)
    assert outcomes([parked, resumed]) == ["parked", "succeeded"]
    assert parked.status.status_code is not StatusCode.ERROR
    assert is_child(parked, request) and is_child(resumed, request)
    for n in range(2):
        [child] = runs_of(spans, f"{handle.id}.{n}")
        assert is_child(child, parked)  # spawned in the run that parked


async def test_every_submit_path_carries_the_trace_context(
    redis_url: str, pool_name: str, client: aioredis.Redis, spans: Tracing
) -> None:
    tiers = [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "tenantConcurrency": 2}]
    pool = make_pool(pool_name, tiers=tiers)
    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, lambda task: "ok"):
        with spans.tracer.start_as_current_span("request") as request:
            ids = [
                await producer.submit("p0", {}),  # SUBMIT
                await producer.submit("p0", {}, task_id="chosen-id"),  # SUBMIT_ONCE
                await producer.submit("p0", {}, delay=0.05),  # SCHEDULE, then moved when due
                await producer.submit("p1", {}, tenant="acme"),  # SUBMIT_GATED
                *await producer.submit_many([TaskRequest("p0", {}) for _ in range(3)]),
            ]
        for task_id in ids:
            assert (await producer.wait_result(task_id, 10)).ok
    for task_id in ids:
        [run] = runs_of(spans, task_id)
        assert is_child(run, request), task_id


async def test_a_sync_handlers_child_joins_its_trace(
    redis_url: str, pool_name: str, client: aioredis.Redis, spans: Tracing
) -> None:
    pool = make_pool(pool_name)
    children: dict[str, str] = {}
    with Client.from_url(redis_url, pool, pool.spec) as blocking:

        def handler(task: Task) -> str:
            if not task.payload.get("child"):
                children[task.id] = blocking.submit("p1", {"child": True})
            return "done"

        producer = AsyncClient(client, pool, pool.spec)
        async with running_worker(pool, redis_url, handler):
            parent_id = await producer.submit("p0", {})
            await producer.wait_result(parent_id, 10)
            await producer.wait_result(children[parent_id], 10)
    [parent], [child] = runs_of(spans, parent_id), runs_of(spans, children[parent_id])
    assert parent.parent is None and is_child(child, parent)  # a task submitted outside a span starts a trace


async def test_a_plain_xadd_without_trace_fields_runs_as_a_root_span_named_by_its_task(
    redis_url: str, pool_name: str, client: aioredis.Redis, spans: Tracing
) -> None:
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    fields = {**encode("raw-1", "p0", "{}", int(time.time() * 1000)), "task": "resolve"}
    async with running_worker(pool, redis_url, lambda task: "ok"):
        with spans.tracer.start_as_current_span("unrelated"):
            await client.xadd(PoolKeys.parse(pool.ref).tier("p0"), fields)  # type: ignore[arg-type]
        assert (await producer.wait_result("raw-1", 10)).ok
    [run] = runs_of(spans, "raw-1")
    assert run.parent is None and run.name == "tierpool.run resolve"
    assert (run.attributes or {})["tierpool.task.name"] == "resolve"


async def test_failed_and_timed_out_runs_record_their_errors_and_their_retries_stay_in_the_trace(
    redis_url: str, pool_name: str, client: aioredis.Redis, spans: Tracing
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)

    async def handler(task: Task) -> str:
        if task.attempt == 1 and task.payload["how"] == "fail":
            raise RuntimeError("boom")
        if task.attempt == 1:
            await asyncio.sleep(10)
        return "ok"

    async with running_worker(pool, redis_url, handler):
        with spans.tracer.start_as_current_span("request") as request:
            failing = await producer.submit("p0", {"how": "fail"})
            slow = await producer.submit("p0", {"how": "slow"}, timeout=0.2)
        assert (await producer.wait_result(failing, 10)).attempts == 2
        assert (await producer.wait_result(slow, 10)).attempts == 2
    for task_id, outcome, error in [(failing, "failed", "RuntimeError: boom"), (slow, "timed out", "timed out")]:
        first, second = runs_of(spans, task_id)
        assert outcomes([first, second]) == [outcome, "succeeded"]
        assert first.status.status_code is StatusCode.ERROR and error in (first.status.description or "")
        assert [event.name for event in first.events] == ["exception"]
        assert [(s.attributes or {})["tierpool.attempt"] for s in (first, second)] == [1, 2]
        assert is_child(first, request) and is_child(second, request)
        assert second.status.status_code is StatusCode.UNSET


async def test_cancelled_and_handed_back_runs_end_their_spans(
    redis_url: str, pool_name: str, client: aioredis.Redis, spans: Tracing
) -> None:
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    started = asyncio.Semaphore(0)

    async def handler(task: Task) -> None:
        started.release()
        await asyncio.sleep(30)

    async with running_worker(pool, redis_url, handler, grace=0.2):
        cancelled, handed_back = await producer.submit("p0", {}), await producer.submit("p0", {})
        for _ in range(2):
            await asyncio.wait_for(started.acquire(), 5)
        await producer.cancel(cancelled)
        assert (await producer.wait_result(cancelled, 10)).status == "cancelled"
    assert outcomes(runs_of(spans, cancelled)) == ["cancelled"]
    assert outcomes(runs_of(spans, handed_back)) == ["handed back"]
    assert all(s.status.status_code is StatusCode.UNSET for s in spans.exporter.get_finished_spans())


async def test_a_preempted_run_ends_its_span_and_its_resumed_run_gets_another(
    redis_url: str, pool_name: str, client: aioredis.Redis, spans: Tracing
) -> None:
    pool = preempt_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    low_started = asyncio.Event()

    async def handler(task: Task) -> str:
        if task.tier == "p1" and task.attempt == 1 and task.checkpoint_state is None:
            low_started.set()
            await task.checkpoint({"step": 1})
            await asyncio.sleep(30)
        return task.tier

    async with running_worker(pool, redis_url, handler, concurrency=1):
        low = await producer.submit("p1", {})
        await asyncio.wait_for(low_started.wait(), 5)
        high = await producer.submit("p0", {})
        assert (await producer.wait_result(high, 10)).ok
        assert (await producer.wait_result(low, 10)).ok
    assert outcomes(runs_of(spans, low)) == ["preempted", "succeeded"]
    assert outcomes(runs_of(spans, high)) == ["succeeded"]


def console_spans(output: str) -> list[dict[str, Any]]:
    """The spans the SDK's console exporter wrote (indented JSON objects), among the worker's JSON log lines."""
    found, block = [], []
    for line in output.splitlines():
        if line == "{" or block:
            block.append(line)
        if line == "}":
            found.append(json.loads("\n".join(block)))
            block = []
    return found


def test_a_worker_under_opentelemetry_instrument_exports_its_runs_by_the_otel_variables(
    redis_url: str, pool_name: str, tmp_path: Path, spans: Tracing
) -> None:
    pool = make_pool(pool_name, worker={"handler": "support_handlers:spawning"})
    otel = {
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "tierpool-test-worker",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "TIERPOOL_LOG_FORMAT": "json",
    }
    instrument = str(Path(sys.executable).parent / "opentelemetry-instrument")
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [instrument, sys.executable, "-m", "tierpool", "worker", "--metrics-port", "0"],
            env={**pool_env(pool, redis_url), **otel},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    with killed_on_exit(worker), Client.from_url(redis_url, pool, pool.spec) as producer:
        with spans.tracer.start_as_current_span("request") as request:
            parent_id = producer.submit("p0", {"spawn": True})
        child_id = producer.wait_result(parent_id, 30).result["child"]
        assert producer.wait_result(child_id, 30).ok
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, log.read_text()
    output = log.read_text()
    runs = {
        s["attributes"].get("tierpool.task.id"): s for s in console_spans(output) if s["name"].startswith("tierpool")
    }
    parent, child = runs[parent_id], runs[child_id]
    context = request.get_span_context()
    assert parent["context"]["trace_id"] == child["context"]["trace_id"] == f"0x{context.trace_id:032x}"
    assert parent["parent_id"] == f"0x{context.span_id:016x}" and child["parent_id"] == parent["context"]["span_id"]
    assert (
        parent["kind"] == "SpanKind.CONSUMER"
        and parent["resource"]["attributes"]["service.name"] == "tierpool-test-worker"
    )
    assert parent["attributes"]["tierpool.task.name"] == "support_handlers:spawning"
    app_lines = [
        json.loads(line) for line in output.splitlines() if line.startswith('{"') and '"logger": "app"' in line
    ]
    assert [(line["task_id"], line["tier"], line["attempt"]) for line in app_lines] == [
        (parent_id, "p0", 1),
        (child_id, "p1", 1),
    ]
