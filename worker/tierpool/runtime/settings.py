"""Where a worker or a command finds its pool and its Redis: flags, then the environment, then the spec. Without
rich, so that a worker process does not import the terminal output the other commands use."""

from __future__ import annotations

from collections.abc import Mapping

from tierpool.model.resource import SPEC_ENV_VAR, AgentPool, load_pool_env, load_pool_file
from tierpool.model.spec import RedisSpec
from tierpool.store.connection import RedisSettings


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
