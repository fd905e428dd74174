"""Least privilege on a real API server, as the chart's ServiceAccount: what RBAC grants it (the can-i matrix),
what the chart's admission policies still refuse it (anything but its pools' children, and with the allowlists,
images and Secrets outside them), and the operator refusing to take over an object that holds a child's name."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.cluster.conftest import GROUP, PLURAL, VERSION, OperatorProcess, agentpool
from tests.cluster.harness import ControlPlane
from tests.cluster.test_chart_on_apiserver import can_i, chart_service_account
from tests.cluster.test_operator import condition, eventually, get_pool, pool_when
from tierpool.model.resource import parse_pool
from tierpool_operator import manifests
from tierpool_operator.drift import FIELD_MANAGER
from tierpool_operator.kube import Kube

pytestmark = [pytest.mark.cluster, pytest.mark.helm]
CLUSTER_WIDE = "watchNamespaces=null"
TIERS = [{"name": "p0", "weight": 1}]
Manifest = dict[str, Any]


def needs(secrets_at: str) -> list[tuple[str, str, str, str, str]]:
    """(verb, resource, group, subresource, where) the operator uses; ``where``: pool (the pool's namespace),
    secrets (where its Secrets are allowed), cluster (no namespace)."""
    return [
        *[(verb, "agentpools", GROUP, "", "pool") for verb in ("get", "list", "watch", "patch")],
        ("patch", "agentpools", GROUP, "status", "pool"),
        *[(verb, "deployments", "apps", "", "pool") for verb in ("get", "list", "watch", "create", "patch")],
        ("patch", "deployments", "apps", "scale", "pool"),
        *[(verb, kind, "", "", "pool") for verb in ("get", "create", "patch") for kind in ("configmaps", "serviceaccounts")],
        *[(verb, "poddisruptionbudgets", "policy", "", "pool") for verb in ("get", "create", "patch")],
        ("list", "pods", "", "", "pool"),
        ("patch", "pods", "", "", "pool"),
        ("create", "events", "", "", "pool"),
        *[(verb, "secrets", "", "", secrets_at) for verb in ("get", "create", "patch")],
        *[(verb, kind, group, "", "cluster") for verb in ("list", "watch") for kind, group in
          (("customresourcedefinitions", "apiextensions.k8s.io"), ("namespaces", ""))],
    ]  # fmt: skip


MUST_NOT = [
    ("get", "deployments", "apps", "scale", "pool"),  # unused: /scale is only ever patched
    ("get", "agentpools", GROUP, "status", "pool"),  # unused: status is read with the pool
    *[("delete", kind, group, "", "pool") for kind, group in
      (("deployments", "apps"), ("configmaps", ""), ("serviceaccounts", ""), ("secrets", ""),
       ("poddisruptionbudgets", "policy"), ("pods", ""), ("agentpools", GROUP))],
    ("update", "deployments", "apps", "", "pool"),
    ("update", "configmaps", "", "", "pool"),
    ("create", "agentpools", GROUP, "", "pool"),
    ("create", "pods", "", "", "pool"),
    ("get", "pods", "", "", "pool"),
    ("create", "pods", "", "exec", "pool"),
    ("create", "pods", "", "eviction", "pool"),
    ("get", "pods", "", "log", "pool"),
    ("create", "serviceaccounts", "", "token", "pool"),
    ("list", "secrets", "", "", "cluster"),
    ("get", "secrets", "", "", "kube-system"),
    ("create", "roles", "rbac.authorization.k8s.io", "", "pool"),
    ("create", "rolebindings", "rbac.authorization.k8s.io", "", "pool"),
    ("bind", "clusterroles", "rbac.authorization.k8s.io", "", "cluster"),
    ("escalate", "clusterroles", "rbac.authorization.k8s.io", "", "cluster"),
    ("impersonate", "serviceaccounts", "", "", "kube-system"),
    ("impersonate", "users", "", "", "cluster"),
    ("patch", "validatingadmissionpolicies", "admissionregistration.k8s.io", "", "cluster"),
    ("delete", "validatingadmissionpolicybindings", "admissionregistration.k8s.io", "", "cluster"),
    ("create", "customresourcedefinitions", "apiextensions.k8s.io", "", "cluster"),
    ("patch", "namespaces", "", "", "cluster"),
    ("patch", "nodes", "", "", "cluster"),
]  # fmt: skip
CHILD_WRITES = [
    ("create", "deployments", "apps", "", "kube-system"),
    ("patch", "deployments", "apps", "scale", "kube-system"),
    ("create", "configmaps", "", "", "kube-system"),
    ("patch", "serviceaccounts", "", "", "kube-system"),
    ("patch", "pods", "", "", "kube-system"),
]
"""Outside the watched namespaces: granted only by a cluster-wide install, where admission narrows them."""


@pytest.mark.parametrize("cluster_wide", [True, False], ids=["cluster-wide", "namespaced"])
def test_can_i_matrix_as_the_chart_service_account(
    helm: Path, api: client.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path, cluster_wide: bool
) -> None:
    sets = (CLUSTER_WIDE,) if cluster_wide else (f"watchNamespaces={{{namespace}}}",)
    with chart_service_account(helm, api, control_plane, tmp_path, sets) as (_, sa):
        release = service_account_namespace(sa)
        places = {"pool": namespace, "cluster": None, "kube-system": "kube-system", "release": release}
        wrong: list[str] = []
        for expected, matrix in (
            (True, needs("release" if cluster_wide else "pool")),
            (False, MUST_NOT),
            (cluster_wide, CHILD_WRITES),
        ):
            for verb, resource, group, sub, where in matrix:
                if can_i(sa, verb, resource, places[where], group, sub) is not expected:
                    wrong.append(f"{verb} {resource}/{sub} in {where}: {'denied' if expected else 'allowed'}")
        assert not wrong, wrong


def service_account_namespace(sa: client.ApiClient) -> str:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    username = client.AuthenticationV1Api(sa).create_self_subject_review(review).status.user_info.username
    return str(username.split(":")[2])  # system:serviceaccount:<namespace>:<name>


def make_pool(custom: client.CustomObjectsApi, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    document = agentpool(name, {"tiers": TIERS, "redis": {"url": "redis://redis.invalid:6379/0"}, **spec})
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, document)  # type: ignore[no-any-return]


def pool_children(body: dict[str, Any]) -> list[Manifest]:
    pool = parse_pool(body)
    return manifests.children(pool, body["metadata"]["uid"], 1)


def write_as(sa: client.ApiClient, manifest: Manifest, dry_run: bool = True) -> tuple[int, str]:
    """Server-side apply as the operator does it (its field manager, force), as ``sa``: (HTTP status, message)."""
    kube = Kube(sa)
    metadata = manifest["metadata"]
    extra = {"dry_run": "All"} if dry_run else {}
    try:
        kube.kinds[manifest["kind"]].patch(
            metadata["name"],
            metadata["namespace"],
            manifest,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
            **extra,
        )
    except client.exceptions.ApiException as error:
        return int(error.status), str(error.body)
    return 200, ""


def edited(manifest: Manifest, change: Callable[[Manifest], object]) -> Manifest:
    found = copy.deepcopy(manifest)
    change(found)
    return found


def worker_pod(deployment: Manifest) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_admission_keeps_the_operator_to_its_pools_children(
    helm: Path,
    api: client.ApiClient,
    control_plane: ControlPlane,
    custom: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A default install binds the child verbs cluster-wide; the chart's policies are what keep the operator's
    token from starting a Deployment in kube-system under another ServiceAccount, writing an object that is not a
    pool's child, taking one over, or scaling a Deployment that runs no workers. Its real children pass."""
    sets = (CLUSTER_WIDE, f"secretNamespaces={{{namespace}}}")
    body = make_pool(custom, namespace, "guarded", redis={"url": "redis://:pw@redis.invalid:6379/0"})
    children = {child["kind"]: child for child in pool_children(body)}
    assert set(children) == {"ServiceAccount", "ConfigMap", "PodDisruptionBudget", "Secret", "Deployment"}
    deployment = children["Deployment"]
    system = edited(deployment, lambda d: d["metadata"].update(namespace="kube-system"))
    plain = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"miner-{uuid.uuid4().hex[:5]}", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "miner"}},
            "template": {
                "metadata": {"labels": {"app": "miner"}},
                "spec": {"serviceAccountName": "default", "containers": [{"name": "m", "image": "evil.example/m:1"}]},
            },
        },
    }
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "tierpool-other-spec"}, "data": {"a": "1"}})
    foreign_spec = edited(children["ConfigMap"], lambda c: c["metadata"].update(name="tierpool-other-spec"))
    foreign_spec["metadata"]["labels"]["tierpool.io/pool"] = "other"
    foreign_spec["metadata"]["ownerReferences"][0]["name"] = "other"
    refused: dict[str, tuple[Manifest, str]] = {
        "a plain Deployment in kube-system": (plain, "children|workers"),
        "a worker Deployment in kube-system under the default ServiceAccount": (
            edited(system, lambda d: worker_pod(d).update(serviceAccountName="default")),
            "workers",
        ),
        "a worker Deployment without its ownerReference": (
            edited(system, lambda d: d["metadata"].pop("ownerReferences")),
            "children",
        ),
        "a worker Deployment with a token mounted": (
            edited(deployment, lambda d: worker_pod(d).update(automountServiceAccountToken=True)),
            "workers",
        ),
        "a worker Deployment with a hostPath volume": (
            edited(deployment, lambda d: worker_pod(d)["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
            "workers",
        ),
        "a privileged worker": (
            edited(deployment, lambda d: worker_pod(d)["containers"][0].update(securityContext={"privileged": True})),
            "workers",
        ),
        "a worker Deployment on the host network": (
            edited(deployment, lambda d: worker_pod(d).update(hostNetwork=True)),
            "workers",
        ),
        "a ConfigMap named after no pool": (
            edited(children["ConfigMap"], lambda c: c["metadata"].update(name="coredns", namespace="kube-system")),
            "children",
        ),
        "a child without the managed-by label": (
            edited(children["ServiceAccount"], lambda c: c["metadata"]["labels"].pop("app.kubernetes.io/managed-by")),
            "children",
        ),
        "taking over a ConfigMap someone else made": (foreign_spec, "children"),
    }
    with chart_service_account(helm, api, control_plane, tmp_path, sets) as (_, sa):
        first, _ = next(iter(refused.values()))
        eventually(lambda: write_as(sa, first)[0] == 403, what="the policies in force")
        wrong = []
        for case, (manifest, policy) in refused.items():
            status, message = write_as(sa, manifest)
            if status != 403 or not any(f"-tierpool-{name}'" in message for name in policy.split("|")):
                wrong.append(f"{case}: {status} {message[:300]}")
        assert not wrong, "\n".join(wrong)
        for child in children.values():  # for real: the operator's own children pass
            assert write_as(sa, child, dry_run=False) == (200, ""), child["kind"]
        assert write_as(sa, foreign_spec, dry_run=False)[0] == 403
        taken = core.read_namespaced_config_map("tierpool-other-spec", namespace)
        assert taken.metadata.owner_references is None and taken.data == {"a": "1"}
        apps.create_namespaced_deployment(namespace, edited(plain, lambda d: d["metadata"].update(namespace=namespace)))
        lookalike = edited(plain, lambda d: d["metadata"].update(name="tierpool-lookalike", namespace=namespace))
        apps.create_namespaced_deployment(namespace, lookalike)
        scale = {"spec": {"replicas": 3}}
        assert scale_as(sa, deployment["metadata"]["name"], namespace, scale) == 200
        assert scale_as(sa, plain["metadata"]["name"], namespace, scale) == 403
        assert scale_as(sa, "tierpool-lookalike", namespace, scale) == 403
        assert apps.read_namespaced_deployment("tierpool-lookalike", namespace).spec.replicas == 1
    assert write_as(api, plain, dry_run=True) == (200, ""), "anyone but the operator: not matched"


def scale_as(sa: client.ApiClient, name: str, namespace: str, body: dict[str, Any]) -> int:
    try:
        client.AppsV1Api(sa).patch_namespaced_deployment_scale(name, namespace, body)
    except client.exceptions.ApiException as error:
        return int(error.status)
    return 200


ALLOWLISTS = ("security.allowedImagePrefixes={registry.example/ok/}", "security.allowedSecretNames={redis}")


def test_allowlists_refuse_other_images_and_secrets(
    helm: Path,
    api: client.ApiClient,
    control_plane: ControlPlane,
    custom: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    image = {"worker": {"image": "registry.example/ok/worker:1"}}
    own_secret = make_pool(custom, namespace, "own", redis={"url": "redis://:pw@redis.invalid:6379/0"}, **image)
    from_secret = make_pool(custom, namespace, "ref", redis={"urlSecretRef": {"name": "redis", "key": "url"}}, **image)
    refs = {f"{part}SecretRef": {"name": "redis", "key": f"tls.{part}"} for part in ("ca", "cert", "key")}
    mtls = make_pool(custom, namespace, "mtls", redis={"url": "rediss://redis.invalid:6380/0", "tls": refs}, **image)
    allowed = [pool_children(body)[-1] for body in (own_secret, from_secret, mtls)]
    deployment = allowed[1]
    secret_env = {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "api-key", "key": "k"}}}
    refused = {
        "an image elsewhere": (edited(deployment, lambda d: worker_pod(d)["containers"][0].update(image="ghcr.io/x:1")), "ghcr.io/x:1"),
        "a prefix look-alike": (edited(deployment, lambda d: worker_pod(d)["containers"][0].update(image="registry.example/ok-evil/x:1")), "ok-evil"),
        "env from another Secret": (edited(deployment, lambda d: worker_pod(d)["containers"][0]["env"].append(secret_env)), "allowedSecretNames"),
        "envFrom another Secret": (edited(deployment, lambda d: worker_pod(d)["containers"][0].update(envFrom=[{"secretRef": {"name": "db"}}])), "allowedSecretNames"),
        "a volume of another Secret": (edited(deployment, lambda d: worker_pod(d)["volumes"].append({"name": "s", "secret": {"secretName": "tls"}})), "allowedSecretNames"),
    }  # fmt: skip
    sets = (f"watchNamespaces={{{namespace}}}", *ALLOWLISTS)
    with chart_service_account(helm, api, control_plane, tmp_path, sets) as (_, sa):
        first, _ = next(iter(refused.values()))
        eventually(lambda: write_as(sa, first)[0] == 403, what="the policies in force")
        wrong = []
        for case, (manifest, text) in refused.items():
            status, message = write_as(sa, manifest)
            if status != 403 or text not in message:
                wrong.append(f"{case}: {status} {message[:300]}")
        assert not wrong, "\n".join(wrong)
        for manifest in allowed:
            assert write_as(sa, manifest) == (200, ""), manifest["metadata"]["name"]


def test_a_pool_outside_the_allowlist_is_reported_not_retried_in_a_loop(
    helm: Path,
    api: client.ApiClient,
    control_plane: ControlPlane,
    custom: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    sets = (f"watchNamespaces={{{namespace}}}", *ALLOWLISTS)
    apps = client.AppsV1Api(api)
    with chart_service_account(helm, api, control_plane, tmp_path, sets) as (kubeconfig, _):
        make_pool(custom, namespace, "outside", worker={"image": "ghcr.io/evil/worker:1"}, scaling={"interval": "2s"})
        log = tmp_path / "operator.log"
        operator = OperatorProcess(kubeconfig, log, namespace, env={"TIERPOOL_FORBIDDEN_RETRY_SECONDS": "20"}).start()
        try:
            pool = eventually(
                pool_when(custom, namespace, "outside", lambda p: (condition(p, "Ready") or {}).get("reason") == "AdmissionDenied"),
                timeout=40,
                what="Ready=False/AdmissionDenied",
            )  # fmt: skip
            message = (condition(pool, "Ready") or {})["message"]
            assert "ghcr.io/evil/worker:1" in message and "security.allowedImagePrefixes" in message, message
            time.sleep(8)
            assert log.read_text().count("; retrying in 20s") == 1, "one refusal, then a slow retry"
            assert not apps.list_namespaced_deployment(namespace).items
            events = [
                e for e in client.CoreV1Api(api).list_namespaced_event(namespace).items if e.reason == "AdmissionDenied"
            ]
            assert len(events) == 1 and events[0].type == "Warning", [e.message for e in events]
            body = {"spec": {"worker": {"image": "registry.example/ok/worker:1"}}}
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "outside", body)
            eventually(lambda: apps.list_namespaced_deployment(namespace).items, timeout=40, what="the Deployment")
        finally:
            operator.stop()
    assert "Traceback" not in log.read_text()


def pool_gone(custom: client.CustomObjectsApi, namespace: str, name: str) -> bool:
    try:
        get_pool(custom, namespace, name)
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def config_map(api: client.ApiClient, namespace: str, name: str) -> client.V1ConfigMap:
    return client.CoreV1Api(api).read_namespaced_config_map(name, namespace)


def test_a_taken_name_is_left_alone_reported_and_freed(
    control_plane: ControlPlane, api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path
) -> None:
    """A ConfigMap someone made with a child's name is not taken over (as it was by a forced apply): it keeps its
    data, gains no ownerReference, and so survives the pool's deletion; the pool says which name is taken. Once
    the name is free, the pool gets its children and ChildrenOwned=True."""
    core = client.CoreV1Api(api)
    for name in ("taken", "freed"):
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": f"tierpool-{name}-spec"}, "data": {"mine": "1"}}
        )
    before = config_map(api, namespace, "tierpool-taken-spec").metadata.resource_version
    log = tmp_path / "operator.log"
    env = {"TIERPOOL_FORBIDDEN_RETRY_SECONDS": "3"}
    operator = OperatorProcess(control_plane.kubeconfig_path, log, namespace, env=env).start()
    try:
        for name in ("taken", "freed"):
            make_pool(custom, namespace, name, scaling={"interval": "2s"})
        for name in ("taken", "freed"):
            pool = eventually(
                pool_when(custom, namespace, name, lambda p: (condition(p, "ChildrenOwned") or {}).get("status") == "False"),
                timeout=40,
                what=f"ChildrenOwned=False on {name}",
            )  # fmt: skip
            owned, ready = condition(pool, "ChildrenOwned") or {}, condition(pool, "Ready") or {}
            assert owned["reason"] == ready["reason"] == "NameTaken"
            assert f"ConfigMap tierpool-{name}-spec" in owned["message"] and namespace in owned["message"]
        core.delete_namespaced_config_map("tierpool-freed-spec", namespace)
        eventually(
            pool_when(custom, namespace, "freed", lambda p: (condition(p, "ChildrenOwned") or {}).get("status") == "True"),
            timeout=40,
            what="ChildrenOwned=True once the name is free",
        )  # fmt: skip
        assert client.AppsV1Api(api).read_namespaced_deployment("tierpool-freed", namespace)
        assert config_map(api, namespace, "tierpool-freed-spec").metadata.owner_references
        time.sleep(4)  # a retry or two of the taken pool
        taken = [
            e
            for e in core.list_namespaced_event(namespace).items
            if e.reason == "NameTaken" and e.involved_object.name == "taken"
        ]
        assert len(taken) == 1 and taken[0].type == "Warning", [e.message for e in taken]
        assert (
            not client.AppsV1Api(api)
            .list_namespaced_deployment(namespace, field_selector="metadata.name=tierpool-taken")
            .items
        )
        assert core.read_namespaced_service_account("tierpool-taken", namespace)  # children before it: applied
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "taken")
        eventually(lambda: pool_gone(custom, namespace, "taken"), what="the pool deleted")
    finally:
        operator.stop()

    def gone() -> bool:
        return not core.list_namespaced_service_account(namespace, field_selector="metadata.name=tierpool-taken").items

    eventually(gone, timeout=60, what="the pool's own children collected")
    found = config_map(api, namespace, "tierpool-taken-spec")
    assert found.metadata.resource_version == before and found.data == {"mine": "1"}
    assert found.metadata.owner_references is None and found.metadata.labels is None
    assert "Traceback" not in log.read_text()
