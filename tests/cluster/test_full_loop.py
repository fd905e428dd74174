"""The whole loop on a real API server: AgentPool -> operator -> Deployment -> worker processes -> back to min."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from kubernetes import client

from tests.cluster.conftest import GROUP, PLURAL, VERSION, OperatorProcess, agentpool
from tests.cluster.kubelet import FakeKubelet
from tests.cluster.test_operator import eventually
from tierpool.client.producer import Client
from tierpool.model.resource import parse_pool
from tierpool.protocol.submission import TaskRequest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_burst_scales_up_drains_and_returns_to_min(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    operator: OperatorProcess,
    redis_url: str,
    tmp_path: Path,
) -> None:
    spec = {
        "tiers": [
            {"name": "p0", "weight": 70, "sla": "10s"},
            {"name": "p1", "weight": 25, "sla": "20s"},
            {"name": "p2", "weight": 5},
        ],
        "redis": {"url": redis_url},
        "replicas": {"min": 1, "max": 4},
        "worker": {"concurrency": 4, "terminationGracePeriodSeconds": 15},
        "recovery": {"claimIdle": "10s", "heartbeat": "2s", "sweepInterval": "1s"},
        "scaling": {"interval": "2s", "taskSeconds": "500ms", "scaleDownStabilization": "4s"},
    }
    document = agentpool("loop", spec)
    document["metadata"]["namespace"] = namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, document)
    apps = client.AppsV1Api(api)
    eventually(lambda: apps.read_namespaced_deployment("tierpool-loop", namespace), what="worker deployment")
    replicas = lambda: apps.read_namespaced_deployment("tierpool-loop", namespace).spec.replicas  # noqa: E731
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    producer = Client(connection, parse_pool(document))
    with FakeKubelet(api, namespace, "tierpool-loop", tmp_path) as kubelet:
        eventually(lambda: kubelet.running, what="first worker process")
        tiers = ["p0", "p1", "p2"]
        ids = producer.submit_many([TaskRequest(tiers[i % 3], {"work_ms": 500}) for i in range(300)])
        eventually(lambda: replicas() > 1, timeout=30, what="scale-up")
        eventually(lambda: all(producer.result(task_id) for task_id in ids), timeout=120, what="every task done")
        eventually(lambda: replicas() == 1, timeout=60, what="scale back to min")
        time.sleep(1)
        assert kubelet.max_seen >= 3
    results = [producer.result(task_id) for task_id in ids]
    assert all(r is not None and r.ok for r in results)
    workers = {r.worker for r in results if r is not None}
    assert len(workers) >= 3  # the burst was shared by the scaled-up workers
    pool = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "loop")
    assert pool["status"]["backlog"] == 0 and pool["status"]["desiredReplicas"] == 1
