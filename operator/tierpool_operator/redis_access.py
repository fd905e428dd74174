"""How the operator reaches a pool's Redis: settings from the spec and its Secrets, one client per pool."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tierpool.model.spec import RedisMode, RedisSpec
from tierpool.store.connection import AsyncRedis, RedisSettings, async_client, parse_sentinels
from tierpool_operator.kube import Kube


class RedisNotConfigured(ValueError):
    """The spec gives no way to reach Redis."""


@dataclass(frozen=True)
class ResolvedRedis:
    settings: RedisSettings

    def client(self) -> AsyncRedis:
        """A client with short timeouts and few connections (per node, in cluster mode): the operator only reads."""
        return async_client(
            self.settings, max_connections=4, socket_timeout=5, socket_connect_timeout=3, health_check_interval=0
        )


def resolve(spec: RedisSpec, namespace: str, kube: Kube) -> ResolvedRedis:
    """Read the URL, password and CA from the spec and its Secrets (in the pool's namespace)."""
    if spec.url_secret_ref:
        url = kube.secret_value(namespace, spec.url_secret_ref.name, spec.url_secret_ref.key)
    elif spec.url:
        url = spec.url
    elif spec.mode is RedisMode.SENTINEL:
        url = RedisSettings.url  # the sentinels name the master; no user, password in its Secret, database 0
    else:
        raise RedisNotConfigured("spec.redis: set url or urlSecretRef")
    password = None
    if spec.password_secret_ref:
        password = kube.secret_value(namespace, spec.password_secret_ref.name, spec.password_secret_ref.key)
    ca_file = None
    if spec.tls.ca_secret_ref:
        ca_file = _ca_file(kube.secret_value(namespace, spec.tls.ca_secret_ref.name, spec.tls.ca_secret_ref.key))
    sentinel_password = None
    if spec.sentinel and spec.sentinel.password_secret_ref:
        ref = spec.sentinel.password_secret_ref
        sentinel_password = kube.secret_value(namespace, ref.name, ref.key)
    settings = RedisSettings(
        url=url,
        password=password,
        tls=spec.tls.enabled,
        tls_ca_file=ca_file,
        tls_insecure=spec.tls.insecure_skip_verify,
        mode=spec.mode,
        sentinels=parse_sentinels(spec.sentinel.sentinels if spec.sentinel else []),
        master_name=spec.sentinel.master_name if spec.sentinel else None,
        sentinel_password=sentinel_password,
    )
    return ResolvedRedis(settings)


def _ca_file(pem: str) -> str:
    """The CA bundle on disk, one file per distinct content: every reconnect resolves again, and a new temporary
    file each time would pile up in the operator's /tmp during a long outage."""
    path = Path(tempfile.gettempdir()) / f"tierpool-ca-{hashlib.sha256(pem.encode()).hexdigest()[:24]}.pem"
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(pem)
        partial.replace(path)  # atomic: a concurrent reader never sees half a bundle
    return str(path)
