"""Operator configuration, read once at start-up from the environment into a typed object."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means every namespace (cluster-wide)."""
    metrics_port: int = 8080
    """Port for the operator's /metrics (0 turns it off)."""
    health_port: int = 8081
    """Port for kopf's liveness endpoint, /healthz."""
    standalone: bool = True
    """Run without kopf peering (one replica, Recreate strategy). False enables peering for several replicas."""
    peering_name: str = "tierpool"
    """KopfPeering object name when standalone is False."""
    redis_timeout: float = 5.0
    """Seconds an observation of one pool's streams may take before Redis counts as unreachable."""
    max_backoff: float = 300.0
    """Longest wait between attempts to reach a pool's Redis after repeated failures."""
    pod_name: str = ""
    """This replica's pod name (downward API, POD_NAME); it names the operator to its peers."""
    status_refresh: float = 60.0
    """Longest time between status writes of an unchanged pool. A scaling pass writes status only when something
    users read there changed; the scaler's memory (also in status, for restarts) is saved at least this often."""
    forbidden_retry: float = 60.0
    """Seconds between attempts to create a pool's children while RBAC refuses one (fixing the chart's values is a
    human's job, so this is slow on purpose)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OperatorConfig:
        namespaces = tuple(n.strip() for n in environ.get("TIERPOOL_WATCH_NAMESPACES", "").split(",") if n.strip())
        return cls(
            namespaces=namespaces,
            metrics_port=int(environ.get("TIERPOOL_METRICS_PORT", cls.metrics_port)),
            health_port=int(environ.get("TIERPOOL_HEALTH_PORT", cls.health_port)),
            standalone=environ.get("TIERPOOL_PEERING", "").lower() not in {"1", "true", "yes"},
            peering_name=environ.get("TIERPOOL_PEERING_NAME", cls.peering_name),
            pod_name=environ.get("POD_NAME", ""),
            status_refresh=float(environ.get("TIERPOOL_STATUS_REFRESH_SECONDS", cls.status_refresh)),
            forbidden_retry=float(environ.get("TIERPOOL_FORBIDDEN_RETRY_SECONDS", cls.forbidden_retry)),
        )


def operator_identity(pod_name: str, hostname: str, pid: int, nonce: str) -> str:
    """Pure: the id this replica shows its kopf peers.

    kopf's own default asks ``getpass.getuser()``, which raises for a UID with no passwd entry (our image runs as
    10001 with no ``USER`` set), so the operator names itself: the pod when it knows it, else host and process.
    """
    return f"{pod_name or hostname}/{pid}/{nonce}"


def own_identity(cfg: OperatorConfig) -> str:
    return operator_identity(cfg.pod_name, socket.gethostname(), os.getpid(), os.urandom(3).hex())
