"""The W3C trace context a task carries in its envelope (``traceparent``, ``tracestate``), through the
OpenTelemetry API when it is installed (the ``otel`` extra). Without it, or without a tracer provider, a producer
writes no trace fields and a worker reads none: tierpool works the same, untraced.

Always the W3C Trace Context format, whatever ``OTEL_PROPAGATORS`` says: the fields are a wire format that other
producers (the TypeScript client, a plain XADD) write too, so the envelope cannot follow one process's propagator
setting. The API's own W3C propagator writes and reads them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed
    AVAILABLE = False
else:
    AVAILABLE = True
    _W3C = TraceContextTextMapPropagator()

FIELDS = ("traceparent", "tracestate")
"""The envelope fields of the trace context, in the W3C names."""


def current_fields() -> dict[str, str]:
    """The current span's context as envelope fields: ``traceparent``, and ``tracestate`` when it has one; empty
    without the API or outside a valid span (no tracer provider: the API's no-op spans carry no context)."""
    if not AVAILABLE:
        return {}
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return {name: carrier[name] for name in FIELDS if carrier.get(name)}


def parent_context(traceparent: str | None, tracestate: str | None) -> Any:
    """The OpenTelemetry Context a run's span starts in: the producer's span as its parent when ``traceparent`` is
    valid, else an empty Context (the run is a trace's root, not a child of whatever the worker was doing). None
    without the API."""
    if not AVAILABLE:
        return None
    if not traceparent:
        return Context()
    carrier: Mapping[str, str] = (
        {"traceparent": traceparent} if not tracestate else {"traceparent": traceparent, "tracestate": tracestate}
    )
    return _W3C.extract(carrier, context=Context())
