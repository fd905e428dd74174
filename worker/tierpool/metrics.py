"""Worker metrics (Prometheus) with fixed, low-cardinality labels: pool and tier."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
RUN_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


@dataclass(frozen=True)
class TierSeries:
    """The series of one (pool, tier), resolved once: ``labels()`` lookups are too slow for the hot path."""

    started: Any
    completed: Any
    failed: Any
    dead_lettered: Any
    reclaimed: Any
    lost: Any
    sla_missed: Any
    queue_wait: Any
    run_time: Any
    in_flight: Any


class WorkerMetrics:
    """All worker series; one instance per process, on an injected registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("pool", "tier")
        self.registry = registry

        def counter(name: str, doc: str) -> Counter:
            return Counter(f"tierpool_tasks_{name}", doc, labels, registry=registry)

        self.started = counter("started", "Tasks handed to the handler.")
        self.completed = counter("completed", "Tasks that finished and were acknowledged.")
        self.failed = counter("failed", "Handler errors (each failed attempt counts).")
        self.dead_lettered = counter("dead_lettered", "Tasks moved to the dead-letter stream.")
        self.reclaimed = counter("reclaimed", "Tasks claimed back from a dead or stalled worker.")
        self.lost = counter("lost", "Pending entries whose stream entry was deleted before it could be reclaimed.")
        self.escalated = counter("escalated", "Tasks moved up from this tier because they waited too long.")
        self.sla_missed = counter("sla_missed", "Tasks whose queue wait exceeded their tier's SLA.")
        self.queue_wait = Histogram(
            "tierpool_queue_wait_seconds",
            "Time from first enqueue to start.",
            labels,
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.run_time = Histogram(
            "tierpool_run_seconds", "Handler run time.", labels, buckets=RUN_BUCKETS, registry=registry
        )
        self.in_flight = Gauge("tierpool_tasks_in_flight", "Tasks running now.", labels, registry=registry)
        self.redis_errors = Counter(
            "tierpool_redis_errors", "Redis calls that failed and were retried.", ("pool",), registry=registry
        )

    def for_tier(self, pool: str, tier: str) -> TierSeries:
        names = (
            "started",
            "completed",
            "failed",
            "dead_lettered",
            "reclaimed",
            "lost",
            "sla_missed",
            "queue_wait",
            "run_time",
            "in_flight",
        )
        return TierSeries(**{name: getattr(self, name).labels(pool, tier) for name in names})
