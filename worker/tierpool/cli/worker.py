"""``tierpool worker``: the CLI only turns its flags into options; tierpool.runtime.entry does the rest.

Apart from the other commands (tierpool.cli.commands), so that a worker process imports only what it runs: a pod's
start-up is mostly imports.
"""

from __future__ import annotations

import argparse
import os
import sys

from tierpool.cli.config import pool_without_redis, redis_settings
from tierpool.runtime.entry import serve
from tierpool.runtime.handler_loading import import_from
from tierpool.runtime.startup import WorkerOptions


def worker(args: argparse.Namespace) -> int:
    import_from(os.getcwd(), sys.path)

    def options() -> WorkerOptions:
        known = pool_without_redis(args)
        return WorkerOptions(
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

    return serve(options, args.log_format, args.log_level or "INFO")
