"""kopf handlers: thin. Gather (API, Redis), decide (tierpool.scaling, manifests), apply (ensure, /scale, status)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import Any

import kopf
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from prometheus_client import start_http_server

from tierpool.connection import UNREACHABLE
from tierpool.keys import PoolKeys
from tierpool.observation import PoolObservation
from tierpool.observe import observe
from tierpool.resource import GROUP, VERSION, AgentPool, SpecError, parse_pool
from tierpool.scaling import Decision, History, decide
from tierpool.spec import ScalingPolicy
from tierpool_operator import conditions, manifests
from tierpool_operator.config import OperatorConfig
from tierpool_operator.kube import Kube
from tierpool_operator.metrics import OperatorMetrics
from tierpool_operator.redis_access import RedisNotConfigured, ResolvedRedis, resolve

PLURAL = "agentpools"
TICK = 2.0
log = logging.getLogger("tierpool.operator")


def api_client() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    operator_config: OperatorConfig = memo.get("config") or OperatorConfig.from_env(os.environ)
    memo["config"] = operator_config
    memo.setdefault("kube", Kube(api_client()))
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


def parse_body(body: kopf.Body) -> AgentPool:
    metadata = body.get("metadata", {})
    document = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")},
        "spec": dict(body.get("spec") or {}),
    }
    return parse_pool(document, f"{metadata.get('namespace')}/{metadata.get('name')}")


def _conditions(status: kopf.Status, patch: kopf.Patch, updates: list[dict[str, Any]]) -> None:
    patch.status["conditions"] = conditions.merge(status.get("conditions") or [], updates)


@kopf.on.resume(GROUP, VERSION, PLURAL, timeout=120, backoff=5)
@kopf.on.create(GROUP, VERSION, PLURAL, timeout=120, backoff=5)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec", timeout=120, backoff=5)
async def reconcile(
    body: kopf.Body, meta: kopf.Meta, status: kopf.Status, patch: kopf.Patch, memo: kopf.Memo, **_: Any
) -> None:
    """Ensure the pool's children exist and match its spec."""
    metrics: OperatorMetrics = memo["metrics"]
    generation = meta.get("generation")
    try:
        pool = parse_body(body)
    except SpecError as error:
        _conditions(status, patch, [conditions.invalid_spec(error.violations, time.time(), generation)])
        patch.status["observedGeneration"] = generation
        metrics.reconciles.labels(meta.namespace, meta.name, "invalid").inc()
        kopf.warn(body, reason="InvalidSpec", message=str(error).replace("\n", " "))
        raise kopf.PermanentError(str(error)) from None
    kube: Kube = memo["kube"]
    children = manifests.children(pool, str(meta.uid), manifests.initial_replicas(pool.spec))
    for child in children:
        outcome = await asyncio.to_thread(kube.ensure, child)
        if outcome != "unchanged":
            message = f"{outcome} {child['kind']} {child['metadata']['name']}"
            kopf.event(body, type="Normal", reason=outcome.capitalize(), message=message)
    await _forget_redis(memo)  # the Redis settings may have changed with the spec
    patch.status["observedGeneration"] = generation
    patch.status["selector"] = manifests.selector_string(pool)
    ready = conditions.condition(conditions.READY, True, "Reconciled", "children are in place", time.time(), generation)
    _conditions(status, patch, [ready])
    metrics.reconciles.labels(meta.namespace, meta.name, "ok").inc()


async def _forget_redis(memo: kopf.Memo) -> None:
    """Close and drop the pool's cached Redis client; the next observation builds a fresh one."""
    redis_client = memo.pop("redis", None)
    if redis_client is not None:
        with contextlib.suppress(Exception):
            await redis_client.aclose()


def _due(status: kopf.Status, memo: kopf.Memo, pool: AgentPool, now: float) -> bool:
    if now < float(status.get("redisRetryAt") or 0):
        return False
    last = memo.get("last_pass") or (status.get("scaler") or {}).get("at")
    return last is None or now - float(last) >= pool.spec.scaling.interval - 0.5


async def _observe(pool: AgentPool, memo: kopf.Memo, timeout: float) -> PoolObservation:
    if "redis" not in memo:
        resolved: ResolvedRedis = await asyncio.to_thread(
            resolve, pool.spec.redis, pool.metadata.namespace, memo["kube"]
        )
        memo["redis"] = resolved.client()
    keys = PoolKeys.parse(pool.ref)
    return await asyncio.wait_for(observe(memo["redis"], keys, pool.spec.tier_names), timeout)


@kopf.timer(GROUP, VERSION, PLURAL, interval=TICK, initial_delay=1.0)
async def autoscale(
    body: kopf.Body, meta: kopf.Meta, status: kopf.Status, patch: kopf.Patch, memo: kopf.Memo, **_: Any
) -> None:
    """Observe the streams, decide, scale the Deployment through /scale, and report in status."""
    try:
        pool = parse_body(body)
    except SpecError:
        return  # reconcile reported it; nothing to scale
    now = time.time()
    if not _due(status, memo, pool, now):
        return
    kube: Kube = memo["kube"]
    metrics: OperatorMetrics = memo["metrics"]
    cfg: OperatorConfig = memo["config"]
    name = manifests.child_name(pool)
    replicas = await asyncio.to_thread(kube.deployment_replicas, name, pool.metadata.namespace)
    if replicas is None:
        return
    current, ready = replicas
    try:
        obs = await _observe(pool, memo, cfg.redis_timeout)
    except (*UNREACHABLE, TimeoutError, ApiException, KeyError, RedisNotConfigured) as error:
        await _redis_unreachable(body, status, patch, memo, cfg, error, now)
        return
    history = memo.get("history") or History.from_json(status.get("scaler"))  # status after a restart
    decision = decide(pool.spec, obs, history, current, now)
    memo["history"], memo["last_pass"] = decision.history, now
    desired = decision.desired
    if pool.spec.scaling.policy is ScalingPolicy.EXTERNAL:
        desired = pool.spec.replicas.desired
    if desired != current:
        await asyncio.to_thread(kube.scale, name, pool.metadata.namespace, desired)
        kopf.event(
            body, type="Normal", reason="Scaled", message=f"scaled workers {current} -> {desired}: {decision.reason}"
        )
        metrics.decisions.labels(meta.namespace, meta.name, "up" if desired > current else "down").inc()
    _report(pool, obs, decision, (current, desired, ready), status, patch, memo, now)


async def _redis_unreachable(
    body: kopf.Body,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    cfg: OperatorConfig,
    error: BaseException,
    now: float,
) -> None:
    failures = int(status.get("redisFailures") or 0) + 1
    delay = min(TICK * 2 ** (failures - 1), cfg.max_backoff)
    message = f"{type(error).__name__}: {error}; replicas left as they are; retrying in {delay:.0f}s"
    await _forget_redis(memo)
    patch.status["redisFailures"] = failures
    patch.status["redisRetryAt"] = now + delay
    _conditions(status, patch, [conditions.condition(conditions.REDIS_REACHABLE, False, "Unreachable", message, now)])
    memo["metrics"].errors.labels(body["metadata"]["namespace"], body["metadata"]["name"], "redis").inc()
    if failures == 1 or failures % 10 == 0:
        kopf.warn(body, reason="RedisUnreachable", message=message)


def _report(
    pool: AgentPool,
    obs: PoolObservation,
    decision: Decision,
    replicas: tuple[int, int, int],
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    now: float,
) -> None:
    """Metrics on every pass; status only when it changed or the scaler's memory is due to be saved."""
    current, desired, ready = replicas
    fields = conditions.observed_status(obs, decision, current, ready, now)
    updates = fields.pop("conditionUpdates")
    if fields["lastScale"] is None:
        fields.pop("lastScale")
    fields.update({"replicas": desired, "desiredReplicas": desired, "redisFailures": 0, "redisRetryAt": None})
    fields["conditions"] = conditions.merge(status.get("conditions") or [], updates)
    config: OperatorConfig = memo["config"]
    if conditions.status_write_due(status, fields, now, config.status_refresh):
        patch.status.update(fields)
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
