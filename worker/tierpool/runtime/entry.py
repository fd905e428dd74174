"""The worker's entry point: what ``tierpool worker`` runs once its flags are options, and what a local-mode
worker forked from the fork server runs directly (tierpool.local.forked), without the CLI.

Expected failures (an unloadable handler, a bad spec, an unreachable Redis) end in one line on stderr and an exit
code, never a traceback."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from tierpool.runtime import logs
from tierpool.runtime.failures import EXPECTED_ERRORS, describe
from tierpool.runtime.handler_loading import HandlerNotFound
from tierpool.runtime.settings import pool_without_redis, redis_settings
from tierpool.runtime.startup import WorkerOptions, run_worker

HANDLER_NOT_LOADED = 2
"""The exit code of a worker whose handler cannot be loaded: no restart can help (local mode stops on it)."""


def serve(options: Callable[[], WorkerOptions], log_format: str | None = None, log_level: str = "INFO") -> int:
    """Run a worker until it is stopped; its exit code. ``options`` is called once the logs are set up, so that a
    bad pool file, spec or Redis setting is reported like any other expected failure. ``log_format`` falls back to
    ``TIERPOOL_LOG_FORMAT``."""
    logs.configure(log_format or os.environ.get("TIERPOOL_LOG_FORMAT", "text"), log_level)
    try:
        return run_worker(options())
    except HandlerNotFound as error:
        print(f"error: {error}", file=sys.stderr)
        return HANDLER_NOT_LOADED
    except EXPECTED_ERRORS as error:
        print(f"error: {describe(error)}", file=sys.stderr)
        return 1


def serve_from_env(consumer: str, metrics_port: int) -> int:
    """``tierpool worker --consumer CONSUMER --metrics-port PORT`` with everything else from the environment."""

    def options() -> WorkerOptions:
        pool = pool_without_redis(os.environ)
        redis = redis_settings(os.environ, pool)
        return WorkerOptions(redis=redis, pool=pool, consumer=consumer, metrics_port=metrics_port)

    return serve(options)
