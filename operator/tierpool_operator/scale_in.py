"""Before a scale-in: mark the worker pods with their in-flight counts, so the ReplicaSet controller takes idle ones.

Called only when the operator is about to lower a pool's replicas to one or more (``deletion_cost.needs_marking``).
API cost per scale-in: one pod LIST plus one PATCH per pod whose count differs from its annotation
(``deletion_cost.annotation_patches``), at most ``PATCH_CONCURRENCY`` at a time. Redis cost: one pipelined XINFO
CONSUMERS over the pool's tiers. Nothing here may stop the scale-in itself: a refused pods permission (RBAC) is
reported once per pool in a Warning Event and the pool scales without costs; when the counts cannot be read, the
costs still on the pods are removed (old ones could reverse the order) and the pool scales without costs; a PATCH
that fails for another reason is logged and the other pods are still written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException
from redis.exceptions import RedisError

from tierpool.model.resource import AgentPool
from tierpool.store.connection import UNREACHABLE, AsyncRedis
from tierpool.store.observe import active_idle_seconds, in_flight_by_consumer
from tierpool_operator import manifests
from tierpool_operator.deletion_cost import (
    ANNOTATION,
    WorkerPod,
    annotation_patches,
    clear_patches,
    in_flight_by_pod,
    unmatched_busy,
)
from tierpool_operator.kube import ChildForbidden, Kube
from tierpool_operator.memo import PoolMemo

log = logging.getLogger("tierpool.operator")
PATCH_CONCURRENCY = 4
KUBE_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)
"""API errors besides a 403: an HTTP error status, or the client's connection errors (MaxRetryError, ...)."""


def worker_pod(pod: Mapping[str, Any]) -> WorkerPod:
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    return WorkerPod(str(metadata.get("name")), annotations.get(ANNOTATION), bool(metadata.get("deletionTimestamp")))


async def mark_busy_pods(
    pool: AgentPool, body: kopf.Body, memo: PoolMemo, redis_client: AsyncRedis, timeout: float
) -> float | None:
    """Write each worker pod's in-flight count as its deletion cost (only where it changed). Pods are listed
    before Redis is read, so the counts are as fresh as they can be when the caller writes /scale. Returns when
    the counts were read (``time.monotonic()``; None: not read), for the caller to log the time to /scale.
    Failing here never stops the scale-in: the caller goes ahead either way."""
    kube = memo.context.kube
    namespace, name = pool.metadata.namespace, pool.metadata.name
    try:
        listed = await asyncio.to_thread(kube.worker_pods, namespace, manifests.selector_string(pool))
    except ChildForbidden as error:
        _refused(body, memo, error)
        return None
    except KUBE_ERRORS as error:
        log.warning("%s/%s scaling in without deletion costs (pods not listed): %s", namespace, name, error)
        return None
    pods = [worker_pod(p) for p in listed]
    read_at: float | None = None
    try:
        in_flight = await asyncio.wait_for(_in_flight(pool, redis_client), timeout)
    except (*UNREACHABLE, TimeoutError, RedisError) as error:
        patches = clear_patches(pods)
        log.warning("%s/%s in-flight counts not read (%s): removing %d old costs", namespace, name, error, len(patches))
        in_flight = {}
    else:
        read_at = time.monotonic()
        patches = annotation_patches(pods, in_flight)
        _report_unmatched(pool, memo, pods, in_flight)
    forbidden = await _write(kube, pool, patches)
    if forbidden is not None:
        _refused(body, memo, forbidden)
        return read_at
    memo.deletion_cost_refused = False
    if read_at is not None:
        counts = in_flight_by_pod((p.name for p in pods if not p.terminating), in_flight)
        log.info("%s/%s deletion costs before scale-in: %s (%d written)", namespace, name, counts, len(patches))
    return read_at


async def _write(kube: Kube, pool: AgentPool, patches: Mapping[str, str | None]) -> ChildForbidden | None:
    """The patches, ``PATCH_CONCURRENCY`` at a time; a failing pod is logged and the others still written.
    Returns a 403 if RBAC refused one."""
    namespace = pool.metadata.namespace
    limit = asyncio.Semaphore(PATCH_CONCURRENCY)
    refused: list[ChildForbidden] = []

    async def one(pod: str, value: str | None) -> None:
        async with limit:
            try:
                await asyncio.to_thread(kube.annotate_pod, namespace, pod, ANNOTATION, value)
            except ChildForbidden as error:
                refused.append(error)
            except KUBE_ERRORS as error:
                log.warning("%s/%s deletion cost of pod %s not written: %s", namespace, pool.metadata.name, pod, error)

    await asyncio.gather(*(one(pod, value) for pod, value in patches.items()))
    return refused[0] if refused else None


def _report_unmatched(pool: AgentPool, memo: PoolMemo, pods: list[WorkerPod], in_flight: Mapping[str, int]) -> None:
    unmatched = unmatched_busy((p.name for p in pods), in_flight)
    if unmatched and not memo.unmatched_consumers_logged:
        memo.unmatched_consumers_logged = True
        log.warning(
            "%s/%s busy consumers %s match no worker pod (a consumer name is the pod name plus '-' and four hex "
            "digits; is TIERPOOL_CONSUMER overridden in worker.env?): their pods cannot be marked before a scale-in",
            pool.metadata.namespace,
            pool.metadata.name,
            unmatched,
        )


async def _in_flight(pool: AgentPool, redis_client: AsyncRedis) -> dict[str, int]:
    recovery = pool.spec.recovery
    active_idle = active_idle_seconds(recovery.heartbeat, recovery.claim_idle)
    return await in_flight_by_consumer(redis_client, pool.keys, pool.spec.tier_names, active_idle)


def _refused(body: kopf.Body, memo: PoolMemo, error: ChildForbidden) -> None:
    """RBAC refused listing or patching pods: one Warning Event per pool (until it works again), a log line each
    time; the caller scales anyway."""
    message = (
        f"the operator may not {error.verb} pods in namespace {error.namespace} (RBAC: Forbidden), so scale-in "
        "cannot prefer idle workers and a busy one may be stopped; grant pods list and patch (the chart does)"
    )
    log.warning("%s/%s %s", error.namespace, body.get("metadata", {}).get("name"), message)
    if not memo.deletion_cost_refused:
        kopf.warn(body, reason="DeletionCostForbidden", message=message)
    memo.deletion_cost_refused = True
