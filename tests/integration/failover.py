"""One Sentinel failover under load, measured: worker processes and a producer run against the master that the
sentinels name, the master is SIGKILLed mid-run, and every submit the producer saw acknowledged is accounted for
once the promoted replica has drained: completed, or lost (acknowledged by the old master, never replicated).
Used by tests/integration/test_redis_sentinel.py and bench/sentinel_failover.py."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis

from tierpool.client.producer import Client
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.model.spec import RedisMode
from tierpool.protocol.submission import TaskRequest
from tierpool.store.connection import RedisSettings, parse_sentinels, sync_client

from .sentinel_support import DATA_PASSWORD, MASTER_NAME, SENTINEL_PASSWORD, ValkeySentinel
from .support import killed_on_exit, make_pool, results, spawn_worker, wait_until

RECOVERY = {"claimIdle": "3s", "heartbeat": "500ms", "retryBackoff": "50ms", "sweepInterval": "200ms"}
BATCH = 20


@dataclass
class Report:
    wait_replicas: int
    behind: float = 0.0
    """Seconds between cutting the replica's link and killing the master (0: a replica in step)."""
    acked: int = 0
    refused: int = 0
    """Submit batches' tasks the producer saw fail (not acknowledged: not counted either way)."""
    completed: int = 0
    lost_never_ran: int = 0
    """Acknowledged submits gone from the promoted replica before any worker ran them."""
    lost_after_running: int = 0
    """Acknowledged submits that ran on the old master, and whose entry and result are both gone."""
    run_twice: int = 0
    """Tasks run more than once: a completion (or a delivery) the old master acknowledged and the replica lacks."""
    submits_per_s: float = 0.0
    runs_per_s: float = 0.0
    """Both over the steady window before the kill, with the replica attached."""
    failover_s: float = 0.0
    """From the SIGKILL to every sentinel naming the promoted replica."""
    completed_after_failover: int = 0
    worker_logs: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "worker_logs"}


def sentinel_pool(setup: ValkeySentinel, name: str, wait_replicas: int) -> AgentPool:
    sentinel = {"masterName": MASTER_NAME, "sentinels": setup.addresses}
    return make_pool(
        name,
        tiers=[{"name": "p0", "weight": 1}],
        redis={"mode": "sentinel", "sentinel": sentinel, "waitReplicas": wait_replicas},
        recovery=RECOVERY,
        worker={"concurrency": 16, "handler": "support_handlers:logged"},
    )


def settings(setup: ValkeySentinel) -> RedisSettings:
    return RedisSettings(
        mode=RedisMode.SENTINEL,
        sentinels=parse_sentinels(setup.addresses),
        master_name=MASTER_NAME,
        password=DATA_PASSWORD,
        sentinel_password=SENTINEL_PASSWORD,
    )


class Producer(threading.Thread):
    """Submits batches as fast as the master acknowledges them, through the sentinels; a batch that fails
    (the master gone, the failover not done) is counted as refused and the next one tried shortly after."""

    def __init__(self, client: Client) -> None:
        super().__init__(daemon=True)
        self.client, self.stop = client, threading.Event()
        self.acked: list[str] = []
        self.refused = 0

    def run(self) -> None:
        serial = 0
        while not self.stop.is_set():
            ids = [f"t{serial + i}" for i in range(BATCH)]
            serial += BATCH
            try:
                self.client.submit_many([TaskRequest("p0", {"work_ms": 2}, task_id=i) for i in ids])
                self.acked += ids
            except (redis.RedisError, OSError):
                self.refused += BATCH
                time.sleep(0.05)


def runs(log: Path) -> Counter[str]:
    if not log.exists():
        return Counter()
    return Counter(line.split()[0] for line in log.read_text().splitlines() if line.strip())


def drained(connection: redis.Redis, pool: AgentPool) -> bool:
    """Nothing pending and nothing undelivered on the pool's stream."""
    stream = PoolKeys.parse(pool.ref).tier("p0")
    group = next(g for g in connection.xinfo_groups(stream) if g["name"] == GROUP)
    return int(group["pending"]) == 0 and group.get("lag") == 0


def run_failover(
    setup: ValkeySentinel,
    tmp: Path,
    name: str,
    wait_replicas: int,
    behind: float = 0.0,
    before: float = 4.0,
    after: float = 6.0,
) -> Report:
    """Two worker processes and a producer; SIGKILL the master ``before`` seconds in (``behind`` seconds after
    cutting its replica's link, when set); produce ``after`` more seconds; drain; account for every acknowledged
    submit."""
    pool, report, log = sentinel_pool(setup, name, wait_replicas), Report(wait_replicas, behind), tmp / f"{name}.runs"
    env = {"TIERPOOL_REDIS_PASSWORD": DATA_PASSWORD, "TIERPOOL_REDIS_SENTINEL_PASSWORD": SENTINEL_PASSWORD}
    env["TEST_RUN_LOG"] = str(log)
    logs = [tmp / f"{name}-w{i}.log" for i in range(2)]
    workers = [spawn_worker(pool, "redis://127.0.0.1/0", log=path, env=env) for path in logs]
    connection = sync_client(settings(setup))
    assert isinstance(connection, redis.Redis)
    with killed_on_exit(*workers):
        producer = Producer(Client(connection, pool))
        producer.start()
        assert wait_until(lambda: len(runs(log)) > 0, 30), "no worker ran a task"
        started, ran, submitted = time.monotonic(), sum(runs(log).values()), len(producer.acked)
        time.sleep(before)
        window = time.monotonic() - started
        report.submits_per_s = round((len(producer.acked) - submitted) / window, 1)
        report.runs_per_s = round((sum(runs(log).values()) - ran) / window, 1)
        if behind:
            setup.cut_replication()
            time.sleep(behind)
        killed_at, old = time.monotonic(), setup.kill_master()
        setup.resume_replicas()
        setup.wait_failover(old)
        report.failover_s = round(time.monotonic() - killed_at, 2)
        acked_before_failover = len(producer.acked)
        time.sleep(after)
        producer.stop.set()
        producer.join(30)
        assert wait_until(lambda: drained(connection, pool), 120, interval=0.5), "the promoted replica never drained"
        time.sleep(float(RECOVERY["claimIdle"].rstrip("s")) + 1)  # a completion lost at failover re-runs by then
        assert wait_until(lambda: drained(connection, pool), 60, interval=0.5)
    _account(report, results(connection, pool, producer.acked), runs(log), producer, acked_before_failover)
    report.worker_logs = [path.read_text() for path in logs]
    connection.close()
    return report


def _account(
    report: Report, done: dict[str, Any], counted: Counter[str], producer: Producer, acked_before_failover: int
) -> None:
    """Every acknowledged submit: completed, or lost (having run on the old master or not); and the re-runs."""
    report.acked, report.refused, report.completed = len(producer.acked), producer.refused, len(done)
    missing = [task for task in producer.acked if task not in done]
    report.lost_after_running = sum(1 for task in missing if counted[task])
    report.lost_never_ran = len(missing) - report.lost_after_running
    report.run_twice = sum(1 for task in producer.acked if counted[task] > 1)
    report.completed_after_failover = sum(1 for task in producer.acked[acked_before_failover:] if task in done)
