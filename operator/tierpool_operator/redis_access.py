"""How the operator reaches a pool's Redis: settings from the spec and its Secrets, one client per pool."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tierpool.model.redis_url import parse_redis_url
from tierpool.model.spec import RedisMode, RedisSpec, SecretKeyRef, tls_fields_without_tls
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


class SecretNotAllowed(RedisNotConfigured):
    """A pool names a Secret outside the chart value ``security.allowedSecretNames``."""


@dataclass(frozen=True)
class SecretReader:
    """Reads the Secrets a pool's ``spec.redis`` names, in the pool's namespace, and only those the chart allows:
    the operator sends what it reads to the pool's Redis (AUTH, a client certificate), so an unchecked read would
    let a pool's author carry any Secret of the namespace to a server of their choosing."""

    kube: Kube
    namespace: str
    allowed: frozenset[str] = frozenset()
    """Secret names a pool may name; empty: any Secret of the pool's namespace."""

    def value(self, ref: SecretKeyRef, field: str) -> str:
        if self.allowed and ref.name not in self.allowed:
            raise SecretNotAllowed(
                f"spec.redis.{field}: Secret {ref.name!r} is not in the chart value security.allowedSecretNames "
                f"({', '.join(sorted(self.allowed))}); the operator reads no other Secret"
            )
        return self.kube.secret_value(self.namespace, ref.name, ref.key)


def resolve(spec: RedisSpec, secrets: SecretReader) -> ResolvedRedis:
    """Read the URL, password, CA and client certificate from the spec and its Secrets (in the pool's namespace).
    RedisNotConfigured when there is no URL, or when TLS settings meet a URL without TLS (the model cannot see a
    URL in urlSecretRef): never a plaintext connection that drops them. With ``operatorAuth`` the operator
    connects as its own ACL user: the URL's credentials and ``passwordSecretRef`` (the workers') are not read."""
    if spec.url_secret_ref:
        url = secrets.value(spec.url_secret_ref, "urlSecretRef")
    elif spec.url:
        url = spec.url
    elif spec.mode is RedisMode.SENTINEL:
        url = RedisSettings.url  # the sentinels name the master; no user, password in its Secret, database 0
    else:
        raise RedisNotConfigured("spec.redis: set url or urlSecretRef")
    _refuse_tls_without_tls(spec, url)
    username, password = _credentials(spec, secrets)
    if spec.operator_auth:
        url = parse_redis_url(url).without_credentials()

    def secret_file(ref: SecretKeyRef | None, field: str, kind: str) -> str | None:
        return _secret_file(secrets.value(ref, field), kind) if ref else None

    sentinel_password = None
    if spec.sentinel and spec.sentinel.password_secret_ref:
        sentinel_password = secrets.value(spec.sentinel.password_secret_ref, "sentinel.passwordSecretRef")
    settings = RedisSettings(
        url=url,
        username=username,
        password=password,
        tls=spec.tls.enabled,
        tls_ca_file=secret_file(spec.tls.ca_secret_ref, "tls.caSecretRef", "ca"),
        tls_cert_file=secret_file(spec.tls.cert_secret_ref, "tls.certSecretRef", "client-cert"),
        tls_key_file=secret_file(spec.tls.key_secret_ref, "tls.keySecretRef", "client-key"),
        tls_insecure=spec.tls.insecure_skip_verify,
        mode=spec.mode,
        sentinels=parse_sentinels(spec.sentinel.sentinels if spec.sentinel else []),
        master_name=spec.sentinel.master_name if spec.sentinel else None,
        sentinel_password=sentinel_password,
    )
    return ResolvedRedis(settings)


def _credentials(spec: RedisSpec, secrets: SecretReader) -> tuple[str | None, str | None]:
    """(username, password) beside the URL's: the operator's own user, else the workers' password Secret."""
    if spec.operator_auth:
        auth = spec.operator_auth
        return auth.username, secrets.value(auth.password_secret_ref, "operatorAuth.passwordSecretRef")
    if spec.password_secret_ref:
        return None, secrets.value(spec.password_secret_ref, "passwordSecretRef")
    return None, None


def _refuse_tls_without_tls(spec: RedisSpec, url: str) -> None:
    unused = tls_fields_without_tls(spec.tls, url)
    if unused:
        where = "the URL in urlSecretRef" if spec.url_secret_ref else "the URL"
        verb = "needs" if len(unused) == 1 else "need"
        raise RedisNotConfigured(
            f"spec.redis.tls.{', spec.redis.tls.'.join(unused)}: {verb} TLS, which is off ({where} is not rediss:// "
            "and spec.redis.tls.enabled is false): set enabled or use a rediss:// URL; tierpool does not connect "
            "in plaintext with TLS settings"
        )


def _secret_file(pem: str, kind: str) -> str:
    """A CA bundle, client certificate or key on disk, readable by the operator only, one file per distinct content:
    every reconnect resolves again, and a new temporary file each time would pile up in the operator's /tmp during a
    long outage."""
    digest = hashlib.sha256(pem.encode()).hexdigest()[:24]
    path = Path(tempfile.gettempdir()) / f"tierpool-{kind}-{digest}.pem"
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.partial")
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
            file.write(pem)
        partial.replace(path)  # atomic: a concurrent reader never sees half a bundle
    return str(path)
