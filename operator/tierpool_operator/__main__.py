"""Entry point: ``python -m tierpool_operator`` / ``tierpool-operator``."""

from __future__ import annotations

import os
import sys

import kopf

from tierpool import logs
from tierpool_operator.config import OperatorConfig


def main() -> int:
    cfg = OperatorConfig.from_env(os.environ)
    logs.configure(os.environ.get("TIERPOOL_LOG_FORMAT", "json"), os.environ.get("TIERPOOL_LOG_LEVEL", "INFO"))
    kopf.configure(verbose=False)
    del handlers  # imported for its kopf registrations
    kopf.run(
        clusterwide=not cfg.namespaces,
        namespaces=list(cfg.namespaces),
        standalone=cfg.standalone,
        peering_name=cfg.peering_name,
        liveness_endpoint=f"http://0.0.0.0:{cfg.metrics_port + 1}/healthz",
        memo=kopf.Memo(config=cfg),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
