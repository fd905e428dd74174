"""`tierpool local`: a burst scales the pool up and back to min with nothing lost (read from --summary-json)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from tierpool.client.producer import Client
from tierpool.model.keys import GROUP
from tierpool.model.resource import load_pool_file

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


def stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (the fork server and the workers it forked)."""
    parents = {int(p.name): stat(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()}
    found, todo = set(), [root]
    while todo:
        parent = todo.pop()
        for pid, info in parents.items():
            if info is not None and info[1] == parent and pid not in found:
                found.add(pid)
                todo.append(pid)
    return found


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if (info := stat(pid)) is not None and info[0] != "Z"}


def running(connection: redis.Redis, stream: str) -> int:
    """Entries delivered and not yet acked (0 before the workers created the group)."""
    try:
        return int(connection.xpending(stream, GROUP)["pending"])
    except redis.ResponseError:  # NOGROUP
        return 0


SLOW_POOL = """\
apiVersion: tierpool.io/v1alpha1
kind: AgentPool
metadata: {name: sigterm, namespace: local}
spec:
  tiers: [{name: p0, weight: 1}]
  worker: {concurrency: 2, terminationGracePeriodSeconds: 30}
  replicas: {min: 1, max: 1}
"""


def test_sigterm_lets_the_task_in_flight_finish_and_leaves_no_process_behind(tmp_path: Path, redis_url: str) -> None:
    """``kill`` of ``tierpool local``: the run is cancelled, its workers drain (the task running finishes, once),
    it exits 130 without a summary, and nothing it started outlives it."""
    pool_path = tmp_path / "pool.yaml"
    pool_path.write_text(SLOW_POOL.replace("name: sigterm", f"name: sigterm-{uuid.uuid4().hex[:8]}"))
    pool = load_pool_file(pool_path)
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    producer = Client(connection, pool)
    summary = tmp_path / "summary.json"
    command = [sys.executable, "-m", "tierpool", "local", str(pool_path), "--redis-url", redis_url, "--load", "none"]
    command += ["--duration", "120", "--no-live", "--summary-json", str(summary)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    below: set[int] = set()
    try:
        task_id = producer.submit("p0", {"work_ms": 3000})
        deadline = time.monotonic() + 60
        while not running(connection, producer.keys.tier("p0")):
            assert time.monotonic() < deadline and process.poll() is None, "the task never started"
            time.sleep(0.05)
        below = descendants(process.pid)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        leftovers = descendants(process.pid) | below
        process.kill()
        for pid in alive(leftovers) if process.returncode != 130 else set():  # a failed run's, not to outlive it
            os.kill(pid, signal.SIGKILL)
    assert process.returncode == 130, output
    assert "terminated: the workers drained" in output and not summary.exists()
    result = producer.wait_result(task_id, timeout=1)
    assert (result.status, result.attempts) == ("succeeded", 1)
    deadline = time.monotonic() + 10
    while alive(below) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive(below) == set()


UNLOADABLE_POOL = """\
apiVersion: tierpool.io/v1alpha1
kind: AgentPool
metadata: {name: unloadable, namespace: local}
spec:
  tiers: [{name: p0, weight: 1}]
  worker: {handler: "HANDLER", terminationGracePeriodSeconds: 5}
  replicas: {min: 2, max: 2}
  scaling: {interval: 1s}
"""


@pytest.mark.parametrize(
    ("handler", "module", "says"),
    [
        ("no_such_handlers:run", None, "No module named 'no_such_handlers'"),
        ("broken_handlers:run", "raise RuntimeError('kaput at import')\n", "RuntimeError: kaput at import (at "),
    ],
)
def test_a_handler_that_cannot_be_imported_stops_local_mode_at_once(
    tmp_path: Path, redis_url: str, handler: str, module: str | None, says: str
) -> None:
    """Not a loop of restarts: one error line naming the module and why, a non-zero exit, and where the logs are."""
    name = handler.partition(":")[0]
    if module:
        (tmp_path / f"{name}.py").write_text(module)
    pool_path = tmp_path / "pool.yaml"
    pool_path.write_text(UNLOADABLE_POOL.replace("HANDLER", handler).replace("unloadable", f"u-{uuid.uuid4().hex[:8]}"))
    command = [sys.executable, "-m", "tierpool", "local", str(pool_path), "--redis-url", redis_url, "--load", "none"]
    started = time.monotonic()
    done = subprocess.run(
        [*command, "--duration", "60", "--no-live"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert time.monotonic() - started < 30, "it ran on instead of stopping"
    [where] = [line for line in done.stdout.splitlines() if line.startswith("worker logs: ")]
    logs = Path(where.removeprefix("worker logs: "))
    assert logs.is_dir() and 1 <= len(list(logs.glob("worker-*.log"))) <= 4
    assert f"redis: {redis_url} (pool " in done.stdout  # where to point a producer at the run
    [line] = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith(f"error: handler '{handler}': cannot import module '{name}': ") and says in line, line
    assert f"(worker log: {logs}/worker-" in line and "Traceback" not in done.stderr
