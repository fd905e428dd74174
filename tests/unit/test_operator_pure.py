"""Operator decisions without a cluster: manifests, the apply-if-different comparison, status conditions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tierpool.observation import PoolObservation, TierObservation
from tierpool.resource import parse_pool
from tierpool.scaling import Decision, History
from tierpool_operator import conditions, manifests
from tierpool_operator.config import OperatorConfig, operator_identity, own_identity
from tierpool_operator.kube import is_subset, without


def pool(**spec: Any) -> Any:
    document = {"tiers": [{"name": "p0", "weight": 3, "sla": "30s"}, {"name": "p1", "weight": 1}], **spec}
    return parse_pool(
        {
            "apiVersion": "tierpool.io/v1alpha1",
            "kind": "AgentPool",
            "metadata": {"name": "agents", "namespace": "team"},
            "spec": document,
        }
    )


def env_of(deployment: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


REDIS_ENV = [
    ({"url": "redis://r:6379/0"}, {"TIERPOOL_REDIS_URL": {"name": "TIERPOOL_REDIS_URL", "value": "redis://r:6379/0"}}),
    (
        {"urlSecretRef": {"name": "s", "key": "url"}},
        {
            "TIERPOOL_REDIS_URL": {
                "name": "TIERPOOL_REDIS_URL",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "url"}},
            }
        },
    ),
    (
        {"url": "redis://r", "passwordSecretRef": {"name": "s", "key": "pw"}},
        {
            "TIERPOOL_REDIS_PASSWORD": {
                "name": "TIERPOOL_REDIS_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}},
            }
        },
    ),
    (
        {"url": "redis://r", "tls": {"enabled": True, "caSecretRef": {"name": "ca", "key": "ca.crt"}}},
        {
            "TIERPOOL_REDIS_TLS": {"name": "TIERPOOL_REDIS_TLS", "value": "true"},
            "TIERPOOL_REDIS_TLS_CA_FILE": {
                "name": "TIERPOOL_REDIS_TLS_CA_FILE",
                "value": "/etc/tierpool/redis-ca/ca.crt",
            },
        },
    ),
    (
        {"url": "rediss://r", "tls": {"insecureSkipVerify": True}},
        {"TIERPOOL_REDIS_TLS_INSECURE": {"name": "TIERPOOL_REDIS_TLS_INSECURE", "value": "true"}},
    ),
]


@pytest.mark.parametrize(("redis", "expected"), REDIS_ENV)
def test_redis_settings_reach_the_container(redis: dict[str, Any], expected: dict[str, Any]) -> None:
    env = env_of(manifests.deployment(pool(redis=redis), "uid-1", 1))
    for name, var in expected.items():
        assert env[name] == var


def test_deployment_is_restricted_and_owned() -> None:
    deployment = manifests.deployment(pool(worker={"terminationGracePeriodSeconds": 90}), "uid-1", 3)
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert deployment["spec"]["replicas"] == 3 and pod["terminationGracePeriodSeconds"] == 90
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"] == {
        "type": "RuntimeDefault"
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert pod["automountServiceAccountToken"] is False


def test_spec_hash_changes_with_the_spec_only() -> None:
    a, b = pool(), pool(worker={"concurrency": 3})
    assert manifests.spec_hash(a) == manifests.spec_hash(pool())
    assert manifests.spec_hash(a) != manifests.spec_hash(b)
    config = manifests.config_map(a, "u")
    assert json.loads(config["data"]["pool.json"])["metadata"] == {"name": "agents", "namespace": "team"}


@pytest.mark.parametrize(
    ("spec", "replicas"),
    [
        ({}, 1),
        ({"replicas": {"min": 2, "max": 4}}, 2),
        ({"scaling": {"policy": "external"}, "replicas": {"desired": 5}}, 5),
    ],
)
def test_initial_replicas(spec: dict[str, Any], replicas: int) -> None:
    assert manifests.initial_replicas(pool(**spec).spec) == replicas


def test_children_in_creation_order() -> None:
    kinds = [child["kind"] for child in manifests.children(pool(), "u", 1)]
    assert kinds == ["ServiceAccount", "ConfigMap", "PodDisruptionBudget", "Deployment"]


SUBSET = [
    ({"a": 1}, {"a": 1, "b": 2}, True),
    ({"a": 1}, {"a": 2}, False),
    ({"a": {"b": [1, 2]}}, {"a": {"b": [1, 2], "c": 3}}, True),
    ({"a": [{"n": 1}]}, {"a": [{"n": 1, "default": True}]}, True),
    ({"a": [1]}, {"a": [1, 2]}, False),
    ({"a": 1}, {}, False),
    ({"port": 80}, {"port": "80"}, True),
]


@pytest.mark.parametrize(("desired", "live", "expected"), SUBSET)
def test_is_subset(desired: Any, live: Any, expected: bool) -> None:
    assert is_subset(desired, live) is expected


def test_without_leaves_the_original_alone() -> None:
    manifest = {"spec": {"replicas": 3, "template": {}}}
    assert without(manifest, [("spec", "replicas")]) == {"spec": {"template": {}}}
    assert manifest["spec"]["replicas"] == 3


def test_condition_merge_keeps_transition_time_when_status_is_unchanged() -> None:
    first = conditions.merge([], [conditions.condition("Ready", True, "Reconciled", "ok", 100.0)])
    again = conditions.merge(first, [conditions.condition("Ready", True, "Reconciled", "still ok", 200.0)])
    flipped = conditions.merge(again, [conditions.condition("Ready", False, "InvalidSpec", "bad", 300.0)])
    assert again[0]["lastTransitionTime"] == first[0]["lastTransitionTime"] and again[0]["message"] == "still ok"
    assert flipped[0]["lastTransitionTime"] == conditions.timestamp(300.0)
    ordered = conditions.merge(
        flipped,
        [
            conditions.condition("Scaling", False, "Steady", "", 1.0),
            conditions.condition("RedisReachable", True, "Observed", "", 1.0),
        ],
    )
    assert [c["type"] for c in ordered] == ["Ready", "RedisReachable", "Scaling"]


def test_invalid_spec_condition_names_every_field() -> None:
    found = conditions.invalid_spec(
        [("spec.tiers[0].escalateAfter", "not allowed"), ("spec.replicas.min", "<= max")], 1.0, 4
    )
    assert found["reason"] == "InvalidSpec" and found["observedGeneration"] == 4
    assert "spec.tiers[0].escalateAfter: not allowed" in found["message"] and "spec.replicas.min" in found["message"]


def tier(name: str, exists: bool = True, backlog: int = 0) -> TierObservation:
    return TierObservation(name, exists, backlog, backlog, True, 0, 0.0, 1, 0, 0)


@pytest.mark.parametrize(
    ("tiers", "desired", "current", "reachable_reason", "scaling"),
    [
        ((tier("p0"), tier("p1")), 1, 1, "Observed", ("False", "Steady")),
        ((tier("p0", backlog=9), tier("p1", exists=False)), 3, 1, "StreamsMissing", ("True", "up")),
        ((tier("p0"), tier("p1")), 1, 2, "Observed", ("True", "down")),
    ],
)
def test_observed_status(
    tiers: tuple[TierObservation, ...], desired: int, current: int, reachable_reason: str, scaling: tuple[str, str]
) -> None:
    decision = Decision(desired, desired, "because", History())
    status = conditions.observed_status(PoolObservation("team/agents", 1.0, tiers, 2), decision, current, 1, 5.0)
    reachable, scaled = status["conditionUpdates"]
    assert reachable["status"] == "True" and reachable["reason"] == reachable_reason
    assert (scaled["status"], scaled["reason"]) == scaling
    assert status["deadLetters"] == 2 and [t["name"] for t in status["tiers"]] == ["p0", "p1"]
    assert (status["lastScale"] is None) is (desired == current)


SAVED = {"backlog": 0, "tiers": [{"name": "p0", "lag": 0}], "scaler": {"at": 100.0, "recommendations": [[100.0, 1]]}}


@pytest.mark.parametrize(
    ("fields", "now", "due"),
    [
        ({"backlog": 0, "tiers": [{"name": "p0", "lag": 0}], "scaler": {"at": 105.0}}, 105.0, False),
        ({"backlog": 3, "tiers": [{"name": "p0", "lag": 0}], "scaler": {"at": 105.0}}, 105.0, True),
        ({"backlog": 0, "tiers": [{"name": "p0", "lag": 1}], "scaler": {"at": 105.0}}, 105.0, True),
        ({"backlog": 0, "lastScale": {"desired": 2}, "scaler": {"at": 105.0}}, 105.0, True),  # a new field
        ({"backlog": 0, "redisRetryAt": None, "scaler": {"at": 150.0}}, 150.0, False),  # None equals absent
        ({"backlog": 0, "scaler": {"at": 160.0}}, 160.0, True),  # the scaler's memory is 60 s old
    ],
)
def test_status_is_written_only_when_it_changed_or_the_memory_is_stale(
    fields: dict[str, Any], now: float, due: bool
) -> None:
    assert conditions.status_write_due(SAVED, fields, now, refresh=60.0) is due


def test_status_is_written_when_nothing_was_saved_yet() -> None:
    assert conditions.status_write_due({}, {"backlog": 0}, 5.0, refresh=60.0)


@pytest.mark.parametrize(
    ("pod", "host", "pid", "nonce", "expected"),
    [
        ("tierpool-7c9d-abcde", "node-1", 7, "a1b2c3", "tierpool-7c9d-abcde/7/a1b2c3"),
        ("", "laptop", 4242, "ffffff", "laptop/4242/ffffff"),
    ],
)
def test_operator_identity_needs_no_passwd_entry(pod: str, host: str, pid: int, nonce: str, expected: str) -> None:
    assert operator_identity(pod, host, pid, nonce) == expected


def test_own_identity_does_not_ask_getpass(monkeypatch: pytest.MonkeyPatch) -> None:
    """UID 10001 in our image has no passwd entry: getpass.getuser() raises KeyError there, and kopf's default
    identity calls it, so the operator crashed at start (issue #9)."""
    import getpass

    def no_user() -> str:
        raise KeyError("getpwuid(): uid not found: 10001")

    monkeypatch.setattr(getpass, "getuser", no_user)
    identity = own_identity(OperatorConfig(pod_name="tierpool-0"))
    assert identity.startswith("tierpool-0/")
