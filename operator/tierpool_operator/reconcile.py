"""kopf handlers for a pool's children: start-up, reconcile on create/update/resume, repair on Deployment events.
The scaling passes are in ``scaler``. Thin: gather (API), decide (manifests, drift), apply (ensure, status)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, cast

import kopf
from kubernetes import client, config
from prometheus_client import start_http_server

from tierpool.model.resource import GROUP, KIND, VERSION, SpecError
from tierpool_operator import conditions, manifests, tiers
from tierpool_operator.deployments import DeploymentCache
from tierpool_operator.drift import needs_apply, repair_allowed, to_apply
from tierpool_operator.essence import LeanDiffBaseStorage
from tierpool_operator.handover import gated
from tierpool_operator.kube import PLURAL, ChildForbidden, Kube
from tierpool_operator.memo import PoolMemo
from tierpool_operator.metrics import OperatorMetrics
from tierpool_operator.peering import ensure_peering
from tierpool_operator.pool_writes import (
    converge,
    parse_body,
    read_deployment,
    report_forbidden,
    write_status,
    written_elsewhere,
)

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
async def startup(settings: kopf.OperatorSettings, memo: PoolMemo, **_: Any) -> None:
    """The operator-wide objects the context was not given, and kopf's settings. kopf runs this with the memo it
    was given, before any object's memo is copied from it."""
    context = memo.context
    cfg = context.config
    if not context.has_kube:
        context.kube = Kube(api_client(cfg.api_threads))
    if not context.has_metrics:
        context.metrics = OperatorMetrics()
        if cfg.metrics_port:
            start_http_server(cfg.metrics_port)
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = LeanDiffBaseStorage(prefix=GROUP, key="last-handled-configuration")
    settings.persistence.consistency_timeout = cfg.consistency_timeout
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 16
    settings.networking.request_timeout = 30.0
    settings.networking.connect_timeout = 10.0
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.peering.standalone = cfg.standalone
    settings.peering.name = cfg.peering_name
    settings.peering.priority = cfg.peering_priority
    settings.peering.lifetime = cfg.peering_lifetime
    if not cfg.standalone:  # before kopf's peering starts: it runs once the startup handlers are done
        await asyncio.to_thread(ensure_peering, context.kube.api, cfg.peering_name, cfg.namespaces)


@kopf.on.resume(GROUP, VERSION, PLURAL, timeout=120, backoff=5)
@kopf.on.create(GROUP, VERSION, PLURAL, timeout=120, backoff=5)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec", timeout=120, backoff=5)
@gated
async def reconcile(body: kopf.Body, meta: kopf.Meta, status: kopf.Status, memo: PoolMemo, **_: Any) -> None:
    """Ensure the pool's children exist and match its spec."""
    metrics, kube = memo.context.metrics, memo.context.kube
    generation = meta.get("generation")
    try:
        pool = parse_body(body)
    except SpecError as error:
        invalid = conditions.invalid_spec(error.violations, time.time(), generation)
        await write_status(kube, meta, {"observedGeneration": generation}, [invalid])
        written_elsewhere(memo, [invalid])
        metrics.reconciles.labels(meta.namespace, meta.name, "invalid").inc()
        kopf.warn(body, reason="InvalidSpec", message=str(error).replace("\n", " "))
        raise kopf.PermanentError(str(error)) from None
    draining = tiers.removed(status, pool.spec.tier_names)
    if draining and draining != memo.draining:
        message = f"tier(s) {', '.join(draining)} left spec.tiers; workers drain their streams last, until empty"
        kopf.warn(body, reason="TierRemoved", message=message)
    memo.draining = draining
    streams = tiers.known_streams(status)
    pool = tiers.with_draining(pool, draining, streams)
    adopted = tiers.adopted_status(pool)
    if draining != list(status.get("drainingTiers") or []) or tiers.known_streams(adopted) != streams:
        # first: the Deployment watch reads them from status
        await write_status(kube, meta, {"drainingTiers": draining, **adopted}, [])
        written_elsewhere(memo)
    secured = conditions.credentials(pool.spec, time.time(), generation)
    if secured["status"] == "False":
        kopf.warn(body, reason=secured["reason"], message=secured["message"])
    fields = {"observedGeneration": generation, "selector": manifests.selector_string(pool), "drainingTiers": draining}
    fields.update(adopted)
    try:
        deployment = await converge(pool, body, kube, cache=memo.context.deployments)
    except ChildForbidden as error:
        await report_forbidden(body, memo, error, fields, [secured])  # reported; the scaler tries again
        metrics.reconciles.labels(meta.namespace, meta.name, "forbidden").inc()
        return
    memo.forbidden_until = None
    memo.last_converge = time.time()
    ready = conditions.ready_condition(deployment, time.time(), generation)
    owned = conditions.children_owned(time.time(), generation)
    await write_status(kube, meta, fields, [ready, secured, owned])
    written_elsewhere(memo, [ready, secured, owned])
    metrics.reconciles.labels(meta.namespace, meta.name, "ok").inc()


@kopf.on.event("apps", "v1", "deployments", labels=CHILD_LABELS)
@gated
async def worker_deployment_event(event: kopf.RawEvent, body: kopf.Body, memo: PoolMemo, **_: Any) -> None:
    """A worker Deployment changed or went away: keep it for the scaler (``DeploymentCache``), and re-converge its
    pool when it no longer matches the spec."""
    cache: DeploymentCache = memo.context.deployments
    current = True
    if isinstance(event.get("object"), dict):
        current = cache.event(event.get("type"), cast(dict[str, Any], event["object"]))
    owner = next((o for o in body.metadata.get("ownerReferences") or [] if o.get("kind") == KIND), None)
    if owner is None:
        return
    kube = memo.context.kube
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
        parent_status = parent.get("status") or {}
        draining = parent_status.get("drainingTiers") or []
        pool = tiers.with_draining(parse_body(parent), draining, tiers.known_streams(parent_status))
    except SpecError:
        return  # reconcile reported it
    if not current:  # older than a /scale or a read since: judged on it, an apply could revert that /scale
        live = await read_deployment(kube, cache, str(body.metadata.namespace), str(body.metadata.name))
    else:
        live = None if event.get("type") == "DELETED" else dict(body)
    manifest = manifests.deployment(pool, owner["uid"], manifests.initial_replicas(pool.spec))
    if live is not None and not needs_apply(to_apply(manifest, live), live):
        return
    try:
        await converge(pool, parent, kube, {"Deployment": live} if live else None, drift=True, cache=cache)
    except ChildForbidden as error:
        log.warning("cannot repair %s/%s: %s (reconcile reports it)", body.metadata.namespace, owner["name"], error)
