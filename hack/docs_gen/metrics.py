"""The metrics reference: name, type, labels and help of every series, from the worker's and the operator's
collectors on a registry of their own."""

from __future__ import annotations

from hack.docs_gen.markdown import banner, table
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from tierpool.runtime.metrics import WorkerMetrics
from tierpool_operator.metrics import OperatorMetrics

INTRO = """\
# Metrics reference

Prometheus series of the workers (`/metrics` on `worker.metricsPort`) and of the operator (`/metrics` on the
chart's `metrics.port`). A counter is exposed with the suffix `_total`; a histogram as `_bucket`, `_sum` and
`_count`.
"""

Row = tuple[str, str, str, str]

SUFFIXES = {"counter": "_total"}


def worker_rows() -> list[Row]:
    """Read from one scrape of a WorkerMetrics with one tier and one pool in it (for the label names)."""
    metrics = WorkerMetrics(CollectorRegistry())
    metrics.for_tier("default/agents", "p0")
    metrics.redis_errors("default/agents")
    found = []
    for family in metrics.collect():
        labels = sorted({name for sample in family.samples for name in sample.labels} - {"le"})
        name = family.name + SUFFIXES.get(family.type, "")
        found.append((f"`{name}`", family.type, ", ".join(f"`{label}`" for label in labels), family.documentation))
    return found


def operator_rows() -> list[Row]:
    metrics = OperatorMetrics(CollectorRegistry())
    found = []
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            kind = metric._type or ""
            labels = ", ".join(f"`{label}`" for label in metric._labelnames)
            found.append((f"`{metric._name}{SUFFIXES.get(kind, '')}`", kind, labels, metric._documentation))
    return found


def page() -> str:
    header = ("metric", "type", "labels", "meaning")
    return (
        banner("the collectors, tierpool.runtime.metrics and tierpool_operator.metrics")
        + INTRO
        + "\n## Worker\n\n"
        + table(header, worker_rows())
        + "\n## Operator\n\n"
        + table(header, operator_rows())
    )
