"""Kubernetes I/O for the operator: ensure children (get -> create -> apply-if-different), scale, read secrets."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

FIELD_MANAGER = "tierpool-operator"
UNOWNED_AFTER_CREATE: dict[str, list[tuple[str, ...]]] = {"Deployment": [("spec", "replicas")]}
"""Fields set on create and then left to someone else (the scaler owns replicas)."""


def is_subset(desired: Any, live: Any) -> bool:
    """True when every field of ``desired`` is present and equal in ``live`` (which has server defaults). Pure."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(is_subset(v, live.get(k)) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(map(is_subset, desired, live))
    if isinstance(desired, int | float) and isinstance(live, str):
        return str(desired) == live
    return bool(desired == live)


def without(manifest: dict[str, Any], paths: list[tuple[str, ...]]) -> dict[str, Any]:
    """A copy of the manifest with the given paths removed. Pure."""
    out = {**manifest}
    for path in paths:
        node = out
        for key in path[:-1]:
            node[key] = {**node.get(key, {})}
            node = node[key]
        node.pop(path[-1], None)
    return out


@dataclass(frozen=True)
class Kind:
    read: Callable[..., Any]
    create: Callable[..., Any]
    patch: Callable[..., Any]


class Kube:
    """The operator's view of the API: typed clients, one place for every call it makes."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        policy = client.PolicyV1Api(api)
        self.kinds = {
            "ServiceAccount": Kind(
                self.core.read_namespaced_service_account,
                self.core.create_namespaced_service_account,
                self.core.patch_namespaced_service_account,
            ),
            "ConfigMap": Kind(
                self.core.read_namespaced_config_map,
                self.core.create_namespaced_config_map,
                self.core.patch_namespaced_config_map,
            ),
            "PodDisruptionBudget": Kind(
                policy.read_namespaced_pod_disruption_budget,
                policy.create_namespaced_pod_disruption_budget,
                policy.patch_namespaced_pod_disruption_budget,
            ),
            "Deployment": Kind(
                self.apps.read_namespaced_deployment,
                self.apps.create_namespaced_deployment,
                self.apps.patch_namespaced_deployment,
            ),
        }

    def ensure(self, manifest: dict[str, Any]) -> str:
        """Create the object if missing, apply it if it differs, otherwise do nothing. Returns what happened."""
        kind = self.kinds[manifest["kind"]]
        name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
        try:
            live = self.api.sanitize_for_serialization(kind.read(name, namespace))
        except ApiException as error:
            if error.status != 404:
                raise
            try:
                kind.create(namespace, manifest, field_manager=FIELD_MANAGER)
                return "created"
            except ApiException as conflict:
                if conflict.status != 409:  # created meanwhile (another reconcile): fall through to compare
                    raise
                live = self.api.sanitize_for_serialization(kind.read(name, namespace))
        desired = without(manifest, UNOWNED_AFTER_CREATE.get(manifest["kind"], []))
        if is_subset(desired, live):
            return "unchanged"
        kind.patch(
            name,
            namespace,
            desired,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
        return "patched"

    def deployment_replicas(self, name: str, namespace: str) -> tuple[int, int] | None:
        """(spec.replicas, status.readyReplicas), or None when the Deployment does not exist."""
        try:
            scale = self.apps.read_namespaced_deployment(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        ready = scale.status.ready_replicas if scale.status else 0
        return int(scale.spec.replicas or 0), int(ready or 0)

    def scale(self, name: str, namespace: str, replicas: int) -> None:
        """Scale through the Deployment's /scale subresource."""
        self.apps.patch_namespaced_deployment_scale(name, namespace, {"spec": {"replicas": replicas}})

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        secret = self.core.read_namespaced_secret(name, namespace)
        data = secret.data or {}
        if key not in data:
            raise KeyError(f"secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data[key]).decode("utf-8")
