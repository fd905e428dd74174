"""Admission on a real API server. The generated CRD: accepted, and bad AgentPools rejected with the field named
(the same table runs through the model, `tierpool validate`, so the CLI and the API server agree). The chart's
child policies: a worker Deployment or Secret the operator never renders is refused the operator's token, naming
the field, while what it renders from a pool that sets every optional worker field passes.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import GROUP, PLURAL, VERSION, agentpool
from tests.cluster.harness import ControlPlane
from tests.cluster.test_chart_on_apiserver import chart_service_account
from tests.cluster.test_least_privilege import CLUSTER_WIDE, Manifest, edited, make_pool, pool_children, write_as
from tests.cluster.test_least_privilege import worker_pod as pod
from tests.cluster.test_operator import eventually
from tierpool.model.resource import SpecError, parse_pool

pytestmark = pytest.mark.cluster
TIERS = [{"name": "p0", "weight": 70, "sla": "30s"}, {"name": "p1", "weight": 25, "escalateAfter": "7m"}]


def spec(**overrides: Any) -> dict[str, Any]:
    return {"tiers": TIERS, **overrides}


BAD = [
    ("min > max", spec(replicas={"min": 5, "max": 2}), "spec.replicas.min"),
    ("zero weight", {"tiers": [{"name": "p0", "weight": 0}]}, "spec.tiers[0].weight"),
    ("negative weight", {"tiers": [{"name": "p0", "weight": -1}]}, "spec.tiers[0].weight"),
    ("weight not a number", {"tiers": [{"name": "p0", "weight": "high"}]}, "spec.tiers[0].weight"),
    ("missing weight", {"tiers": [{"name": "p0"}]}, "spec.tiers[0].weight"),
    ("duplicate tier names", {"tiers": [{"name": "a", "weight": 1}, {"name": "a", "weight": 2}]}, "spec.tiers[1]"),
    ("escalateAfter on the top tier", {"tiers": [{"name": "p0", "weight": 1, "escalateAfter": "1m"}]}, "escalateAfter"),
    (
        "preemptible on the top tier",
        {"tiers": [{"name": "p0", "weight": 1, "preemptible": True}, {"name": "p1", "weight": 1}]},
        "preemptible",
    ),
    ("bad sla duration", {"tiers": [{"name": "p0", "weight": 1, "sla": "soon"}]}, "spec.tiers[0].sla"),
    (
        "bad escalateAfter duration",
        {"tiers": [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "escalateAfter": "7 minutes"}]},
        "spec.tiers[1].escalateAfter",
    ),
    ("claimIdle equal to heartbeat", spec(recovery={"claimIdle": "10s", "heartbeat": "10s"}), "claimIdle"),
    ("claimIdle below heartbeat", spec(recovery={"claimIdle": "5s", "heartbeat": "1m"}), "claimIdle"),
    ("bad claimIdle duration", spec(recovery={"claimIdle": "5 minutes"}), "spec.recovery.claimIdle"),
    ("no tiers", {"tiers": []}, "spec.tiers"),
    ("too many tiers", {"tiers": [{"name": f"t{i}", "weight": 1} for i in range(17)]}, "spec.tiers"),
    ("tier name not DNS-safe", {"tiers": [{"name": "P_0", "weight": 1}]}, "spec.tiers[0].name"),
    ("tier name too long", {"tiers": [{"name": "a" * 64, "weight": 1}]}, "spec.tiers[0].name"),
    ("handler without a function", spec(worker={"handler": "nocolon"}), "spec.worker.handler"),
    ("zero concurrency", spec(worker={"concurrency": 0}), "spec.worker.concurrency"),
    ("privileged metrics port", spec(worker={"metricsPort": 80}), "spec.worker.metricsPort"),
    ("bad imagePullPolicy", spec(worker={"imagePullPolicy": "Sometimes"}), "spec.worker.imagePullPolicy"),
    (
        "zero grace period",
        spec(worker={"terminationGracePeriodSeconds": 0}),
        "spec.worker.terminationGracePeriodSeconds",
    ),
    ("non-redis url", spec(redis={"url": "http://redis:6379"}), "spec.redis.url"),
    (
        "insecure TLS with a CA",
        spec(redis={"tls": {"insecureSkipVerify": True, "caSecretRef": {"name": "c", "key": "k"}}}),
        "insecureSkipVerify",
    ),
    (
        "a CA with TLS off",
        spec(redis={"url": "redis://r", "tls": {"caSecretRef": {"name": "c", "key": "k"}}}),
        "spec.redis.tls",
    ),
    (
        "a client certificate without its key",
        spec(redis={"url": "rediss://r", "tls": {"certSecretRef": {"name": "c", "key": "tls.crt"}}}),
        "spec.redis.tls.certSecretRef",
    ),
    ("sentinel mode without sentinels", spec(redis={"mode": "sentinel"}), "spec.redis.sentinel"),
    (
        "sentinels outside sentinel mode",
        spec(redis={"url": "redis://r", "sentinel": {"masterName": "m", "sentinels": ["s:26379"]}}),
        "spec.redis.sentinel",
    ),
    (
        "a sentinel address without a port",
        spec(redis={"mode": "sentinel", "sentinel": {"masterName": "m", "sentinels": ["s"]}}),
        "spec.redis.sentinel.sentinels[0]",
    ),
    (
        "waitReplicas on a cluster",
        spec(redis={"mode": "cluster", "url": "redis://r", "waitReplicas": 1}),
        "spec.redis.waitReplicas",
    ),
    ("a zero waitTimeout", spec(redis={"waitReplicas": 1, "waitTimeout": "0s"}), "spec.redis.waitTimeout"),
    ("unknown scaling policy", spec(scaling={"policy": "magic"}), "spec.scaling.policy"),
    ("drainFraction above 1", spec(scaling={"drainFraction": 1.5}), "spec.scaling.drainFraction"),
    ("maxDeliveries 0", spec(recovery={"maxDeliveries": 0}), "spec.recovery.maxDeliveries"),
    ("negative min replicas", spec(replicas={"min": -1, "max": 2}), "spec.replicas.min"),
    ("payload limit too small", spec(tasks={"maxPayloadBytes": 10}), "spec.tasks.maxPayloadBytes"),
    ("zero time limit", spec(tasks={"timeout": "0s"}), "spec.tasks.timeout"),
    ("too many deferrals", spec(recovery={"maxDeferrals": 1001}), "spec.recovery.maxDeferrals"),
    (
        "escalation cap without escalateAfter",
        {"tiers": [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "escalateMaxTargetBacklog": 3}]},
        "escalateMaxTargetBacklog",
    ),
    (
        "reservedSlots on the lowest tier",
        {"tiers": [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "reservedSlots": 1}]},
        "reservedSlots",
    ),
    (
        "reservations leave the lowest tier no slot",
        {"tiers": [{"name": "p0", "weight": 1, "reservedSlots": 8}, {"name": "p1", "weight": 1}]},
        "reservedSlots",
    ),
]


@pytest.mark.parametrize(("case", "body", "field"), BAD, ids=[case for case, _, _ in BAD])
def test_bad_pool_rejected_at_admission(
    custom: client.CustomObjectsApi, namespace: str, case: str, body: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiException) as raised:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("bad", body))
    assert raised.value.status == 422, raised.value.body
    assert field in raised.value.body, raised.value.body
    with pytest.raises(SpecError):
        parse_pool({"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentPool", "metadata": {"name": "bad"}, "spec": body})


def test_unknown_field_rejected_with_strict_validation(custom: client.CustomObjectsApi, namespace: str) -> None:
    body = agentpool("strict", spec(colour="blue"))
    with pytest.raises(ApiException) as raised:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, field_validation="Strict")
    assert raised.value.status == 400
    assert 'unknown field \\"spec.colour\\"' in raised.value.body


def test_valid_pool_accepted_with_defaults(custom: client.CustomObjectsApi, namespace: str) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("ok", spec()))
    assert created["spec"]["recovery"] == {
        "claimIdle": "1m",
        "heartbeat": "10s",
        "maxDeferrals": 10,
        "maxDeliveries": 5,
        "retryBackoff": "1s",
        "sweepInterval": "2s",
    }
    assert created["spec"]["replicas"] == {"min": 1, "max": 10, "desired": 1}
    assert created["spec"]["scaling"]["policy"] == "sla"
    parse_pool(created)  # the model accepts what the API server stored, defaults included


def test_a_sentinel_pool_with_wait_is_accepted(custom: client.CustomObjectsApi, namespace: str) -> None:
    sentinel = {
        "masterName": "m",
        "sentinels": ["s0:26379", "[::1]:26379"],
        "passwordSecretRef": {"name": "s", "key": "p"},
    }
    body = spec(redis={"mode": "sentinel", "sentinel": sentinel, "waitReplicas": 1, "waitTimeout": "200ms"})
    created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("sentinel", body))
    assert parse_pool(created).spec.redis.sentinel is not None


def test_printer_columns_and_scale_subresource(
    control_plane: ControlPlane, custom: client.CustomObjectsApi, namespace: str
) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("cols", spec()))
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        "cols",
        {"status": {"replicas": 2, "readyReplicas": 1, "desiredReplicas": 2, "backlog": 7, "selector": "a=b"}},
    )
    scale = custom.get_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "cols")
    assert scale["status"] == {"replicas": 2, "selector": "a=b"}
    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, "cols", {"spec": {"replicas": 4}})
    assert (
        custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "cols")["spec"]["replicas"]["desired"]
        == 4
    )
    table = control_plane.get_json(
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}",
        accept="application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns[:5] == ["Name", "Ready", "Desired", "Backlog", "Oldest"]
    assert table["rows"][0]["cells"][1:4] == [1, 2, 7]


def container(deployment: Manifest) -> dict[str, Any]:
    return pod(deployment)["containers"][0]  # type: ignore[no-any-return]


def init_container(**security: Any) -> dict[str, Any]:
    """An init container that passes every rule but those ``security`` breaks."""
    context = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, **security}
    return {"name": "init", "image": "registry.example/init:1", "securityContext": context}


WORKER_EDITS: list[tuple[str, Callable[[Manifest], object], str]] = [
    ("a capability added", lambda d: container(d)["securityContext"]["capabilities"].update(add=["NET_ADMIN"]), "capabilities.add"),
    ("an init container adding a capability", lambda d: pod(d).update(initContainers=[init_container(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]})]), "capabilities.add"),
    ("capabilities kept", lambda d: container(d)["securityContext"].pop("capabilities"), "capabilities.drop"),
    ("an init container keeping its capabilities", lambda d: pod(d).update(initContainers=[init_container(capabilities={})]), "capabilities.drop"),
    ("privilege escalation allowed", lambda d: container(d)["securityContext"].update(allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
    ("privilege escalation left to its default", lambda d: container(d)["securityContext"].pop("allowPrivilegeEscalation"), "allowPrivilegeEscalation"),
    ("an init container escalating", lambda d: pod(d).update(initContainers=[init_container(allowPrivilegeEscalation=True)]), "allowPrivilegeEscalation"),
    ("root for the pod", lambda d: pod(d)["securityContext"].update(runAsUser=0), "runAsUser 0"),
    ("root for the container", lambda d: container(d)["securityContext"].update(runAsUser=0), "runAsUser 0"),
    ("root for an init container", lambda d: pod(d).update(initContainers=[init_container(runAsUser=0)]), "runAsUser 0"),
    ("runAsNonRoot off in the container", lambda d: container(d)["securityContext"].update(runAsNonRoot=False), "runAsNonRoot"),
    ("runAsNonRoot nowhere", lambda d: (pod(d)["securityContext"].pop("runAsNonRoot"), container(d)["securityContext"].pop("runAsNonRoot")), "runAsNonRoot"),
    ("a hostPort", lambda d: container(d)["ports"][0].update(hostPort=9100), "hostPort"),
    ("an init container's hostPort", lambda d: pod(d).update(initContainers=[{**init_container(), "ports": [{"containerPort": 80, "hostPort": 80}]}]), "hostPort"),
    ("bound to a node", lambda d: pod(d).update(nodeName="control-plane-1"), "nodeName"),
    ("tolerating every taint", lambda d: pod(d).update(tolerations=[{"operator": "Exists"}]), "tolerations"),
    ("a grace period past the model's bound", lambda d: pod(d).update(terminationGracePeriodSeconds=86_401), "terminationGracePeriodSeconds"),
    ("no grace period", lambda d: pod(d).update(terminationGracePeriodSeconds=0), "terminationGracePeriodSeconds"),
    ("a projected ServiceAccount token", lambda d: pod(d).setdefault("volumes", []).append({"name": "tok", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "audience": "vault"}}]}}), "serviceAccountToken"),
    ("seccomp off for the pod", lambda d: pod(d)["securityContext"].update(seccompProfile={"type": "Unconfined"}), "seccompProfile"),
    ("seccomp off for the container", lambda d: container(d)["securityContext"].update(seccompProfile={"type": "Unconfined"}), "seccompProfile"),
    ("group root for the pod", lambda d: pod(d)["securityContext"].update(runAsGroup=0), "runAsGroup 0"),
    ("group root for an init container", lambda d: pod(d).update(initContainers=[init_container(runAsGroup=0)]), "runAsGroup 0"),
    ("a node-critical priority", lambda d: pod(d).update(priorityClassName="system-node-critical"), "priorityClassName"),
]  # fmt: skip


CHILD_KINDS = {"ServiceAccount", "ConfigMap", "PodDisruptionBudget", "Secret", "Deployment"}


def foreign_secret(secret: Manifest, kind: str, data: dict[str, str], **annotations: str) -> Manifest:
    """The pool's Secret (its name, labels and owner) of another type."""
    metadata = {**secret["metadata"], "annotations": annotations}
    return {**secret, "metadata": metadata, "type": kind, "data": data}


def every_worker_field(namespace: str, custom: client.CustomObjectsApi) -> list[dict[str, Any]]:
    """Pools that between them set every optional worker field at its bounds, and every Secret-backed Redis setting."""
    refs = {f"{part}SecretRef": {"name": "redis-tls", "key": f"tls.{part}"} for part in ("ca", "cert", "key")}
    env = [
        {"name": "PLAIN", "value": "1"},
        {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "api-key", "key": "k"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    full = {
        "handler": "agents.handlers:run",
        "concurrency": 10_000,
        "dispatch": "strict",
        "image": "registry.example/agents/worker:1",
        "imagePullPolicy": "Always",
        "env": env,
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": 2, "memory": "1Gi"}},
        "terminationGracePeriodSeconds": 86_400,
        "metricsPort": 65_535,
    }
    sentinel = {"masterName": "m", "sentinels": ["s0:26379"], "passwordSecretRef": {"name": "s", "key": "p"}}
    return [
        make_pool(
            custom, namespace, "full", worker=full, redis={"url": "rediss://:pw@redis.invalid:6380/0", "tls": refs}
        ),
        make_pool(
            custom,
            namespace,
            "brief",
            worker={"terminationGracePeriodSeconds": 1, "metricsPort": 1024},
            redis={
                "mode": "sentinel",
                "sentinel": sentinel,
                "passwordSecretRef": {"name": "redis", "key": "password"},
                "tls": {"enabled": True, "insecureSkipVerify": True},
            },
        ),
        make_pool(custom, namespace, "ref", redis={"urlSecretRef": {"name": "redis", "key": "url"}}),
    ]


@pytest.mark.helm
def test_child_policies_refuse_what_no_pool_renders_and_admit_what_every_pool_does(
    helm: Path,
    api: client.ApiClient,
    control_plane: ControlPlane,
    custom: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A stolen operator token may not give a worker Deployment root (user or group), capabilities, privilege
    escalation, Unconfined seccomp, a projected ServiceAccount token, a hostPort, a node of its choosing, tolerations,
    a priority class or an unbounded grace period (init containers included), nor
    write a service-account-token or dockerconfigjson Secret under a pool's name. What the operator renders passes."""
    pools = every_worker_field(namespace, custom)
    children = [child for body in pools for child in pool_children(body)]
    deployment = next(child for child in children if child["kind"] == "Deployment")
    [secret] = [child for child in children if child["kind"] == "Secret"]
    docker = {".dockerconfigjson": base64.b64encode(b'{"auths": {}}').decode()}
    account = {"kubernetes.io/service-account.name": "default"}  # the token controller fills in its token
    refused = [(case, edited(deployment, edit), "workers", text) for case, edit, text in WORKER_EDITS] + [
        ("a service-account-token Secret", foreign_secret(secret, "kubernetes.io/service-account-token", {}, **account), "children", "type Opaque"),
        ("a dockerconfigjson Secret", foreign_secret(secret, "kubernetes.io/dockerconfigjson", docker), "children", "type Opaque"),
    ]  # fmt: skip
    sets = (CLUSTER_WIDE, f"secretNamespaces={{{namespace}}}")
    with chart_service_account(helm, api, control_plane, tmp_path, sets) as (_, sa):
        elsewhere = edited(deployment, lambda d: pod(d).update(serviceAccountName="default"))  # an older rule
        eventually(lambda: write_as(sa, elsewhere)[0] == 403, what="the policies in force")
        wrong = []
        for case, manifest, policy, text in refused:
            status, message = write_as(sa, manifest)
            if status != 403 or f"-tierpool-{policy}'" not in message or text not in message:
                wrong.append(f"{case}: {status} {message[:400]}")
        assert not wrong, "\n".join(wrong)
        assert {child["kind"] for child in children} == CHILD_KINDS
        admitted = [(child["metadata"]["name"], write_as(sa, child, dry_run=False)) for child in children]
        assert [found for found in admitted if found[1] != (200, "")] == []
