"""Before a scale-in: mark the worker pods with their in-flight counts, so the ReplicaSet controller takes idle ones.

Called only when the operator is about to lower a pool's replicas. API cost per scale-in: one pod LIST plus one
PATCH per pod whose count differs from its annotation (``deletion_cost.annotation_patches``). Redis cost: one
pipelined XINFO CONSUMERS over the pool's tiers. Nothing here may stop the scale-in itself: a refused pods
permission (RBAC) is reported once per pool in a Warning Event and the pool scales without costs; any other
failure is logged and the pool scales without costs as well.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf
import redis.asyncio as aioredis
from kubernetes.client.exceptions import ApiException

from tierpool.connection import UNREACHABLE
from tierpool.keys import PoolKeys
from tierpool.observe import active_idle_seconds, in_flight_by_consumer
from tierpool.resource import AgentPool
from tierpool_operator import manifests
from tierpool_operator.deletion_cost import ANNOTATION, WorkerPod, annotation_patches, in_flight_by_pod
from tierpool_operator.kube import ChildForbidden, Kube

log = logging.getLogger("tierpool.operator")
REFUSED_KEY = "deletion_cost_refused"
"""memo key: the pods permission was refused and the Event about it posted (cleared once a scale-in marks pods)."""


def worker_pod(pod: Mapping[str, Any]) -> WorkerPod:
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    return WorkerPod(str(metadata.get("name")), annotations.get(ANNOTATION), bool(metadata.get("deletionTimestamp")))


async def mark_busy_pods(
    pool: AgentPool, body: kopf.Body, memo: kopf.Memo, redis_client: aioredis.Redis, timeout: float
) -> None:
    """Write each worker pod's in-flight count as its deletion cost (only where it changed). Pods are listed
    before Redis is read, so the counts are as fresh as they can be when the caller writes /scale. Failing here
    never stops the scale-in: the caller goes ahead either way."""
    kube: Kube = memo["kube"]
    namespace = pool.metadata.namespace
    try:
        listed = await asyncio.to_thread(kube.worker_pods, namespace, manifests.selector_string(pool))
        pods = [worker_pod(p) for p in listed]
        in_flight = await asyncio.wait_for(_in_flight(pool, redis_client), timeout)
        patches = annotation_patches(pods, in_flight)
        for name, value in patches.items():
            await asyncio.to_thread(kube.annotate_pod, namespace, name, ANNOTATION, value)
    except ChildForbidden as error:
        _refused(body, memo, error)
        return
    except (*UNREACHABLE, TimeoutError, ApiException) as error:
        log.warning("%s/%s scaling in without deletion costs: %s", namespace, pool.metadata.name, error)
        return
    memo.pop(REFUSED_KEY, None)
    counts = in_flight_by_pod((p.name for p in pods if not p.terminating), in_flight)
    name = pool.metadata.name
    log.info("%s/%s deletion costs before scale-in: %s (%d written)", namespace, name, counts, len(patches))


async def _in_flight(pool: AgentPool, redis_client: aioredis.Redis) -> dict[str, int]:
    recovery = pool.spec.recovery
    active_idle = active_idle_seconds(recovery.heartbeat, recovery.claim_idle)
    return await in_flight_by_consumer(redis_client, PoolKeys.parse(pool.ref), pool.spec.tier_names, active_idle)


def _refused(body: kopf.Body, memo: kopf.Memo, error: ChildForbidden) -> None:
    """RBAC refused listing or patching pods: one Warning Event per pool (until it works again), a log line each
    time; the caller scales anyway."""
    verb = "list" if error.name == "(list)" else "patch"
    message = (
        f"the operator may not {verb} pods in namespace {error.namespace} (RBAC: Forbidden), so scale-in cannot "
        "prefer idle workers and a busy one may be stopped; grant pods get, list and patch (the chart does)"
    )
    log.warning("%s/%s %s", error.namespace, body.get("metadata", {}).get("name"), message)
    if not memo.get(REFUSED_KEY):
        kopf.warn(body, reason="DeletionCostForbidden", message=message)
    memo[REFUSED_KEY] = True
