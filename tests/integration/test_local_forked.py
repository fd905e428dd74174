"""Local mode's worker processes, forked from a server that imported tierpool once (tierpool.local.forked): they
serve the pool from the spec in their environment, log to their own file, drain on scale-in and report exit codes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import redis

from tierpool.client import Client
from tierpool.local.supervisor import ProcessPool
from tierpool.resource import AgentPool, load_pool_file

pytestmark = [pytest.mark.redis]

POOL = """\
apiVersion: tierpool.io/v1alpha1
kind: AgentPool
metadata: {{name: forked, namespace: local}}
spec:
  tiers: [{{name: p0, weight: 1}}]
  worker: {{handler: "{handler}", concurrency: 2, terminationGracePeriodSeconds: 10}}
"""


def pool_file(tmp_path: Path, handler: str) -> AgentPool:
    path = tmp_path / "pool.yaml"
    path.write_text(POOL.format(handler=handler))
    return load_pool_file(path)


def reaped(workers: ProcessPool, timeout: float) -> list[int]:
    deadline, codes = time.monotonic() + timeout, []
    while time.monotonic() < deadline and (workers.running or workers.draining):
        codes += workers.reap()
        time.sleep(0.05)
    return codes


def test_a_forked_worker_serves_the_pool_then_drains_with_exit_code_0(tmp_path: Path, redis_url: str) -> None:
    pool = pool_file(tmp_path, "tierpool.handlers:simulate")
    producer = Client(redis.Redis.from_url(redis_url, decode_responses=True), pool)
    ids = [producer.submit("p0", {"work_ms": 10}) for _ in range(3)]
    workers = ProcessPool(pool, redis_url, tmp_path, os.environ)
    workers.scale(1)
    assert [producer.wait_result(task_id, timeout=30).status for task_id in ids] == ["succeeded"] * 3
    workers.scale(0)
    assert len(workers.draining) == 1 and workers.size == 0
    assert reaped(workers, 30) == [0]
    log = (tmp_path / "worker-1.log").read_text()
    assert "serving pool local/forked" in log and "stop requested" in log


def test_a_worker_that_cannot_start_reports_its_exit_code_and_why(tmp_path: Path, redis_url: str) -> None:
    pool = pool_file(tmp_path, "no_such_module_here:handle")
    workers = ProcessPool(pool, redis_url, tmp_path, os.environ)
    workers.scale(1)
    assert reaped(workers, 30) == [2]  # the CLI's exit code for a handler it cannot load
    assert "no_such_module_here" in (tmp_path / "worker-1.log").read_text()


def test_wait_times_out_like_popen_and_kill_ends_the_worker(tmp_path: Path, redis_url: str) -> None:
    workers = ProcessPool(pool_file(tmp_path, "tierpool.handlers:simulate"), redis_url, tmp_path, os.environ)
    workers.scale(1)
    worker = workers.running[0]
    with pytest.raises(subprocess.TimeoutExpired):
        worker.wait(0.2)
    assert worker.poll() is None and worker.returncode is None
    worker.kill()
    assert worker.wait(10) == -9
