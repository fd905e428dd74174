"""Entry point: ``python -m tierpool_operator`` / ``tierpool-operator``."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, cast

try:
    import kopf
except ImportError:  # the console script is installed without the extra that brings its dependencies
    sys.exit(
        "tierpool-operator needs kopf and kubernetes, from tierpool's 'operator' extra: "
        "pip install 'tierpool[operator]'"
    )

from tierpool.runtime import logs
from tierpool_operator import logfilter, reconcile, scaler  # noqa: F401 - reconcile, scaler: their kopf registrations
from tierpool_operator.config import OperatorConfig, own_identity
from tierpool_operator.handover import serve
from tierpool_operator.memo import OperatorContext, PoolMemo


def main() -> int:
    cfg = OperatorConfig.from_env(os.environ)
    kopf.configure(verbose=cfg.verbose)
    # After kopf's: it adds a root handler of its own, and ours replaces it (one line per record, in our format).
    logs.configure(cfg.log_format, cfg.log_level)
    logfilter.install(cfg.verbose)
    serving = serve(
        PoolMemo(OperatorContext(cfg)),  # kopf gives each object a copy: the context shared, a memory of its own
        cfg.drain_timeout,
        cfg.api_threads,
        clusterwide=not cfg.namespaces,
        namespaces=list(cfg.namespaces),
        standalone=cfg.standalone,
        peering_name=None if cfg.standalone else cfg.peering_name,  # a name makes kopf peering mandatory
        priority=cfg.peering_priority,
        liveness_endpoint=f"http://0.0.0.0:{cfg.health_port}/healthz",
        identity=cast(Any, own_identity(cfg)),  # kopf's default calls getpass.getuser(): no passwd entry here
    )
    if not cfg.profile_path:
        asyncio.run(serving)
        return 0
    import cProfile  # only when asked for: the benchmark's profile of the operator

    profile = cProfile.Profile()
    try:
        profile.runcall(asyncio.run, serving)
    finally:
        profile.dump_stats(cfg.profile_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
