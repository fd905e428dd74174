"""Local-mode reporting: the timeline, the summary (pure), the PNG plot and the live terminal table."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from tierpool.model.spec import PoolSpec
from tierpool.runtime.failures import require
from tierpool.scaling.observation import PoolObservation

SUMMARY_VERSION = 1


@dataclass(frozen=True)
class Sample:
    """One second of the run."""

    t: float
    desired: int
    running: int
    backlog: dict[str, int]
    pending: dict[str, int]
    oldest_age: dict[str, float]
    reason: str
    draining: int = 0
    """Scaled-in workers still finishing their tasks: they cost like running ones (a terminating pod does too)."""
    scheduled: int = 0
    """Tasks in the due-time index."""
    throttled: int = 0
    """Tasks waiting for a rate limit."""


def sample(t: float, desired: int, running: int, obs: PoolObservation, reason: str, draining: int = 0) -> Sample:
    return Sample(
        t=round(t, 2),
        desired=desired,
        running=running,
        backlog={tier.name: tier.backlog for tier in obs.tiers},
        pending={tier.name: tier.pending for tier in obs.tiers},
        oldest_age={tier.name: round(tier.oldest_age_seconds, 2) for tier in obs.tiers},
        reason=reason,
        draining=draining,
        scheduled=obs.scheduled,
        throttled=obs.throttled,
    )


def replica_seconds(timeline: Sequence[Sample]) -> float:
    """Worker-seconds the run cost: running and draining workers, each sample held until the next. Pure."""
    spans = zip(timeline, [*timeline[1:], None], strict=True)
    return sum((s.running + s.draining) * ((after.t if after else s.t + 1.0) - s.t) for s, after in spans)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile; None for no values. Pure."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


def summarize(
    spec: PoolSpec,
    submitted: Mapping[str, str],
    results: Mapping[str, Mapping[str, Any]],
    timeline: Sequence[Sample],
    duration: float,
) -> dict[str, Any]:
    """The ``--summary-json`` document (stable, versioned). ``submitted`` maps task_id -> submitted tier."""
    completed = {tid: r for tid, r in results.items() if r.get("status") == "succeeded"}
    dead = sum(1 for r in results.values() if r.get("status") == "dead_lettered")
    tiers: dict[str, Any] = {}
    for tier in spec.tiers:  # by the class each task was submitted as (the same tier unless --fifo)
        ids = [tid for tid, name in submitted.items() if name == tier.name]
        waits = [completed[tid]["queue_wait_ms"] / 1000 for tid in ids if tid in completed]
        misses = sum(1 for wait in waits if tier.sla is not None and wait > tier.sla)
        tiers[tier.name] = {
            "submitted": len(ids),
            "completed": len(waits),
            "escalated": sum(1 for tid in ids if completed.get(tid, {}).get("escalated_from")),
            "queue_wait_p50_seconds": _round(percentile(waits, 50)),
            "queue_wait_p95_seconds": _round(percentile(waits, 95)),
            "queue_wait_max_seconds": _round(max(waits) if waits else None),
            "sla_seconds": tier.sla,
            "sla_misses": misses,
        }
    return {
        "version": SUMMARY_VERSION,
        "duration_seconds": round(duration, 1),
        "policy": spec.scaling.policy.value,
        "tasks": {
            "submitted": len(submitted),
            "completed": len(completed),
            "dead_lettered": dead,
            "lost": len(submitted) - len(completed) - dead,
        },
        "replicas": {
            "max": max((s.running for s in timeline), default=0),
            "final": timeline[-1].running if timeline else 0,
            "min": spec.replicas.min,
            "limit": spec.replicas.max,
            "seconds": round(replica_seconds(timeline), 1),
        },
        "tiers": tiers,
        "timeline": [asdict(s) for s in timeline],
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def live_table(spec: PoolSpec, last: Sample | None, completed: int, submitted: int, elapsed: float) -> Table:
    title = f"tierpool local — {elapsed:5.1f}s — replicas {last.running if last else 0}"
    title += f" (desired {last.desired})" if last else ""
    table = Table(title=title, caption=(last.reason if last else "starting"), caption_justify="left")
    for column in ("tier", "weight", "backlog", "in flight", "oldest wait", "sla"):
        table.add_column(column, justify="left" if column == "tier" else "right")
    for tier in spec.tiers:
        age = last.oldest_age.get(tier.name, 0.0) if last else 0.0
        late = tier.sla is not None and age > tier.sla
        table.add_row(
            tier.name,
            str(tier.weight),
            str(last.backlog.get(tier.name, 0) if last else 0),
            str(last.pending.get(tier.name, 0) if last else 0),
            f"[red]{age:.1f}s[/]" if late else f"{age:.1f}s",
            "-" if tier.sla is None else f"{tier.sla:g}s",
        )
    table.add_section()
    table.add_row("all", "", f"done {completed}/{submitted}", "", "", "")
    return table


def plot(spec: PoolSpec, timeline: Sequence[Sample], path: Path, title: str) -> None:
    """A PNG with three panels: replicas, per-tier backlog, per-tier oldest wait against its SLA."""
    matplotlib = require("matplotlib", "local", "--plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [s.t for s in timeline]
    figure, (replicas, backlog, wait) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    replicas.step(times, [s.desired for s in timeline], where="post", label="desired", linestyle="--")
    replicas.step(times, [s.running for s in timeline], where="post", label="running")
    replicas.set_ylabel("replicas")
    replicas.legend(loc="upper right")
    for tier in spec.tiers:
        line = backlog.plot(times, [s.backlog.get(tier.name, 0) for s in timeline], label=tier.name)[0]
        wait.plot(times, [s.oldest_age.get(tier.name, 0.0) for s in timeline], label=tier.name, color=line.get_color())
        if tier.sla is not None and tier.sla <= 3 * max(
            (max(s.oldest_age.values(), default=0) for s in timeline), default=1
        ):
            wait.axhline(tier.sla, color=line.get_color(), linestyle=":", linewidth=1)
    backlog.set_ylabel("backlog (waiting tasks)")
    backlog.legend(loc="upper right")
    wait.set_ylabel("oldest waiting task (s)\n(dotted: SLA)")
    wait.set_xlabel("seconds")
    wait.legend(loc="upper right")
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
