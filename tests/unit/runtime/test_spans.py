"""The span of a run: a CONSUMER child of the producer's span, current while the handler runs, ended with its
outcome on every way out; and no span, at the cost of a clock read, while no tracer provider is set."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import ProxyTracerProvider, SpanKind, StatusCode

from tests.otel_support import Tracing
from tierpool.protocol.envelope import Task
from tierpool.protocol.errors import TaskTimedOut
from tierpool.runtime import spans as run_spans
from tierpool.runtime.spans import ATTRIBUTES, RECHECK, RunSpans

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
KEY = (0, "1-0")


def task(**fields: object) -> Task:
    made = Task("t1", "p0", {}, 2, 0, "1-0", traceparent=PARENT)
    for name, value in fields.items():
        setattr(made, name, value)
    return made


def runs(cancelled: bool = False, preempted: bool = False) -> RunSpans:
    return RunSpans("ns/pool", "agents:handle", lambda key: cancelled, lambda key: preempted)


def only_span(spans: Tracing) -> ReadableSpan:
    [span] = spans.exporter.get_finished_spans()
    return span


def test_a_run_is_a_consumer_span_under_the_producers_with_its_attributes(spans: Tracing) -> None:
    outer = trace.get_current_span()
    with runs().run(KEY, task(), 0.25) as current:
        assert trace.get_current_span() is current  # what the handler submits carries this span
    assert trace.get_current_span() is outer
    span = only_span(spans)
    assert span.name == "tierpool.run p0" and span.kind is SpanKind.CONSUMER
    assert span.parent is not None and span.parent.span_id == 0xB7AD6B7169203331 and span.parent.is_remote
    assert span.context is not None and span.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert set(span.attributes or {}) == set(ATTRIBUTES)
    assert dict(span.attributes or {}) == {
        "tierpool.pool": "ns/pool",
        "tierpool.task.id": "t1",
        "tierpool.task.name": "agents:handle",
        "tierpool.tier": "p0",
        "tierpool.attempt": 2,
        "tierpool.queue_wait_ms": 250.0,
        "tierpool.outcome": "succeeded",
    }
    assert span.status.status_code is StatusCode.UNSET and span.end_time is not None


def test_a_named_task_names_its_span_and_an_untraced_one_is_a_root(spans: Tracing) -> None:
    with (
        spans.tracer.start_as_current_span("the worker's own"),
        runs().run(KEY, task(name="resolve", traceparent=None), 0),
    ):
        pass
    span = next(s for s in spans.exporter.get_finished_spans() if s.name.startswith("tierpool.run"))
    assert span.name == "tierpool.run resolve" and span.parent is None
    assert span.attributes is not None and span.attributes["tierpool.task.name"] == "resolve"


@pytest.mark.parametrize(
    ("error", "outcome"),
    [(RuntimeError("boom"), "failed"), (TaskTimedOut(2.0), "timed out")],
)
def test_a_failed_run_records_its_exception_with_an_error_status(
    spans: Tracing, error: Exception, outcome: str
) -> None:
    with pytest.raises(type(error)), runs().run(KEY, task(), 0):
        raise error
    span = only_span(spans)
    assert span.status.status_code is StatusCode.ERROR and str(error) in (span.status.description or "")
    assert [event.name for event in span.events] == ["exception"]
    assert span.attributes is not None and span.attributes["tierpool.outcome"] == outcome


def test_a_failures_event_and_status_hold_no_redis_password(spans: Tracing) -> None:
    with pytest.raises(ConnectionError), runs().run(KEY, task(), 0):
        raise ConnectionError("cannot reach redis://app:hunter2@redis:6379/0")
    span = only_span(spans)
    [event] = span.events
    shown = [span.status.description, *(str(value) for value in (event.attributes or {}).values())]
    assert "hunter2" not in "".join(str(text) for text in shown)
    assert span.status.description == "ConnectionError: cannot reach redis://app:***@redis:6379/0"
    assert (event.attributes or {})["exception.type"] == "ConnectionError"
    assert "test_spans.py" in str((event.attributes or {})["exception.stacktrace"])


@pytest.mark.parametrize(
    ("cancelled", "preempted", "outcome"),
    [(True, False, "cancelled"), (False, True, "preempted"), (False, False, "handed back")],
)
def test_a_stopped_run_ends_with_why_and_no_error(
    spans: Tracing, cancelled: bool, preempted: bool, outcome: str
) -> None:
    with pytest.raises(asyncio.CancelledError), runs(cancelled, preempted).run(KEY, task(), 0):
        raise asyncio.CancelledError
    span = only_span(spans)
    assert span.attributes is not None and span.attributes["tierpool.outcome"] == outcome
    assert span.status.status_code is StatusCode.UNSET and span.events == ()


def test_a_run_that_returns_after_its_cancel_ends_cancelled(spans: Tracing) -> None:
    with runs(cancelled=True).run(KEY, task(), 0):
        pass
    attributes = only_span(spans).attributes
    assert attributes is not None and attributes["tierpool.outcome"] == "cancelled"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_provider_runs_are_untraced_and_looked_for_once_a_recheck(
    monkeypatch: pytest.MonkeyPatch, otel_provider: Tracing
) -> None:
    provider: trace.TracerProvider = ProxyTracerProvider()
    looks: list[float] = []
    clock = Clock()

    def get_tracer_provider() -> trace.TracerProvider:
        looks.append(clock.now)
        return provider

    monkeypatch.setattr(run_spans.trace, "get_tracer_provider", get_tracer_provider)
    spans = RunSpans("ns/pool", "h", lambda key: False, lambda key: False, clock)
    for _ in range(3):
        with spans.run(KEY, task(), 0) as span:
            assert span is None
    clock.now += RECHECK / 2
    with spans.run(KEY, task(), 0) as span:
        assert span is None
    assert looks == [100.0]
    clock.now += RECHECK
    provider = otel_provider.provider  # set in the meantime: found at the next look, and kept
    for _ in range(3):
        with spans.run(KEY, task(), 0) as span:
            assert span is not None
    assert looks == [100.0, 100.0 + 1.5 * RECHECK]
