"""Which Secrets the operator reads for a pool's Redis, and as whom it connects (no Redis, no API server)."""

from __future__ import annotations

from typing import Any

import pytest

from tierpool.model.spec import RedisSpec
from tierpool.store.connection import RedisSettings
from tierpool_operator.redis_access import SecretNotAllowed, SecretReader, resolve

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


class Secrets:
    """Every Secret of the namespace answers; the reads are recorded."""

    def __init__(self) -> None:
        self.read: list[str] = []

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        self.read.append(name)
        return "redis://r:6379/0" if key == "url" else PEM if key.endswith((".crt", ".key")) else "pw-" + name


def ref(name: str, key: str = "password") -> dict[str, str]:
    return {"name": name, "key": key}


MTLS = {"enabled": True, "caSecretRef": ref("ca", "ca.crt"), "certSecretRef": ref("crt", "tls.crt")}
SENTINEL = {"masterName": "m", "sentinels": ["s:26379"], "passwordSecretRef": ref("sentinel")}
OPERATOR = {"username": "tierpool-operator", "passwordSecretRef": ref("operator")}


@pytest.mark.parametrize(
    ("redis", "field", "secret"),
    [
        ({"urlSecretRef": ref("url", "url")}, "spec.redis.urlSecretRef", "url"),
        ({"url": "redis://r:6379/0", "passwordSecretRef": ref("stolen")}, "spec.redis.passwordSecretRef", "stolen"),
        ({"url": "redis://r:6379/0", "tls": MTLS | {"keySecretRef": ref("key", "tls.key")}}, "spec.redis.tls.", "ca"),
        ({"mode": "sentinel", "sentinel": SENTINEL}, "spec.redis.sentinel.passwordSecretRef", "sentinel"),
        (
            {"url": "redis://r:6379/0", "operatorAuth": OPERATOR},
            "spec.redis.operatorAuth.passwordSecretRef",
            "operator",
        ),
    ],
)
def test_a_secret_outside_the_allowlist_is_refused_unread(redis: dict[str, Any], field: str, secret: str) -> None:
    spec = RedisSpec.model_validate(redis)
    secrets = Secrets()
    allowed = frozenset({"redis-auth"})
    with pytest.raises(SecretNotAllowed) as refused:
        resolve(spec, SecretReader(secrets, "team", allowed))  # type: ignore[arg-type]
    message = str(refused.value)
    assert message.startswith(field) and "security.allowedSecretNames" in message and "redis-auth" in message
    assert secret not in secrets.read  # never read, so never sent to the pool's Redis
    resolved = resolve(spec, SecretReader(secrets, "team", frozenset(secrets.read) | {secret, "crt", "key"}))  # type: ignore[arg-type]
    assert resolved.settings.url.startswith("redis://")
    assert resolve(spec, SecretReader(Secrets(), "team")).settings.url  # type: ignore[arg-type] # no list: any Secret


@pytest.mark.parametrize(
    ("redis", "username", "password", "read"),
    [
        ({"url": "redis://r:6379/0", "passwordSecretRef": ref("workers")}, None, "pw-workers", ["workers"]),
        (
            {
                "url": "redis://worker:wpw@r:6379/0?password=q",
                "passwordSecretRef": ref("workers"),
                "operatorAuth": OPERATOR,
            },
            "tierpool-operator",
            "pw-operator",
            ["operator"],
        ),
        (
            {"mode": "sentinel", "sentinel": SENTINEL | {"passwordSecretRef": None}, "operatorAuth": OPERATOR},
            "tierpool-operator",
            "pw-operator",
            ["operator"],
        ),
    ],
)
def test_the_operator_connects_as_its_own_user_when_the_pool_names_one(
    redis: dict[str, Any], username: str | None, password: str, read: list[str]
) -> None:
    secrets = Secrets()
    settings = resolve(RedisSpec.model_validate(redis), SecretReader(secrets, "team")).settings  # type: ignore[arg-type]
    assert secrets.read == read  # with operatorAuth the workers' password is not even read
    kwargs = settings.client_kwargs()
    assert (kwargs.get("username"), kwargs.get("password")) == (username, password)
    if username:
        assert "wpw" not in settings.url and "worker@" not in settings.url and "password=" not in settings.url


def test_the_operator_user_reaches_a_sentinel_master_too() -> None:
    settings = RedisSettings(
        url="redis://r:6379/0", username="op", password="pw", sentinels=(("s", 1),), master_name="m"
    )
    master, _ = settings.sentinel_kwargs()
    assert (master["username"], master["password"]) == ("op", "pw")


def test_the_scaler_reads_secrets_through_the_operators_allowlist() -> None:
    """The wiring: the scaler's own observation builds its reader from OperatorConfig.allowed_secret_names."""
    import asyncio
    from typing import cast

    from prometheus_client import CollectorRegistry

    from tierpool.model.resource import parse_pool
    from tierpool_operator import scaler
    from tierpool_operator.config import OperatorConfig
    from tierpool_operator.deployments import DeploymentCache
    from tierpool_operator.kube import Kube
    from tierpool_operator.memo import OperatorContext, PoolMemo
    from tierpool_operator.metrics import OperatorMetrics

    secrets = Secrets()
    config = OperatorConfig(allowed_secret_names=frozenset({"redis-auth"}))
    context = OperatorContext(
        config, kube=cast(Kube, secrets), metrics=OperatorMetrics(CollectorRegistry()), deployments=DeploymentCache()
    )
    redis = {"url": "redis://r:6379/0", "passwordSecretRef": ref("stolen")}
    pool = parse_pool(
        {
            "apiVersion": "tierpool.io/v1alpha1",
            "kind": "AgentPool",
            "metadata": {"name": "p", "namespace": "team"},
            "spec": {"tiers": [{"name": "p0", "weight": 1}], "redis": redis},
        }
    )
    with pytest.raises(SecretNotAllowed, match=r"spec\.redis\.passwordSecretRef"):
        asyncio.run(scaler._observe(pool, PoolMemo(context), 1.0))
    assert secrets.read == []
