"""Operator configuration, read once at start-up from the environment into a typed object."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping
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
    """KopfPeering object name when standalone is False (the chart names it after the release)."""
    peering_priority: int = 0
    """This replica's kopf peering priority: the live replica with the highest one acts, the others pause. From
    ``TIERPOOL_PEERING_PRIORITY`` when set, else derived from the start time so that the oldest replica wins
    (``oldest_first_priority``): a replica that starts or restarts never preempts the active one."""
    peering_lifetime: int = 30
    """Seconds a replica's peering record stays valid without a keep-alive. kopf renews it 5-10 s (at least 1 s)
    before it runs out; a standby takes over at most this long after the active one died without a goodbye."""
    redis_timeout: float = 5.0
    """Seconds an observation of one pool's streams may take before Redis counts as unreachable."""
    max_backoff: float = 300.0
    """Longest wait between attempts to reach a pool's Redis after repeated failures."""
    drain_timeout: float = 20.0
    """On SIGTERM, the longest wait for handler runs in flight before kopf stops (and, with peering, hands over);
    keep it below the pod's terminationGracePeriodSeconds (30 s by default)."""
    api_threads: int = 24
    """Threads (and pooled connections) for the blocking Kubernetes calls. Every call waits on the API server, so
    this bounds how many are in flight: at 1,000 pools asyncio's default (CPUs + 4) kept the operator waiting."""
    max_defer: float = 30.0
    """Longest time a pool's scaling pass gives way to reconciles in flight (a burst of pool changes goes first)."""
    profile_path: str = ""
    """Write a cProfile of the whole run here when the operator exits (``TIERPOOL_PROFILE``; for benchmarks)."""
    pod_name: str = ""
    """This replica's pod name (downward API, POD_NAME); it names the operator to its peers."""
    status_refresh: float = 60.0
    """Longest time between status writes of an unchanged pool. A scaling pass writes status only when something
    users read there changed; the scaler's memory (also in status, for restarts) is saved at least this often."""
    children_check: float = 300.0
    """Seconds between the scaler's fresh reads and re-applies of all of a pool's children. The worker Deployment
    is watched (drift repaired at once); the ConfigMap, ServiceAccount and PDB are not (watching every ConfigMap
    of a cluster costs more), so their drift is repaired within this period. Four GETs per pool each time: at 60 s
    they were most of an idle operator's API calls and CPU."""
    consistency_timeout: float = 30.0
    """Longest wait for the watch to bring back kopf's own patch of a pool before kopf handles the pool anyway
    (kopf's ``persistence.consistency_timeout``, 5 s by default). Handled on an older copy, a just-created pool
    looks new again and its create handler runs twice: at 1,000 pools applied at once, the watch lagged more than
    5 s and 887 of 1,000 pools were reconciled twice."""
    forbidden_retry: float = 60.0
    """Seconds between attempts to create a pool's children while RBAC refuses one (fixing the chart's values is a
    human's job, so this is slow on purpose)."""
    log_level: str = "INFO"
    """Level of the operator's log (``TIERPOOL_LOG_LEVEL``); DEBUG also turns on kopf's verbose log and keeps its
    routine success lines."""
    log_format: str = "json"
    """``json`` (one object a line, as the chart sets) or ``text`` (``TIERPOOL_LOG_FORMAT``)."""
    allowed_secret_names: frozenset[str] = frozenset()
    """The only Secrets a pool's ``spec.redis`` may name for the operator to read (``TIERPOOL_ALLOWED_SECRET_NAMES``,
    comma-separated; the chart's ``security.allowedSecretNames``). Empty: any Secret of the pool's namespace."""

    @property
    def verbose(self) -> bool:
        """Whether kopf logs verbosely and its routine success lines are kept (``log_level`` DEBUG)."""
        return self.log_level.upper() == "DEBUG"

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OperatorConfig:
        values = {
            setting.field: setting.parse(environ[setting.name]) for setting in ENV_SETTINGS if setting.name in environ
        }
        values.setdefault("peering_priority", oldest_first_priority(time.time()))
        return cls(**values)  # type: ignore[arg-type]


def _listed(value: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in value.split(",") if name.strip())


def _truthy(value: str) -> bool:
    return value.lower() in {"1", "true", "yes"}


@dataclass(frozen=True)
class EnvSetting:
    """One environment variable the operator reads: the OperatorConfig field it sets and how its text is read."""

    name: str
    field: str
    parse: Callable[[str], object]
    format: str
    """How the value is written, for the generated reference (docs/reference/operator-env.md)."""
    unset: str = ""
    """What an unset variable means, where the field's default does not say it."""


ENV_SETTINGS: tuple[EnvSetting, ...] = (
    EnvSetting("TIERPOOL_WATCH_NAMESPACES", "namespaces", _listed, "comma-separated names", "every namespace"),
    EnvSetting("TIERPOOL_METRICS_PORT", "metrics_port", int, "port"),
    EnvSetting("TIERPOOL_HEALTH_PORT", "health_port", int, "port"),
    EnvSetting(
        "TIERPOOL_PEERING", "standalone", lambda value: not _truthy(value), "`1`, `true` or `yes`: peering on", "off"
    ),
    EnvSetting("TIERPOOL_PEERING_NAME", "peering_name", str, "name"),
    EnvSetting(
        "TIERPOOL_PEERING_PRIORITY",
        "peering_priority",
        lambda value: peering_priority(value, time.time()),
        "integer",
        "from the start time, oldest first",
    ),
    EnvSetting("TIERPOOL_PEERING_LIFETIME_SECONDS", "peering_lifetime", int, "seconds (integer)"),
    EnvSetting("TIERPOOL_DRAIN_TIMEOUT_SECONDS", "drain_timeout", float, "seconds"),
    EnvSetting("TIERPOOL_API_THREADS", "api_threads", int, "integer"),
    EnvSetting("TIERPOOL_MAX_DEFER_SECONDS", "max_defer", float, "seconds"),
    EnvSetting("TIERPOOL_PROFILE", "profile_path", str, "file path"),
    EnvSetting("POD_NAME", "pod_name", str, "name (the chart sets it from the downward API)"),
    EnvSetting("TIERPOOL_STATUS_REFRESH_SECONDS", "status_refresh", float, "seconds"),
    EnvSetting("TIERPOOL_CHILDREN_CHECK_SECONDS", "children_check", float, "seconds"),
    EnvSetting("TIERPOOL_FORBIDDEN_RETRY_SECONDS", "forbidden_retry", float, "seconds"),
    EnvSetting("TIERPOOL_CONSISTENCY_TIMEOUT_SECONDS", "consistency_timeout", float, "seconds"),
    EnvSetting("TIERPOOL_LOG_LEVEL", "log_level", str, "`DEBUG`, `INFO`, `WARNING` or `ERROR`"),
    EnvSetting("TIERPOOL_LOG_FORMAT", "log_format", str, "`json` or `text`"),
    EnvSetting(
        "TIERPOOL_ALLOWED_SECRET_NAMES",
        "allowed_secret_names",
        lambda value: frozenset(_listed(value)),
        "comma-separated names",
        "any Secret of the pool's namespace",
    ),
)
"""The environment variables ``OperatorConfig.from_env`` reads, one per field it sets; an unset one keeps the
field's default. One table for the code and the generated reference page."""


PRIORITY_CEILING = 2**53
"""Above every start-time priority (microseconds since 1970 stay below it until the year 2255). A priority set
by hand above it (a developer's operator, say) pauses every in-cluster replica, as kopf intends."""


def oldest_first_priority(started_at: float) -> int:
    """Pure: a priority that falls as the start time rises, so the longest-running replica outranks the others.

    kopf pauses every replica that sees a live peer of higher *or equal* priority, so two replicas with kopf's
    default (0) would both pause; random priorities would let a restarted pod preempt a healthy active one.
    """
    return PRIORITY_CEILING - int(started_at * 1_000_000)


def peering_priority(explicit: str, started_at: float) -> int:
    """Pure: the priority set by hand when there is one, else the start-time one."""
    return int(explicit) if explicit.strip() else oldest_first_priority(started_at)


def operator_identity(pod_name: str, hostname: str, pid: int, nonce: str) -> str:
    """Pure: the id this replica shows its kopf peers.

    kopf's own default asks ``getpass.getuser()``, which raises for a UID with no passwd entry (our image runs as
    10001 with no ``USER`` set), so the operator names itself: the pod when it knows it, else host and process.
    """
    return f"{pod_name or hostname}/{pid}/{nonce}"


def own_identity(cfg: OperatorConfig) -> str:
    return operator_identity(cfg.pod_name, socket.gethostname(), os.getpid(), os.urandom(3).hex())
