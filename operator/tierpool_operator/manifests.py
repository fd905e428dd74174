"""Manifests of a pool's children: worker Deployment, spec ConfigMap, ServiceAccount, PodDisruptionBudget. Pure.

Every child carries the pool's labels and an ownerReference, so deleting the pool deletes them (garbage
collection). The scaler owns ``spec.replicas`` of the Deployment: reconciles never overwrite it.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from tierpool.model.redis_url import RedisUrlError, split_url
from tierpool.model.resource import API_VERSION, KIND, AgentPool
from tierpool.model.spec import PoolSpec, redis_defaults_left_out, sections_left_out, tier_defaults_left_out

WORKER_UID = 10001
SPEC_KEY = "pool.json"
CA_MOUNT = "/etc/tierpool/redis-ca"
CLIENT_CERT_MOUNT = "/etc/tierpool/redis-client-cert"
CLIENT_KEY_MOUNT = "/etc/tierpool/redis-client-key"
KEY_FILE_MODE = 0o440  # owner root, group fsGroup (the worker's): a private key that no other user reads
Manifest = dict[str, Any]


def child_name(pool: AgentPool) -> str:
    return f"tierpool-{pool.metadata.name}"


def selector_labels(pool: AgentPool) -> dict[str, str]:
    return {"app.kubernetes.io/name": "tierpool-worker", "app.kubernetes.io/instance": pool.metadata.name}


def labels(pool: AgentPool) -> dict[str, str]:
    return {
        **selector_labels(pool),
        "app.kubernetes.io/managed-by": "tierpool-operator",
        "app.kubernetes.io/part-of": "tierpool",
        "tierpool.io/pool": pool.metadata.name,
    }


def selector_string(pool: AgentPool) -> str:
    return ",".join(f"{key}={value}" for key, value in selector_labels(pool).items())


def owner_reference(pool: AgentPool, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": pool.metadata.name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(pool: AgentPool, uid: str, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or child_name(pool),
        "namespace": pool.metadata.namespace,
        "labels": labels(pool),
        "ownerReferences": [owner_reference(pool, uid)],
    }


REDIS_URL_DATA_KEY = "url"
POD_UNUSED = {"replicas", "scaling"}
"""Spec sections no worker reads: the scaler's business. Left out of the pods' document, so a /scale write
(``replicas.desired``) or a scaling tweak neither rewrites the ConfigMap nor rolls the Deployment."""


def url_password(url: str | None) -> str | None:
    """The password written into a Redis URL (``redis://user:password@host``, or ``?password=`` in the query,
    which redis-py accepts too), if any. Pure."""
    if not url:
        return None
    try:
        return split_url(url).password
    except RedisUrlError:
        return None


def without_password(url: str) -> str:
    """The URL with its password left out (the user name stays; a ``password`` query parameter goes). Pure."""
    if url_password(url) is None:
        return url
    return split_url(url).without_password()


def redis_secret_name(pool: AgentPool) -> str:
    return f"{child_name(pool)}-redis"


def url_needs_secret(spec: PoolSpec) -> bool:
    """A password written into ``spec.redis.url`` and no other source of it: the operator keeps the URL in a
    Secret of its own, which the workers read (the ConfigMap and the pod spec never carry it)."""
    redis = spec.redis
    return bool(redis.url and url_password(redis.url) and not redis.password_secret_ref and not redis.url_secret_ref)


def redis_secret(pool: AgentPool, uid: str) -> Manifest:
    """The operator-owned Secret holding a URL with a password in it (key ``url``)."""
    url = (pool.spec.redis.url or "").encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(pool, uid, redis_secret_name(pool)),
        "type": "Opaque",
        "data": {REDIS_URL_DATA_KEY: base64.b64encode(url).decode()},
    }


def pool_document_json(pool: AgentPool) -> str:
    """The document workers read from TIERPOOL_POOL_SPEC: metadata name/namespace and the spec sections that
    reach the pods (defaults stand in for the others when a worker parses it). Never a password: one written
    into ``spec.redis.url`` is left out (the ConfigMap is not a Secret)."""
    redis = pool.spec.redis
    if redis.url and url_password(redis.url):
        redis = redis.model_copy(update={"url": without_password(redis.url)})
    spec = pool.spec.model_copy(update={"redis": redis})
    # an empty rateLimits, default deadLetters and the default redis.mode are left out: the pods' document, and
    # so their spec hash, stays what it was
    unused: dict[str, Any] = dict.fromkeys(POD_UNUSED | sections_left_out(spec), True)
    unused["redis"] = redis_defaults_left_out(redis)
    if tiers := tier_defaults_left_out(spec):
        unused["tiers"] = tiers
    return pool.model_copy(update={"status": None, "spec": spec}).model_dump_json(
        by_alias=True, exclude_none=True, exclude={"spec": unused}
    )


def spec_hash(pool: AgentPool) -> str:
    """Hash of what reaches the pods (their document); a change rolls the Deployment, nothing else does."""
    return hashlib.sha256(pool_document_json(pool).encode()).hexdigest()[:16]


def config_map(pool: AgentPool, uid: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(pool, uid, f"{child_name(pool)}-spec"),
        "data": {SPEC_KEY: pool_document_json(pool)},
    }


def service_account(pool: AgentPool, uid: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(pool, uid),
        "automountServiceAccountToken": False,
    }


def pod_disruption_budget(pool: AgentPool, uid: str) -> Manifest:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(pool, uid),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(pool)}},
    }


def _secret_env(name: str, ref: Any) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


def redis_env(pool: AgentPool) -> list[dict[str, Any]]:
    """How the worker container learns the Redis URL, password and TLS settings."""
    redis = pool.spec.redis
    env: list[dict[str, Any]] = []
    if redis.url_secret_ref:
        env.append(_secret_env("TIERPOOL_REDIS_URL", redis.url_secret_ref))
    elif url_needs_secret(pool.spec):  # the operator's own Secret: the workers keep their password
        secret = {"name": redis_secret_name(pool), "key": REDIS_URL_DATA_KEY}
        env.append({"name": "TIERPOOL_REDIS_URL", "valueFrom": {"secretKeyRef": secret}})
    elif redis.url:  # a password in it stays out of the pod spec: credentials reach pods from Secrets only
        env.append({"name": "TIERPOOL_REDIS_URL", "value": without_password(redis.url)})
    if redis.password_secret_ref:
        env.append(_secret_env("TIERPOOL_REDIS_PASSWORD", redis.password_secret_ref))
    if redis.sentinel and redis.sentinel.password_secret_ref:  # the addresses reach the pods in the spec
        env.append(_secret_env("TIERPOOL_REDIS_SENTINEL_PASSWORD", redis.sentinel.password_secret_ref))
    if redis.tls.enabled:
        env.append({"name": "TIERPOOL_REDIS_TLS", "value": "true"})
    if redis.tls.insecure_skip_verify:
        env.append({"name": "TIERPOOL_REDIS_TLS_INSECURE", "value": "true"})
    if redis.tls.ca_secret_ref:
        env.append({"name": "TIERPOOL_REDIS_TLS_CA_FILE", "value": f"{CA_MOUNT}/{redis.tls.ca_secret_ref.key}"})
    for name, ref, mount in (
        ("TIERPOOL_REDIS_TLS_CERT_FILE", redis.tls.cert_secret_ref, CLIENT_CERT_MOUNT),
        ("TIERPOOL_REDIS_TLS_KEY_FILE", redis.tls.key_secret_ref, CLIENT_KEY_MOUNT),
    ):
        if ref is not None:
            env.append({"name": name, "value": f"{mount}/{ref.key}"})
    return env


def redis_tls_volumes(pool: AgentPool) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(volume, mount) of each TLS Secret: the CA's as a whole, the client certificate and key as their one key
    each, so a kubernetes.io/tls Secret's key never lands in the certificate's directory."""
    tls = pool.spec.redis.tls
    found: list[tuple[dict[str, Any], dict[str, Any]]] = []
    if tls.ca_secret_ref:
        found.append(
            (
                {"name": "redis-ca", "secret": {"secretName": tls.ca_secret_ref.name}},
                {"name": "redis-ca", "mountPath": CA_MOUNT, "readOnly": True},
            )
        )
    for name, ref, path, mode in (
        ("redis-client-cert", tls.cert_secret_ref, CLIENT_CERT_MOUNT, None),
        ("redis-client-key", tls.key_secret_ref, CLIENT_KEY_MOUNT, KEY_FILE_MODE),
    ):
        if ref is None:
            continue
        secret: dict[str, Any] = {"secretName": ref.name, "items": [{"key": ref.key, "path": ref.key}]}
        if mode is not None:
            secret["defaultMode"] = mode
        found.append(({"name": name, "secret": secret}, {"name": name, "mountPath": path, "readOnly": True}))
    return found


def worker_container(pool: AgentPool) -> dict[str, Any]:
    worker = pool.spec.worker
    probe = {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10, "failureThreshold": 3}
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]  # noqa: S108 - an emptyDir, the only writable path
    mounts += [mount for _, mount in redis_tls_volumes(pool)]
    env = [
        {
            "name": "TIERPOOL_POOL_SPEC",
            "valueFrom": {"configMapKeyRef": {"name": f"{child_name(pool)}-spec", "key": SPEC_KEY}},
        },
        {"name": "TIERPOOL_LOG_FORMAT", "value": "json"},
        {"name": "TIERPOOL_CONSUMER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        *redis_env(pool),
        *(var.model_dump(by_alias=True, exclude_none=True) for var in worker.env),
    ]
    container: dict[str, Any] = {
        "name": "worker",
        "image": worker.image,
        "imagePullPolicy": worker.image_pull_policy,
        "args": ["worker", "--handler", worker.handler, "--concurrency", str(worker.concurrency)],
        "env": env,
        "ports": [{"name": "metrics", "containerPort": worker.metrics_port, "protocol": "TCP"}],
        "livenessProbe": probe,
        "readinessProbe": {**probe, "httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }
    resources = worker.resources.model_dump(by_alias=True, exclude_defaults=True)
    if resources:
        container["resources"] = resources
    return container


def deployment(pool: AgentPool, uid: str, replicas: int) -> Manifest:
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    volumes += [volume for volume, _ in redis_tls_volumes(pool)]
    pod_spec = {
        "serviceAccountName": child_name(pool),
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": pool.spec.worker.termination_grace_period_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": WORKER_UID,
            "runAsGroup": WORKER_UID,
            "fsGroup": WORKER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [worker_container(pool)],
        "volumes": volumes,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(pool, uid),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_labels(pool)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {
                    "labels": labels(pool),
                    "annotations": {
                        "tierpool.io/spec-hash": spec_hash(pool),
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(pool.spec.worker.metrics_port),
                    },
                },
                "spec": pod_spec,
            },
        },
    }


def children(pool: AgentPool, uid: str, replicas: int) -> list[Manifest]:
    """Every child, in creation order."""
    secret = [redis_secret(pool, uid)] if url_needs_secret(pool.spec) else []
    return [
        service_account(pool, uid),
        config_map(pool, uid),
        pod_disruption_budget(pool, uid),
        *secret,
        deployment(pool, uid, replicas),
    ]


def initial_replicas(spec: PoolSpec) -> int:
    if spec.scaling.policy.value == "external":
        return spec.replicas.desired
    return spec.replicas.min
