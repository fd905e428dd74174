"""A small HTTP endpoint for /metrics, /healthz and /readyz, served from a daemon thread.

Each connection gets a thread of its own and a socket timeout, so a client that holds a connection open, or sends
half a request (slowloris), never delays the kubelet's probe on another connection: a stalled /healthz would get a
healthy worker restarted. prometheus_client's ``start_http_server`` is threaded too, but serves only /metrics.

Open connections are capped (``MAX_CONNECTIONS``), so a flood of idle ones cannot spawn threads without bound. At
the cap the oldest open connection is dropped to make room: refusing the newest instead would refuse the kubelet's
probe for as long as the flood holds every place, whereas a probe, sent as soon as it connects, is answered at
once and never becomes the oldest.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

from tierpool.model.spec import DEFAULT_METRICS_PORT

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

BIND_ENV = "TIERPOOL_METRICS_BIND"
DEFAULT_HOST = "0.0.0.0"  # noqa: S104 - a pod's metrics port must be reachable by Prometheus and the kubelet
CONNECTION_TIMEOUT = 5.0
"""Seconds a connection may sit without a byte read or written before it is dropped."""
MAX_CONNECTIONS = 16
"""Connections served at once, one thread each: a kubelet's two probes and a scrape or two need far fewer."""

log = logging.getLogger("tierpool.runtime.health")
CANNOT_LISTEN = {errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL}
"""Why a listen fails because of the configuration (the port is taken, privileged, or not this host's address)."""


class CannotListen(OSError):
    """The metrics/health port cannot be listened on: a configuration error, reported as one line."""


def listen_failure(host: str, port: int, error: OSError) -> CannotListen | None:
    """The one-line error for a listen that failed because of its configuration, else None. Pure."""
    if error.errno not in CANNOT_LISTEN:
        return None
    why = "taken by another process" if error.errno == errno.EADDRINUSE else error.strerror
    return CannotListen(
        f"cannot serve /metrics, /healthz and /readyz on {host}:{port}: {why}; choose another port with "
        "spec.worker.metricsPort or --metrics-port (0 = none)",
    )


def bind_host(environ: Mapping[str, str]) -> str:
    """The address to listen on: ``TIERPOOL_METRICS_BIND`` (e.g. ``127.0.0.1`` or ``::``), else every IPv4 one."""
    return environ.get(BIND_ENV, "").strip() or DEFAULT_HOST


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature from the base class
        return


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a connection still open never holds up the process's exit

    def __init__(self, address: tuple[str, int], connection_timeout: float, max_connections: int) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.connection_timeout = connection_timeout
        self.max_connections = max_connections
        self._open: dict[socket.socket, None] = {}  # oldest first
        self._open_lock = threading.Lock()
        super().__init__(address, _QuietHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            while len(self._open) >= self.max_connections:
                oldest = next(iter(self._open))
                del self._open[oldest]
                _wake_and_drop(oldest)
            self._open[request] = None
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open.pop(request, None)

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        connection.settimeout(self.connection_timeout)
        return connection, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # timed out, or reset by the client: its connection is dropped, nothing more
            log.debug("health connection from %s dropped: %r", client_address, error)
            return
        super().handle_error(request, client_address)


def _wake_and_drop(connection: socket.socket) -> None:
    """Ends a connection another thread serves: its blocked read returns at once, and that thread closes it."""
    with contextlib.suppress(OSError):  # the client went away already
        connection.shutdown(socket.SHUT_RDWR)


class HealthServer:
    """Serves Prometheus metrics plus liveness (/healthz) and readiness (/readyz) from callables."""

    def __init__(
        self,
        registry: CollectorRegistry,
        live: Callable[[], bool],
        ready: Callable[[], bool],
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_METRICS_PORT,
        connection_timeout: float = CONNECTION_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._metrics = make_wsgi_app(registry)
        self._live, self._ready = live, ready
        try:
            self._server = _ThreadingServer((host, port), connection_timeout, max_connections)
        except OSError as error:
            failure = listen_failure(host, port, error)
            if failure is None:
                raise
            raise failure from None
        self._server.set_app(self._app)
        self.host = str(self._server.server_address[0])
        self.port = self._server.server_port

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path in ("/healthz", "/readyz"):
            ok = self._live() if path == "/healthz" else self._ready()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ok\n" if ok else b"not ready\n"]
        if path == "/metrics":
            return self._metrics(environ, start_response)  # type: ignore[no-any-return]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    def start(self) -> None:
        threading.Thread(target=self._server.serve_forever, name="tierpool-health", daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
