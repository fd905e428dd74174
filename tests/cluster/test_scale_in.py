"""Scale-in on a real API server and ReplicaSet controller: idle worker pods go, busy ones stay (issue #14)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from tests.cluster.conftest import GROUP, PLURAL, VERSION, OperatorProcess, agentpool
from tests.cluster.kubelet import PodKubelet
from tests.cluster.test_operator import eventually
from tierpool.model.keys import GROUP as CONSUMER_GROUP
from tierpool.model.keys import PoolKeys

pytestmark = pytest.mark.cluster
COST = "controller.kubernetes.io/pod-deletion-cost"
SELECTOR = "app.kubernetes.io/name=tierpool-worker,app.kubernetes.io/instance=shrink"


def external_pool(redis_url: str, desired: int) -> dict[str, Any]:
    return {
        "tiers": [{"name": "p0", "weight": 1}],
        "redis": {"url": redis_url},
        "replicas": {"min": 0, "max": 6, "desired": desired},
        "worker": {"concurrency": 4},
        "recovery": {"heartbeat": "30s", "claimIdle": "120s"},  # a consumer counts as live for 60 s
        "scaling": {"policy": "external", "interval": "1s"},
    }


def create_pool(custom: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]) -> None:
    document = agentpool("shrink", spec)
    document["metadata"]["namespace"] = namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, document)


def set_desired(custom: client.CustomObjectsApi, namespace: str, desired: int) -> None:
    body = {"spec": {"replicas": {"desired": desired}}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "shrink", body)


def run_tasks(redis_url: str, namespace: str, held: dict[str, int], create: bool = True) -> None:
    """The PEL as workers leave it: each consumer (pod name plus the worker's 4-hex suffix) holds its tasks."""
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = PoolKeys.parse(f"{namespace}/shrink").tier("p0")
    if create:
        connection.xgroup_create(stream, CONSUMER_GROUP, id="0", mkstream=True)
    for index, (consumer, count) in enumerate(held.items()):
        for _ in range(count):
            connection.xadd(stream, {"task_id": f"t{index}-{time.monotonic_ns()}", "tier": "p0", "payload": "{}"})
        connection.xreadgroup(CONSUMER_GROUP, consumer, {stream: ">"}, count=max(count, 1))


def test_scale_in_deletes_idle_pods_never_a_busy_one(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    operator: OperatorProcess,
    redis_url: str,
) -> None:
    """Four Ready workers, two of them running tasks; the pool goes from 4 to 2 replicas. The busy pods are the
    ones the ReplicaSet controller takes by itself (Ready most recently, as pods started for a burst are), so
    without deletion costs they would be stopped mid-task; with them the two idle pods go."""
    create_pool(custom, namespace, external_pool(redis_url, 4))
    apps = client.AppsV1Api(api)
    with PodKubelet(api, namespace, SELECTOR) as kubelet:
        ready = eventually(lambda: (lambda names: names if len(names) == 4 else None)(kubelet.ready()), timeout=60)
        idle, busy = ready[:2], ready[2:]
        for name in idle:  # up for an hour; the busy ones became Ready just now
            kubelet.ready_since(name, datetime.now(UTC) - timedelta(hours=1))
        run_tasks(redis_url, namespace, {f"{busy[0]}-beef": 2, f"{busy[1]}-0a1b": 1, f"{idle[0]}-c0de": 0})
        set_desired(custom, namespace, 2)
        eventually(lambda: apps.read_namespaced_deployment("tierpool-shrink", namespace).spec.replicas == 2)
        survivors = eventually(lambda: (lambda names: names if len(names) == 2 else None)(kubelet.ready()), 30)
        time.sleep(2)  # nothing else goes
        assert sorted(survivors) == sorted(busy) and sorted(kubelet.ready()) == sorted(busy)
        assert not set(kubelet.deleted) & set(busy), f"busy pods deleted: {kubelet.deleted}"
        assert set(idle) <= set(kubelet.deleted)
        costs = {p.metadata.name: (p.metadata.annotations or {}).get(COST) for p in kubelet.pods()}
        assert costs == {busy[0]: "2", busy[1]: "1"}


def costs_of(kubelet: PodKubelet) -> dict[str, str | None]:
    return {p.metadata.name: (p.metadata.annotations or {}).get(COST) for p in kubelet.pods()}


def test_a_scale_up_writes_no_cost_and_the_next_scale_in_corrects_a_stale_one(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    operator: OperatorProcess,
    redis_url: str,
    tmp_path: Path,
) -> None:
    """A busy pod gets no annotation when the pool scales up (only a scale-in writes); at the first scale-in it gets its count; once it is idle and another pod busy, the next scale-in
    removes its stale cost, marks the busy one, and the stale-cost pod is the one that goes."""
    create_pool(custom, namespace, external_pool(redis_url, 1))
    apps = client.AppsV1Api(api)
    replicas = lambda: apps.read_namespaced_deployment("tierpool-shrink", namespace).spec.replicas  # noqa: E731
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = PoolKeys.parse(f"{namespace}/shrink").tier("p0")
    with PodKubelet(api, namespace, SELECTOR) as kubelet:
        [first] = eventually(lambda: (lambda names: names if len(names) == 1 else None)(kubelet.ready()), timeout=60)
        run_tasks(redis_url, namespace, {f"{first}-beef": 2})
        set_desired(custom, namespace, 3)
        ready = eventually(lambda: (lambda names: names if len(names) == 3 else None)(kubelet.ready()), timeout=60)
        time.sleep(3)  # a few more scaler passes
        assert costs_of(kubelet) == dict.fromkeys(ready)
        set_desired(custom, namespace, 2)  # first is busy: it stays, with its count
        eventually(lambda: replicas() == 2 and len(kubelet.ready()) == 2, timeout=30, what="scale-in to 2")
        assert first in kubelet.ready() and costs_of(kubelet)[first] == "2"
        [other] = [name for name in kubelet.ready() if name != first]
        for entry_id, _ in connection.xrange(stream):  # first is done; other takes a task
            connection.xack(stream, CONSUMER_GROUP, entry_id)
        run_tasks(redis_url, namespace, {f"{other}-0a1b": 1}, create=False)
        set_desired(custom, namespace, 1)
        eventually(lambda: replicas() == 1 and kubelet.ready() == [other], timeout=30, what="the stale-cost pod gone")
        eventually(lambda: costs_of(kubelet) == {other: "1"}, timeout=10, what="only the busy pod left, marked")
    log = (tmp_path / "operator.log").read_text()
    assert log.count("s before /scale") == 2, "one read per scale-in to >0 replicas, none on the scale-up"
