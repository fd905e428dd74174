"""The chart's dashboard and alert rules against the series the worker and the operator really export: every metric
a query names exists, every label it selects, groups by or shows is one that metric carries, and every panel selects
its pool exactly (``namespace`` and ``pool`` from the dashboard's variables, one label scheme on both sides)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from tierpool.runtime.metrics import WorkerMetrics, pool_labels
from tierpool_operator.metrics import OperatorMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "helm/tierpool/files/dashboard.json").read_text())
RULES = (ROOT / "helm/tierpool/templates/prometheusrule.yaml").read_text()
SELECTOR = re.compile(r"\b(tierpool_[a-z_]+)(\{[^}]*\})?")
MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"")


def exported() -> dict[str, set[str]]:
    """Every sample name both collectors export, with its label names."""
    worker_registry, operator_registry = CollectorRegistry(), CollectorRegistry()
    worker = WorkerMetrics(worker_registry)
    worker.for_tier("ns/a", "p0").queue_wait.observe(1.0)
    worker.redis_errors("ns/a").inc()
    operator = OperatorMetrics(operator_registry)
    for metric in vars(operator).values():
        if isinstance(metric, MetricWrapperBase):
            metric.labels(*["x"] * len(metric._labelnames))
    found: dict[str, set[str]] = {}
    for registry in (worker_registry, operator_registry):
        for family in registry.collect():
            for sample in family.samples:
                found.setdefault(sample.name, set()).update(sample.labels)
    return found


SERIES = exported()


def queries() -> list[tuple[str, str]]:
    """(expression, legend) of every dashboard target."""
    return [(t["expr"], t.get("legendFormat", "")) for p in DASHBOARD["panels"] for t in p.get("targets", [])]


def test_worker_and_operator_label_a_pool_the_same_way() -> None:
    assert pool_labels("team-a/agents") == ("team-a", "agents")
    assert SERIES["tierpool_tasks_in_flight"] == {"namespace", "pool", "tier"}
    assert SERIES["tierpool_pool_backlog"] == {"namespace", "pool", "tier"}
    assert SERIES["tierpool_redis_errors_total"] == SERIES["tierpool_pool_dead_letters"] == {"namespace", "pool"}


@pytest.mark.parametrize(("expr", "legend"), queries())
def test_every_dashboard_query_uses_series_and_labels_that_exist(expr: str, legend: str) -> None:
    named = SELECTOR.findall(expr)
    assert named, expr
    carried: set[str] = set()
    for metric, matchers in named:
        assert metric in SERIES, f"{metric} is exported by neither the worker nor the operator"
        labels = SERIES[metric]
        assert set(MATCHER.findall(matchers)) <= labels, (metric, matchers)
        assert 'namespace=~"$namespace"' in matchers and 'pool=~"$pool"' in matchers, f"{metric}: not exact"
        carried |= labels
    grouped = re.findall(r"\bby \(([^)]*)\)", expr)
    for group in grouped:
        assert {name.strip() for name in group.split(",")} <= carried, (expr, group)
    shown = set(re.findall(r"\{\{(\w+)\}\}", legend))
    result = {name.strip() for name in grouped[-1].split(",")} - {"le"} if grouped else carried
    assert shown <= result and {"namespace", "pool"} <= shown, (expr, legend)


def test_the_dashboard_variables_read_labels_that_exist() -> None:
    variables = [v for v in DASHBOARD["templating"]["list"] if v["type"] == "query"]
    assert [v["name"] for v in variables] == ["namespace", "pool"]
    for variable in variables:
        metric, label = re.fullmatch(
            r"label_values\((tierpool_[a-z_]+)(?:\{[^}]*\})?, (\w+)\)", variable["query"]
        ).groups()  # type: ignore[union-attr]
        assert label in SERIES[metric]


def test_every_alert_rule_names_an_exported_series() -> None:
    named = [metric for metric, _ in SELECTOR.findall(RULES)]
    assert named and all(metric in SERIES for metric in named), named
