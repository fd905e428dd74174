"""The generated CRD on a real API server: accepted, and bad AgentPools rejected at admission with the field named.

The same table runs through the model (`tierpool validate`), so the CLI and the API server agree.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import GROUP, PLURAL, VERSION, agentpool
from tests.cluster.harness import ControlPlane
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
