"""Worker metrics (Prometheus) with fixed, low-cardinality labels: pool and tier.

The per-task series are plain numbers, updated on the event loop and turned into Prometheus samples only when
scraped, by a custom collector (the pattern prometheus_client documents for this). Its labelled Counter and
Histogram take a lock on every update; at six updates a task that was a sixth of a no-op task's cost.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from tierpool.model.keys import PoolKeys

WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
RUN_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

COUNTERS = {
    "started": "Tasks handed to the handler.",
    "completed": "Tasks that finished successfully.",
    "failed": "Handler errors (each failed attempt counts).",
    "dead_lettered": "Tasks moved to the dead-letter stream.",
    "reclaimed": "Tasks claimed back from a dead or stalled worker.",
    "lost": "Pending entries whose stream entry was deleted before it could be reclaimed.",
    "lost_ownership": "Runs stopped, or outcomes not written, because another worker had taken the entry over.",
    "escalated": "Tasks moved up from this tier because they waited too long.",
    "sla_missed": "Tasks whose queue wait exceeded their tier's SLA.",
    "cancelled": "Cancelled outcomes written by this worker (counted when the write lands), before or during a run.",
    "stale_skipped": "Entries read but never started: the read returned late (the process stalled) and another worker "
    "had taken or finished them meanwhile.",
    "preempted": "Runs of this tier stopped for a waiting task of a higher tier and given back to resume later "
    "(tiers[].preemptible).",
}


class Tally:
    """A monotonic count. Updated from the event loop thread only; read by the scrape thread."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class Distribution:
    """Histogram buckets (upper bounds inclusive, like Prometheus' ``le``) plus the sum of observations."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, cumulative count) pairs ending with +Inf, from one snapshot of the counts."""
        snapshot, running = self.counts[:], 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip((*self.bounds, float("inf")), snapshot, strict=True):
            running += count
            buckets.append((_le(bound), running))
        return buckets


def _le(bound: float) -> str:
    """A bucket bound as Prometheus clients write it: ``0.005``, ``1.0``, ``+Inf``."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


class TierSeries:
    """The series of one (pool, tier)."""

    __slots__ = ("queue_wait", "run_time", "preempted_work", "in_flight", *COUNTERS)

    def __init__(self) -> None:
        for name in COUNTERS:
            setattr(self, name, Tally())
        self.queue_wait = Distribution(WAIT_BUCKETS)
        self.run_time = Distribution(RUN_BUCKETS)
        self.preempted_work = Distribution(RUN_BUCKETS)
        self.in_flight: Callable[[], int] = lambda: 0
        """Read at scrape time: the worker points it at its own running count."""

    # Typed views of the counters set in __init__ (slots with dynamic names are invisible to type checkers).
    started: Tally
    completed: Tally
    failed: Tally
    dead_lettered: Tally
    reclaimed: Tally
    lost: Tally
    lost_ownership: Tally
    escalated: Tally
    sla_missed: Tally
    cancelled: Tally
    stale_skipped: Tally
    preempted: Tally


def pool_labels(ref: str) -> tuple[str, str]:
    """``(namespace, pool)`` of a pool reference ``NAMESPACE/NAME``: the operator's labels, so one query (and the
    chart's dashboard) selects a pool's series from both exactly. Pure."""
    keys = PoolKeys.parse(ref)
    return keys.namespace, keys.name


class WorkerMetrics:
    """All worker series; one instance per process, registered as a collector on an injected registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._tiers: dict[tuple[str, str], TierSeries] = {}
        self._redis_errors: dict[str, Tally] = {}
        registry.register(self)

    def for_tier(self, pool: str, tier: str) -> TierSeries:
        """The series of one tier; the same object on every call."""
        return self._tiers.setdefault((pool, tier), TierSeries())

    def redis_errors(self, pool: str) -> Tally:
        """Redis calls that failed and were retried."""
        return self._redis_errors.setdefault(pool, Tally())

    def collect(self) -> Iterator[Metric]:
        tiers = [((*pool_labels(pool), tier), series) for (pool, tier), series in list(self._tiers.items())]
        labels = ["namespace", "pool", "tier"]
        for name, documentation in COUNTERS.items():
            counter = CounterMetricFamily(f"tierpool_tasks_{name}", documentation, labels=labels)
            for key, series in tiers:
                counter.add_metric(list(key), getattr(series, name).value)
            yield counter
        histograms = (
            ("tierpool_queue_wait_seconds", "Time from first enqueue to start.", "queue_wait"),
            ("tierpool_run_seconds", "Handler run time.", "run_time"),
            (
                "tierpool_preempted_work_seconds",
                "Work each preemption discarded: seconds since the run's last checkpoint, or since its start.",
                "preempted_work",
            ),
        )
        for metric, documentation, attribute in histograms:
            histogram = HistogramMetricFamily(metric, documentation, labels=labels)
            for key, series in tiers:
                distribution: Distribution = getattr(series, attribute)
                histogram.add_metric(list(key), distribution.cumulative(), distribution.total)
            yield histogram
        in_flight = GaugeMetricFamily("tierpool_tasks_in_flight", "Tasks running now.", labels=labels)
        for key, series in tiers:
            in_flight.add_metric(list(key), series.in_flight())
        yield in_flight
        errors = CounterMetricFamily(
            "tierpool_redis_errors", "Redis calls that failed and were retried.", labels=["namespace", "pool"]
        )
        for pool, tally in list(self._redis_errors.items()):
            errors.add_metric(list(pool_labels(pool)), tally.value)
        yield errors
