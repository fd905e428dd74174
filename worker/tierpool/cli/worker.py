"""``tierpool worker``: the CLI only turns its flags into options; tierpool.runtime.startup does the rest.

Apart from the other commands (tierpool.cli.commands), so that a worker process imports only what it runs: a pod's
start-up is mostly imports.
"""

from __future__ import annotations

import argparse
import os

from tierpool.cli.config import pool_without_redis, redis_settings
from tierpool.handlers import HandlerNotFound
from tierpool.runtime import logs
from tierpool.runtime.startup import WorkerOptions, run_worker


def worker(args: argparse.Namespace) -> int:
    logs.configure(args.log_format or os.environ.get("TIERPOOL_LOG_FORMAT", "text"), args.log_level)
    try:
        known = pool_without_redis(args)
        options = WorkerOptions(
            redis=redis_settings(args, known),
            pool=known,
            pool_ref=args.pool,
            handler=args.handler,
            concurrency=args.concurrency,
            consumer=args.consumer,
            grace=args.grace,
            metrics_port=args.metrics_port,
            maintenance=not args.no_maintenance,
        )
        return run_worker(options)
    except Exception as error:
        from tierpool.cli.support import EXPECTED_ERRORS, expected_failure, fail  # rich, only when it fails

        if isinstance(error, HandlerNotFound):
            return fail(str(error), 2)
        if isinstance(error, EXPECTED_ERRORS):
            return expected_failure(error)
        raise
