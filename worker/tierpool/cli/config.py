"""The flags a command finds its pool and its Redis by (tierpool.runtime.settings resolves them)."""

from __future__ import annotations

import argparse
import os

from tierpool.model.resource import AgentPool
from tierpool.runtime import settings
from tierpool.store.connection import RedisSettings, TlsSettingsError


def pool_without_redis(args: argparse.Namespace) -> AgentPool | None:
    """The pool from ``--file``, else from the spec in the environment; None when only ``--pool`` names it."""
    return settings.pool_without_redis(os.environ, getattr(args, "file", None))


def redis_settings(args: argparse.Namespace, pool: AgentPool | None = None) -> RedisSettings:
    """The Redis of ``--redis-url``/``--redis-mode``/``--sentinels``/``--master-name`` (see
    tierpool.runtime.settings.redis_settings). TLS settings that TLS is off for end the command (exit code 1) with
    the message naming them, before anything connects."""
    try:
        return settings.redis_settings(
            os.environ,
            pool,
            url=getattr(args, "redis_url", None),
            mode=getattr(args, "redis_mode", None),
            sentinels=getattr(args, "sentinels", None),
            master_name=getattr(args, "master_name", None),
        )
    except TlsSettingsError as error:
        raise SystemExit(f"tierpool: {error}") from None
