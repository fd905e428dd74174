"""`tierpool local`: a burst scales the pool up and back to min with nothing lost (read from --summary-json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.redis, pytest.mark.slow]

POOL = """\
apiVersion: tierpool.io/v1alpha1
kind: AgentPool
metadata: {name: burst, namespace: local}
spec:
  tiers:
    - {name: p0, weight: 70, sla: 5s}
    - {name: p1, weight: 25, sla: 10s}
    - {name: p2, weight: 5}
  worker: {concurrency: 4, terminationGracePeriodSeconds: 10}
  recovery: {claimIdle: 10s, heartbeat: 2s, sweepInterval: 1s}
  replicas: {min: 1, max: 6}
  scaling: {interval: 1s, taskSeconds: 250ms, scaleDownStabilization: 3s, cooldown: 10s}
"""


def test_burst_scales_up_and_back_to_min_with_nothing_lost(tmp_path: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL)
    summary_path, plot_path = tmp_path / "summary.json", tmp_path / "timeline.png"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tierpool",
            "local",
            str(pool),
            "--load",
            "burst",
            "--duration",
            "40",  # the burst comes at 4 s; scale-down to min needs the rest even on a loaded 2-core machine
            "--summary-json",
            str(summary_path),
            "--plot",
            str(plot_path),
            "--no-live",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(summary_path.read_text())
    assert summary["tasks"] == {"submitted": 500, "completed": 500, "dead_lettered": 0, "lost": 0}
    assert summary["replicas"]["max"] >= 3
    assert summary["replicas"]["final"] == 1
    running = [sample["running"] for sample in summary["timeline"]]
    peak = running.index(max(running))
    assert running[-1] < max(running) and peak < len(running) - 1
    assert set(summary["tiers"]) == {"p0", "p1", "p2"}
    assert summary["tiers"]["p0"]["queue_wait_p95_seconds"] is not None
    assert plot_path.stat().st_size > 10_000
    assert "summary: 500 submitted, 500 completed" in done.stdout.replace("\n", " ")
