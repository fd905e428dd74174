"""Local mode's worker processes, forked from a server that imported tierpool once (tierpool.local.forked): they
serve the pool from the spec in their environment, log to their own file, drain on scale-in and report exit codes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from multiprocessing import forkserver
from pathlib import Path

import pytest
import redis

from tierpool.client.producer import Client
from tierpool.local import forked
from tierpool.local.supervisor import ProcessPool
from tierpool.model.keys import GROUP
from tierpool.model.resource import AgentPool, load_pool_file

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


@pytest.fixture
def pools() -> Iterator[list[ProcessPool]]:
    """Process pools a test started, stopped whatever the test's outcome (no worker outlives it)."""
    started: list[ProcessPool] = []
    yield started
    for workers in started:
        workers.stop(timeout=10)


def ended(pid: int) -> bool:
    """Whether the process is gone or a zombie (an orphan's zombie waits for whoever reaps orphans here)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def reaped(workers: ProcessPool, timeout: float) -> list[int]:
    deadline, codes = time.monotonic() + timeout, []
    while time.monotonic() < deadline and (workers.running or workers.draining):
        codes += workers.reap()
        time.sleep(0.05)
    return codes


def test_a_forked_worker_serves_the_pool_then_drains_with_exit_code_0(
    tmp_path: Path, redis_url: str, pools: list[ProcessPool]
) -> None:
    pool = pool_file(tmp_path, "tierpool.handlers:simulate")
    producer = Client(redis.Redis.from_url(redis_url, decode_responses=True), pool)
    ids = [producer.submit("p0", {"work_ms": 10}) for _ in range(3)]
    workers = ProcessPool(pool, redis_url, tmp_path, os.environ)
    pools.append(workers)
    workers.scale(1)
    assert [producer.wait_result(task_id, timeout=30).status for task_id in ids] == ["succeeded"] * 3
    workers.scale(0)
    assert len(workers.draining) == 1 and workers.size == 0
    assert reaped(workers, 30) == [0]
    log = (tmp_path / "worker-1.log").read_text()
    assert "serving pool local/forked" in log and "stop requested" in log


def test_a_worker_that_cannot_start_reports_its_exit_code_and_why(
    tmp_path: Path, redis_url: str, pools: list[ProcessPool]
) -> None:
    pool = pool_file(tmp_path, "no_such_module_here:handle")
    workers = ProcessPool(pool, redis_url, tmp_path, os.environ)
    pools.append(workers)
    workers.scale(1)
    assert reaped(workers, 30) == [2]  # the CLI's exit code for a handler it cannot load
    assert "no_such_module_here" in (tmp_path / "worker-1.log").read_text()


def test_wait_times_out_like_popen_and_kill_ends_the_worker(
    tmp_path: Path, redis_url: str, pools: list[ProcessPool]
) -> None:
    workers = ProcessPool(pool_file(tmp_path, "tierpool.handlers:simulate"), redis_url, tmp_path, os.environ)
    pools.append(workers)
    workers.scale(1)
    worker = workers.running[0]
    with pytest.raises(subprocess.TimeoutExpired):
        worker.wait(0.2)
    assert worker.poll() is None and worker.returncode is None
    worker.kill()
    assert worker.wait(10) == -9


HANDLER_IN_CWD = """\
import atexit
import pathlib

atexit.register(lambda: pathlib.Path("atexit-ran").write_text("yes"))


async def handle(task):
    return {"from": "the current directory"}
"""


def test_a_handler_module_in_the_current_directory_loads_and_its_atexit_hooks_run(
    tmp_path: Path, redis_url: str, pools: list[ProcessPool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with ``python -m tierpool``: the current directory is on the worker's import path, whatever the fork
    server's was; and the worker's exit runs atexit hooks (a forkserver child before 3.13 skips them)."""
    (tmp_path / "handlers_here.py").write_text(HANDLER_IN_CWD)
    monkeypatch.chdir(tmp_path)
    pool = pool_file(tmp_path, "handlers_here:handle")
    producer = Client(redis.Redis.from_url(redis_url, decode_responses=True), pool)
    task_id = producer.submit("p0", {})
    workers = ProcessPool(pool, redis_url, tmp_path, os.environ)
    pools.append(workers)
    workers.scale(1)
    assert producer.wait_result(task_id, timeout=30).result == {"from": "the current directory"}
    workers.scale(0)
    assert reaped(workers, 30) == [0]
    assert (tmp_path / "atexit-ran").read_text() == "yes"


def test_a_task_running_at_scale_in_finishes_before_the_worker_exits(
    tmp_path: Path, redis_url: str, pools: list[ProcessPool]
) -> None:
    pool = pool_file(tmp_path, "tierpool.handlers:simulate")
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    producer = Client(connection, pool)
    workers = ProcessPool(pool, redis_url, tmp_path, os.environ)
    pools.append(workers)
    workers.scale(1)
    task_id = producer.submit("p0", {"work_ms": 1500})
    deadline = time.monotonic() + 30
    while not connection.xpending(producer.keys.tier("p0"), GROUP)["pending"]:
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.02)
    workers.scale(0)
    assert reaped(workers, 30) == [0]
    assert producer.wait_result(task_id, timeout=1).status == "succeeded"


def test_workers_outlive_their_fork_server_and_still_drain(
    tmp_path: Path, redis_url: str, pools: list[ProcessPool]
) -> None:
    """multiprocessing reports every worker as ended (255) once the fork server is gone; they still run, so they
    count as running, are signalled through their pidfd, and drain; a new fork server serves the next start."""
    pool = pool_file(tmp_path, "tierpool.handlers:simulate")
    workers = ProcessPool(pool, redis_url, tmp_path, os.environ)
    pools.append(workers)
    workers.scale(1)
    worker = workers.running[0]
    server = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    assert server is not None
    os.kill(server, signal.SIGKILL)
    time.sleep(0.5)
    assert worker._process.exitcode == forked.SERVER_GONE  # type: ignore[attr-defined]  # what multiprocessing says
    assert worker.poll() is None and workers.reap() == []
    assert not ended(worker.pid)
    workers.scale(0)
    worker.wait(30)
    assert ended(worker.pid)
    workers.scale(1)  # a new fork server
    producer = Client(redis.Redis.from_url(redis_url, decode_responses=True), pool)
    assert producer.wait_result(producer.submit("p0", {}), timeout=30).status == "succeeded"


def test_without_a_fork_server_workers_start_as_new_interpreters(
    tmp_path: Path, redis_url: str, pools: list[ProcessPool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forked, "forking", lambda: False)
    pool = pool_file(tmp_path, "tierpool.handlers:simulate")
    workers = ProcessPool(pool, redis_url, tmp_path, os.environ)
    pools.append(workers)
    workers.scale(1)
    assert isinstance(workers.running[0], subprocess.Popen)
    producer = Client(redis.Redis.from_url(redis_url, decode_responses=True), pool)
    assert producer.wait_result(producer.submit("p0", {}), timeout=30).status == "succeeded"
    workers.scale(0)
    assert reaped(workers, 30) == [0]


LEAVES_A_WORKER = """\
import os, sys, time
from pathlib import Path
from tierpool.local.supervisor import ProcessPool
from tierpool.model.resource import load_pool_file

workers = ProcessPool(load_pool_file(Path(sys.argv[1])), sys.argv[2], Path(sys.argv[3]), os.environ)
workers.scale(1)
log, deadline = Path(sys.argv[3]) / "worker-1.log", time.monotonic() + 30
while not (log.exists() and "serving pool" in log.read_text()) and time.monotonic() < deadline:
    time.sleep(0.05)  # serving: the drain is the worker's, not a kill before it started
print(workers.running[0].pid, flush=True)
"""


def test_a_worker_left_running_at_exit_is_drained_not_waited_for_forever(tmp_path: Path, redis_url: str) -> None:
    """multiprocessing joins its children at exit without a bound; a worker left running (an interrupted stop) is
    signalled to drain first, so the process exits, and the worker with it, drained (exit code 0 in its log)."""
    pool_file(tmp_path, "tierpool.handlers:simulate")
    script = textwrap.dedent(LEAVES_A_WORKER)
    command = [sys.executable, "-c", script, str(tmp_path / "pool.yaml"), redis_url, str(tmp_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        assert process.stdout is not None
        pid = int(process.stdout.readline())
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        if pid is not None and not ended(pid):
            os.kill(pid, signal.SIGKILL)  # a failed run's worker must not serve later tests
    assert pid is not None and ended(pid)
    assert "stop requested" in (tmp_path / "worker-1.log").read_text()
