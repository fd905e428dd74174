"""Kubernetes I/O for the operator: ensure children (get -> apply if ours and changed), scale, status, secrets."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tierpool.model.resource import GROUP, VERSION
from tierpool_operator.drift import FIELD_MANAGER, SCALER_MANAGER, changed, folded_managed_fields, needs_apply, to_apply
from tierpool_operator.ownership import name_taken

STATUS_RETRIES = 5
PLURAL = "agentpools"


POD_REQUEST_TIMEOUT = 10.0
"""Seconds for the pod calls before a scale-in: a hung API server must not hold the scaler's pass."""


def _plain(response: Any) -> dict[str, Any]:
    """A raw response (``_preload_content=False``) as the plain dict the API sent: what the typed models plus
    ``sanitize_for_serialization`` give, without building and unbuilding the models on every scaling pass."""
    found: dict[str, Any] = json.loads(response.data)
    return found


class ChildForbidden(Exception):
    """The API server refused the operator one of a pool's children (HTTP 403): RBAC, or an admission policy
    (``detail``: the server's message, which names the policy and says why)."""

    def __init__(self, kind: str, name: str, namespace: str, verb: str = "patch", detail: str = "") -> None:
        super().__init__(f"forbidden: {verb} {kind} {namespace}/{name}")
        self.kind, self.name, self.namespace, self.verb, self.detail = kind, name, namespace, verb, detail

    @property
    def by_admission_policy(self) -> bool:
        return "ValidatingAdmissionPolicy" in self.detail


class ChildNameTaken(ChildForbidden):
    """An object the pool does not own already has a child's name: the operator refuses itself the apply that
    would take it over (``ownership.name_taken``). Reported and retried like a refusal by the API server."""


def _server_message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or "")
    except (ValueError, AttributeError):
        return ""


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
            "Secret": Kind(
                self.core.read_namespaced_secret,
                self.core.patch_namespaced_secret,
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
            found = _plain(self.kinds[kind].read(name, namespace, _preload_content=False))
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    def ensure(self, manifest: dict[str, Any], live: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Apply the manifest when the object is missing or differs from it (``live``: the object as already
        read, to save a GET). Returns what happened (created, patched, unchanged) and the object."""
        name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
        try:
            return self._ensure(manifest, live)
        except ApiException as error:
            if error.status == 403:
                raise ChildForbidden(manifest["kind"], name, namespace, detail=_server_message(error)) from error
            raise

    def _ensure(self, manifest: dict[str, Any], live: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
        kind = self.kinds[manifest["kind"]]
        name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
        if live is None:
            live = self.read(manifest["kind"], name, namespace)
        if name_taken(manifest, live):
            raise ChildNameTaken(manifest["kind"], name, namespace)
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
            _preload_content=False,
        )
        after = _plain(applied)
        if not changed(live, after):
            return "unchanged", after  # the apply was a no-op (the drift was only in how the server stores it)
        return "created" if live is None else "patched", after

    def _set_managed_fields(self, kind: str, live: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
        """Rewrite the object's managedFields (guarded by its resourceVersion); returns the object after."""
        metadata = live["metadata"]
        ops = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": metadata["resourceVersion"]},
            {"op": "replace", "path": "/metadata/managedFields", "value": entries},
        ]
        return _plain(self.kinds[kind].patch(metadata["name"], metadata["namespace"], ops, _preload_content=False))

    def scale(self, name: str, namespace: str, replicas: int) -> str | None:
        """Scale through the Deployment's /scale subresource. Returns the Deployment's resourceVersion after it
        ("" if the reply had none), or None when the Deployment is gone (404)."""
        try:
            scaled = self.apps.patch_namespaced_deployment_scale(
                name, namespace, {"spec": {"replicas": replicas}}, field_manager=SCALER_MANAGER
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return str((scaled.metadata.resource_version if scaled.metadata else None) or "")  # "": none given

    def worker_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The pods matching the pool's selector, as plain dicts (metadata only is used)."""
        try:
            found = self.core.list_namespaced_pod(
                namespace, label_selector=selector, _request_timeout=POD_REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status == 403:
                raise ChildForbidden("pods", "", namespace, verb="list") from error
            raise
        return [cast(dict[str, Any], self.api.sanitize_for_serialization(pod)) for pod in found.items]

    def annotate_pod(self, namespace: str, name: str, key: str, value: str | None) -> None:
        """Set (or, with None, remove) one annotation on a pod by a merge patch; a pod gone meanwhile is skipped."""
        body = {"metadata": {"annotations": {key: value}}}
        try:
            self.core.patch_namespaced_pod(
                name,
                namespace,
                body,
                _content_type="application/merge-patch+json",
                _request_timeout=POD_REQUEST_TIMEOUT,
            )
        except ApiException as error:
            if error.status == 403:
                raise ChildForbidden("pods", name, namespace) from error
            if error.status != 404:
                raise

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
