"""The user path on a real kind cluster, command for command as docs/getting-started/kind.md gives it.

`make kind-up` (an offline node image is assembled first where no registry is in reach), `make kind-load deploy
example`, `make load`; then faults a user will meet: a worker pod force-deleted while it owns tasks, the operator
pod deleted mid-burst, a namespace under Pod Security `restricted`, `helm upgrade`, `helm uninstall`.
Under CI (CI=true) a missing Docker engine or a cluster that cannot be created fails the tier; locally it skips.
The tests run in file order and share one cluster.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from tests.conftest import ROOT, unavailable
from tests.helm.chart import notes_pool
from tests.kind.conftest import default_operator_image
from tierpool.model.spec import WORKER_IMAGE

pytestmark = [pytest.mark.kind, pytest.mark.timeout(5400)]

CONTEXT = "kind-tierpool"
NS = "tierpool-system"
POOL = "kind"
REDIS_URL = "redis://:dev@localhost:6379/0"
KEY_PREFIX = f"tierpool:{{{NS}/{POOL}}}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def sh(command: str, timeout: float = 1800) -> str:
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def kubectl(*args: str, timeout: float = 300) -> str:
    return sh(" ".join(["kubectl", "--context", CONTEXT, *args]), timeout=timeout)


def kube_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json"))


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")


@pytest.fixture(scope="module")
def cluster() -> Iterator[redis.Redis]:
    if subprocess.run(["bash", "hack/docker-up.sh"], cwd=ROOT, capture_output=True).returncode != 0:
        unavailable("no Docker engine (hack/docker-up.sh failed); the kind tier needs one")
    up = subprocess.run(["bash", "hack/kind-up.sh"], cwd=ROOT, capture_output=True, text=True, timeout=5400)
    if up.returncode != 0:
        unavailable(f"no kind cluster: hack/kind-up.sh failed: {up.stderr[-3000:]}")
    os.environ["PATH"] = f"{up.stdout.strip().splitlines()[-1]}:{os.environ['PATH']}"
    sh("make kind-load deploy example")
    connection = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    wait_for("the dev Redis through the NodePort", lambda: _pings(connection), 120)
    yield connection
    connection.close()


def _pings(connection: redis.Redis) -> bool:
    try:
        return bool(connection.ping())
    except redis.RedisError:
        return False


def deployment(name: str, namespace: str = NS) -> dict[str, Any]:
    found: dict[str, Any] = kube_json("get", "deployment", name, "-n", namespace)
    return found


def pool_children() -> dict[str, list[str]]:
    children: dict[str, list[str]] = {}
    for kind in ("deployment", "serviceaccount", "configmap", "poddisruptionbudget"):
        items = kube_json("get", kind, "-n", NS)["items"]
        children[kind] = [
            i["metadata"]["name"]
            for i in items
            if any(o.get("kind") == "AgentPool" for o in i["metadata"].get("ownerReferences", []))
        ]
    return children


def worker_pods() -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = kube_json("get", "pods", "-n", NS, "-l", f"app.kubernetes.io/instance={POOL}")["items"]
    return [p for p in pods if "deletionTimestamp" not in p["metadata"]]


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def results(connection: redis.Redis) -> dict[str, str]:
    statuses: dict[str, str] = {}
    for key in connection.scan_iter(f"{KEY_PREFIX}:result:*", count=1000):
        record = connection.get(key)
        if record is not None:
            statuses[key] = json.loads(record)["status"]
    return statuses


def pending_by_consumer(connection: redis.Redis) -> dict[str, int]:
    owners: dict[str, int] = {}
    for tier in ("p0", "p1", "p2"):
        summary = connection.xpending(f"{KEY_PREFIX}:tier:{tier}", "workers")
        for consumer in summary.get("consumers") or []:
            owners[consumer["name"]] = owners.get(consumer["name"], 0) + int(consumer["pending"])
    return owners


def test_operator_runs_and_the_pool_gets_its_children(cluster: redis.Redis) -> None:
    kubectl("wait", "-n", NS, "--for=condition=Available", "deployment/tierpool", "--timeout=300s")
    wait_for("the pool's children", lambda: all(pool_children().values()), 180)
    children = pool_children()
    assert children == {
        "deployment": [f"tierpool-{POOL}"],
        "serviceaccount": [f"tierpool-{POOL}"],
        "configmap": [f"tierpool-{POOL}-spec"],
        "poddisruptionbudget": [f"tierpool-{POOL}"],
    }
    kubectl("wait", "-n", NS, "--for=condition=Available", f"deployment/tierpool-{POOL}", "--timeout=300s")
    images = {
        name: deployment(name)["spec"]["template"]["spec"]["containers"][0]["image"]
        for name in ("tierpool", f"tierpool-{POOL}")
    }
    assert images == {"tierpool": default_operator_image(), f"tierpool-{POOL}": WORKER_IMAGE}, "not the defaults"


def test_kubectl_get_agentpools_shows_the_printer_columns(cluster: redis.Redis) -> None:
    header = kubectl("get", "agentpools", "-n", NS).splitlines()[0].split()
    assert header == ["NAME", "READY", "DESIRED", "BACKLOG", "OLDEST", "AGE"]
    wide = kubectl("get", "agentpools", "-n", NS, "-o", "wide").splitlines()[0].split()
    assert "POLICY" in wide


def test_a_burst_scales_pods_up_survives_pod_kills_and_returns_to_min(cluster: redis.Redis) -> None:
    before = results(cluster)
    sh("make load")
    victim = wait_for("a worker pod that owns in-flight tasks", lambda: _busy_pod(cluster), 120, every=0.2)
    kubectl("delete", "pod", victim, "-n", NS, "--grace-period=0", "--force", "--wait=false")
    wait_for("more than one Ready worker pod", lambda: sum(ready(p) for p in worker_pods()) > 1, 240, every=1)
    operator = kube_json("get", "pods", "-n", NS, "-l", "app.kubernetes.io/name=tierpool-operator")["items"][0]
    kubectl("delete", "pod", operator["metadata"]["name"], "-n", NS, "--wait=false")

    def drained() -> dict[str, str] | None:
        new = {k: v for k, v in results(cluster).items() if k not in before}
        return new if len(new) >= 684 else None

    done = wait_for("all 684 tasks to finish", drained, 900, every=5)
    assert set(done.values()) == {"succeeded"}, {v: list(done.values()).count(v) for v in set(done.values())}
    assert cluster.xlen(f"{KEY_PREFIX}:dlq") == 0
    assert pending_by_consumer(cluster) == {}
    wait_for("the pool back at replicas.min (1)", lambda: deployment(f"tierpool-{POOL}")["spec"]["replicas"] == 1, 600)
    kubectl("wait", "-n", NS, "--for=condition=Available", "deployment/tierpool", "--timeout=300s")
    assert pool_children()["deployment"] == [f"tierpool-{POOL}"], "the restarted operator duplicated a child"
    status = kube_json("get", "agentpool", POOL, "-n", NS)["status"]
    assert status["backlog"] == 0


def _busy_pod(connection: redis.Redis) -> str | None:
    """A Ready worker pod whose consumer (the pod's name plus a per-process suffix) owns pending entries."""
    owners = pending_by_consumer(connection)
    for pod in worker_pods():
        name = pod["metadata"]["name"]
        if ready(pod) and any(c.startswith(f"{name}-") and n > 0 for c, n in owners.items()):
            return str(name)
    return None


RESTRICTED_POOL = """
apiVersion: v1
kind: Secret
metadata: {name: redis, namespace: tp-restricted}
stringData: {url: "redis://:dev@tierpool-redis.tierpool-system.svc:6379/0"}
---
apiVersion: tierpool.io/v1alpha1
kind: AgentPool
metadata: {name: locked, namespace: tp-restricted}
spec:
  redis: {urlSecretRef: {name: redis, key: url}}
  tiers: [{name: p0, weight: 1}]
  replicas: {min: 1, max: 1}
"""


def test_a_namespace_under_pod_security_restricted_admits_the_worker_pods(cluster: redis.Redis) -> None:
    sh(
        f"kubectl --context {CONTEXT} create namespace tp-restricted --dry-run=client -o yaml | kubectl --context {CONTEXT} apply -f -"
    )
    kubectl("label", "namespace", "tp-restricted", "--overwrite", "pod-security.kubernetes.io/enforce=restricted")
    sh(f"kubectl --context {CONTEXT} apply -f - <<'EOF'\n{RESTRICTED_POOL}\nEOF")
    wait_for("the Deployment in tp-restricted", lambda: _exists("deployment", "tierpool-locked", "tp-restricted"), 120)
    kubectl("wait", "-n", "tp-restricted", "--for=condition=Available", "deployment/tierpool-locked", "--timeout=300s")
    events = kube_json("get", "events", "-n", "tp-restricted")["items"]
    assert not [e["message"] for e in events if "violates PodSecurity" in e.get("message", "")]


def _exists(kind: str, name: str, namespace: str) -> bool:
    return (
        subprocess.run(
            ["kubectl", "--context", CONTEXT, "get", kind, name, "-n", namespace], capture_output=True
        ).returncode
        == 0
    )


def test_the_printed_notes_work_as_written(cluster: redis.Redis) -> None:
    """The chart's NOTES, as `helm get notes` prints them for this release: the pool they give is pasted into bash,
    comes up against the dev Redis through its Secret, and `helm test` submits a task to it and gets its result."""
    helm = f"$(bash hack/build-helm.sh) --kube-context {CONTEXT}"
    printed = sh(f"{helm} get notes tierpool -n {NS}")
    start = printed.index("kubectl apply -f - <<'EOF'\n")
    step = printed[start : printed.index("\nEOF\n", start) + len("\nEOF\n")]
    sh(step.replace("kubectl ", f"kubectl --context {CONTEXT} ", 1))
    pool = notes_pool(printed)
    namespace, name = pool["metadata"]["namespace"], pool["metadata"]["name"]
    wait_for("the NOTES' pool's Deployment", lambda: _exists("deployment", f"tierpool-{name}", namespace), 120)
    kubectl("wait", "-n", namespace, "--for=condition=Available", f"deployment/tierpool-{name}", "--timeout=300s")
    assert f"helm test tierpool -n {NS}" in printed
    tested = sh(f"{helm} test tierpool -n {NS} --timeout 5m", timeout=400)
    assert "Phase:          Succeeded" in tested or "Phase: Succeeded" in tested, tested
    push = [line.strip() for line in printed.split("Push work from your machine", 1)[1].splitlines()[1:4]]
    assert push[0].startswith("kubectl ") and "port-forward" in push[0] and push[2].startswith("tierpool submit")
    forward = push[0].split("#", 1)[0].strip().removesuffix("&").strip()
    port = str(free_port())  # "any free local port", as the notes say: 16379 may be taken on this host
    script = "\n".join(
        [
            forward.replace("kubectl ", f"kubectl --context {CONTEXT} ", 1).replace("16379:", f"{port}:")
            + " >/dev/null 2>&1 &",
            "trap 'kill %1' EXIT",
            "sleep 3",
            push[1].replace("kubectl ", f"kubectl --context {CONTEXT} ").replace(":16379/", f":{port}/"),
            push[2].replace("tierpool ", f"{ROOT}/.venv/bin/tierpool ", 1),
        ]
    )
    assert "16379" in push[0] and "16379" in push[1]  # what was substituted is what the notes print
    submitted = sh(script, timeout=120)  # the task's result record, exit 0 when it succeeded
    assert '"succeeded"' in submitted, submitted
    kubectl("delete", "agentpool", name, "-n", namespace, "--wait=true")


def test_helm_upgrade_rolls_the_operator_and_leaves_the_pools_alone(cluster: redis.Redis) -> None:
    worker = deployment(f"tierpool-{POOL}")
    pods_before = sorted(p["metadata"]["name"] for p in worker_pods())
    operator_before = deployment("tierpool")["metadata"]["generation"]
    sh("make deploy HELM_EXTRA_ARGS='--set logLevel=DEBUG'")
    kubectl("rollout", "status", "-n", NS, "deployment/tierpool", "--timeout=300s")
    assert deployment("tierpool")["metadata"]["generation"] > operator_before
    new_operator = wait_for("the upgraded operator's pod", _upgraded_operator_pod, 180)
    wait_for(
        "the upgraded operator's scaler to run a pass on the pool",
        lambda: "autoscale admitted" in kubectl("logs", "-n", NS, new_operator, timeout=60),
        180,
    )
    after = deployment(f"tierpool-{POOL}")
    assert after["metadata"]["generation"] == worker["metadata"]["generation"]
    assert after["spec"]["template"] == worker["spec"]["template"]
    assert sorted(p["metadata"]["name"] for p in worker_pods()) == pods_before


def _upgraded_operator_pod() -> str | None:
    pods = kube_json("get", "pods", "-n", NS, "-l", "app.kubernetes.io/name=tierpool-operator")["items"]
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
        if env.get("TIERPOOL_LOG_LEVEL") == "DEBUG" and ready(pod) and "deletionTimestamp" not in pod["metadata"]:
            return str(pod["metadata"]["name"])
    return None


def test_helm_uninstall_keeps_the_crd_and_the_pools(cluster: redis.Redis) -> None:
    sh(f"$(bash hack/build-helm.sh) uninstall tierpool --kube-context {CONTEXT} -n {NS} --wait")
    assert _exists("crd", "agentpools.tierpool.io", "default")
    names = [p["metadata"]["name"] for p in kube_json("get", "agentpools", "-A")["items"]]
    assert POOL in names and "locked" in names
