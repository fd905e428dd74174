"""Starting a worker process: ``run_worker(options)`` does everything between the parsed command line and a
serving :class:`Worker`, and the exit after it (the CLI stays a thin parser).

Order matters: the stop request (SIGTERM, SIGINT) is installed first, and honoured at every step of the start-up,
including while Redis is unreachable. After the drain, a handler that would not stop (a sync handler's thread,
or an async one that swallows its cancellation) must not keep running user code once the worker is gone, nor
hold up the exit: the process exits at once instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from tierpool.model.keys import PoolKeys
from tierpool.model.resource import AgentPool, SpecError, pool_from_spec
from tierpool.runtime.drain import AFTER_GRACE_SECONDS
from tierpool.runtime.handler_loading import load_handler
from tierpool.runtime.health import HealthServer, bind_host
from tierpool.runtime.metrics import WorkerMetrics
from tierpool.runtime.settings import WorkerSettings, eviction_recheck_seconds
from tierpool.runtime.stopping import STOP, StopRequest
from tierpool.runtime.worker import PING_TIMEOUT, Worker
from tierpool.store.connection import AsyncRedis, RedisSettings, async_client, wait_until_reachable
from tierpool.store.drivers import run_async
from tierpool.store.registry import load_spec_plan

log = logging.getLogger("tierpool.startup")


@dataclass(frozen=True)
class WorkerOptions:
    """What the command line (or a caller) decides; everything else comes from the pool spec."""

    redis: RedisSettings
    pool: AgentPool | None = None
    """The pool, when it is known without Redis (a file, or the spec in the environment)."""
    pool_ref: str | None = None
    """``NAMESPACE/NAME`` of a pool whose published spec is read from Redis, when ``pool`` is None."""
    handler: str | None = None
    concurrency: int | None = None
    consumer: str | None = None
    grace: float | None = None
    metrics_port: int | None = None
    """None: the spec's port; 0: no endpoint."""
    maintenance: bool = True


@dataclass(frozen=True)
class Served:
    code: int
    threads_left: int = 0
    """Sync handler calls still running after the drain."""


def run_worker(options: WorkerOptions, stop: StopRequest = STOP) -> int:
    """Run a worker process to its end and return its exit code (0 after a clean drain)."""
    stop.install()
    served = asyncio.run(serve(options, stop))
    if served.threads_left:
        exit_at_once(served.code, served.threads_left)
    return served.code


def exit_at_once(code: int, running: int) -> None:
    """End the process now, without waiting for (or running any more of) the user code still running."""
    log.warning("%d handler call(s) still running after the drain; exiting without waiting for them", running)
    logging.shutdown()
    os._exit(code)


async def serve(options: WorkerOptions, stop: StopRequest = STOP) -> Served:
    stop.attach(asyncio.get_running_loop())
    stopped = asyncio.Event()
    stop.on_request(stopped.set)
    client = async_client(options.redis, max_connections=(options.concurrency or 64) + 16)
    try:
        if not await _reach(client, options.redis, stopped):
            log.info("stopped before start-up finished")
            return Served(0)
        pool = options.pool or await _published_pool(client, options.pool_ref)
        handler_path = options.handler or pool.spec.worker.handler
        handler = load_handler(handler_path)
        registry = CollectorRegistry()
        worker = Worker(worker_settings(options, pool, handler_path), handler, client, WorkerMetrics(registry))
        stop.on_request(worker.request_stop)
        port = worker.settings.metrics_port
        server = None
        if port:
            host = bind_host(os.environ)
            server = HealthServer(registry, live=worker.live, ready=worker.serving, host=host, port=port)
            server.start()
        try:
            # after the health server: a kubelet sees the waiting worker live (not ready) and does not restart it
            # an allkeys-* server is waited on, not exited from: a crash loop would say why less clearly
            if not await worker.eviction.until_safe():
                log.info("stopped before start-up finished")
                return Served(0)
            code = await worker.run()
            if worker.stuck:  # user code that would not stop: it must not outlive the drain (nor hang the exit)
                exit_at_once(code, len(worker.stuck))
        finally:
            if server:
                server.stop()
        return Served(code, worker.user_code_running())
    finally:
        await client.aclose()


async def _reach(client: AsyncRedis, redis: RedisSettings, stopped: asyncio.Event) -> bool:
    async def ping() -> Any:
        return await asyncio.wait_for(client.ping(), PING_TIMEOUT)

    async def pause(seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopped.wait(), seconds)

    return await wait_until_reachable(ping, redis.redacted_url(), sleep=pause, stop=stopped.is_set)


async def _published_pool(client: AsyncRedis, ref: str | None) -> AgentPool:
    if not ref:
        raise SpecError([("--file/--pool", "say which pool: --file pool.yaml or --pool NAMESPACE/NAME")], "arguments")
    keys = PoolKeys.parse(ref)
    return pool_from_spec(keys.name, keys.namespace, await run_async(client, load_spec_plan(keys)))


def worker_settings(options: WorkerOptions, pool: AgentPool, handler: str) -> WorkerSettings:
    spec = pool.spec.worker
    return WorkerSettings(
        pool=pool,
        redis=options.redis,
        handler=handler,
        concurrency=options.concurrency or spec.concurrency,
        consumer=options.consumer or consumer_name(os.environ.get("TIERPOOL_CONSUMER")),
        grace_seconds=options.grace
        if options.grace is not None
        else grace_seconds(spec.termination_grace_period_seconds),
        metrics_port=spec.metrics_port if options.metrics_port is None else (options.metrics_port or None),
        maintenance=options.maintenance,
        eviction_recheck_seconds=eviction_recheck_seconds(os.environ),
    )


def grace_seconds(termination_grace: float) -> float:
    """The drain leaves enough of the pod's termination grace period for what follows it: cancelling, the
    hand-back, the last outcome writes and the exit (``AFTER_GRACE_SECONDS``), and at least a tenth of it (up to
    5 s) to spare."""
    reserve = max(AFTER_GRACE_SECONDS, min(5.0, termination_grace * 0.1))
    return max(1.0, termination_grace - reserve)


def consumer_name(pod_name: str | None) -> str:
    """The pod name when the operator passes it (unique per pod), else host-pid-random."""
    base = pod_name or f"{socket.gethostname()}-{os.getpid()}"
    return f"{base}-{secrets.token_hex(2)}"
