"""Reconcile means converge, on a real kube-apiserver: /scale writes do not roll the pods, drift is corrected,
fields removed from the spec leave the children, conditions merge by type, Ready means ready."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from tests.cluster.conftest import GROUP, PLURAL, VERSION, OperatorProcess, agentpool
from tests.cluster.harness import ControlPlane
from tests.cluster.test_operator import TIERS, condition, condition_is, eventually, get_pool, pool_spec, pool_when
from tierpool.client.producer import Client
from tierpool.model.keys import GROUP as GROUP_NAME
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import parse_pool
from tierpool.protocol.submission import TaskRequest
from tierpool_operator import manifests
from tierpool_operator.drift import APPLIED, FIELD_MANAGER
from tierpool_operator.kube import Kube

pytestmark = pytest.mark.cluster


def deployment(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = api.sanitize_for_serialization(
        client.AppsV1Api(api).read_namespaced_deployment(f"tierpool-{name}", namespace)
    )
    return found


def container(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = deployment(api, namespace, name)["spec"]["template"]["spec"]["containers"][0]
    return found


def events(api: client.ApiClient, namespace: str, reason: str) -> list[Any]:
    """Events with this reason (kopf posts them in the background: wait for them, do not assert at once)."""
    return [e for e in client.CoreV1Api(api).list_namespaced_event(namespace).items if e.reason == reason]


def said(api: client.ApiClient, namespace: str, reason: str, text: str) -> bool:
    return any(text in e.message for e in events(api, namespace, reason))


def test_scale_writes_move_replicas_and_never_the_pod_template(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    spec = pool_spec(redis_url, scaling={"policy": "external", "interval": "1s"})
    spec["replicas"] = {"min": 0, "max": 8, "desired": 1}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("hpa", spec))
    template = eventually(lambda: deployment(api, namespace, "hpa"), what="deployment")["spec"]["template"]
    config_version = client.CoreV1Api(api).read_namespaced_config_map("tierpool-hpa-spec", namespace)
    for replicas in (2, 3, 5, 4):
        custom.patch_namespaced_custom_object_scale(
            GROUP, VERSION, namespace, PLURAL, "hpa", {"spec": {"replicas": replicas}}
        )
        eventually(
            lambda n=replicas: deployment(api, namespace, "hpa")["spec"]["replicas"] == n,  # type: ignore[misc]
            timeout=40,
            what=f"the Deployment following /scale to {replicas}",
        )
        eventually(  # the reconcile of this spec change has run (it writes observedGeneration last)
            pool_when(
                custom,
                namespace,
                "hpa",
                lambda p: p["status"].get("observedGeneration") == p["metadata"]["generation"],
            ),
            what="the spec change reconciled",
        )
        assert deployment(api, namespace, "hpa")["spec"]["template"] == template
    after = client.CoreV1Api(api).read_namespaced_config_map("tierpool-hpa-spec", namespace)
    assert after.metadata.resource_version == config_version.metadata.resource_version


def test_a_deleted_deployment_is_recreated_and_ready_follows_it(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    spec = pool_spec(redis_url)
    spec["replicas"] = {"min": 0, "max": 4}  # zero replicas: ready as soon as the controller has seen it
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("phoenix", spec))
    pool = eventually(pool_when(custom, namespace, "phoenix", condition_is("Ready", "True")), 40, "Ready=True")
    assert (condition(pool, "Ready") or {})["reason"] == "WorkersReady"
    first = deployment(api, namespace, "phoenix")["metadata"]["uid"]
    client.AppsV1Api(api).delete_namespaced_deployment("tierpool-phoenix", namespace)
    recreated = eventually(
        lambda: (lambda d: d if d["metadata"]["uid"] != first else None)(deployment(api, namespace, "phoenix")),
        timeout=40,
        what="the deleted Deployment recreated",
    )
    assert recreated["spec"]["template"]["spec"]["containers"][0]["name"] == "worker"
    eventually(lambda: said(api, namespace, "Restored", "recreated Deployment"), what="a Restored event")
    eventually(pool_when(custom, namespace, "phoenix", condition_is("Ready", "True")), 40, "Ready=True again")


def test_ready_is_false_while_the_workers_are_not_ready(
    custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    """No kubelet runs here, so the one replica never becomes ready: Ready must say so, not "children exist"."""
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("slow", pool_spec(redis_url)))
    pool = eventually(
        pool_when(
            custom, namespace, "slow", lambda p: (condition(p, "Ready") or {}).get("reason") == "WorkersNotReady"
        ),
        timeout=40,
        what="Ready=False, WorkersNotReady",
    )
    ready = condition(pool, "Ready") or {}
    assert ready["status"] == "False" and "0/1" in ready["message"], ready
    assert ready["observedGeneration"] == pool["metadata"]["generation"]


WATCH_ONLY = {"interval": "600s", "taskSeconds": "1s", "scaleDownStabilization": "4s"}
"""A scaling interval far longer than the tests' deadlines: after its first pass the timer repairs nothing in
time, so what is repaired was repaired by the Deployment watch."""


def test_the_deployment_watch_restores_a_hand_edited_template_and_a_deleted_deployment(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    spec = pool_spec(redis_url, scaling=WATCH_ONLY)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("drift", spec))
    image = eventually(lambda: container(api, namespace, "drift"), what="deployment")["image"]
    eventually(  # the timer's first pass is over: the next one is 600 s away
        pool_when(custom, namespace, "drift", lambda p: (p.get("status") or {}).get("scaler")),
        timeout=60,
        what="the first scaling pass",
    )
    edit = {"spec": {"template": {"spec": {"containers": [{"name": "worker", "image": "someone/else:1"}]}}}}
    client.AppsV1Api(api).patch_namespaced_deployment("tierpool-drift", namespace, edit)
    eventually(lambda: container(api, namespace, "drift")["image"] == image, timeout=60, what="the image restored")
    eventually(lambda: said(api, namespace, "Restored", "re-applied Deployment"), what="a Restored event")
    first = deployment(api, namespace, "drift")["metadata"]["uid"]
    restored = len(events(api, namespace, "Restored"))
    client.AppsV1Api(api).delete_namespaced_deployment("tierpool-drift", namespace)
    eventually(
        lambda: deployment(api, namespace, "drift")["metadata"]["uid"] != first,
        timeout=60,
        what="the deleted Deployment recreated",
    )
    # "recreated", or "re-applied" when a repair already in flight (from an older event) applied it back
    eventually(lambda: len(events(api, namespace, "Restored")) > restored, what="a Restored event for it")


def test_a_canonicalized_deployment_settles_without_applies_or_restored_events(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    control_plane: ControlPlane,
    tmp_path: Path,
    redis_url: str,
) -> None:
    """The API server stores cpu "0.5" as 500m, 1024Mi as 1Gi and drops an empty env value: once converged, the
    scaler's passes (and its periodic re-applies) must neither re-apply the Deployment nor post Restored."""
    # status (scaler.at) written every ~3 s: the passes show; and the children re-read and re-applied as often
    refresh = {"TIERPOOL_STATUS_REFRESH_SECONDS": "3", "TIERPOOL_CHILDREN_CHECK_SECONDS": "3"}
    process = OperatorProcess(control_plane.kubeconfig_path, tmp_path / "op.log", namespace, refresh).start()
    try:
        spec = pool_spec(redis_url, scaling={"interval": "1s", "taskSeconds": "1s", "scaleDownStabilization": "4s"})
        spec["replicas"] = {"min": 0, "max": 2}
        worker = {"env": [{"name": "EMPTY", "value": ""}, {"name": "A", "value": "1"}]}
        worker["resources"] = {"requests": {"cpu": "0.5", "memory": "1024Mi"}}
        spec["worker"] = {**spec["worker"], **worker}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("canon", spec))
        eventually(pool_when(custom, namespace, "canon", condition_is("Ready", "True")), 60, "Ready=True")
        stored = container(api, namespace, "canon")
        assert stored["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}, stored["resources"]

        def pass_at() -> float:
            return float(
                ((get_pool(custom, namespace, "canon").get("status") or {}).get("scaler") or {}).get("at") or 0
            )

        def after(at: float) -> float | None:
            now = pass_at()
            return now if now > at else None

        at = eventually(lambda: after(0), timeout=40, what="a scaling pass")
        at = eventually(lambda: after(at), timeout=40, what="a second scaling pass")
        version = deployment(api, namespace, "canon")["metadata"]["resourceVersion"]
        restored = len(events(api, namespace, "Restored"))
        for n in range(4):  # the scaler runs: its status writes move on during the window
            at = eventually(lambda a=at: after(a), timeout=40, what=f"scaling pass {n + 3}")  # type: ignore[misc]
        assert deployment(api, namespace, "canon")["metadata"]["resourceVersion"] == version
        assert len(events(api, namespace, "Restored")) == restored
        assert restored == 0, [e.message for e in events(api, namespace, "Restored")]
    finally:
        process.stop()


def test_fields_removed_from_the_spec_leave_the_deployment(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    spec = pool_spec(redis_url)
    spec["worker"] = {
        **spec["worker"],
        "env": [{"name": "EXTRA", "value": "1"}],
        "resources": {"limits": {"memory": "512Mi"}, "requests": {"cpu": "100m"}},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("trim", spec))
    first = eventually(lambda: container(api, namespace, "trim"), what="deployment")
    assert "EXTRA" in {e["name"] for e in first["env"]} and first["resources"]["limits"]["memory"] == "512Mi"
    removal = {"spec": {"worker": {"env": None, "resources": {"limits": None}}}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "trim", removal)

    def trimmed() -> dict[str, Any] | None:
        found = container(api, namespace, "trim")
        return found if "EXTRA" not in {e["name"] for e in found["env"]} else None

    after = eventually(trimmed, timeout=40, what="the removed env var gone from the Deployment")
    assert "limits" not in after.get("resources", {}) and after["resources"]["requests"]["cpu"] == "100m"


def test_conditions_carry_the_generation_and_keep_their_transition_times(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("gen", pool_spec(redis_url)))
    pool = eventually(pool_when(custom, namespace, "gen", condition_is("RedisReachable", "True")), 40, "observed")
    reachable_since = (condition(pool, "RedisReachable") or {})["lastTransitionTime"]
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "gen", {"spec": {"worker": {"concurrency": 3}}}
    )

    def all_at_generation_2(found: dict[str, Any]) -> bool:
        kinds = {c["type"]: c.get("observedGeneration") for c in found["status"].get("conditions", [])}
        return (
            found["status"].get("observedGeneration") == 2
            and set(kinds) >= {"Ready", "RedisReachable", "Scaling"}
            and set(kinds.values()) == {2}
        )

    pool = eventually(pool_when(custom, namespace, "gen", all_at_generation_2), 40, "every condition at generation 2")
    assert (condition(pool, "RedisReachable") or {})["lastTransitionTime"] == reachable_since


def test_status_writes_merge_conditions_with_a_concurrent_writer(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str
) -> None:
    """A writer that read the status before another wrote it must not undo that write: it is retried on 409."""
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, agentpool("race", {"tiers": [{"name": "p0", "weight": 1}]})
    )
    other = {
        "type": "ThirdParty",
        "status": "True",
        "reason": "Set",
        "message": "by someone else",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    calls: list[int] = []

    def build(current: dict[str, Any]) -> dict[str, Any]:
        if not calls:  # between this read and its write, someone else writes a condition
            custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, "race", {"status": {"conditions": [other]}}
            )
        calls.append(len(current.get("conditions") or []))
        mine = {
            "type": "Ready",
            "status": "False",
            "reason": "Test",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        merged = {c["type"]: c for c in [*(current.get("conditions") or []), mine]}
        return {"conditions": list(merged.values())}

    Kube(api).patch_pool_status(namespace, "race", build)
    assert calls == [0, 1]
    found = get_pool(custom, namespace, "race")
    assert {c["type"] for c in found["status"]["conditions"]} == {"Ready", "ThirdParty"}


def test_a_password_in_the_url_stays_out_of_configmap_and_pods_and_is_reported(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    leaky = redis_url.replace("redis://", "redis://app:hunter2@", 1)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("leak", pool_spec(leaky)))
    pool = eventually(
        pool_when(custom, namespace, "leak", condition_is("CredentialsInSecrets", "False")), 40, "the condition"
    )
    assert "urlSecretRef" in (condition(pool, "CredentialsInSecrets") or {})["message"]
    warned = eventually(lambda: events(api, namespace, "PasswordInURL"), what="a PasswordInURL event")
    assert warned[0].type == "Warning"
    config = client.CoreV1Api(api).read_namespaced_config_map("tierpool-leak-spec", namespace)
    assert "hunter2" not in str(config.data)
    assert "hunter2" not in str(deployment(api, namespace, "leak"))
    env = {e["name"]: e for e in container(api, namespace, "leak")["env"]}
    # the workers keep their password (AUTH): the URL reaches them from the operator's own Secret
    ref = {"secretKeyRef": {"name": "tierpool-leak-redis", "key": "url"}}
    assert env["TIERPOOL_REDIS_URL"] == {"name": "TIERPOOL_REDIS_URL", "valueFrom": ref}
    secret = client.CoreV1Api(api).read_namespaced_secret("tierpool-leak-redis", namespace)
    assert base64.b64decode(secret.data["url"]).decode() == leaky
    [owner] = secret.metadata.owner_references
    assert (owner.kind, owner.name) == ("AgentPool", "leak")
    entries = [e.manager for e in secret.metadata.managed_fields or []]
    assert entries == [FIELD_MANAGER], entries


def test_a_removed_tier_with_work_is_reported_and_drained_before_it_is_dropped(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    document = agentpool("shrink", pool_spec(redis_url))
    document["metadata"]["namespace"] = namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, document)
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    Client(connection, parse_pool(document)).submit_many([TaskRequest("p2", {}) for _ in range(5)])
    eventually(
        pool_when(
            custom, namespace, "shrink", lambda p: any(t["lag"] == 5 for t in p.get("status", {}).get("tiers", []))
        ),
        timeout=40,
        what="the p2 backlog observed",
    )
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "shrink", {"spec": {"tiers": TIERS[:2]}})
    pool = eventually(pool_when(custom, namespace, "shrink", condition_is("TiersInSpec", "False")), 40, "condition")
    assert "p2: 5 waiting" in (condition(pool, "TiersInSpec") or {})["message"]
    assert pool["status"]["drainingTiers"] == ["p2"] and pool["status"]["backlog"] == 5
    eventually(lambda: events(api, namespace, "TierRemoved"), what="a TierRemoved event")
    config = client.CoreV1Api(api).read_namespaced_config_map("tierpool-shrink-spec", namespace)
    assert [t["name"] for t in json.loads(config.data["pool.json"])["spec"]["tiers"]] == ["p0", "p1", "p2"]

    stream = PoolKeys(namespace, "shrink").tier("p2")  # a worker drains it: read and acknowledge everything
    connection.xgroup_create(stream, GROUP_NAME, id="0", mkstream=True)
    for _, entries in connection.xreadgroup(GROUP_NAME, "drainer", {stream: ">"}, count=10):
        connection.xack(stream, GROUP_NAME, *[entry_id for entry_id, _ in entries])
    eventually(pool_when(custom, namespace, "shrink", condition_is("TiersInSpec", "True")), 40, "drained")

    def dropped() -> bool:
        data = client.CoreV1Api(api).read_namespaced_config_map("tierpool-shrink-spec", namespace).data
        return [t["name"] for t in json.loads(data["pool.json"])["spec"]["tiers"]] == ["p0", "p1"]

    eventually(dropped, timeout=40, what="the drained tier dropped from the workers' tiers")
    eventually(lambda: events(api, namespace, "TierDrained"), what="a TierDrained event")
    assert get_pool(custom, namespace, "shrink")["status"]["drainingTiers"] == []


def test_children_created_by_an_older_operator_lose_removed_fields_too(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    control_plane: ControlPlane,
    redis_url: str,
    tmp_path: Path,
) -> None:
    """Older versions created children with a plain create: that entry is folded into the apply entry."""
    spec = pool_spec(redis_url)
    spec["worker"] = {**spec["worker"], "env": [{"name": "EXTRA", "value": "1"}]}
    created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("legacy", spec))
    document = {**created, "metadata": {"name": "legacy", "namespace": namespace}}
    old = manifests.deployment(parse_pool(document), created["metadata"]["uid"], 1)
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(namespace, old, field_manager=FIELD_MANAGER)  # as the old operator did
    operator = OperatorProcess(control_plane.kubeconfig_path, tmp_path / "operator.log", namespace).start()
    try:
        eventually(
            lambda: APPLIED in (deployment(api, namespace, "legacy")["metadata"].get("annotations") or {}),
            timeout=40,
            what="the operator's first apply",
        )
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "legacy", {"spec": {"worker": {"env": None}}}
        )
        eventually(
            lambda: "EXTRA" not in {e["name"] for e in container(api, namespace, "legacy")["env"]},
            timeout=40,
            what="the env var the old create set removed",
        )
    finally:
        operator.stop()
    entries = deployment(api, namespace, "legacy")["metadata"]["managedFields"]
    assert not [e for e in entries if e["manager"] == FIELD_MANAGER and e["operation"] == "Update"]
