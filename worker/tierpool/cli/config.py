"""Where a command finds its pool and its Redis: flags, then the environment, then the spec. Without rich, so that
``tierpool worker`` (tierpool.cli.worker) does not import the terminal output the other commands use."""

from __future__ import annotations

import argparse
import os

from tierpool.model.resource import SPEC_ENV_VAR, AgentPool, load_pool_env, load_pool_file
from tierpool.model.spec import RedisSpec
from tierpool.store.connection import RedisSettings


def pool_without_redis(args: argparse.Namespace) -> AgentPool | None:
    """The pool from --file, else from the spec in the environment (how the operator starts workers); None when
    only --pool names it (its spec is then read from Redis)."""
    if getattr(args, "file", None):
        return load_pool_file(args.file)
    if os.environ.get(SPEC_ENV_VAR):
        return load_pool_env(os.environ)
    return None


def redis_settings(args: argparse.Namespace, pool: AgentPool | None = None) -> RedisSettings:
    """``--redis-url`` wins, then ``TIERPOOL_REDIS_URL``, then the pool's ``spec.redis.url``, then localhost; the
    mode likewise (``--redis-mode``, ``TIERPOOL_REDIS_MODE``, ``spec.redis.mode``, standalone), and the sentinels
    (``--sentinels``/``--master-name``, their variables, ``spec.redis.sentinel``)."""
    redis = pool.spec.redis if pool is not None else RedisSpec()
    return RedisSettings.from_env(
        os.environ,
        url=getattr(args, "redis_url", None),
        fallback_url=redis.url,
        mode=getattr(args, "redis_mode", None),
        fallback_mode=redis.mode,
        sentinels=getattr(args, "sentinels", None),
        master_name=getattr(args, "master_name", None),
        fallback_sentinel=redis.sentinel,
    )
