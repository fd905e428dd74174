"""kopf handlers: thin. Gather (API, Redis), decide (tierpool.scaling, manifests), apply (ensure, /scale, status)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import kopf
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from prometheus_client import start_http_server

from tierpool.connection import UNREACHABLE
from tierpool.keys import PoolKeys
from tierpool.observation import PoolObservation
from tierpool.observe import active_idle_seconds, observe
from tierpool.resource import GROUP, KIND, VERSION, AgentPool, SpecError, parse_pool
from tierpool.scaling import Decision, History, decide
from tierpool.spec import ScalingPolicy
from tierpool_operator import conditions, manifests, tiers
from tierpool_operator.config import OperatorConfig
from tierpool_operator.deletion_cost import needs_marking
from tierpool_operator.drift import needs_apply, repair_allowed, to_apply
from tierpool_operator.handover import Gate, defer_pass, gated
from tierpool_operator.kube import PLURAL, ChildForbidden, Kube
from tierpool_operator.metrics import OperatorMetrics
from tierpool_operator.peering import ensure_peering
from tierpool_operator.redis_access import RedisNotConfigured, ResolvedRedis, resolve
from tierpool_operator.scale_in import mark_busy_pods

TICK = 2.0
CHILD_LABELS = {"app.kubernetes.io/managed-by": "tierpool-operator"}
log = logging.getLogger("tierpool.operator")


def api_client(connections: int) -> client.ApiClient:
    """An API client whose connection pool matches the threads that use it (the default keeps 5 per CPU)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    operator_config: OperatorConfig = memo.get("config") or OperatorConfig.from_env(os.environ)
    memo["config"] = operator_config
    memo.setdefault("kube", Kube(api_client(operator_config.api_threads)))
    if "metrics" not in memo:
        memo["metrics"] = OperatorMetrics()
        if operator_config.metrics_port:
            start_http_server(operator_config.metrics_port)
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 16
    settings.networking.request_timeout = 30.0
    settings.networking.connect_timeout = 10.0
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.peering.standalone = operator_config.standalone
    settings.peering.name = operator_config.peering_name
    settings.peering.priority = operator_config.peering_priority
    settings.peering.lifetime = operator_config.peering_lifetime
    if not operator_config.standalone:  # before kopf's peering starts: it runs once the startup handlers are done
        kube: Kube = memo["kube"]
        await asyncio.to_thread(ensure_peering, kube.api, operator_config.peering_name, operator_config.namespaces)


def parse_body(body: Mapping[str, Any]) -> AgentPool:
    metadata = body.get("metadata", {})
    document = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")},
        "spec": dict(body.get("spec") or {}),
    }
    return parse_pool(document, f"{metadata.get('namespace')}/{metadata.get('name')}")


async def _write_status(
    kube: Kube, meta: Mapping[str, Any], fields: dict[str, Any], updates: list[dict[str, Any]]
) -> None:
    """Status fields plus condition updates, merged by type into the conditions as they are now (read fresh)."""

    def build(current: dict[str, Any]) -> dict[str, Any]:
        return {**fields, "conditions": conditions.merge(current.get("conditions") or [], updates)}

    await asyncio.to_thread(kube.patch_pool_status, meta["namespace"], meta["name"], build)


async def converge(
    pool: AgentPool, body: Mapping[str, Any], kube: Kube, lives: Mapping[str, Any] | None = None, drift: bool = False
) -> dict[str, Any]:
    """Ensure every child; ``lives``: children already read, by kind. Returns the worker Deployment as applied
    or found. ``drift``: called because a child went missing or changed (the Event says so)."""
    uid = str(body["metadata"]["uid"])
    deployment: dict[str, Any] = {}
    for child in manifests.children(pool, uid, manifests.initial_replicas(pool.spec)):
        kind, name = child["kind"], child["metadata"]["name"]
        outcome, found = await asyncio.to_thread(kube.ensure, child, (lives or {}).get(kind))
        if outcome != "unchanged":
            reason = "Restored" if drift else outcome.capitalize()
            what = "recreated" if drift and outcome == "created" else "re-applied" if drift else outcome
            kopf.event(
                cast(kopf.Body, body),
                type="Warning" if drift else "Normal",
                reason=reason,
                message=f"{what} {kind} {name}",
            )
            log.info("%s %s %s/%s", what, kind, pool.metadata.namespace, name)
        if kind == "Deployment":
            deployment = found
    return deployment


@kopf.on.resume(GROUP, VERSION, PLURAL, timeout=120, backoff=5)
@kopf.on.create(GROUP, VERSION, PLURAL, timeout=120, backoff=5)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec", timeout=120, backoff=5)
@gated
async def reconcile(body: kopf.Body, meta: kopf.Meta, status: kopf.Status, memo: kopf.Memo, **_: Any) -> None:
    """Ensure the pool's children exist and match its spec."""
    metrics: OperatorMetrics = memo["metrics"]
    kube: Kube = memo["kube"]
    generation = meta.get("generation")
    try:
        pool = parse_body(body)
    except SpecError as error:
        invalid = conditions.invalid_spec(error.violations, time.time(), generation)
        await _write_status(kube, meta, {"observedGeneration": generation}, [invalid])
        metrics.reconciles.labels(meta.namespace, meta.name, "invalid").inc()
        kopf.warn(body, reason="InvalidSpec", message=str(error).replace("\n", " "))
        raise kopf.PermanentError(str(error)) from None
    draining = tiers.removed(status, pool.spec.tier_names)
    if draining and draining != memo.get("draining"):
        message = f"tier(s) {', '.join(draining)} left spec.tiers; workers drain their streams last, until empty"
        kopf.warn(body, reason="TierRemoved", message=message)
    memo["draining"] = draining
    if draining != list(status.get("drainingTiers") or []):  # first: the Deployment watch reads it from status
        await _write_status(kube, meta, {"drainingTiers": draining}, [])
    pool = tiers.with_draining(pool, draining)
    secured = conditions.credentials(pool.spec, time.time(), generation)
    if secured["status"] == "False":
        kopf.warn(body, reason=secured["reason"], message=secured["message"])
    fields = {"observedGeneration": generation, "selector": manifests.selector_string(pool), "drainingTiers": draining}
    try:
        deployment = await converge(pool, body, kube)
    except ChildForbidden as error:
        await _forbidden(body, memo, error, fields, [secured])  # reported; the timer tries again
        metrics.reconciles.labels(meta.namespace, meta.name, "forbidden").inc()
        return
    memo.pop("forbidden_until", None)
    memo["last_converge"] = time.time()
    await _forget_redis(memo)  # the Redis settings may have changed with the spec
    ready = conditions.ready_condition(deployment, time.time(), generation)
    await _write_status(kube, meta, fields, [ready, secured])
    metrics.reconciles.labels(meta.namespace, meta.name, "ok").inc()


@kopf.on.event("apps", "v1", "deployments", labels=CHILD_LABELS)
@gated
async def worker_deployment_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A worker Deployment changed or went away: re-converge its pool when it no longer matches the spec."""
    owner = next((o for o in body.metadata.get("ownerReferences") or [] if o.get("kind") == KIND), None)
    if owner is None:
        return
    kube: Kube = memo["kube"]
    parent = await asyncio.to_thread(kube.read_pool, str(body.metadata.namespace), owner["name"])
    if (
        parent is None
        or parent["metadata"].get("uid") != owner.get("uid")
        or parent["metadata"].get("deletionTimestamp")
    ):
        return  # the pool is gone or going: the garbage collector handles its children
    if not repair_allowed(parent):
        return  # a newer spec than the one reconciled: reconcile applies it
    try:
        pool = tiers.with_draining(parse_body(parent), (parent.get("status") or {}).get("drainingTiers") or [])
    except SpecError:
        return  # reconcile reported it
    live = None if event.get("type") == "DELETED" else dict(body)
    manifest = manifests.deployment(pool, owner["uid"], manifests.initial_replicas(pool.spec))
    if live is not None and not needs_apply(to_apply(manifest, live), live):
        return
    try:
        await converge(pool, parent, kube, {"Deployment": live} if live else None, drift=True)
    except ChildForbidden as error:
        log.warning("cannot repair %s/%s: %s (reconcile reports it)", body.metadata.namespace, owner["name"], error)


async def _forbidden(
    body: kopf.Body, memo: kopf.Memo, error: ChildForbidden, fields: dict[str, Any], more: Sequence[dict[str, Any]] = ()
) -> None:
    """RBAC refused a child: say so in Ready (and once in an Event), and try again after ``forbidden_retry``."""
    meta, now = body["metadata"], time.time()
    refused = conditions.forbidden(error.kind, error.name, error.namespace, now, meta.get("generation"))
    retry = memo["config"].forbidden_retry
    log.warning("%s/%s %s; retrying in %.0fs", meta["namespace"], meta["name"], refused["message"], retry)
    if "forbidden_until" not in memo:
        kopf.warn(body, reason="Forbidden", message=refused["message"])
    memo["forbidden_until"] = now + retry
    await _write_status(memo["kube"], meta, fields, [refused, *more])


async def _forget_redis(memo: kopf.Memo) -> None:
    """Close and drop the pool's cached Redis client; the next observation builds a fresh one."""
    redis_client = memo.pop("redis", None)
    if redis_client is not None:
        with contextlib.suppress(Exception):
            await redis_client.aclose()


def _parsed(body: kopf.Body, memo: kopf.Memo) -> AgentPool | None:
    """The pool as the model reads it (None: rejected), parsed once per generation, not on every 2 s tick."""
    generation = body["metadata"].get("generation")
    cached = memo.get("parsed")
    if cached is not None and cached[0] == generation:
        return cast(AgentPool | None, cached[1])
    try:
        pool: AgentPool | None = parse_body(body)
    except SpecError:
        pool = None
    memo["parsed"] = (generation, pool)
    return pool


def _gives_way(status: kopf.Status, memo: kopf.Memo, now: float) -> bool:
    gate = memo.get("gate")
    last = float(memo.get("last_pass") or (status.get("scaler") or {}).get("at") or memo.setdefault("first_tick", now))
    return isinstance(gate, Gate) and defer_pass(gate.count("reconcile"), now - last, memo["config"].max_defer)


def _due(status: kopf.Status, memo: kopf.Memo, pool: AgentPool, now: float) -> bool:
    last = memo.get("last_pass") or (status.get("scaler") or {}).get("at")
    return last is None or now - float(last) >= pool.spec.scaling.interval - 0.5


async def _observe(pool: AgentPool, memo: kopf.Memo, timeout: float) -> PoolObservation:
    if "redis" not in memo:
        resolved: ResolvedRedis = await asyncio.to_thread(
            resolve, pool.spec.redis, pool.metadata.namespace, memo["kube"]
        )
        memo["redis"] = resolved.client()
    keys = PoolKeys.parse(pool.ref)
    recovery = pool.spec.recovery
    active_idle = active_idle_seconds(recovery.heartbeat, recovery.claim_idle)
    found = observe(memo["redis"], keys, pool.spec.tier_names, active_idle, recovery.claim_idle)
    return await asyncio.wait_for(found, timeout)


async def _worker_deployment(pool: AgentPool, body: kopf.Body, memo: kopf.Memo, now: float) -> dict[str, Any]:
    """The worker Deployment, re-converged first when it is missing or drifted, and every status-refresh period
    (which also covers the children that are not watched)."""
    kube: Kube = memo["kube"]
    live = await asyncio.to_thread(kube.read, "Deployment", manifests.child_name(pool), pool.metadata.namespace)
    manifest = manifests.deployment(pool, str(body["metadata"]["uid"]), manifests.initial_replicas(pool.spec))
    periodic = now - float(memo.get("last_converge") or 0) >= memo["config"].status_refresh
    if live is not None and not periodic and not needs_apply(to_apply(manifest, live), live):
        return live
    memo["last_converge"] = now
    return await converge(pool, body, kube, {"Deployment": live} if live else None, drift=not periodic)


@kopf.timer(GROUP, VERSION, PLURAL, interval=TICK, initial_delay=1.0)
@gated
async def autoscale(body: kopf.Body, meta: kopf.Meta, status: kopf.Status, memo: kopf.Memo, **_: Any) -> None:
    """Re-converge on drift, observe the streams, decide, scale the Deployment through /scale, report in status."""
    spec_pool = _parsed(body, memo)
    if spec_pool is None:
        return  # reconcile reported it; nothing to scale
    if not repair_allowed(dict(body)):
        return  # a spec newer than the one reconciled: reconcile applies it first, the timer does not race it
    now = time.time()
    if not _due(status, memo, spec_pool, now) or now < float(memo.get("forbidden_until") or 0):
        return
    if _gives_way(status, memo, now):
        return  # a burst of pool changes is being reconciled: it goes first (checked again next tick)
    draining: list[str] = memo["draining"] if "draining" in memo else list(status.get("drainingTiers") or [])
    pool = tiers.with_draining(spec_pool, draining)
    memo["last_pass"] = now
    kube: Kube = memo["kube"]
    cfg: OperatorConfig = memo["config"]
    try:
        deployment = await _worker_deployment(pool, body, memo, now)
    except ChildForbidden as error:
        await _forbidden(body, memo, error, {})
        return
    memo.pop("forbidden_until", None)
    ready_condition = conditions.ready_condition(deployment, now, meta.get("generation"))
    if now < float(status.get("redisRetryAt") or 0):
        if not conditions.same_conditions(status.get("conditions") or [], [ready_condition]):
            await _write_status(kube, meta, {}, [ready_condition])
        return
    current = int((deployment.get("spec") or {}).get("replicas") or 0)
    ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
    try:
        obs = await _observe(pool, memo, cfg.redis_timeout)
    except (*UNREACHABLE, TimeoutError, ApiException, KeyError, RedisNotConfigured) as error:
        await _redis_unreachable(body, status, memo, cfg, error, now, ready_condition)
        return
    draining = await _drop_drained(spec_pool, body, memo, obs, draining)
    history = memo.get("history") or History.from_json(status.get("scaler"))  # status after a restart
    decision = decide(pool.spec, obs, history, current, now)
    memo["history"] = decision.history
    desired = decision.desired
    if pool.spec.scaling.policy is ScalingPolicy.EXTERNAL:
        desired = pool.spec.replicas.desired
    if desired != current:
        read_at = None
        if needs_marking(current, desired):
            read_at = await mark_busy_pods(pool, body, memo, memo["redis"], cfg.redis_timeout)
        await asyncio.to_thread(kube.scale, manifests.child_name(pool), pool.metadata.namespace, desired)
        if read_at is not None:
            log.info("%s/%s counts read %.3f s before /scale", meta.namespace, meta.name, time.monotonic() - read_at)
        message = f"scaled workers {current} -> {desired}: {decision.reason}"
        kopf.event(body, type="Normal", reason="Scaled", message=message)
        log.info("%s/%s %s", meta.namespace, meta.name, message)
        memo["metrics"].decisions.labels(meta.namespace, meta.name, "up" if desired > current else "down").inc()
    updates = [ready_condition, tiers.tiers_condition(obs, draining, now, meta.get("generation"))]
    extra = {"drainingTiers": draining}
    await _report(pool, obs, decision, (current, desired, ready), status, meta, memo, now, updates, extra)


async def _drop_drained(
    spec_pool: AgentPool, body: kopf.Body, memo: kopf.Memo, obs: PoolObservation, draining: list[str]
) -> list[str]:
    """Removed tiers whose streams are empty now leave the workers' tier list. Returns the ones still draining."""
    empty = tiers.drained(obs, draining)
    if not empty:
        return draining
    remaining = [name for name in draining if name not in empty]
    memo["draining"] = remaining
    await _write_status(memo["kube"], body["metadata"], {"drainingTiers": remaining}, [])
    await converge(tiers.with_draining(spec_pool, remaining), body, memo["kube"])
    message = f"removed tier(s) {', '.join(empty)} drained; workers no longer read them"
    kopf.event(body, type="Normal", reason="TierDrained", message=message)
    log.info("%s/%s %s", body["metadata"]["namespace"], body["metadata"]["name"], message)
    return remaining


async def _redis_unreachable(
    body: kopf.Body,
    status: kopf.Status,
    memo: kopf.Memo,
    cfg: OperatorConfig,
    error: BaseException,
    now: float,
    ready_condition: dict[str, Any],
) -> None:
    failures = int(status.get("redisFailures") or 0) + 1
    delay = conditions.retry_delay(failures, TICK, cfg.max_backoff)
    message = f"{type(error).__name__}: {error}; replicas left as they are; retrying in {delay:.0f}s"
    await _forget_redis(memo)
    meta = body["metadata"]
    unreachable = conditions.condition(
        conditions.REDIS_REACHABLE, False, "Unreachable", message, now, meta.get("generation")
    )
    fields = {"redisFailures": failures, "redisRetryAt": now + delay}
    await _write_status(memo["kube"], meta, fields, [unreachable, ready_condition])
    memo["metrics"].errors.labels(meta["namespace"], meta["name"], "redis").inc()
    if failures == 1 or failures % 10 == 0:
        kopf.warn(body, reason="RedisUnreachable", message=message)
        log.warning("%s/%s Redis unreachable (%d failures): %s", meta["namespace"], meta["name"], failures, message)


async def _report(
    pool: AgentPool,
    obs: PoolObservation,
    decision: Decision,
    replicas: tuple[int, int, int],
    status: kopf.Status,
    meta: kopf.Meta,
    memo: kopf.Memo,
    now: float,
    more_conditions: list[dict[str, Any]],
    more_fields: dict[str, Any],
) -> None:
    """Metrics on every pass; status only when it changed or the scaler's memory is due to be saved."""
    current, desired, ready = replicas
    fields = {**conditions.observed_status(obs, decision, current, ready, now, meta.get("generation")), **more_fields}
    updates = [*more_conditions, *fields.pop("conditionUpdates")]
    if fields["lastScale"] is None:
        fields.pop("lastScale")
    fields.update({"replicas": desired, "desiredReplicas": desired, "redisFailures": 0, "redisRetryAt": None})
    config: OperatorConfig = memo["config"]
    due = {**fields, "conditions": conditions.merge(status.get("conditions") or [], updates)}
    if conditions.status_write_due(status, due, now, config.status_refresh):
        await _write_status(memo["kube"], meta, fields, updates)
    metrics: OperatorMetrics = memo["metrics"]
    ns, name = pool.metadata.namespace, pool.metadata.name
    metrics.desired.labels(ns, name).set(desired)
    metrics.replicas.labels(ns, name).set(desired)
    metrics.ready.labels(ns, name).set(ready)
    for tier_spec, tier in zip(pool.spec.tiers, obs.tiers, strict=True):
        metrics.backlog.labels(ns, name, tier.name).set(tier.backlog)
        metrics.pending.labels(ns, name, tier.name).set(tier.pending)
        metrics.oldest.labels(ns, name, tier.name).set(tier.oldest_age_seconds)
        if tier_spec.sla is not None:
            metrics.sla.labels(ns, name, tier.name).set(tier_spec.sla)
