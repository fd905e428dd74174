"""The ``redis`` section of the AgentPool spec: where the streams live and how workers and the operator reach them."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator

from tierpool.model.base import Model, SecretKeyRef
from tierpool.model.durations import Duration
from tierpool.model.redis_url import parse_redis_url

ACL_USER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._@:+=-]{0,127}$"
"""A Redis ACL user name as ``tierpool acl`` writes one (ACL SETUSER takes more; these need no quoting)."""


class RedisTLS(Model):
    """TLS settings for the Redis connection (a ``rediss://`` URL also turns TLS on). Every field but ``enabled``
    needs TLS on: with ``enabled`` false and a ``redis://`` URL they are refused, never ignored for a plaintext
    connection (at admission for ``url``; for ``urlSecretRef`` by the operator and the workers once they read it)."""

    enabled: bool = False
    """Connect with TLS, also for a ``redis://`` URL."""
    ca_secret_ref: SecretKeyRef | None = None
    """Secret key holding a PEM CA bundle to verify the server with."""
    cert_secret_ref: SecretKeyRef | None = None
    """Secret key holding the PEM client certificate (chain) for mutual TLS, e.g. ``tls.crt`` of a
    ``kubernetes.io/tls`` Secret. Needs keySecretRef."""
    key_secret_ref: SecretKeyRef | None = None
    """Secret key holding the client certificate's unencrypted PEM private key, e.g. ``tls.key``. Needs
    certSecretRef."""
    insecure_skip_verify: bool = False
    """Skip server certificate verification. For development only."""


class RedisMode(StrEnum):
    """How the pool's Redis is deployed."""

    STANDALONE = "standalone"
    CLUSTER = "cluster"
    SENTINEL = "sentinel"


SENTINEL_ADDRESS = r"^(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]/@]+):[0-9]{1,5}$"


class SentinelSpec(Model):
    """Where Redis Sentinel tells the current master of a replicated Redis."""

    master_name: Annotated[str, Field(min_length=1, max_length=253)]
    """The monitored master's name (``sentinel monitor <name> ...``)."""
    sentinels: Annotated[list[Annotated[str, Field(pattern=SENTINEL_ADDRESS)]], Field(min_length=1, max_length=16)]
    """Sentinel addresses, ``host:port`` (``[v6]:port``); any one that answers names the master."""
    password_secret_ref: SecretKeyRef | None = None
    """Secret key holding the sentinels' own password (``requirepass`` in sentinel.conf), when they have one."""


class OperatorRedisAuth(Model):
    """The Redis ACL user the operator connects as, so that it holds only the read-mostly rights of
    ``tierpool acl operator`` and never the workers' credentials. The workers never see it."""

    username: Annotated[str, Field(pattern=ACL_USER_NAME)]
    """ACL user name (``ACL SETUSER <username> ...``)."""
    password_secret_ref: SecretKeyRef
    """Secret key holding that user's password."""


class RedisSpec(Model):
    """Where the pool's streams live."""

    mode: RedisMode = RedisMode.STANDALONE
    """``standalone`` (one server, or a proxy in front of several), ``cluster`` (Redis Cluster: the URL names
    any seed node; the pool's keys share one hash tag, so they live in one slot on one shard) or ``sentinel``
    (the master that ``sentinel`` names; the URL, optional, then gives only the user, password, database and
    ``rediss://``)."""
    sentinel: SentinelSpec | None = None
    """Required with mode ``sentinel``, and only there."""
    wait_replicas: Annotated[int, Field(ge=0, le=16)] = 0
    """Opt-in (standalone and sentinel): after writing completions the worker, and after submits the producer,
    sends ``WAIT <waitReplicas> <waitTimeout>`` on the same connection, so an acknowledged write has reached that
    many replicas before it is reported; it narrows (does not close) what a failover can lose. 0: no WAIT."""
    wait_timeout: Duration = 0.5
    """The longest WAIT blocks; a write that reached fewer replicas by then is logged, not undone."""
    url: str | None = Field(default=None, pattern=r"^rediss?://")
    """Redis URL (``redis://`` or ``rediss://``). A password written here is not passed to the workers (neither
    their ConfigMap nor their env; condition CredentialsInSecrets says so): use passwordSecretRef or urlSecretRef."""
    url_secret_ref: SecretKeyRef | None = None
    """Secret key holding the Redis URL. Takes precedence over ``url``."""

    @field_validator("url")
    @classmethod
    def _readable_url(cls, url: str | None) -> str | None:
        if url is not None:
            parse_redis_url(url)  # its error names the part at fault, never the URL
        return url

    password_secret_ref: SecretKeyRef | None = None
    """Secret key holding the Redis password (AUTH), added to the URL's connection."""
    tls: RedisTLS = RedisTLS()
    """TLS settings."""
    allow_eviction: bool = False
    """Accept a server whose ``maxmemory-policy`` is ``allkeys-*``. Such a server deletes any key under memory
    pressure, tier streams and scheduled tasks included, so by default workers wait (logging why) instead of
    serving, and the operator reports condition RedisEvictionSafe=False. ``volatile-*`` policies only warn."""
    operator_auth: OperatorRedisAuth | None = None
    """Connect the operator as this ACL user instead of with the URL's and ``passwordSecretRef``'s credentials
    (the workers'). Unset: the operator reads the streams with the workers' rights."""


def redis_defaults_left_out(redis: RedisSpec) -> set[str]:
    """The ``redis`` fields left out of the published spec and the pods' document: those added after the first
    release that are at their defaults (so older readers still parse it and pods do not roll on upgrade), and
    ``operator_auth`` always (only the operator uses it; workers and producers never see it). Pure."""
    default = RedisSpec()
    added_later = ("mode", "wait_replicas", "wait_timeout", "allow_eviction")
    return {name for name in added_later if getattr(redis, name) == getattr(default, name)} | {"operator_auth"}


TLS_OFF = "needs TLS, which is off: set redis.tls.enabled or use a rediss:// URL"


def redis_tls_violations(redis: RedisSpec) -> list[tuple[str, str]]:
    """What ``redis.tls`` refuses. With ``urlSecretRef`` the model cannot tell whether TLS is on: the operator
    checks :func:`tls_fields_without_tls` once it has read the URL. Pure."""
    tls = redis.tls
    found: list[tuple[str, str]] = []
    if tls.insecure_skip_verify and tls.ca_secret_ref is not None:
        found.append(("redis.tls.insecureSkipVerify", "cannot be combined with caSecretRef"))
    if tls.cert_secret_ref is not None and tls.key_secret_ref is None:
        found.append(("redis.tls.certSecretRef", "needs keySecretRef (the client certificate's private key)"))
    if tls.key_secret_ref is not None and tls.cert_secret_ref is None:
        found.append(("redis.tls.keySecretRef", "needs certSecretRef (the client certificate of this key)"))
    if redis.url_secret_ref is None:
        found += [(f"redis.tls.{name}", TLS_OFF) for name in tls_fields_without_tls(tls, redis.url)]
    return found


def tls_fields_without_tls(tls: RedisTLS, url: str | None) -> list[str]:
    """The ``redis.tls`` fields set (camelCase) that a connection to ``url`` would not use because TLS is off:
    ``enabled`` false and ``url`` not ``rediss://`` (None: the default ``redis://`` one). Pure."""
    if tls.enabled or (url or "").startswith("rediss://"):
        return []
    present = {
        "caSecretRef": tls.ca_secret_ref is not None,
        "certSecretRef": tls.cert_secret_ref is not None,
        "keySecretRef": tls.key_secret_ref is not None,
        "insecureSkipVerify": tls.insecure_skip_verify,
    }
    return [name for name, is_set in present.items() if is_set]


def redis_mode_violations(redis: RedisSpec) -> list[tuple[str, str]]:
    """What each ``redis.mode`` needs and refuses. Pure."""
    sentinel = redis.mode is RedisMode.SENTINEL
    found: list[tuple[str, str]] = []
    if sentinel and redis.sentinel is None:
        found.append(("redis.sentinel", "required with mode sentinel (masterName and sentinels)"))
    if not sentinel and redis.sentinel is not None:
        found.append(("redis.sentinel", "only allowed with mode sentinel"))
    if redis.wait_replicas and redis.mode is RedisMode.CLUSTER:
        found.append(("redis.waitReplicas", "not supported with mode cluster (yet)"))
    if redis.wait_timeout <= 0:
        found.append(("redis.waitTimeout", "must be greater than 0"))
    return found
