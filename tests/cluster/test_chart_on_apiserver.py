"""The chart on a real API server: server-side dry-run of every manifest, and RBAC proven as its ServiceAccount."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client, config, dynamic

from tests.cluster.conftest import GROUP, PLURAL, VERSION, OperatorProcess, agentpool
from tests.cluster.harness import ControlPlane
from tests.cluster.test_operator import condition, condition_is, eventually, pool_when
from tests.helm.chart import render
from tierpool.client import Client
from tierpool.resource import parse_pool
from tierpool.submission import TaskRequest

pytestmark = [pytest.mark.cluster, pytest.mark.helm]
SKIP_KINDS = {"ServiceMonitor", "PodMonitor", "CustomResourceDefinition"}  # no Prometheus CRDs; ours is installed


def apply(api: client.ApiClient, doc: dict[str, Any], dry_run: bool = False) -> None:
    resource = dynamic.DynamicClient(api).resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    kwargs: dict[str, Any] = {"field_manager": "test", "content_type": "application/apply-patch+yaml"}
    if dry_run:
        kwargs["dry_run"] = "All"
    resource.patch(body=doc, name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"), **kwargs)


@pytest.mark.parametrize(
    "sets",
    [(), ("redis.enabled=true", "redis.password=p"), ("watchNamespaces={a,b}",)],
    ids=["defaults", "dev-redis", "namespaced"],
)
def test_rendered_chart_passes_server_side_dry_run(helm: Path, api: client.ApiClient, sets: tuple[str, ...]) -> None:
    release_ns = f"rel-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": release_ns}})
    existing = {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}
    for name in {"a", "b"} - existing:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    docs = [d for d in render(helm, *sets, namespace=release_ns, release="dry") if d["kind"] not in SKIP_KINDS]
    assert len(docs) >= 8
    for doc in docs:
        apply(api, doc, dry_run=True)


@pytest.fixture
def as_chart_service_account(
    helm: Path, api: client.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[tuple[Path, client.ApiClient]]:
    """Install the chart's ServiceAccount and RBAC (watching `namespace`) and return a kubeconfig acting as it."""
    release_ns = f"rel-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": release_ns}})
    release = f"r{uuid.uuid4().hex[:5]}"
    docs = render(helm, f"watchNamespaces={{{namespace}}}", namespace=release_ns, release=release)
    rbac = [
        d for d in docs if d["kind"] in {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    ]
    for doc in rbac:
        apply(api, doc)
    [account] = [d for d in rbac if d["kind"] == "ServiceAccount"]
    token = (
        client.CoreV1Api(api)
        .create_namespaced_service_account_token(
            account["metadata"]["name"], release_ns, {"spec": {"expirationSeconds": 3600}}
        )
        .status.token
    )
    path = control_plane.write_kubeconfig(tmp_path / "operator.kubeconfig", token, "tierpool-operator")
    yield path, config.new_client_from_config(config_file=str(path))
    rbac_api = client.RbacAuthorizationV1Api(api)
    for doc in rbac:
        if doc["kind"] == "ClusterRole":
            rbac_api.delete_cluster_role(doc["metadata"]["name"])
        elif doc["kind"] == "ClusterRoleBinding":
            rbac_api.delete_cluster_role_binding(doc["metadata"]["name"])


def can_i(
    api: client.ApiClient, verb: str, resource: str, namespace: str | None, group: str = "", subresource: str = ""
) -> bool:
    review = client.AuthorizationV1Api(api).create_self_subject_access_review(
        {
            "spec": {
                "resourceAttributes": {
                    "verb": verb,
                    "resource": resource,
                    "namespace": namespace,
                    "group": group,
                    "subresource": subresource,
                }
            }
        }
    )
    return bool(review.status.allowed)


def test_operator_does_its_whole_job_as_the_chart_service_account(
    as_chart_service_account: tuple[Path, client.ApiClient],
    custom: client.CustomObjectsApi,
    api: client.ApiClient,
    namespace: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    kubeconfig, _ = as_chart_service_account
    client.CoreV1Api(api).create_namespaced_secret(
        namespace, {"metadata": {"name": "redis"}, "stringData": {"url": redis_url}}
    )
    spec = {
        "tiers": [{"name": "p0", "weight": 1, "sla": "30s"}],
        "redis": {"urlSecretRef": {"name": "redis", "key": "url"}},
        "replicas": {"min": 1, "max": 4},
        "worker": {"concurrency": 1},
        "scaling": {"interval": "2s", "taskSeconds": "1s"},
    }
    document = agentpool("rbac", spec)
    document["metadata"]["namespace"] = namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, document)
    operator = OperatorProcess(kubeconfig, tmp_path / "operator.log", namespace).start()
    try:
        eventually(  # no kubelet here, so never True: the operator read its Deployment and wrote status
            pool_when(
                custom, namespace, "rbac", lambda p: (condition(p, "Ready") or {}).get("reason") == "WorkersNotReady"
            ),
            timeout=40,
            what="Ready written",
        )
        Client(redis.Redis.from_url(redis_url, decode_responses=True), parse_pool(document)).submit_many(
            [TaskRequest("p0", {}) for _ in range(40)]
        )
        apps = client.AppsV1Api(api)
        eventually(
            lambda: apps.read_namespaced_deployment("tierpool-rbac", namespace).spec.replicas > 1,
            timeout=40,
            what="scale-up through /scale as the ServiceAccount",
        )
        eventually(
            pool_when(custom, namespace, "rbac", condition_is("RedisReachable", "True")), what="redis via Secret"
        )
        eventually(  # a status written between the submit and the next observation may still show less
            pool_when(custom, namespace, "rbac", lambda p: p.get("status", {}).get("backlog") == 40),
            timeout=40,
            what="the backlog of 40 in status",
        )
    finally:
        operator.stop()
    assert "Forbidden" not in (tmp_path / "operator.log").read_text()


def test_service_account_cannot_do_more(
    as_chart_service_account: tuple[Path, client.ApiClient], namespace: str
) -> None:
    _, sa = as_chart_service_account
    allowed = [
        ("get", "secrets", namespace, "", ""),
        ("create", "secrets", namespace, "", ""),  # its own tierpool-<pool>-redis Secret
        ("patch", "secrets", namespace, "", ""),
        ("create", "deployments", namespace, "apps", ""),
        ("patch", "deployments", namespace, "apps", "scale"),
        ("patch", "agentpools", namespace, GROUP, "status"),
        ("watch", "agentpools", namespace, GROUP, ""),
        ("create", "events", namespace, "", ""),
        ("list", "customresourcedefinitions", None, "apiextensions.k8s.io", ""),
    ]
    denied = [
        ("get", "secrets", "default", "", ""),
        ("list", "secrets", None, "", ""),
        ("create", "secrets", "default", "", ""),
        ("patch", "secrets", "default", "", ""),
        ("delete", "secrets", namespace, "", ""),
        ("create", "pods", namespace, "", ""),
        ("create", "pods", namespace, "", "exec"),
        ("list", "pods", namespace, "", ""),
        ("delete", "deployments", namespace, "apps", ""),
        ("create", "deployments", "default", "apps", ""),
        ("create", "clusterroles", None, "rbac.authorization.k8s.io", ""),
        ("patch", "nodes", None, "", ""),
        ("create", "customresourcedefinitions", None, "apiextensions.k8s.io", ""),
        ("delete", "agentpools", namespace, GROUP, ""),
        ("update", "configmaps", "kube-system", "", ""),
    ]
    for verb, resource, ns, group, sub in allowed:
        assert can_i(sa, verb, resource, ns, group, sub), f"should be allowed: {verb} {resource}/{sub} in {ns}"
    for verb, resource, ns, group, sub in denied:
        assert not can_i(sa, verb, resource, ns, group, sub), f"should be denied: {verb} {resource}/{sub} in {ns}"
