"""Two operators with kopf peering on a real API server, as the chart installs them (its peering CRDs, its RBAC):
one acts, the other waits; the active one is killed mid-burst (SIGKILL, then SIGTERM) and the standby takes over.

Sound "never both at once": every handler run is logged (DEBUG, JSON, with the object), each process to
its own file; a standby's file must show no handler run before the moment its predecessor was killed (SIGKILL),
or before its predecessor's last run (SIGTERM: it may finish a pass while shutting down).
"""

from __future__ import annotations

import json
import re
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.cluster.conftest import GROUP, PLURAL, VERSION, OperatorProcess, agentpool
from tests.cluster.harness import ControlPlane
from tests.cluster.test_chart_on_apiserver import apply, as_chart_service_account  # noqa: F401 - a fixture
from tests.cluster.test_operator import children, eventually, pool_spec
from tests.helm.chart import render

pytestmark = [pytest.mark.cluster, pytest.mark.helm]
POOLS = 20
LIFETIME = 8
"""Peering lifetime for the test (the chart's default is 30): kopf renews every 1-3 s at this setting."""
HANDLER_RUN = re.compile(r"^(reconcile|autoscale|worker_deployment_event) admitted$")
"""Logged (DEBUG, with the object) once a handler run has passed the operator's gate, i.e. really runs: kopf's own
"is invoked" comes earlier, also for runs that a stopping replica holds and never lets write."""


@pytest.fixture
def peering_crds(helm: Path, api: client.ApiClient, namespace: str) -> None:
    """The chart's own kopf peering CRDs (peering=true), applied as an admin would with ``helm install``."""
    docs = render(helm, "peering=true", f"watchNamespaces={{{namespace}}}")
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition" and d["spec"]["group"] == "kopf.dev"]
    assert {d["metadata"]["name"] for d in crds} == {"kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"}
    for doc in crds:
        apply(api, doc)
    extensions = client.ApiextensionsV1Api(api)
    for doc in crds:
        eventually(lambda d=doc: established(extensions, d["metadata"]["name"]), 30, "peering CRD established")


def established(extensions: client.ApiextensionsV1Api, name: str) -> bool:
    crd = extensions.read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))


@pytest.fixture
def replicas(
    peering_crds: None,
    as_chart_service_account: tuple[Path, client.ApiClient],  # noqa: F811
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> Iterator[list[OperatorProcess]]:
    """Operator processes as the chart's ServiceAccount with peering; started by the test, one at a time."""
    kubeconfig, _ = as_chart_service_account
    started: list[OperatorProcess] = []
    peering = f"tp-{uuid.uuid4().hex[:6]}"

    def env() -> dict[str, str]:
        return {
            "TIERPOOL_PEERING": "true",
            "TIERPOOL_PEERING_NAME": peering,
            "TIERPOOL_PEERING_LIFETIME_SECONDS": str(LIFETIME),
            "TIERPOOL_LOG_FORMAT": "json",
            "TIERPOOL_LOG_LEVEL": "DEBUG",
        }

    class Replicas(list[OperatorProcess]):
        name = peering

        def start(self) -> OperatorProcess:
            log = tmp_path / f"operator-{len(started)}.log"
            process = OperatorProcess(kubeconfig, log, namespace, env=env()).start()
            started.append(process)
            return process

    yield Replicas()
    for process in started:
        process.stop()


def handler_runs(log: Path) -> list[tuple[float, str]]:
    """(time, object) of every handler and timer run in an operator's JSON log."""
    runs = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if HANDLER_RUN.match(record.get("message", "")) and record.get("object"):
            runs.append((datetime.fromisoformat(record["time"]).timestamp(), record["object"]))
    return runs


WRITE = re.compile(r'"(PATCH|POST|PUT|DELETE) /|^(Merge-)?[Pp]atching ')
"""A write in an operator's DEBUG log: the kubernetes client's request lines (urllib3) and kopf's own patches."""


def writes_after(log: Path, moment: float) -> list[str]:
    found = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        at = datetime.fromisoformat(record["time"]).timestamp()
        if at >= moment and WRITE.search(record.get("message", "")):
            found.append(line)
    return found


def conflicts(log: Path) -> list[str]:
    """HTTP 409s (a write on a stale resourceVersion, or a create of something another replica created) other than
    the peering object's create, which every replica tries at start-up."""
    return [
        line
        for line in log.read_text().splitlines()
        if ('" 409 ' in line and "/kopfpeerings " not in line)
        or ("Conflict" in line and "Conflicting operators with the same priority" not in line)
    ]


def peers(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    body = custom.get_namespaced_custom_object("kopf.dev", "v1", namespace, "kopfpeerings", name)
    return dict(body.get("status") or {})


def wait_standby(custom: client.CustomObjectsApi, namespace: str, name: str, count: int) -> None:
    eventually(lambda: len(peers(custom, namespace, name)) >= count or None, 60, f"{count} peers in the peering")


def burst(custom: client.CustomObjectsApi, namespace: str, redis_url: str, names: range, concurrency: int) -> None:
    """Create the pools that do not exist yet, and set each one's worker concurrency (a new pod template)."""
    for index in names:
        name = f"ha{index}"
        spec = pool_spec(redis_url)
        spec["worker"]["concurrency"] = concurrency
        try:
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool(name, spec))
        except client.exceptions.ApiException as error:
            if error.status != 409:
                raise
            patch = {"spec": {"worker": {"concurrency": concurrency}}}
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch)


def converged(api: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, concurrency: int) -> bool:
    """Every pool reconciled at its latest generation, its Deployment carrying the latest concurrency."""
    pools = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    if len(pools) != POOLS or any(
        (p.get("status") or {}).get("observedGeneration") != p["metadata"]["generation"] for p in pools
    ):
        return False
    deployments = client.AppsV1Api(api).list_namespaced_deployment(namespace).items
    wanted = ["--concurrency", str(concurrency)]
    return len(deployments) == POOLS and all(
        " ".join(wanted) in " ".join(d.spec.template.spec.containers[0].args) for d in deployments
    )


def one_child_each(api: client.ApiClient, namespace: str) -> None:
    for kind, items in children(api, namespace).items():
        owners = [item.metadata.owner_references[0].name for item in items]
        assert sorted(owners) == sorted(f"ha{i}" for i in range(POOLS)), kind  # exactly one per pool


@pytest.mark.parametrize("as_chart_service_account", [("peering=true",)], indirect=True)
def test_standby_takes_over_on_sigkill_and_sigterm_and_never_acts_alongside(
    replicas: Any,
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    redis_url: str,
    record_property: Any,
) -> None:
    first = replicas.start()
    wait_standby(custom, namespace, replicas.name, 1)
    second = replicas.start()  # started later: the lower priority, so it waits
    wait_standby(custom, namespace, replicas.name, 2)
    burst(custom, namespace, redis_url, range(0, 10), 2)
    eventually(lambda: len(handler_runs(first.log)) >= 10 or None, 60, "the first operator handling pools")
    assert handler_runs(second.log) == []  # the standby waits

    burst(custom, namespace, redis_url, range(10, 20), 2)  # mid-burst ...
    assert first.process is not None
    killed = time.time()
    first.kill()  # ... the active one dies without a goodbye
    burst(custom, namespace, redis_url, range(0, 20), 3)
    eventually(lambda: converged(api, custom, namespace, 3), 90, "every pool converged after SIGKILL")
    before = [run for run in handler_runs(second.log) if run[0] < killed]
    assert before == [], "the standby ran handlers while the active operator was alive"
    sigkill_takeover = handler_runs(second.log)[0][0] - killed
    one_child_each(api, namespace)

    third = replicas.start()
    wait_standby(custom, namespace, replicas.name, 2)
    burst(custom, namespace, redis_url, range(0, 20), 4)
    assert second.process is not None
    terminated = time.time()
    second.process.send_signal(signal.SIGTERM)  # a graceful stop: kopf drops its peering record
    second.process.wait(30)
    eventually(lambda: converged(api, custom, namespace, 4), 90, "every pool converged after SIGTERM")
    last_of_second = max(t for t, _ in handler_runs(second.log))
    third_runs = handler_runs(third.log)
    assert third_runs and third_runs[0][0] > last_of_second, "the standby acted before its predecessor stopped"
    assert all(t > terminated for t, _ in third_runs)
    assert writes_after(second.log, third_runs[0][0]) == [], "the stopping replica wrote after the handover"
    sigterm_takeover = third_runs[0][0] - terminated
    one_child_each(api, namespace)

    record_property("sigkill_takeover_seconds", round(sigkill_takeover, 2))
    record_property("sigterm_takeover_seconds", round(sigterm_takeover, 2))
    print(f"takeover after SIGKILL {sigkill_takeover:.2f}s, after SIGTERM {sigterm_takeover:.2f}s")
    assert sigkill_takeover <= LIFETIME + 5  # the record runs out, the standby re-lists, a handler runs
    assert sigterm_takeover <= 5
    for process in (first, second, third):
        assert conflicts(process.log) == [], f"conflicting writes in {process.log}"
