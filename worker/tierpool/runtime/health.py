"""A small HTTP endpoint for /metrics, /healthz and /readyz, served from a daemon thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature from the base class
        return


class HealthServer:
    """Serves Prometheus metrics plus liveness (/healthz) and readiness (/readyz) from callables."""

    def __init__(
        self,
        registry: CollectorRegistry,
        live: Callable[[], bool],
        ready: Callable[[], bool],
        host: str = "0.0.0.0",  # noqa: S104 - a pod's metrics port must be reachable by Prometheus
        port: int = 9100,
    ) -> None:
        self._metrics = make_wsgi_app(registry)
        self._live, self._ready = live, ready
        self._server: WSGIServer = make_server(host, port, self._app, handler_class=_QuietHandler)
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
