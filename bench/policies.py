"""Tiering and scaling policies on the seed article's load, side by side in one run (local mode, embedded Valkey).

Reproduce:  .venv/bin/python bench/policies.py            (about 20 minutes on 2 cores; --rounds 1: 9 minutes)

1. FIFO vs tiers at fixed capacity (3 workers x 4 slots): the seed article's claim (critical-path latency -58%,
   P0 ~3x faster). Every task goes through one stream in the FIFO run, reported under its original class.
   A third run caps escalation into P0 (``escalateMaxTargetBacklog: 0`` on P1).
2. ``sla`` vs ``lag`` (KEDA-style) autoscaling, 1-8 workers, on the seed load and on a burst (500 short tasks over
   every tier at once): per-tier p95 wait, SLA misses, replica-seconds (running and draining workers). The two
   policies alternate for ``--rounds`` rounds (default 3) and the table reports each figure's median: on a
   burst P0's misses are decided by how fast new workers start, which on this box varies from run to run.
   ``bench/results/policies.png``: the first round's workers (running and draining) and waiting tasks over time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CURVES = {"seed": "autoscaling_1_to_8", "burst": "autoscaling_1_to_8_burst"}
BASE = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text())


def run(
    name: str, spec_changes: dict[str, Any], fifo: bool = False, duration: int = 60, load: str = "seed"
) -> dict[str, Any]:
    """One `tierpool local` run of the seed load; dict changes merge into the spec's sections, lists replace."""
    document = json.loads(json.dumps(BASE))
    document["metadata"]["name"] = name
    for key, value in spec_changes.items():
        document["spec"][key] = value if isinstance(value, list) else {**document["spec"].get(key, {}), **value}
    with tempfile.TemporaryDirectory() as tmp:
        pool, summary = Path(tmp) / "pool.yaml", Path(tmp) / "summary.json"
        pool.write_text(yaml.safe_dump(document))
        command = [
            sys.executable,
            "-m",
            "tierpool",
            "local",
            str(pool),
            "--load",
            load,
            "--duration",
            str(duration),
            "--summary-json",
            str(summary),
            "--no-live",
        ] + (["--fifo"] if fifo else [])
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=900)
        result: dict[str, Any] = json.loads(summary.read_text())
    result["curve"] = curve(result.pop("timeline"))
    result["replica_seconds"] = result["replicas"]["seconds"]  # running and draining workers
    return result


def curve(timeline: list[dict[str, Any]]) -> list[tuple[float, int, int]]:
    """(t, workers running or draining, tasks waiting) per sample of a run's timeline."""
    return [(s["t"], s["running"] + s.get("draining", 0), sum(s["backlog"].values())) for s in timeline]


def plot(curves: dict[str, dict[str, list[tuple[float, int, int]]]], path: Path) -> None:
    """Workers and waiting tasks over time, one panel per load, sla and lag overlaid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, panels = plt.subplots(1, len(curves), figsize=(12, 4.5), squeeze=False)
    for ax, (load, by_policy) in zip(panels[0], curves.items(), strict=True):
        waiting = ax.twinx()
        for policy, color in (("sla", "tab:blue"), ("lag", "tab:orange")):
            t, workers, backlog = zip(*by_policy[policy], strict=True)
            ax.step(t, workers, where="post", color=color, label=f"{policy}: workers (running + draining)")
            waiting.plot(t, backlog, color=color, alpha=0.35, linestyle=":", label=f"{policy}: tasks waiting")
        ax.set_title(f"{load} load, first round")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("workers")
        waiting.set_ylabel("tasks waiting")
        lines = ax.get_legend_handles_labels()
        extra = waiting.get_legend_handles_labels()
        ax.legend(lines[0] + extra[0], lines[1] + extra[1], fontsize=8, loc="upper right")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def tier_table(result: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {k: t[k] for k in ("queue_wait_p50_seconds", "queue_wait_p95_seconds", "sla_misses", "completed")}
        for name, t in result["tiers"].items()
    }


def autoscaling(sla: dict[str, Any], lag: dict[str, Any]) -> dict[str, Any]:
    """sla against lag on one load: per-tier waits and misses, replica-seconds (running and draining workers)."""
    p95 = lambda r, t: r["tiers"][t]["queue_wait_p95_seconds"]  # noqa: E731
    return {
        "curves": {"sla": sla["curve"], "lag": lag["curve"]},
        "sla": {**tier_table(sla), "replica_seconds": sla["replica_seconds"], "max_replicas": sla["replicas"]["max"]},
        "lag": {**tier_table(lag), "replica_seconds": lag["replica_seconds"], "max_replicas": lag["replicas"]["max"]},
        "p0_p95_ratio_sla_over_lag": round(p95(sla, "p0") / max(p95(lag, "p0"), 0.001), 2),
        "replica_seconds_ratio_sla_over_lag": round(sla["replica_seconds"] / lag["replica_seconds"], 2),
        "lost": [sla["tasks"]["lost"], lag["tasks"]["lost"]],
    }


def median_of(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number's median over the rounds (same keys, nested); lists of lost tasks are summed."""
    first = rounds[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            out[key] = median_of([r[key] for r in rounds])
        elif key == "lost":
            out[key] = [sum(r[key][i] for r in rounds) for i in range(len(value))]
        elif isinstance(value, int | float):
            out[key] = round(statistics.median(r[key] for r in rounds), 3)
    return out


def compare(load: str, rounds: int) -> dict[str, Any]:
    """sla and lag alternating on one load, ``rounds`` times: the medians and every round."""
    each = []
    for round_index in range(rounds):
        sla = run(f"sla-{load}-{round_index}", {"scaling": {"policy": "sla"}}, load=load)
        lag = run(f"lag-{load}-{round_index}", {"scaling": {"policy": "lag", "targetPerReplica": 20}}, load=load)
        each.append(autoscaling(sla, lag))
    curves = each[0]["curves"]
    for one in each:
        del one["curves"]
    return {"median": median_of(each), "rounds": each, "first_round_curves": curves}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each sla/lag pair (medians reported)")
    rounds = parser.parse_args().rounds
    fixed = {"replicas": {"min": 3, "max": 3}}
    fifo = run("fifo", fixed, fifo=True)
    tiered = run("tiered", fixed)
    capped_tiers = [dict(t) for t in BASE["spec"]["tiers"]]
    capped_tiers[1]["escalateMaxTargetBacklog"] = 0  # p1 escalates into p0 only while p0 has nothing waiting
    capped = run("capped", {**fixed, "tiers": capped_tiers})
    p95 = lambda r, t: r["tiers"][t]["queue_wait_p95_seconds"]  # noqa: E731
    p50 = lambda r, t: r["tiers"][t]["queue_wait_p50_seconds"]  # noqa: E731
    report = {
        "command": ".venv/bin/python bench/policies.py",
        "load": "seed profile, 60 s, examples/demo.yaml tiers (P0 sla 5s, P1 20s, P2 60s), concurrency 4",
        "fixed_capacity_3_workers": {
            "fifo": tier_table(fifo),
            "tiered": tier_table(tiered),
            "tiered_escalation_capped": tier_table(capped),
            "p0_p95_wait_reduction": round(1 - p95(tiered, "p0") / p95(fifo, "p0"), 3),
            "capped_p0_p95_wait_reduction": round(1 - p95(capped, "p0") / p95(fifo, "p0"), 3),
            "capped_p2_p95_wait_ratio": round(p95(capped, "p2") / p95(fifo, "p2"), 2),
            "p0_p50_speedup": round(p50(fifo, "p0") / max(p50(tiered, "p0"), 0.001), 1),
            "p2_p95_wait_ratio": round(p95(tiered, "p2") / p95(fifo, "p2"), 2),
            "lost": [fifo["tasks"]["lost"], tiered["tasks"]["lost"], capped["tasks"]["lost"]],
        },
        "autoscaling_rounds": rounds,
        "autoscaling_1_to_8": compare("seed", rounds),
        "autoscaling_1_to_8_burst": compare("burst", rounds),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    curves = {load: report[key].pop("first_round_curves") for load, key in CURVES.items()}
    plot(curves, RESULTS / "policies.png")
    (RESULTS / "policies.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
