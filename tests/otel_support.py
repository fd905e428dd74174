"""An SDK tracer provider for tests: set as the global provider once per process (the API allows one), with an
in-memory exporter. Spans are sampled only while a test holds the ``spans`` fixture; in other tests a run's span
is a non-recording one, which records nothing and keeps nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes


class Switch(Sampler):
    """Samples every span while ``on``, none otherwise."""

    def __init__(self) -> None:
        self.on = False

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> SamplingResult:
        sampler = ALWAYS_ON if self.on else ALWAYS_OFF
        return sampler.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return "tests: on while a test holds the spans fixture"


@dataclass
class Tracing:
    provider: TracerProvider
    exporter: InMemorySpanExporter
    switch: Switch

    @property
    def tracer(self) -> trace.Tracer:
        """A tracer for a test's own (producer) spans."""
        return self.provider.get_tracer("tests")


def install() -> Tracing:
    """The process's global provider; fails when another one was set first."""
    switch, exporter = Switch(), InMemorySpanExporter()
    provider = TracerProvider(sampler=switch)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider, "another global tracer provider was set first"
    return Tracing(provider, exporter, switch)
