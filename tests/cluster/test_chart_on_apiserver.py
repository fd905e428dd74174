"""The chart on a real API server: server-side dry-run of every manifest, and RBAC proven as its ServiceAccount."""

from __future__ import annotations

import contextlib
import time
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
from tierpool.client.producer import Client
from tierpool.model.resource import parse_pool
from tierpool.protocol.submission import TaskRequest

pytestmark = [pytest.mark.cluster, pytest.mark.helm]
COST = "controller.kubernetes.io/pod-deletion-cost"
RBAC_KINDS = {
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
SKIP_KINDS = {"ServiceMonitor", "PodMonitor", "CustomResourceDefinition"}  # no Prometheus CRDs; ours is installed


def apply(api: client.ApiClient, doc: dict[str, Any], dry_run: bool = False) -> None:
    resource = dynamic.DynamicClient(api).resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    kwargs: dict[str, Any] = {"field_manager": "test", "content_type": "application/apply-patch+yaml"}
    if dry_run:
        kwargs["dry_run"] = "All"
    resource.patch(body=doc, name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"), **kwargs)


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("redis.enabled=true", "redis.password=p"),
        ("watchNamespaces={a,b}",),
        ("networkPolicy.enabled=true", "security.allowedSecretNames={redis}", "security.allowedImagePrefixes={r.io/}"),
    ],
    ids=["defaults", "dev-redis", "namespaced", "hardened"],
)
def test_rendered_chart_passes_server_side_dry_run(helm: Path, api: client.ApiClient, sets: tuple[str, ...]) -> None:
    release_ns = f"rel-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": release_ns}})
    existing = {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}
    for name in {"a", "b"} - existing:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    docs = [d for d in render(helm, *sets, namespace=release_ns, release="dry") if d["kind"] not in SKIP_KINDS]
    assert len(docs) >= 8
    if "networkPolicy.enabled=true" in sets:  # the API server validates the policies themselves too
        assert {d["kind"] for d in docs} >= {"NetworkPolicy", "ValidatingAdmissionPolicy"}
    for doc in docs:
        apply(api, doc, dry_run=True)


@contextlib.contextmanager
def chart_service_account(
    helm: Path, api: client.ApiClient, control_plane: ControlPlane, tmp_path: Path, sets: tuple[str, ...]
) -> Iterator[tuple[Path, client.ApiClient]]:
    """Install the chart's ServiceAccount, RBAC and admission policies (rendered with ``sets``) and return a
    kubeconfig acting as that ServiceAccount, and a client using it. Removes the cluster-wide objects after."""
    release_ns = f"rel-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": release_ns}})
    release = f"r{uuid.uuid4().hex[:5]}"
    docs = render(helm, *sets, namespace=release_ns, release=release)
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS]
    existing = {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}
    for name in {d["metadata"].get("namespace") for d in rbac} - existing - {None}:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    try:
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
        path = control_plane.write_kubeconfig(tmp_path / f"{release}.kubeconfig", token, "tierpool-operator")
        yield path, config.new_client_from_config(config_file=str(path))
    finally:
        remove_cluster_wide(api, rbac)


def remove_cluster_wide(api: client.ApiClient, rbac: list[dict[str, Any]]) -> None:
    rbac_api = client.RbacAuthorizationV1Api(api)
    for doc in rbac:
        with contextlib.suppress(client.exceptions.ApiException):  # not applied: an earlier apply failed
            if doc["kind"] == "ClusterRole":
                rbac_api.delete_cluster_role(doc["metadata"]["name"])
            elif doc["kind"] == "ClusterRoleBinding":
                rbac_api.delete_cluster_role_binding(doc["metadata"]["name"])
            elif doc["kind"].startswith("ValidatingAdmissionPolicy"):
                dynamic.DynamicClient(api).resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).delete(
                    name=doc["metadata"]["name"]
                )


@pytest.fixture
def as_chart_service_account(
    request: pytest.FixtureRequest,
    helm: Path,
    api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> Iterator[tuple[Path, client.ApiClient]]:
    """Install the chart's ServiceAccount and RBAC (watching `namespace`) and return a kubeconfig acting as it.
    Indirect parameters: more ``--set`` values."""
    sets = (f"watchNamespaces={{{namespace}}}", *getattr(request, "param", ()))
    with chart_service_account(helm, api, control_plane, tmp_path, sets) as found:
        yield found


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


@pytest.mark.parametrize("as_chart_service_account", [("secretNamespaces={elsewhere}",)], indirect=True)
def test_a_secret_the_chart_does_not_allow_gets_a_condition_not_a_retry_loop(
    as_chart_service_account: tuple[Path, client.ApiClient],
    custom: client.CustomObjectsApi,
    api: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A password in spec.redis.url needs the operator's own Secret, which RBAC allows only in secretNamespaces:
    outside them the pool says so in Ready (naming the value to set), the operator tries again slowly instead of
    on kopf's 5 s backoff, and it converges once RBAC allows the Secret."""
    kubeconfig, _ = as_chart_service_account
    spec = {"tiers": [{"name": "p0", "weight": 1}], "redis": {"url": "redis://:hunter2@redis.example:6379/0"}}
    document = agentpool("locked", spec)
    document["metadata"]["namespace"] = namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, document)
    log = tmp_path / "operator.log"
    env = {"TIERPOOL_FORBIDDEN_RETRY_SECONDS": "20"}
    operator = OperatorProcess(kubeconfig, log, namespace, env=env).start()
    apps = client.AppsV1Api(api)
    try:
        pool = eventually(
            pool_when(
                custom, namespace, "locked", lambda p: (condition(p, "Ready") or {}).get("reason") == "Forbidden"
            ),
            timeout=40,
            what="Ready=False/Forbidden",
        )
        message = (condition(pool, "Ready") or {})["message"]
        assert "secretNamespaces" in message and namespace in message and "Secret tierpool-locked-redis" in message
        time.sleep(12)
        attempts = log.read_text().count("; retrying in 20s")
        assert attempts == 1, f"{attempts} attempts in 12 s"
        assert not apps.list_namespaced_deployment(namespace).items
        grant_secrets(api, namespace, kubeconfig)
        eventually(lambda: apps.list_namespaced_deployment(namespace).items, timeout=40, what="the Deployment")
        eventually(
            pool_when(
                custom, namespace, "locked", lambda p: (condition(p, "Ready") or {}).get("reason") != "Forbidden"
            ),
            what="Ready no longer Forbidden",
        )
    finally:
        operator.stop()


def grant_secrets(api: client.ApiClient, namespace: str, kubeconfig: Path) -> None:
    """What adding the namespace to secretNamespaces grants: the Secret verbs, to the kubeconfig's ServiceAccount."""
    user = config.new_client_from_config(config_file=str(kubeconfig))
    who = (
        client.AuthenticationV1Api(user)
        .create_self_subject_review({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        .status.user_info.username
    )
    _, account_namespace, account = who.split(":")[1:]
    rbac = client.RbacAuthorizationV1Api(api)
    rule = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]}
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "secrets"}, "rules": [rule]})
    subject = {"kind": "ServiceAccount", "name": account, "namespace": account_namespace}
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secrets"}
    binding = {"metadata": {"name": "secrets"}, "subjects": [subject], "roleRef": role_ref}
    rbac.create_namespaced_role_binding(namespace, binding)


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
        ("list", "pods", namespace, "", ""),  # the deletion-cost annotation before a scale-in
        ("patch", "pods", namespace, "", ""),  # narrowed further by the chart's ValidatingAdmissionPolicy
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
        ("delete", "pods", namespace, "", ""),
        ("create", "pods", namespace, "", "eviction"),
        ("list", "pods", "default", "", ""),
        ("get", "pods", namespace, "", ""),
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


def test_without_pods_permission_the_pool_still_scales_in(
    as_chart_service_account: tuple[Path, client.ApiClient],
    custom: client.CustomObjectsApi,
    api: client.ApiClient,
    namespace: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    """A chart older than the deletion-cost annotation (no pods verbs): scale-in goes ahead without costs, and one
    Warning Event names the missing permission, however many scale-ins follow."""
    kubeconfig, _ = as_chart_service_account
    rbac = client.RbacAuthorizationV1Api(api)
    [role] = [
        b.role_ref.name for b in rbac.list_namespaced_role_binding(namespace).items if "secrets" not in b.role_ref.name
    ]
    rules = rbac.read_cluster_role(role).rules
    rbac.patch_cluster_role(
        role, {"rules": [api.sanitize_for_serialization(r) for r in rules if "pods" not in r.resources]}
    )
    spec = {
        "tiers": [{"name": "p0", "weight": 1}],
        "redis": {"url": redis_url},
        "replicas": {"min": 0, "max": 4, "desired": 3},
        "scaling": {"policy": "external", "interval": "1s"},
    }
    document = agentpool("nopods", spec)
    document["metadata"]["namespace"] = namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, document)
    log = tmp_path / "operator.log"
    operator = OperatorProcess(kubeconfig, log, namespace).start()
    apps = client.AppsV1Api(api)
    replicas = lambda: apps.read_namespaced_deployment("tierpool-nopods", namespace).spec.replicas  # noqa: E731
    try:
        eventually(lambda: replicas() == 3, timeout=40, what="three replicas")
        for desired in (2, 1):
            body = {"spec": {"replicas": {"desired": desired}}}
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "nopods", body)
            eventually(lambda: replicas() == desired, timeout=40, what=f"scale-in to {desired} without pods access")
        events = eventually(
            lambda: [
                e
                for e in client.CoreV1Api(api).list_namespaced_event(namespace).items
                if e.reason == "DeletionCostForbidden"
            ],
            what="the DeletionCostForbidden Event",
        )
        time.sleep(2)
    finally:
        operator.stop()
    assert len(events) == 1 and (events[0].count or 1) == 1, [(e.message, e.count) for e in events]
    assert "may not list pods" in events[0].message and events[0].type == "Warning"
    assert log.read_text().count("may not list pods") == 2 and "Traceback" not in log.read_text()


def patch_as(api: client.ApiClient, namespace: str, name: str, body: dict[str, Any]) -> int:
    """The HTTP status of a strategic merge patch of a pod: 200, or the refusal's status."""
    kind = "application/strategic-merge-patch+json"
    try:
        client.CoreV1Api(api).patch_namespaced_pod(name, namespace, body, _content_type=kind)
    except client.exceptions.ApiException as error:
        return int(error.status)
    return 200


def bare_pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    container = {"name": "c", "image": "registry.invalid/none:1"}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"containers": [container]}}


@pytest.mark.parametrize("as_chart_service_account", [("watchNamespaces=null",)], indirect=True)
def test_default_install_may_patch_only_the_cost_annotation_of_worker_pods(
    as_chart_service_account: tuple[Path, client.ApiClient], api: client.ApiClient, namespace: str
) -> None:
    """A default install (watchNamespaces empty) binds the pods verbs cluster-wide, as RBAC cannot name a label or
    a field; the chart's ValidatingAdmissionPolicy is what keeps the operator to the deletion-cost annotation of
    worker pods: a pod in kube-system, a non-worker pod, or any other change of a worker pod is refused."""
    _, sa = as_chart_service_account
    assert can_i(sa, "patch", "pods", "kube-system") and not can_i(sa, "get", "pods", "kube-system")
    core = client.CoreV1Api(api)
    system = f"system-{uuid.uuid4().hex[:5]}"
    core.create_namespaced_pod("kube-system", bare_pod(system, {"app": "dns"}))
    core.create_namespaced_pod(namespace, bare_pod("worker", {"app.kubernetes.io/name": "tierpool-worker"}))
    core.create_namespaced_pod(namespace, bare_pod("other", {"app.kubernetes.io/name": "other"}))
    cost = {"metadata": {"annotations": {COST: "3"}}}
    try:
        eventually(lambda: patch_as(sa, "kube-system", system, cost) == 403, what="the policy in force")
        assert patch_as(sa, namespace, "other", cost) == 403
        assert patch_as(sa, namespace, "worker", cost) == 200
        assert core.read_namespaced_pod("worker", namespace).metadata.annotations[COST] == "3"
        assert patch_as(sa, namespace, "worker", {"metadata": {"annotations": {COST: None}}}) == 200
        refused = [
            {"metadata": {"annotations": {COST: "1", "other": "x"}}},
            {"metadata": {"labels": {"app.kubernetes.io/name": "tierpool-worker", "extra": "x"}}},
            {"metadata": {"finalizers": ["example.com/hold"]}},
            {"spec": {"containers": [{"name": "c", "image": "registry.invalid/evil:1"}]}},  # would run other code
            {"spec": {"activeDeadlineSeconds": 5}},
        ]
        for body in refused:
            assert patch_as(sa, namespace, "worker", body) == 403, body
        assert COST not in (core.read_namespaced_pod("worker", namespace).metadata.annotations or {})
        other = {"metadata": {"annotations": {"other": "x"}}}
        assert patch_as(api, namespace, "worker", other) == 200  # anyone but the operator: not matched
    finally:
        core.delete_namespaced_pod(system, "kube-system", grace_period_seconds=0)
