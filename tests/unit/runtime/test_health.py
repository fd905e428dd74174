"""The health and metrics server: its answers, and that no idle or slow client delays another one's."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from tierpool.runtime.health import BIND_ENV, DEFAULT_HOST, HealthServer, bind_host

ANSWER_WITHIN = 1.0
"""A kubelet probe's default timeout."""


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("tierpool_probe_test", "a metric to find in /metrics", registry=registry).inc()
    return registry


@pytest.fixture
def server(registry: CollectorRegistry) -> Iterator[HealthServer]:
    server = HealthServer(registry, live=lambda: True, ready=lambda: False, host="127.0.0.1", port=0)
    server.start()
    yield server
    server.stop()


def get(port: int, path: str) -> tuple[int, str, float]:
    """Status, body and seconds taken; a server that does not answer within ANSWER_WITHIN raises TimeoutError."""
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=ANSWER_WITHIN)
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        return reply.status, reply.read().decode(), time.monotonic() - started
    finally:
        connection.close()


def hostile_client(port: int, sends: bytes) -> socket.socket:
    """A connection that sends ``sends`` (maybe nothing, maybe half a request) and then holds on, silent."""
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    if sends:
        client.sendall(sends)
    time.sleep(0.1)  # let the server accept it before the probe's connection
    return client


def test_endpoints_answer_as_before(server: HealthServer) -> None:
    assert get(server.port, "/healthz")[:2] == (200, "ok\n")
    assert get(server.port, "/readyz")[:2] == (503, "not ready\n")
    assert get(server.port, "/nowhere")[:2] == (404, "not found\n")
    status, body, _ = get(server.port, "/metrics")
    assert status == 200 and "tierpool_probe_test_total 1.0" in body


@pytest.mark.parametrize(
    "sends",
    [b"", b"GET /healthz HTT", b"GET /healthz HTTP/1.1\r\nHost: worker\r\n"],
    ids=["idle-connection", "half-a-request-line", "headers-never-finished"],
)
def test_a_held_connection_never_delays_another_request(server: HealthServer, sends: bytes) -> None:
    held = [hostile_client(server.port, sends) for _ in range(3)]
    try:
        for path in ("/healthz", "/readyz", "/metrics"):
            status, _, took = get(server.port, path)
            assert status in (200, 503) and took < ANSWER_WITHIN, path
    finally:
        for client in held:
            client.close()


def test_a_silent_connection_is_dropped_after_the_connection_timeout(
    registry: CollectorRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    server = HealthServer(
        registry, live=lambda: True, ready=lambda: True, host="127.0.0.1", port=0, connection_timeout=0.3
    )
    server.start()
    try:
        with hostile_client(server.port, b"GET /healthz HTTP/1.1\r\n") as client:
            started = time.monotonic()
            assert client.recv(1024) == b"", "the server closes the connection without an answer"
            assert time.monotonic() - started < 3
        assert get(server.port, "/healthz")[:2] == (200, "ok\n")
    finally:
        server.stop()
    assert "Traceback" not in capsys.readouterr().err, "a timed-out client is routine, not an error"


def test_it_listens_on_the_host_it_is_given(registry: CollectorRegistry) -> None:
    server = HealthServer(registry, live=lambda: True, ready=lambda: True, host="127.0.0.1", port=0)
    server.start()
    try:
        assert server.host == "127.0.0.1"
        assert get(server.port, "/healthz")[0] == 200
    finally:
        server.stop()


def test_it_can_listen_on_ipv6(registry: CollectorRegistry) -> None:
    try:
        server = HealthServer(registry, live=lambda: True, ready=lambda: True, host="::1", port=0)
    except OSError as error:
        pytest.skip(f"no IPv6 loopback here: {error}")
    server.start()
    try:
        connection = http.client.HTTPConnection("::1", server.port, timeout=ANSWER_WITHIN)
        connection.request("GET", "/healthz")
        assert connection.getresponse().status == 200
        connection.close()
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("environ", "host"),
    [
        ({}, DEFAULT_HOST),
        ({BIND_ENV: ""}, DEFAULT_HOST),
        ({BIND_ENV: " 127.0.0.1 "}, "127.0.0.1"),
        ({BIND_ENV: "::"}, "::"),
    ],
)
def test_bind_host_comes_from_the_environment(environ: dict[str, str], host: str) -> None:
    assert bind_host(environ) == host
    assert DEFAULT_HOST == "0.0.0.0", "what a pod needs, and what it was before the variable"


def test_a_flood_of_idle_connections_is_capped_and_never_delays_a_probe(registry: CollectorRegistry) -> None:
    cap = 4
    server = HealthServer(
        registry, live=lambda: True, ready=lambda: True, host="127.0.0.1", port=0, max_connections=cap
    )
    server.start()
    before = threading.active_count()
    flood = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(cap * 5)]
    try:
        time.sleep(0.3)  # every one accepted, each waiting for a request that never comes
        assert threading.active_count() - before <= cap
        for _ in range(3):
            status, _, took = get(server.port, "/healthz")
            assert status == 200 and took < ANSWER_WITHIN
        dropped = sum(1 for client in flood if _closed_by_server(client))
        assert dropped >= len(flood) - cap, "the oldest connections made room"
    finally:
        for client in flood:
            client.close()
        server.stop()


def _closed_by_server(client: socket.socket) -> bool:
    client.settimeout(0.01)
    try:
        return client.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True
