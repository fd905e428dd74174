"""What both the reconcile handlers and the scaler write: the pool's status, its children, its Redis client."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import kopf

from tierpool.model.resource import AgentPool, parse_pool
from tierpool_operator import conditions, manifests
from tierpool_operator.deployments import DeploymentCache
from tierpool_operator.kube import ChildForbidden, ChildNameTaken, Kube
from tierpool_operator.memo import PoolMemo

log = logging.getLogger("tierpool.operator")


def parse_body(body: Mapping[str, Any]) -> AgentPool:
    metadata = body.get("metadata", {})
    document = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")},
        "spec": dict(body.get("spec") or {}),
    }
    return parse_pool(document, f"{metadata.get('namespace')}/{metadata.get('name')}")


async def write_status(
    kube: Kube, meta: Mapping[str, Any], fields: dict[str, Any], updates: list[dict[str, Any]]
) -> None:
    """Status fields plus condition updates, merged by type into the conditions as they are now (read fresh)."""

    def build(current: dict[str, Any]) -> dict[str, Any]:
        return {**fields, "conditions": conditions.merge(current.get("conditions") or [], updates)}

    await asyncio.to_thread(kube.patch_pool_status, meta["namespace"], meta["name"], build)


async def converge(
    pool: AgentPool,
    body: Mapping[str, Any],
    kube: Kube,
    lives: Mapping[str, Any] | None = None,
    drift: bool = False,
    cache: DeploymentCache | None = None,
) -> dict[str, Any]:
    """Ensure every child; ``lives``: children already read, by kind. Returns the worker Deployment as applied
    or found (and keeps it in ``cache``). ``drift``: called because a child went missing or changed (the Event
    says so)."""
    uid = str(body["metadata"]["uid"])
    deployment: dict[str, Any] = {}
    changed: dict[str, list[str]] = {}
    for child in manifests.children(pool, uid, manifests.initial_replicas(pool.spec)):
        kind, name = child["kind"], child["metadata"]["name"]
        outcome, found = await asyncio.to_thread(kube.ensure, child, (lives or {}).get(kind))
        if outcome != "unchanged":
            what = "recreated" if drift and outcome == "created" else "re-applied" if drift else outcome
            changed.setdefault(what, []).append(f"{kind} {name}")
            log.info("%s %s %s/%s", what, kind, pool.metadata.namespace, name)
        if kind == "Deployment":
            deployment = found
            if cache is not None and found:
                cache.read(found)
    for what, children in changed.items():  # one Event per outcome, not one per child: 1,000 new pools post 1,000
        reason = "Restored" if drift else what.capitalize()
        kind = "Warning" if drift else "Normal"
        kopf.event(cast(kopf.Body, body), type=kind, reason=reason, message=f"{what} {', '.join(children)}")
    return deployment


async def read_deployment(
    kube: Kube, cache: DeploymentCache | None, namespace: str, name: str
) -> dict[str, Any] | None:
    """The Deployment read fresh (a GET) and handed to the cache; the cache's copy if a newer one came meanwhile."""
    live = await asyncio.to_thread(kube.read, "Deployment", name, namespace)
    if cache is None:
        return live
    if live is None:
        cache.forget(namespace, name)
        return None
    cache.read(live)
    return cache.get(namespace, name) or live


async def report_forbidden(
    body: kopf.Body, memo: PoolMemo, error: ChildForbidden, fields: dict[str, Any], more: Sequence[dict[str, Any]] = ()
) -> None:
    """A child refused (RBAC, an admission policy, or its name taken): say so in Ready (and once in an Event), and
    try again after ``forbidden_retry``."""
    meta, now = body["metadata"], time.time()
    reason, refused = refusal(error, now, meta.get("generation"))
    message = refused[0]["message"]
    retry = memo.context.config.forbidden_retry
    log.warning("%s/%s %s; retrying in %.0fs", meta["namespace"], meta["name"], message, retry)
    if memo.forbidden_until is None:
        kopf.warn(body, reason=reason, message=message)
    memo.forbidden_until = now + retry
    await write_status(memo.context.kube, meta, fields, [*refused, *more])
    written_elsewhere(memo, [*refused, *more])


def refusal(error: ChildForbidden, now: float, generation: int | None) -> tuple[str, list[dict[str, Any]]]:
    """(Event reason, conditions) for a child refused: its name taken, an admission policy, or RBAC."""
    kind, name, namespace = error.kind, error.name, error.namespace
    if isinstance(error, ChildNameTaken):
        return "NameTaken", conditions.name_taken(kind, name, namespace, now, generation)
    if error.by_admission_policy:
        return "AdmissionDenied", [conditions.admission_denied(kind, name, namespace, error.detail, now, generation)]
    return "Forbidden", [conditions.forbidden(kind, name, namespace, now, generation)]


def redis_retry_at(status: Mapping[str, Any], memo: PoolMemo) -> float:
    """When the pool's Redis may be tried again (0: now)."""
    return redis_backoff(status, memo)[1]


def redis_backoff(status: Mapping[str, Any], memo: PoolMemo) -> tuple[int, float]:
    """(failures in a row, retry time): the scaler's own, else from status (a restarted operator). kopf's copy
    can lag minutes behind the scaler's writes (at 1,000 pools the API server closed its watch as too slow), and
    a count read from it stayed at one: no back-off, and a Warning Event on every pass."""
    if memo.redis_backoff is not None:
        return memo.redis_backoff
    return int(status.get("redisFailures") or 0), float(status.get("redisRetryAt") or 0)


def written_elsewhere(memo: PoolMemo, updates: Sequence[dict[str, Any]] = ()) -> None:
    """Status was written by something other than the scaler's report (a reconcile, an outage, RBAC refusing a
    child), with these condition ``updates``: the next report is written whatever kopf's copy shows. That copy can
    be older than this write, and a report judged against it can find nothing to change (after an outage, the pool
    read Unreachable on). The Ready written is remembered for passes inside a Redis back-off (``ready_written``)."""
    memo.status_written = None
    memo.report_due = True
    ready = next((update for update in updates if update.get("type") == conditions.READY), None)
    if ready is not None:
        memo.ready_written = ready


async def forget_redis(memo: PoolMemo) -> None:
    """Close and drop the pool's cached Redis client; the next observation builds a fresh one."""
    redis_client, memo.redis = memo.redis, None
    if redis_client is not None:
        with contextlib.suppress(Exception):
            await redis_client.aclose()
