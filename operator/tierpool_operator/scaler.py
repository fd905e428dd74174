"""The scaler: one kopf daemon per pool, a scaling pass whenever one is due. Thin: gather (the Deployment from the
watch cache, the streams from Redis), decide (tierpool.scaling.decision), apply (/scale, status).

A daemon, not a kopf timer: a timer runs kopf's whole handler machinery (state, patches, outcome) on every tick,
and at 1,000 pools ticking every 2 s that machinery alone took most of the operator's event loop. The daemon is one
coroutine per pool that sleeps until its next pass is due.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from redis.exceptions import ResponseError

from tierpool.model.resource import GROUP, VERSION, AgentPool, SpecError
from tierpool.model.spec import ScalingPolicy
from tierpool.scaling.decision import Decision, History, decide
from tierpool.scaling.observation import PoolObservation
from tierpool.store.connection import UNREACHABLE
from tierpool.store.observe import active_idle_seconds, observe
from tierpool_operator import conditions, manifests, tiers
from tierpool_operator.config import OperatorConfig
from tierpool_operator.deletion_cost import needs_marking
from tierpool_operator.drift import needs_apply, repair_allowed, to_apply
from tierpool_operator.eviction import eviction_condition
from tierpool_operator.gate import defer_pass
from tierpool_operator.kube import PLURAL, ChildForbidden
from tierpool_operator.memo import PoolMemo
from tierpool_operator.pool_writes import (
    converge,
    forget_redis,
    parse_body,
    read_deployment,
    redis_backoff,
    redis_retry_at,
    report_forbidden,
    write_status,
    written_elsewhere,
)
from tierpool_operator.publication import publish_spec_for_producers
from tierpool_operator.redis_access import RedisNotConfigured, ResolvedRedis, SecretReader, resolve
from tierpool_operator.scale_in import mark_busy_pods

TICK = 2.0
"""The longest a pool's daemon sleeps between checks (a pass is due every ``scaling.interval``)."""
STOP_GRACE = 10.0
"""Seconds a pass in flight gets to finish when its daemon is stopped, before kopf cancels it."""
DUE_SLACK = 0.5
"""A pass this close to due counts as due."""
BURST_REFRESH = 5
"""How much longer the periodic refresh waits while reconciles are in flight (see ``_refresh``)."""
log = logging.getLogger("tierpool.operator")


@kopf.daemon(
    GROUP, VERSION, PLURAL, initial_delay=1.0, cancellation_backoff=STOP_GRACE, cancellation_timeout=STOP_GRACE
)
async def autoscale(
    body: kopf.Body,
    meta: kopf.Meta,
    status: kopf.Status,
    memo: PoolMemo,
    stopped: kopf.DaemonStopped,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    **_: Any,
) -> None:
    """Scaling passes for one pool until it is deleted or the operator stops (``body`` is kept current by kopf).
    A failed pass is logged and counted, and the next one runs on time: the daemon itself never ends on an error
    (kopf would restart it only after a minute)."""
    _starting(body, memo)
    try:
        await _run_passes(body, meta, status, memo, stopped, logger)
    finally:
        await forget_redis(memo)  # the pool is gone, or this replica stops or pauses: its connection goes too


async def _run_passes(
    body: kopf.Body,
    meta: kopf.Meta,
    status: kopf.Status,
    memo: PoolMemo,
    stopped: kopf.DaemonStopped,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> None:
    while not stopped:
        gate = memo.context.gate
        if gate is not None and gate.stopping:
            await stopped.wait()  # handing over: no new pass. Returning now would tell kopf the pool needs no
            return  # finalizer any more, and the stopping replica would remove it
        now = time.time()
        pool = _pass_due(body, status, memo, now)
        if pool is not None:
            try:
                if gate is not None:
                    async with gate.entry("autoscale"):
                        logger.debug("autoscale admitted")
                        await scaling_pass(pool, body, meta, status, memo, now)
                else:
                    await scaling_pass(pool, body, meta, status, memo, now)
            except Exception as error:  # any failure of one pass: the next one tries again
                failures = memo.pass_failures = memo.pass_failures + 1
                trace = failures == 1 or failures % 60 == 0  # the traceback now and then, not every 5 s
                logger.error(
                    "scaling pass failed (%d in a row): %s: %s", failures, type(error).__name__, error, exc_info=trace
                )
                memo.context.metrics.errors.labels(meta.namespace, meta.name, "scaling").inc()
            else:
                memo.pass_failures = 0
        wait = _sleep(status, memo, time.time())
        if pool is None and wait <= DUE_SLACK:
            wait = TICK  # due but held (giving way to reconciles, refused, spec not reconciled): check now and then
        await stopped.wait(wait)


def _starting(body: kopf.Body, memo: PoolMemo) -> None:
    """A daemon starts with the operator, or when it resumes after a pause (peering): what the cache holds for the
    pool may be from before the pause, so the first pass reads the Deployment fresh."""
    pool = _parsed(body, memo)
    if pool is not None:
        memo.context.deployments.forget(pool.metadata.namespace, manifests.child_name(pool))
    memo.in_step = None
    memo.redis_backoff = memo.status_written = memo.ready_written = None  # another replica may have written since


def _sleep(status: kopf.Status, memo: PoolMemo, now: float) -> float:
    parsed = memo.parsed
    pool = parsed[1] if parsed else None
    last = memo.last_pass or (status.get("scaler") or {}).get("at")
    return next_check(None if last is None else float(last), pool.spec.scaling.interval if pool else None, now)


def next_check(last_pass: float | None, interval: float | None, now: float) -> float:
    """Pure: seconds a pool's daemon sleeps: until its next pass is due, at least 0.1 and at most TICK (spec
    changes, retries and hold-offs are seen within TICK). Before any pass, or without a spec, TICK."""
    if last_pass is None or interval is None:
        return TICK
    return max(0.1, min(TICK, last_pass + interval - now))


def _parsed(body: kopf.Body, memo: PoolMemo) -> AgentPool | None:
    """The pool as the model reads it (None: rejected), parsed once per generation, not on every 2 s tick."""
    generation = body["metadata"].get("generation")
    cached = memo.parsed
    if cached is not None and cached[0] == generation:
        return cached[1]
    try:
        pool: AgentPool | None = parse_body(body)
    except SpecError:
        pool = None
    memo.parsed = (generation, pool)
    return pool


def _gives_way(status: kopf.Status, memo: PoolMemo, now: float) -> bool:
    gate = memo.context.gate
    last = memo.last_pass or (status.get("scaler") or {}).get("at")
    if not last:  # no pass yet, here or in status: give way for at most max_defer after the daemon's first look
        if memo.first_tick is None:
            memo.first_tick = now
        last = memo.first_tick
    return gate is not None and defer_pass(gate.count("reconcile"), now - float(last), memo.context.config.max_defer)


def _refresh(memo: PoolMemo, period: float | None = None) -> float:
    """Seconds between the pool's periodic chores (``period``: the status refresh by default), or BURST_REFRESH
    times that while reconciles are in flight. The chores (re-reading the children, saving the scaler's memory)
    are per pool and per period, so during a burst of 1,000 new pools the pools already created spent the API
    calls the burst needed, for as long as the burst lasted (work that grew with pools times burst length). A
    changed status is still written at once."""
    gate = memo.context.gate
    every = float(memo.context.config.status_refresh if period is None else period)
    return every * BURST_REFRESH if gate is not None and gate.count("reconcile") else every


def _due(status: kopf.Status, memo: PoolMemo, pool: AgentPool, now: float) -> bool:
    last = memo.last_pass or (status.get("scaler") or {}).get("at")
    return last is None or now - float(last) >= pool.spec.scaling.interval - DUE_SLACK


async def _observe(pool: AgentPool, memo: PoolMemo, timeout: float) -> PoolObservation:
    if memo.redis is None:
        context = memo.context
        secrets = SecretReader(context.kube, pool.metadata.namespace, context.config.allowed_secret_names)
        resolved: ResolvedRedis = await asyncio.to_thread(resolve, pool.spec.redis, secrets)
        memo.redis = resolved.client()
        memo.published_spec = None  # a new client may be a new server: publish there too
    keys = pool.keys
    recovery = pool.spec.recovery
    active_idle = active_idle_seconds(recovery.heartbeat, recovery.claim_idle)
    found = observe(memo.redis, keys, pool.spec.tier_names, active_idle, recovery.claim_idle)
    return await asyncio.wait_for(found, timeout)


def _in_step(pool: AgentPool, body: kopf.Body, memo: PoolMemo, live: dict[str, Any]) -> bool:
    """Whether the Deployment matches what the pool asks for; remembered by its resourceVersion and the pool's
    generation and tiers, so an unchanged pair is not built and compared again on every pass."""
    seen = (live["metadata"].get("resourceVersion"), body["metadata"].get("generation"), pool.spec.tier_names)
    if memo.in_step == seen:
        return True
    manifest = manifests.deployment(pool, str(body["metadata"]["uid"]), manifests.initial_replicas(pool.spec))
    if needs_apply(to_apply(manifest, live), live):
        return False
    memo.in_step = seen
    return True


async def _worker_deployment(pool: AgentPool, body: kopf.Body, memo: PoolMemo, now: float) -> dict[str, Any]:
    """The worker Deployment (from the watch cache, else a GET), re-converged first when it is missing or drifted,
    and every status-refresh period (which also covers the children that are not watched)."""
    kube, cache = memo.context.kube, memo.context.deployments
    name, namespace = manifests.child_name(pool), pool.metadata.namespace
    live = cache.get(namespace, name) or await read_deployment(kube, cache, namespace, name)
    periodic = now - memo.last_converge >= _refresh(memo, memo.context.config.children_check)
    if live is not None and not periodic and _in_step(pool, body, memo, live):
        return live
    memo.last_converge = now
    # converge reads every child fresh: the cached copy may be one whose deletion the watch missed, and an apply
    # judged against a stale copy would report a false "re-applied" or carry an old replica count
    return await converge(pool, body, kube, drift=not periodic, cache=cache)


def _pass_due(body: kopf.Body, status: kopf.Status, memo: PoolMemo, now: float) -> AgentPool | None:
    """The pool to scale now, or None: its spec was rejected, or is newer than the one reconciled (reconcile
    applies it first; the scaler does not race it), or no pass is due, or RBAC refused a child a moment ago, or a
    burst of pool changes is being reconciled (it goes first)."""
    spec_pool = _parsed(body, memo)
    if spec_pool is None or not _due(status, memo, spec_pool, now):
        return None  # the cheap checks first: a pool's daemon wakes several times per pass
    if now < (memo.forbidden_until or 0.0) or not repair_allowed(dict(body)):
        return None
    if _gives_way(status, memo, now):
        return None
    return spec_pool


async def scaling_pass(
    spec_pool: AgentPool, body: kopf.Body, meta: kopf.Meta, status: kopf.Status, memo: PoolMemo, now: float
) -> None:
    """Re-converge on drift, observe the streams, decide, scale the Deployment through /scale, report in status."""
    draining = memo.draining if memo.draining is not None else list(status.get("drainingTiers") or [])
    pool = tiers.with_draining(spec_pool, draining, streams := tiers.known_streams(status))
    memo.last_pass = now
    kube, cfg = memo.context.kube, memo.context.config
    try:
        deployment = await _worker_deployment(pool, body, memo, now)
    except ChildForbidden as error:
        await report_forbidden(body, memo, error, {})
        return
    if memo.forbidden_until is not None:  # refused until now: every child is the pool's again
        await write_status(kube, meta, {}, [conditions.children_owned(now, meta.get("generation"))])
    memo.forbidden_until = None
    ready_condition = conditions.ready_condition(deployment, now, meta.get("generation"))
    await _follow_redis_spec(pool, status, memo)
    if now < redis_retry_at(status, memo):
        await _keep_ready(ready_condition, meta, status, memo)
        return
    current = int((deployment.get("spec") or {}).get("replicas") or 0)
    ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
    try:
        obs = await _observe(pool, memo, cfg.redis_timeout)
    except (*UNREACHABLE, ResponseError, TimeoutError, ApiException, KeyError, RedisNotConfigured) as error:
        await _redis_unreachable(body, status, memo, cfg, error, now, ready_condition)
        return
    memo.redis_backoff = (0, 0.0)
    await publish_spec_for_producers(pool, memo, now)
    draining = await _drop_drained(spec_pool, body, memo, obs, draining, streams)
    history = memo.history or History.from_json(status.get("scaler"))  # status after a restart
    decision = decide(pool.spec, obs, history, current, now)
    memo.history = decision.history
    desired = decision.desired
    if pool.spec.scaling.policy is ScalingPolicy.EXTERNAL:
        desired = pool.spec.replicas.desired
    if desired != current:
        read_at = None
        if needs_marking(current, desired):
            assert memo.redis is not None  # the observation above built it
            read_at = await mark_busy_pods(pool, body, memo, memo.redis, cfg.redis_timeout)
        scaled = await asyncio.to_thread(kube.scale, manifests.child_name(pool), pool.metadata.namespace, desired)
        memo.context.deployments.wrote(pool.metadata.namespace, manifests.child_name(pool), scaled)
        if scaled is None:
            return  # the Deployment went away meanwhile: the next pass recreates it
        if read_at is not None:
            log.info("%s/%s counts read %.3f s before /scale", meta.namespace, meta.name, time.monotonic() - read_at)
        message = f"scaled workers {current} -> {desired}: {decision.reason}"
        kopf.event(body, type="Normal", reason="Scaled", message=message)
        log.info("%s/%s %s", meta.namespace, meta.name, message)
        memo.context.metrics.decisions.labels(meta.namespace, meta.name, "up" if desired > current else "down").inc()
    generation = meta.get("generation")
    evicts, groups = (
        eviction_condition(obs, pool.spec.redis.allow_eviction, now, generation),
        tiers.groups_condition(pool, obs, now, generation),
    )
    updates = [ready_condition, tiers.tiers_condition(obs, draining, now, generation), evicts, groups]
    extra = {"drainingTiers": draining, **tiers.adopted_status(tiers.with_draining(spec_pool, draining, streams))}
    await _report(pool, obs, decision, (current, desired, ready), status, meta, memo, now, updates, extra)


async def _drop_drained(
    spec_pool: AgentPool,
    body: kopf.Body,
    memo: PoolMemo,
    obs: PoolObservation,
    draining: list[str],
    streams: dict[str, str],
) -> list[str]:
    """Removed tiers whose streams are empty now leave the workers' tier list. Returns the ones still draining."""
    empty = tiers.drained(obs, draining)
    if not empty:
        return draining
    remaining = [name for name in draining if name not in empty]
    memo.draining = remaining
    kube = memo.context.kube
    pool = tiers.with_draining(spec_pool, remaining, streams)
    await write_status(kube, body["metadata"], {"drainingTiers": remaining, **tiers.adopted_status(pool)}, [])
    written_elsewhere(memo)
    await converge(pool, body, kube, cache=memo.context.deployments)
    message = f"removed tier(s) {', '.join(empty)} drained; workers no longer read them"
    kopf.event(body, type="Normal", reason="TierDrained", message=message)
    log.info("%s/%s %s", body["metadata"]["namespace"], body["metadata"]["name"], message)
    return remaining


async def _follow_redis_spec(pool: AgentPool, status: kopf.Status, memo: PoolMemo) -> None:
    """``spec.redis`` changed since the daemon's last pass (a fixed URL, say): drop the client built from the old
    settings, and try the new ones at once, not after the rest of the old ones' back-off (up to ``maxBackoff``; the
    failure count is kept, so Warning Events stay rare). A daemon's first pass keeps the back-off read from status:
    an operator restarted while Redis is down does not retry every pool at once."""
    last, memo.redis_spec = memo.redis_spec, pool.spec.redis
    if last is None or last == pool.spec.redis:
        return
    await forget_redis(memo)
    memo.redis_backoff = (redis_backoff(status, memo)[0], 0.0)


async def _keep_ready(ready_condition: dict[str, Any], meta: kopf.Meta, status: kopf.Status, memo: PoolMemo) -> None:
    """Inside a Redis back-off a pass only keeps Ready current: written when it differs from the Ready this scaler
    last wrote (kopf's copy, which can lag minutes behind, only when it wrote none since another writer did)."""
    written = memo.ready_written
    seen = [written] if written is not None else status.get("conditions") or []
    if conditions.same_conditions(seen, [ready_condition]):
        return
    await write_status(memo.context.kube, meta, {}, [ready_condition])
    written_elsewhere(memo, [ready_condition])


async def _redis_unreachable(
    body: kopf.Body,
    status: kopf.Status,
    memo: PoolMemo,
    cfg: OperatorConfig,
    error: BaseException,
    now: float,
    ready_condition: dict[str, Any],
) -> None:
    failures = redis_backoff(status, memo)[0] + 1
    delay = conditions.retry_delay(failures, TICK, cfg.max_backoff)
    message = f"{type(error).__name__}: {error}; replicas left as they are; retrying in {delay:.0f}s"
    await forget_redis(memo)
    meta = body["metadata"]
    refused = isinstance(error, ResponseError)  # reached, but a command was refused (NOPERM, WRONGTYPE, ...)
    reason = "Refused" if refused else "Unreachable"
    unreachable = conditions.condition(conditions.REDIS_REACHABLE, False, reason, message, now, meta.get("generation"))
    fields = {"redisFailures": failures, "redisRetryAt": now + delay}
    memo.redis_backoff = (failures, now + delay)
    await write_status(memo.context.kube, meta, fields, [unreachable, ready_condition])
    written_elsewhere(memo, [unreachable, ready_condition])
    memo.context.metrics.errors.labels(meta["namespace"], meta["name"], "redis").inc()
    if failures == 1 or failures % 10 == 0:
        kopf.warn(body, reason=f"Redis{reason}", message=message)
        log.warning("%s/%s Redis unreachable (%d failures): %s", meta["namespace"], meta["name"], failures, message)


async def _report(
    pool: AgentPool,
    obs: PoolObservation,
    decision: Decision,
    replicas: tuple[int, int, int],
    status: kopf.Status,
    meta: kopf.Meta,
    memo: PoolMemo,
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
    due = {**fields, "conditions": conditions.merge(status.get("conditions") or [], updates)}
    written = memo.status_written
    if memo.report_due or conditions.status_write_due(status, due, now, _refresh(memo), written):
        await write_status(memo.context.kube, meta, fields, updates)
        memo.report_due = False  # only once written: a failed write leaves it due
        memo.status_written = (due, now)
    metrics = memo.context.metrics
    ns, name = pool.metadata.namespace, pool.metadata.name
    metrics.desired.labels(ns, name).set(desired)
    metrics.replicas.labels(ns, name).set(desired)
    metrics.ready.labels(ns, name).set(ready)
    metrics.dead_letters.labels(ns, name).set(obs.dlq)
    for tier_spec, tier in zip(pool.spec.tiers, obs.tiers, strict=True):
        metrics.backlog.labels(ns, name, tier.name).set(tier.backlog)
        metrics.pending.labels(ns, name, tier.name).set(tier.pending)
        metrics.oldest.labels(ns, name, tier.name).set(tier.oldest_age_seconds)
        metrics.oldest_pending.labels(ns, name, tier.name).set(tier.oldest_pending_age_seconds)
        if tier_spec.sla is not None:
            metrics.sla.labels(ns, name, tier.name).set(tier_spec.sla)
