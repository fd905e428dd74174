"""Redis connection settings and clients (sync and async), including TLS and AUTH."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeAlias

import hiredis
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.connection import AbstractConnection as AsyncConnection
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.connection import parse_url
from redis.exceptions import ClusterError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.sentinel import Sentinel as SyncSentinel

from tierpool.model.redis_url import RedisUrlError, parse_redis_url, split_url
from tierpool.model.spec import SENTINEL_ADDRESS, RedisMode, SentinelSpec
from tierpool.protocol import utf8

log = logging.getLogger("tierpool.connection")

URL_ENV = "TIERPOOL_REDIS_URL"
PASSWORD_ENV = "TIERPOOL_REDIS_PASSWORD"  # noqa: S105 - a variable name, not a secret
TLS_ENV = "TIERPOOL_REDIS_TLS"
TLS_CA_ENV = "TIERPOOL_REDIS_TLS_CA_FILE"
TLS_CERT_ENV = "TIERPOOL_REDIS_TLS_CERT_FILE"
TLS_KEY_ENV = "TIERPOOL_REDIS_TLS_KEY_FILE"
TLS_INSECURE_ENV = "TIERPOOL_REDIS_TLS_INSECURE"
MODE_ENV = "TIERPOOL_REDIS_MODE"
SENTINELS_ENV = "TIERPOOL_REDIS_SENTINELS"
MASTER_NAME_ENV = "TIERPOOL_REDIS_MASTER_NAME"
SENTINEL_PASSWORD_ENV = "TIERPOOL_REDIS_SENTINEL_PASSWORD"  # noqa: S105 - a variable name, not a secret
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError, RedisClusterException, ClusterError, TryAgainError)
"""Errors that mean "Redis is not reachable right now": retry with backoff, never crash. In cluster mode also: no
seed node answers, the cluster is down, redirections ran out, or a slot is mid-migration (TRYAGAIN: a multi-key
script whose keys are split between the two shards until the migration ends)."""


class TlsSettingsError(ValueError):
    """TLS settings that the connection would not use (TLS is off), or a client key without its certificate."""


DECODING: dict[str, Any] = {"decode_responses": True, "encoding_errors": utf8.ESCAPE}
"""How every tierpool client decodes replies. Entries come from any producer, and a strict decoder raised inside
the reply parser on one byte that is not UTF-8, before any code could look at it: the worker's reads and claims
failed for good, and so did status and the operator's observation. With ``surrogateescape`` decoding never
raises, the envelope decoder sees exactly which bytes were bad and dead-letters the entry, and text written back
(a key made from a bad task_id, a script argument) is encoded to the original bytes again (see
tierpool.protocol.utf8; the hiredis packing below falls back to redis-py's encoder for it)."""

AsyncRedis: TypeAlias = aioredis.Redis | AsyncRedisCluster
"""An asyncio client of either mode: a plain one, or a cluster client that routes each command by its keys' slot
and follows MOVED and ASK. Both offer the same command methods, pipelines and MULTI (one slot, in cluster mode)."""
SyncRedis: TypeAlias = redis.Redis | SyncRedisCluster


@dataclass(frozen=True)
class RedisSettings:
    """How to reach Redis. Read once at start-up from flags and the environment."""

    url: str = field(default="redis://localhost:6379/0", repr=False)
    """``redis://`` or ``rediss://`` URL; a password in the URL is honoured (the repr shows none of it)."""
    password: str | None = field(default=None, repr=False)
    """AUTH password, when it is not in the URL (the operator passes it from a Secret); never in the repr."""
    username: str | None = None
    """ACL user, when the URL names none (the operator's own user, ``spec.redis.operatorAuth``)."""
    tls: bool = False
    """Force TLS even for a ``redis://`` URL."""
    tls_ca_file: str | None = None
    """PEM CA bundle to verify the server with."""
    tls_cert_file: str | None = None
    """PEM client certificate (chain) for mutual TLS; it may hold the private key too."""
    tls_key_file: str | None = None
    """PEM private key of ``tls_cert_file``, when that file does not hold it."""
    tls_insecure: bool = False
    """Skip server certificate verification."""
    mode: RedisMode = RedisMode.STANDALONE
    """``cluster``: the URL is any seed node of a Redis Cluster, and the clients are cluster clients.
    ``sentinel``: the clients ask ``sentinels`` for the master named ``master_name``, again after a failover."""
    sentinels: tuple[tuple[str, int], ...] = ()
    master_name: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    """AUTH password of the sentinels themselves (often not the data nodes' one); never in the repr."""

    def __post_init__(self) -> None:
        """Refuse TLS settings that a plaintext connection would silently drop: TlsSettingsError names them."""
        unused = [env for env, is_set in self._tls_only_settings().items() if is_set]
        if unused and not self.uses_tls:
            raise TlsSettingsError(
                f"{', '.join(unused)} set, but TLS is off (a redis:// URL and {TLS_ENV} unset): use a rediss:// "
                f"URL or set {TLS_ENV}=true; tierpool does not connect in plaintext with TLS settings"
            )
        if self.tls_key_file and not self.tls_cert_file:
            raise TlsSettingsError(f"{TLS_KEY_ENV} set without {TLS_CERT_ENV}: the key needs its client certificate")

    def _tls_only_settings(self) -> dict[str, bool]:
        return {
            TLS_CA_ENV: bool(self.tls_ca_file),
            TLS_CERT_ENV: bool(self.tls_cert_file),
            TLS_KEY_ENV: bool(self.tls_key_file),
            TLS_INSECURE_ENV: self.tls_insecure,
        }

    @property
    def uses_tls(self) -> bool:
        """A ``rediss://`` URL or the TLS flag."""
        return self.tls or self.url.startswith("rediss://")

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        url: str | None = None,
        fallback_url: str | None = None,
        mode: str | None = None,
        fallback_mode: RedisMode = RedisMode.STANDALONE,
        sentinels: str | None = None,
        master_name: str | None = None,
        fallback_sentinel: SentinelSpec | None = None,
    ) -> RedisSettings:
        """Settings from ``TIERPOOL_REDIS_*`` variables. The URL: an explicit ``url`` (a CLI flag) wins, then
        ``TIERPOOL_REDIS_URL``, then ``fallback_url`` (the pool file's ``spec.redis.url``), then localhost. The
        mode likewise: ``mode`` (a flag), ``TIERPOOL_REDIS_MODE``, then ``fallback_mode`` (the pool's); and the
        sentinel addresses and master name: flags, ``TIERPOOL_REDIS_SENTINELS`` (comma-separated) and
        ``TIERPOOL_REDIS_MASTER_NAME``, then ``fallback_sentinel`` (the pool's ``spec.redis.sentinel``)."""
        listed = sentinels or environ.get(SENTINELS_ENV)
        return cls(
            mode=RedisMode(mode or environ.get(MODE_ENV) or fallback_mode),
            url=url or environ.get(URL_ENV) or fallback_url or cls.url,
            password=environ.get(PASSWORD_ENV) or None,
            tls=environ.get(TLS_ENV, "").lower() in {"1", "true", "yes"},
            tls_ca_file=environ.get(TLS_CA_ENV) or None,
            tls_cert_file=environ.get(TLS_CERT_ENV) or None,
            tls_key_file=environ.get(TLS_KEY_ENV) or None,
            tls_insecure=environ.get(TLS_INSECURE_ENV, "").lower() in {"1", "true", "yes"},
            sentinels=parse_sentinels(listed.split(",") if listed else getattr(fallback_sentinel, "sentinels", [])),
            master_name=master_name or environ.get(MASTER_NAME_ENV) or getattr(fallback_sentinel, "master_name", None),
            sentinel_password=environ.get(SENTINEL_PASSWORD_ENV) or None,
        )

    def client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = DECODING | {"health_check_interval": 30}
        if self.password:
            kwargs["password"] = self.password
        if self.username:
            kwargs["username"] = self.username
        url = parse_redis_url(self.url)
        if url.username:
            kwargs["username"] = url.username
        if url.password:  # the URL's password wins, as it did when redis-py read it from the URL
            kwargs["password"] = url.password
        if self.uses_tls:
            kwargs["ssl_cert_reqs"] = ssl.CERT_NONE if self.tls_insecure else ssl.CERT_REQUIRED
            kwargs["ssl_check_hostname"] = not self.tls_insecure
            if self.tls_ca_file:
                kwargs["ssl_ca_certs"] = self.tls_ca_file
            if self.tls_cert_file:
                kwargs["ssl_certfile"] = self.tls_cert_file
            if self.tls_key_file:
                kwargs["ssl_keyfile"] = self.tls_key_file
        return kwargs

    def sentinel_kwargs(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Keyword arguments for the master's connections and for the sentinels' in sentinel mode. The master's
        user, password and database come from the URL (``passwordSecretRef`` wins over a password in it); TLS,
        when on, applies to both (same CA, same client certificate), the sentinels' password is their own.
        ValueError when the settings do not say which master to ask for. Pure."""
        if not self.sentinels or not self.master_name:
            raise ValueError("redis mode sentinel needs sentinel addresses (host:port) and a master name")
        parsed = parse_url(self.url_for_client())  # type: ignore[no-untyped-call]
        master = {k: v for k, v in self.client_kwargs().items() if k != "health_check_interval"}
        master |= {k: parsed[k] for k in ("db", "username", "password") if parsed.get(k) is not None}
        if self.password:
            master["password"] = self.password
        tls = {k: v for k, v in master.items() if k.startswith("ssl_")}
        if tls or self.url_for_client().startswith("rediss://"):
            master["ssl"] = True
        sentinel: dict[str, Any] = {"decode_responses": True, "socket_timeout": 2, "socket_connect_timeout": 2}
        sentinel |= tls | ({"ssl": True} if "ssl" in master else {})
        if self.sentinel_password:
            sentinel["password"] = self.sentinel_password
        return master, sentinel

    def url_for_client(self) -> str:
        """The URL handed to redis-py: without its credentials (``client_kwargs`` carries them, so that a
        password holding ``/`` or ``?`` is never read as a host, a port or a query), ``rediss://`` with ``tls``."""
        bare = parse_redis_url(self.url).without_credentials()
        if self.tls and bare.startswith("redis://"):
            return "rediss://" + bare.removeprefix("redis://")
        return bare

    def redacted_url(self) -> str:
        """The URL with any password replaced, for logs."""
        return redact_url(self.url)

    def __repr__(self) -> str:
        """The settings with the URL redacted and no password: a repr lands in logs and tracebacks."""
        shown = (f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"RedisSettings(url={self.redacted_url()!r}, {', '.join(shown)})"


def redact_url(url: str) -> str:
    """``url`` with every password in it replaced by ``***``, for logs (tierpool.model.redis_url)."""
    try:
        return split_url(url).redacted()
    except RedisUrlError:
        return "<not a Redis URL>"


class _HiredisPacking(AsyncConnection):
    """Packs commands with hiredis, as redis-py's sync client already does. Its asyncio connections still pack
    in Python (redis/redis-py#4176), 3-6% of a worker's CPU per task (A/B runs; a profile). Arguments hiredis
    cannot pack (None, bool) go the Python way, which raises redis-py's own DataError; so does text hiredis
    cannot encode (lone surrogates: bytes that were not UTF-8, see DECODING), which redis-py's encoder turns back
    into the original bytes."""

    def pack_command(self, *args: Any) -> list[bytes]:
        name = args[0].encode() if isinstance(args[0], str) else args[0]
        command = (*name.split(), *args[1:]) if isinstance(name, bytes) else args  # 'CONFIG GET' is two words
        try:
            return [hiredis.pack_command(command)]
        except (TypeError, UnicodeEncodeError):
            return super().pack_command(*args)


class _TcpHiredisPacking(_HiredisPacking, aioredis.Connection):
    pass


class _TlsHiredisPacking(_HiredisPacking, aioredis.SSLConnection):
    pass


class _UnixHiredisPacking(_HiredisPacking, aioredis.UnixDomainSocketConnection):
    pass


_HIREDIS_PACKING: dict[type[AsyncConnection], type[AsyncConnection]] = {
    aioredis.Connection: _TcpHiredisPacking,
    aioredis.SSLConnection: _TlsHiredisPacking,
    aioredis.UnixDomainSocketConnection: _UnixHiredisPacking,
}


async def slot_node(client: AsyncRedis, key: str) -> dict[str, Any]:
    """Keyword arguments that send a keyless command (TIME) to the node serving ``key``'s slot in cluster mode,
    so a clock read compared with stream ids comes from the server that wrote them; none for one server."""
    if not isinstance(client, AsyncRedisCluster):
        return {}
    await client.initialize()  # a no-op once the slot map is known
    return {"target_nodes": client.get_node_from_key(key)}


def parse_sentinels(addresses: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """``host:port`` (``[v6]:port``) strings as (host, port) pairs; ValueError names a malformed one. Pure."""
    pairs: list[tuple[str, int]] = []
    for raw in (address.strip() for address in addresses):
        if not raw:
            continue
        if not re.match(SENTINEL_ADDRESS, raw):
            raise ValueError(f"sentinel address {raw!r}: expected host:port")
        host, _, port = raw.rpartition(":")
        pairs.append((host.strip("[]"), int(port)))
    return tuple(pairs)


def _retry() -> Retry:
    return Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=3)


def async_client(settings: RedisSettings, max_connections: int = 64, **overrides: Any) -> AsyncRedis:
    """An asyncio client with a bounded pool (per node, in cluster mode), a short retry on dropped connections
    and, for a standalone server, hiredis packing (redis-py's cluster client takes no connection class)."""
    kwargs = settings.client_kwargs() | overrides
    if settings.mode is RedisMode.SENTINEL:
        master, sentinel = settings.sentinel_kwargs()
        manager = AsyncSentinel(list(settings.sentinels), sentinel_kwargs=sentinel)  # type: ignore[no-untyped-call]
        found: aioredis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
            str(settings.master_name), max_connections=max_connections, retry=_retry(), **(master | overrides)
        )
        return found  # a plain client whose pool asks the sentinels for the master on every new connection
    if settings.mode is RedisMode.CLUSTER:
        return AsyncRedisCluster.from_url(
            settings.url_for_client(), max_connections=max_connections, retry=_retry(), **kwargs
        )
    client = aioredis.Redis.from_url(
        settings.url_for_client(), max_connections=max_connections, retry=_retry(), **kwargs
    )
    pool = client.connection_pool
    pool.connection_class = _HIREDIS_PACKING.get(pool.connection_class, pool.connection_class)
    return client


def sync_client(settings: RedisSettings) -> SyncRedis:
    if settings.mode is RedisMode.SENTINEL:
        master, sentinel = settings.sentinel_kwargs()
        manager = SyncSentinel(list(settings.sentinels), sentinel_kwargs=sentinel)  # type: ignore[no-untyped-call]
        found: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
            str(settings.master_name), retry=_retry(), **master
        )
        return found
    if settings.mode is RedisMode.CLUSTER:
        return SyncRedisCluster.from_url(settings.url_for_client(), retry=_retry(), **settings.client_kwargs())
    return redis.Redis.from_url(settings.url_for_client(), retry=_retry(), **settings.client_kwargs())


async def wait_until_reachable(
    ping: Callable[[], Awaitable[Any]],
    describe: str,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    stop: Callable[[], bool] = lambda: False,
    cap: float = 10.0,
    first: float = 0.2,
) -> bool:
    """Ping until it answers, with capped exponential backoff from a short first delay, and one log line per
    failed attempt. Pass a ``sleep`` that ends early on shutdown to stop promptly.

    Returns False only when ``stop()`` turns true first (a shutdown during start-up).
    """
    delay, attempt = first, 1
    while not stop():
        try:
            await ping()
            if attempt > 1:
                log.info("redis reachable again", extra={"redis": describe, "attempt": attempt})
            return True
        except UNREACHABLE as error:
            log.warning(
                "redis unreachable, retrying in %.1fs: %s",
                delay,
                error,
                extra={"redis": describe, "attempt": attempt},
            )
        await sleep(delay)
        delay, attempt = min(delay * 2, cap), attempt + 1
    return False
