"""Kubernetes I/O for the operator: ensure children (get -> apply-if-different), scale, status, read secrets."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tierpool.resource import GROUP, VERSION

FIELD_MANAGER = "tierpool-operator"
"""The one field manager of every child: created and updated by server-side apply, so a field dropped from the
manifest is dropped from the object."""
SCALER_MANAGER = "tierpool-scaler"
"""Field manager of /scale writes: the scaler owns ``spec.replicas``, an apply keeps the live value."""
APPLIED = "tierpool.io/applied"
"""Annotation holding a hash of the last applied manifest: a change to the manifest (a field removed, say) is
applied even when the live object still has every field of the new one."""
STATUS_RETRIES = 5
PLURAL = "agentpools"


def applied_hash(manifest: dict[str, Any]) -> str:
    """Hash of a manifest as the operator applies it, without the replicas the scaler owns. Pure."""
    spec = {k: v for k, v in (manifest.get("spec") or {}).items() if k != "replicas"}
    canonical = json.dumps({**manifest, "spec": spec}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def to_apply(manifest: dict[str, Any], live: dict[str, Any] | None) -> dict[str, Any]:
    """What to apply: the manifest, its hash annotation, and the live replica count once the object exists (the
    scaler's value; the manifest's own count is only the initial one). Pure."""
    metadata = manifest["metadata"]
    out = {**manifest, "metadata": {**metadata, "annotations": {**metadata.get("annotations", {})}}}
    out["metadata"]["annotations"][APPLIED] = applied_hash(manifest)
    live_replicas = ((live or {}).get("spec") or {}).get("replicas")
    if "replicas" in (manifest.get("spec") or {}) and live_replicas is not None:
        out["spec"] = {**manifest["spec"], "replicas": live_replicas}
    return out


def needs_apply(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """True when the object is missing, was last applied from another manifest, or was edited away from it."""
    if live is None:
        return True
    if (live.get("metadata") or {}).get("deletionTimestamp"):
        return False  # being deleted: its DELETED event brings the recreate
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    return annotations.get(APPLIED) != desired["metadata"]["annotations"][APPLIED] or not is_subset(desired, live)


def is_subset(desired: Any, live: Any) -> bool:
    """True when every field of ``desired`` is present and equal in ``live`` (which has server defaults). Pure."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(is_subset(v, live.get(k)) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(map(is_subset, desired, live))
    if isinstance(desired, int | float) and isinstance(live, str):
        return str(desired) == live
    return bool(desired == live)


def _union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        out[key] = _union(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


def folded_managed_fields(entries: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Managed fields with this operator's Update entry (left by the plain create of older versions) folded into
    its Apply entry, as client-go's csaupgrade does; None when there is nothing to fold. After this, an apply
    that drops a field removes it. Pure."""
    ours = [e for e in entries if e.get("manager") == FIELD_MANAGER and not e.get("subresource")]
    updates = [e for e in ours if e.get("operation") == "Update"]
    if not updates:
        return None
    applied = next((e for e in ours if e.get("operation") == "Apply"), None)
    fields: dict[str, Any] = dict((applied or {}).get("fieldsV1") or {})
    for entry in updates:
        fields = _union(fields, entry.get("fieldsV1") or {})
    base = applied or updates[0]
    merged = {**base, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields}
    rest = [e for e in entries if e not in updates and e is not applied]
    return [*rest, merged]


@dataclass(frozen=True)
class Kind:
    read: Callable[..., Any]
    patch: Callable[..., Any]


class Kube:
    """The operator's view of the API: typed clients, one place for every call it makes."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        policy = client.PolicyV1Api(api)
        self.kinds = {
            "ServiceAccount": Kind(
                self.core.read_namespaced_service_account,
                self.core.patch_namespaced_service_account,
            ),
            "ConfigMap": Kind(
                self.core.read_namespaced_config_map,
                self.core.patch_namespaced_config_map,
            ),
            "PodDisruptionBudget": Kind(
                policy.read_namespaced_pod_disruption_budget,
                policy.patch_namespaced_pod_disruption_budget,
            ),
            "Deployment": Kind(
                self.apps.read_namespaced_deployment,
                self.apps.patch_namespaced_deployment,
            ),
        }

    def read(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """The object as a plain dict (API field names), or None when it does not exist."""
        try:
            found: dict[str, Any] = self.api.sanitize_for_serialization(self.kinds[kind].read(name, namespace))
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    def ensure(self, manifest: dict[str, Any], live: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Apply the manifest when the object is missing or differs from it (``live``: the object as already
        read, to save a GET). Returns what happened (created, patched, unchanged) and the object."""
        kind = self.kinds[manifest["kind"]]
        name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
        if live is None:
            live = self.read(manifest["kind"], name, namespace)
        folded = folded_managed_fields((live or {}).get("metadata", {}).get("managedFields") or [])
        if live is not None and folded is not None:
            live = self._set_managed_fields(manifest["kind"], live, folded)
        desired = to_apply(manifest, live)
        if not needs_apply(desired, live):
            return "unchanged", live or {}
        applied = kind.patch(
            name,
            namespace,
            desired,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
        return "created" if live is None else "patched", self.api.sanitize_for_serialization(applied)

    def _set_managed_fields(self, kind: str, live: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
        """Rewrite the object's managedFields (guarded by its resourceVersion); returns the object after."""
        metadata = live["metadata"]
        ops = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": metadata["resourceVersion"]},
            {"op": "replace", "path": "/metadata/managedFields", "value": entries},
        ]
        patched = self.kinds[kind].patch(metadata["name"], metadata["namespace"], ops)
        found: dict[str, Any] = self.api.sanitize_for_serialization(patched)
        return found

    def scale(self, name: str, namespace: str, replicas: int) -> None:
        """Scale through the Deployment's /scale subresource."""
        self.apps.patch_namespaced_deployment_scale(
            name, namespace, {"spec": {"replicas": replicas}}, field_manager=SCALER_MANAGER
        )

    def read_pool(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast(dict[str, Any], found)

    def patch_pool_status(
        self, namespace: str, name: str, build: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> None:
        """Write status fields computed by ``build`` from the pool's current status, read fresh. The write carries
        the resourceVersion read, so a concurrent writer makes it fail (409) and it is built again: conditions
        merged by one handler are never undone by another's older copy."""
        for _ in range(STATUS_RETRIES):
            pool = self.read_pool(namespace, name)
            if pool is None:
                return
            fields = build(pool.get("status") or {})
            if not fields:
                return
            body = {"metadata": {"resourceVersion": pool["metadata"]["resourceVersion"]}, "status": fields}
            try:
                self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, body)
                return
            except ApiException as error:
                if error.status != 409:
                    raise
        raise RuntimeError(f"status of {namespace}/{name}: still conflicting after {STATUS_RETRIES} attempts")

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        secret = self.core.read_namespaced_secret(name, namespace)
        data = secret.data or {}
        if key not in data:
            raise KeyError(f"secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data[key]).decode("utf-8")
