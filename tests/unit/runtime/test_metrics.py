"""The worker's scrape-time collector writes what prometheus_client's own Counter and Histogram would."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from tierpool.runtime.metrics import WAIT_BUCKETS, Distribution, WorkerMetrics


def samples(registry: CollectorRegistry, name: str) -> dict[str, float]:
    """Sample lines of one metric, without the ``_created`` ones only prometheus_client writes."""
    lines = generate_latest(registry).decode().splitlines()
    out = {}
    for line in lines:
        if line.startswith(name) and "_created" not in line:
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


@given(st.lists(st.floats(min_value=0, max_value=10_000, allow_nan=False), max_size=60))
def test_histogram_matches_prometheus_client(values: list[float]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    series = WorkerMetrics(ours).for_tier("ns/pool", "p0")
    reference = Histogram(
        "tierpool_queue_wait_seconds", "x", ["namespace", "pool", "tier"], buckets=WAIT_BUCKETS, registry=theirs
    ).labels("ns", "pool", "p0")
    for value in values:
        series.queue_wait.observe(value)
        reference.observe(value)
    mine, expected = samples(ours, "tierpool_queue_wait_seconds"), samples(theirs, "tierpool_queue_wait_seconds")
    assert mine.keys() == expected.keys()
    for key, value in expected.items():
        assert mine[key] == pytest.approx(value), key


def test_counters_gauge_and_errors_are_exposed_per_pool_and_tier() -> None:
    registry, reference = CollectorRegistry(), CollectorRegistry()
    metrics = WorkerMetrics(registry)
    p0, p1 = metrics.for_tier("ns/a", "p0"), metrics.for_tier("ns/a", "p1")
    assert metrics.for_tier("ns/a", "p0") is p0
    p0.completed.inc()
    p0.completed.inc(2)
    p1.escalated.inc(5)
    p1.in_flight = lambda: 4
    metrics.redis_errors("ns/a").inc()
    completed = Counter("tierpool_tasks_completed", "x", ["namespace", "pool", "tier"], registry=reference)
    completed.labels("ns", "a", "p0").inc(3)
    completed.labels("ns", "a", "p1")
    assert samples(registry, "tierpool_tasks_completed") == samples(reference, "tierpool_tasks_completed")
    text = generate_latest(registry).decode()
    assert 'tierpool_tasks_escalated_total{namespace="ns",pool="a",tier="p1"} 5.0' in text
    assert 'tierpool_tasks_in_flight{namespace="ns",pool="a",tier="p1"} 4.0' in text
    assert 'tierpool_tasks_in_flight{namespace="ns",pool="a",tier="p0"} 0.0' in text
    assert 'tierpool_redis_errors_total{namespace="ns",pool="a"} 1.0' in text


@pytest.mark.parametrize(
    ("value", "bucket"),
    [(0.0, "0.005"), (0.005, "0.005"), (0.0051, "0.01"), (3600, "3600.0"), (3600.5, "+Inf")],
)
def test_bucket_bounds_are_inclusive(value: float, bucket: str) -> None:
    distribution = Distribution(WAIT_BUCKETS)
    distribution.observe(value)
    first = next(le for le, count in distribution.cumulative() if count == 1)
    assert first == bucket
