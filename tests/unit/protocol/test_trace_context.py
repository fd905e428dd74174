"""The W3C trace context in the envelope: written from the producer's current span, read back as the parent of a
run's span; absent outside a span; ignored when it is not valid."""

from __future__ import annotations

import subprocess
import sys

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tests.otel_support import Tracing
from tierpool.model.keys import PoolKeys
from tierpool.model.spec import PoolSpec
from tierpool.protocol import trace_context
from tierpool.protocol.envelope import Task, decode, decode_many
from tierpool.protocol.submission import TaskRequest, prepare

SPEC = PoolSpec.model_validate({"tiers": [{"name": "p0", "weight": 1}]})
KEYS = PoolKeys("ns", "pool")
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_outside_a_span_a_task_carries_no_trace_fields() -> None:
    assert trace_context.current_fields() == {}


def test_the_current_span_travels_as_traceparent(spans: Tracing) -> None:
    with spans.tracer.start_as_current_span("producer") as span:
        fields = trace_context.current_fields()
    context = span.get_span_context()
    assert fields == {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"}


def test_a_trace_state_travels_as_tracestate(spans: Tracing) -> None:
    remote = TraceContextTextMapPropagator().extract({"traceparent": PARENT, "tracestate": "vendor=abc"})
    with spans.tracer.start_as_current_span("producer", context=remote):
        fields = trace_context.current_fields()
    assert fields["tracestate"] == "vendor=abc"
    assert fields["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-")


def test_the_parent_context_is_the_producers_span_or_none() -> None:
    parent = trace.get_current_span(trace_context.parent_context(PARENT, "vendor=abc")).get_span_context()
    assert (parent.trace_id, parent.span_id, parent.is_remote) == (
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        True,
    )
    assert parent.trace_state.get("vendor") == "abc"
    for traceparent in (None, "", "not a traceparent", "00-00000000000000000000000000000000-b7ad6b7169203331-01"):
        context = trace_context.parent_context(traceparent, None)
        assert isinstance(context, Context) and not trace.get_current_span(context).get_span_context().is_valid


def test_submitted_fields_are_decoded_into_the_task(spans: Tracing) -> None:
    with spans.tracer.start_as_current_span("producer"):
        carried = trace_context.current_fields()
    submission = prepare(SPEC, KEYS, TaskRequest("p0", {}), 1000, carried)
    assert submission.fields["traceparent"] == carried["traceparent"] and "tracestate" not in submission.fields
    fields = {**submission.fields, "tracestate": "vendor=abc", "task": "resolve"}
    tasks = [decode("1-0", fields, 1), *decode_many([("1-0", fields, 1)])]
    for task in tasks:
        assert isinstance(task, Task)
        assert (task.traceparent, task.tracestate, task.name) == (carried["traceparent"], "vendor=abc", "resolve")
    untraced = decode("1-0", prepare(SPEC, KEYS, TaskRequest("p0", {}), 1000).fields, 1)
    assert (untraced.traceparent, untraced.tracestate, untraced.name) == (None, None, None)


WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from tierpool.client.producer import Client
from tierpool.model.keys import PoolKeys
from tierpool.model.spec import PoolSpec
from tierpool.protocol import trace_context
from tierpool.protocol.envelope import decode
from tierpool.protocol.submission import TaskRequest, prepare
from tierpool.runtime import spans
from tierpool.runtime.worker import Worker

spec = PoolSpec.model_validate({"tiers": [{"name": "p0", "weight": 1}]})
assert not trace_context.AVAILABLE and not spans.OTEL
assert trace_context.current_fields() == {} and trace_context.parent_context("00-ab-cd-01", None) is None
fields = prepare(spec, PoolKeys("ns", "pool"), TaskRequest("p0", {}), 1000, trace_context.current_fields()).fields
task = decode("1-0", {**fields, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, 1)
runs = spans.RunSpans("ns/pool", "app:handler", lambda key: False, lambda key: False)
with runs.run((0, "1-0"), task, 0.0) as span:
    assert span is None
print("ok", "opentelemetry" in sys.modules and sys.modules["opentelemetry"] is None)
"""


def test_tierpool_imports_and_runs_untraced_without_the_otel_extra() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_OTEL], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok True"
