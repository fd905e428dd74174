"""Where a worker or a command finds its pool and its Redis: flags, then the environment, then the spec; and the
settings a worker reads once at start-up. Without rich, so that a worker process does not import the terminal
output the other commands use."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from tierpool.model.resource import SPEC_ENV_VAR, AgentPool, load_pool_env, load_pool_file
from tierpool.model.spec import RedisSpec
from tierpool.store.connection import RedisSettings

log = logging.getLogger("tierpool.settings")
EVICTION_RECHECK_ENV = "TIERPOOL_EVICTION_RECHECK_SECONDS"
EVICTION_RECHECK_SECONDS = 30.0
"""How often a worker reads the server's eviction policy again, unless ``TIERPOOL_EVICTION_RECHECK_SECONDS`` says."""


@dataclass(frozen=True)
class WorkerSettings:
    """Everything a worker needs, read once at start-up."""

    pool: AgentPool
    """The pool document (from --file or TIERPOOL_POOL_SPEC)."""
    redis: RedisSettings
    """How to reach Redis."""
    handler: str
    """``module:function`` of the task handler."""
    concurrency: int
    """Tasks run at once."""
    consumer: str
    """This worker's consumer name in every group; unique per process."""
    grace_seconds: float
    """How long to drain in-flight tasks after SIGTERM."""
    metrics_port: int | None = None
    """Port for /metrics, /healthz, /readyz; None turns the endpoint off."""
    block_ms: int = 500
    """Longest blocking read when every tier is empty (bounds shutdown latency)."""
    maintenance: bool = True
    """Take part in the escalator lease (escalation, retention, consumer cleanup)."""
    stall_seconds: float = 60.0
    """Liveness fails when a background loop has made no progress for this long (at least three of its own
    intervals)."""
    eviction_recheck_seconds: float = EVICTION_RECHECK_SECONDS
    """How often the server's eviction policy is read again, while waiting to serve and while serving."""


def eviction_recheck_seconds(env: Mapping[str, str]) -> float:
    """``TIERPOOL_EVICTION_RECHECK_SECONDS``, else the default (also, with a warning, for a value that is not a
    positive number of seconds)."""
    raw = env.get(EVICTION_RECHECK_ENV, "").strip()
    if not raw:
        return EVICTION_RECHECK_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        log.warning(
            "%s=%r is not a positive number of seconds; using %g", EVICTION_RECHECK_ENV, raw, EVICTION_RECHECK_SECONDS
        )
        return EVICTION_RECHECK_SECONDS
    return seconds


def pool_without_redis(env: Mapping[str, str], file: str | None = None) -> AgentPool | None:
    """The pool from ``file``, else from the spec in the environment (how the operator starts workers); None when
    only ``--pool`` names it (its spec is then read from Redis)."""
    if file:
        return load_pool_file(file)
    if env.get(SPEC_ENV_VAR):
        return load_pool_env(env)
    return None


def redis_settings(
    env: Mapping[str, str],
    pool: AgentPool | None = None,
    *,
    url: str | None = None,
    mode: str | None = None,
    sentinels: str | None = None,
    master_name: str | None = None,
) -> RedisSettings:
    """``url`` (``--redis-url``) wins, then ``TIERPOOL_REDIS_URL``, then the pool's ``spec.redis.url``, then
    localhost; the mode likewise (``--redis-mode``, ``TIERPOOL_REDIS_MODE``, ``spec.redis.mode``, standalone), and
    the sentinels (``--sentinels``/``--master-name``, their variables, ``spec.redis.sentinel``)."""
    redis = pool.spec.redis if pool is not None else RedisSpec()
    return RedisSettings.from_env(
        env,
        url=url,
        fallback_url=redis.url,
        mode=mode,
        fallback_mode=redis.mode,
        sentinels=sentinels,
        master_name=master_name,
        fallback_sentinel=redis.sentinel,
    )
