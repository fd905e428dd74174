"""One OpenTelemetry span per handler run, a child of the producer's span (the envelope's ``traceparent``), and
the current span while the handler runs: what the handler submits carries it, so its children's runs join the
same trace (tierpool.protocol.trace_context).

Spans come from the global tracer provider: ``opentelemetry-instrument`` (the ``OTEL_*`` variables) or the
application's own ``trace.set_tracer_provider``. Without the API (the ``otel`` extra), or while no provider is
set, a run starts no span, and the check for one costs one clock read: a provider is looked for at most once a
``RECHECK`` seconds, and once found it is kept (the API sets the global provider only once)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextvars import Token
from traceback import format_exception
from types import TracebackType

from tierpool._version import __version__
from tierpool.model.redis_url import redact_urls_in
from tierpool.protocol import trace_context, tracebacks, utf8
from tierpool.protocol.envelope import Task
from tierpool.protocol.errors import TaskTimedOut
from tierpool.protocol.gather import Gathering
from tierpool.runtime.ledger import Key

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.context import Context
except ImportError:  # the otel extra is not installed
    OTEL = False
else:
    OTEL = True

SPAN_NAME = "tierpool.run"
"""A run's span is ``tierpool.run <task name>``, or ``tierpool.run <tier>`` for a task with no name."""
ATTRIBUTES = (
    "tierpool.pool",
    "tierpool.task.id",
    "tierpool.task.name",
    "tierpool.tier",
    "tierpool.attempt",
    "tierpool.queue_wait_ms",
    "tierpool.outcome",
)
"""The attributes of a run's span (docs/how-to/tracing-and-logs.md)."""
RECHECK = 1.0
"""Seconds between looks for a tracer provider while none is set."""
_UNTRACED: contextlib.nullcontext[None] = contextlib.nullcontext()


class RunSpans:
    """Starts the span of each run. ``handler`` names the tasks that carry no name of their own (the ``task``
    envelope field); ``cancelled(key)`` and ``preempted(key)`` say why a run was stopped."""

    def __init__(
        self,
        pool: str,
        handler: str,
        cancelled: Callable[[Key], bool],
        preempted: Callable[[Key], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool, self.handler, self.cancelled, self.preempted, self.clock = pool, handler, cancelled, preempted, clock
        self._tracer: trace.Tracer | None = None
        self._next_look = 0.0

    def run(self, key: Key, task: Task, wait: float) -> contextlib.AbstractContextManager[trace.Span | None]:
        """The context the handler runs in: its span, current, ended on the way out whatever the outcome."""
        tracer = self._tracer or self._look()
        if tracer is None:
            return _UNTRACED
        return RunSpan(self, tracer, key, task, wait)

    def _look(self) -> trace.Tracer | None:
        """The tracer of the global provider, or None while there is none (looked for at most once a RECHECK)."""
        now = self.clock()
        if not OTEL or now < self._next_look:
            return None
        self._next_look = now + RECHECK
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
        self._tracer = provider.get_tracer("tierpool", __version__)
        return self._tracer

    def stopped(self, key: Key) -> str:
        """Why a run that was cancelled from outside stopped."""
        if self.cancelled(key):
            return "cancelled"
        return "preempted" if self.preempted(key) else "handed back"


class RunSpan:
    """The span of one run: started and made current on entry; on exit given the outcome, the exception of a
    failed run (with an error status), and ended."""

    __slots__ = ("_key", "_span", "_spans", "_token")

    def __init__(self, spans: RunSpans, tracer: trace.Tracer, key: Key, task: Task, wait: float) -> None:
        self._spans, self._key = spans, key
        attributes: dict[str, str | int | float] = {
            "tierpool.pool": spans.pool,
            "tierpool.task.id": task.id,
            "tierpool.task.name": task.name or spans.handler,
            "tierpool.tier": task.tier,
            "tierpool.attempt": task.attempt,
            "tierpool.queue_wait_ms": round(wait * 1000, 3),
        }
        parent = trace_context.parent_context(task.traceparent, task.tracestate)
        name = f"{SPAN_NAME} {task.name or task.tier}"
        self._span = tracer.start_span(name, context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes)
        self._token: Token[Context] | None = None

    def __enter__(self) -> trace.Span:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self._span

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _: TracebackType | None) -> None:
        if self._token is not None:
            otel_context.detach(self._token)
        span, key = self._span, self._key
        if error is None:
            outcome = "cancelled" if self._spans.cancelled(key) else "succeeded"
        elif isinstance(error, asyncio.CancelledError):
            outcome = self._spans.stopped(key)
        elif isinstance(error, Gathering):  # gives its slot up for its children: not a failure
            outcome = "parked"
        else:
            outcome = "timed out" if isinstance(error, TaskTimedOut) else "failed"
            _record_failure(span, error)
        span.set_attribute("tierpool.outcome", outcome)
        span.end()


def _record_failure(span: trace.Span, error: BaseException) -> None:
    """The exception event and the error status, each Redis URL's password redacted as in the logs and the result
    record (an exception's message often holds the URL), the traceback bounded as there
    (tierpool.protocol.tracebacks)."""
    message = utf8.readable(redact_urls_in(str(error)))
    stack = tracebacks.recorded("".join(format_exception(error)))
    span.record_exception(error, {"exception.message": message, "exception.stacktrace": stack})
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {message}"))
