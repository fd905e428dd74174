"""Tiering and scaling policies on the seed article's load, side by side in one run (local mode, embedded Valkey).

Reproduce:  .venv/bin/python bench/policies.py            (about 9 minutes on 2 cores)

1. FIFO vs tiers at fixed capacity (3 workers x 4 slots): the seed article's claim (critical-path latency -58%,
   P0 ~3x faster). Every task goes through one stream in the FIFO run, reported under its original class.
   A third run caps escalation into P0 (``escalateMaxTargetBacklog: 0`` on P1).
2. ``sla`` vs ``lag`` (KEDA-style) autoscaling, 1-8 workers, on the seed load and on a burst (500 short tasks over
   every tier at once): per-tier p95 wait, SLA misses, replica-seconds (running and draining workers).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
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
    result.pop("timeline")
    result["replica_seconds"] = result["replicas"]["seconds"]  # running and draining workers
    return result


def tier_table(result: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {k: t[k] for k in ("queue_wait_p50_seconds", "queue_wait_p95_seconds", "sla_misses", "completed")}
        for name, t in result["tiers"].items()
    }


def autoscaling(sla: dict[str, Any], lag: dict[str, Any]) -> dict[str, Any]:
    """sla against lag on one load: per-tier waits and misses, replica-seconds (running and draining workers)."""
    p95 = lambda r, t: r["tiers"][t]["queue_wait_p95_seconds"]  # noqa: E731
    return {
        "sla": {**tier_table(sla), "replica_seconds": sla["replica_seconds"], "max_replicas": sla["replicas"]["max"]},
        "lag": {**tier_table(lag), "replica_seconds": lag["replica_seconds"], "max_replicas": lag["replicas"]["max"]},
        "p0_p95_ratio_sla_over_lag": round(p95(sla, "p0") / max(p95(lag, "p0"), 0.001), 2),
        "replica_seconds_ratio_sla_over_lag": round(sla["replica_seconds"] / lag["replica_seconds"], 2),
        "lost": [sla["tasks"]["lost"], lag["tasks"]["lost"]],
    }


def main() -> None:
    fixed = {"replicas": {"min": 3, "max": 3}}
    fifo = run("fifo", fixed, fifo=True)
    tiered = run("tiered", fixed)
    capped_tiers = [dict(t) for t in BASE["spec"]["tiers"]]
    capped_tiers[1]["escalateMaxTargetBacklog"] = 0  # p1 escalates into p0 only while p0 has nothing waiting
    capped = run("capped", {**fixed, "tiers": capped_tiers})
    sla = run("sla", {"scaling": {"policy": "sla"}})
    lag = run("lag", {"scaling": {"policy": "lag", "targetPerReplica": 20}})
    sla_burst = run("sla-burst", {"scaling": {"policy": "sla"}}, load="burst")
    lag_burst = run("lag-burst", {"scaling": {"policy": "lag", "targetPerReplica": 20}}, load="burst")
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
        "autoscaling_1_to_8": autoscaling(sla, lag),
        "autoscaling_1_to_8_burst": autoscaling(sla_burst, lag_burst),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "policies.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
