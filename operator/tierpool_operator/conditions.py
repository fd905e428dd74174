"""Status conditions and the AgentPool status document. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from tierpool.model.spec import PoolSpec
from tierpool.scaling.decision import Decision
from tierpool.scaling.observation import PoolObservation
from tierpool_operator.manifests import url_password

READY, REDIS_REACHABLE, SCALING = "Ready", "RedisReachable", "Scaling"
CREDENTIALS = "CredentialsInSecrets"
CHILDREN_OWNED = "ChildrenOwned"
MAX_DOUBLINGS = 30
"""Retry backoff exponent clamp: 2**30 times any base is far above every cap."""


def timestamp(now: float) -> str:
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    kind: str, ok: bool, reason: str, message: str, now: float, generation: int | None = None
) -> dict[str, Any]:
    found: dict[str, Any] = {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": timestamp(now),
    }
    if generation is not None:
        found["observedGeneration"] = generation
    return found


def merge(existing: Sequence[dict[str, Any]], updates: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replace conditions by type, keeping lastTransitionTime when the status did not change."""
    merged = {c["type"]: dict(c) for c in existing}
    for update in updates:
        before = merged.get(update["type"])
        kept = before.get("lastTransitionTime") if before and before.get("status") == update["status"] else None
        merged[update["type"]] = {**update, "lastTransitionTime": kept or update["lastTransitionTime"]}
    return sorted(merged.values(), key=_order)


def _order(found: Mapping[str, Any]) -> tuple[int, str]:
    return {READY: 0, REDIS_REACHABLE: 1, SCALING: 2}.get(found["type"], 9), str(found["type"])


def retry_delay(failures: int, base: float, cap: float) -> float:
    """Seconds to wait after ``failures`` consecutive failures: doubling from ``base``, at most ``cap``. The
    exponent is clamped, so a days-long outage neither overflows a float nor stops the count."""
    return float(min(base * 2.0 ** min(max(failures - 1, 0), MAX_DOUBLINGS), cap))


def deployment_ready(deployment: Mapping[str, Any] | None) -> tuple[bool, str, str]:
    """Whether the worker Deployment is ready: it exists, its controller has seen the current template, every
    replica runs that template and is ready. Returns (ready, reason, message) for the Ready condition."""
    if deployment is None:
        return False, "DeploymentMissing", "the worker Deployment is missing; recreating it"
    if (deployment.get("metadata") or {}).get("deletionTimestamp"):
        return False, "DeploymentDeleting", "the worker Deployment is being deleted; it will be recreated"
    status = deployment.get("status") or {}
    want = int((deployment.get("spec") or {}).get("replicas") or 0)
    generation = int((deployment.get("metadata") or {}).get("generation") or 0)
    if int(status.get("observedGeneration") or 0) < generation:
        return False, "RolloutPending", f"the Deployment controller has not yet seen generation {generation}"
    updated, total, ready = (int(status.get(key) or 0) for key in ("updatedReplicas", "replicas", "readyReplicas"))
    if updated < want:
        return False, "RollingOut", f"{updated}/{want} replica(s) run the current pod template"
    if total > updated:
        return False, "RollingOut", f"{total - updated} replica(s) with an older pod template still running"
    if ready < want:
        return False, "WorkersNotReady", f"{ready}/{want} replica(s) ready"
    return True, "WorkersReady", f"{ready}/{want} replica(s) ready and current"


def ready_condition(deployment: Mapping[str, Any] | None, now: float, generation: int | None) -> dict[str, Any]:
    ok, reason, message = deployment_ready(deployment)
    return condition(READY, ok, reason, message, now, generation)


def same_conditions(existing: Sequence[dict[str, Any]], updates: Sequence[dict[str, Any]]) -> bool:
    """True when merging ``updates`` would change nothing users read."""
    return merge(existing, updates) == sorted(existing, key=_order)


def credentials(spec: PoolSpec, now: float, generation: int | None) -> dict[str, Any]:
    """Whether every credential comes from a Secret of the user's. A password written into ``spec.redis.url``
    stays out of the workers' ConfigMap and pod spec: they read the URL from the operator's own Secret."""
    if spec.redis.url and url_password(spec.redis.url):
        message = (
            "spec.redis.url carries a password; it is kept out of the workers' ConfigMap and pod spec (the operator "
            "hands the URL to the workers through its Secret tierpool-<pool>-redis). Move it to a Secret of yours: "
            "spec.redis.urlSecretRef (or spec.redis.passwordSecretRef)"
        )
        return condition(CREDENTIALS, False, "PasswordInURL", message, now, generation)
    return condition(CREDENTIALS, True, "SecretRefs", "no credential is written in the spec", now, generation)


def forbidden(kind: str, name: str, namespace: str, now: float, generation: int | None) -> dict[str, Any]:
    """Ready=False when RBAC refuses the operator a child; for its Secret, say which chart value grants it."""
    message = f"the operator may not read or write {kind} {name} in namespace {namespace} (RBAC: Forbidden)"
    if kind == "Secret":
        message += (
            f"; it holds the password written in spec.redis.url: add {namespace} to the chart's secretNamespaces, "
            "or move the URL into a Secret of yours (spec.redis.urlSecretRef)"
        )
    return condition(READY, False, "Forbidden", message, now, generation)


def admission_denied(
    kind: str, name: str, namespace: str, detail: str, now: float, generation: int | None
) -> dict[str, Any]:
    """Ready=False when an admission policy (the chart's, or the cluster's) refuses the operator a child: the
    server's message says which policy and why (an image outside the chart's allowlist, say)."""
    message = f"an admission policy refused the operator {kind} {name} in namespace {namespace}: {detail}"
    return condition(READY, False, "AdmissionDenied", message, now, generation)


def name_taken(kind: str, name: str, namespace: str, now: float, generation: int | None) -> list[dict[str, Any]]:
    """Ready=False and ChildrenOwned=False: an object the pool does not own has a child's name. The operator
    leaves it alone (no take-over, so it is not deleted with the pool) and creates no workers meanwhile."""
    message = (
        f"{kind} {name} already exists in namespace {namespace} and is not this pool's (no ownerReference to the "
        "pool, no tierpool labels for it): the operator does not take it over and starts no workers until it is "
        "renamed or deleted, or the pool is"
    )
    return [
        condition(READY, False, "NameTaken", message, now, generation),
        condition(CHILDREN_OWNED, False, "NameTaken", message, now, generation),
    ]


def children_owned(now: float, generation: int | None) -> dict[str, Any]:
    return condition(CHILDREN_OWNED, True, "Owned", "every child is the pool's own", now, generation)


def invalid_spec(violations: Sequence[tuple[str, str]], now: float, generation: int | None) -> dict[str, Any]:
    message = "; ".join(f"{path}: {text}" for path, text in violations)
    return condition(READY, False, "InvalidSpec", message, now, generation)


def tier_status(obs: PoolObservation) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "lag": t.backlog,
            "lagExact": t.lag_exact,
            "pending": t.pending,
            "oldestAgeSeconds": round(t.oldest_age_seconds, 3),
            "consumers": t.consumers,
            "exists": t.exists,
        }
        for t in obs.tiers
    ]


def observed_status(
    obs: PoolObservation, decision: Decision, current: int, ready: int, now: float, generation: int | None = None
) -> dict[str, Any]:
    """Status fields from one scaling pass."""
    missing = [t.name for t in obs.tiers if not t.exists]
    scaling = condition(
        SCALING,
        decision.desired != current,
        decision.direction(current) if decision.desired != current else "Steady",
        decision.reason,
        now,
        generation,
    )
    streams = condition(
        REDIS_REACHABLE,
        True,
        "StreamsMissing" if missing else "Observed",
        f"no consumer group yet for tier(s) {', '.join(missing)}; waiting tasks counted from the streams"
        if missing
        else f"observed {len(obs.tiers)} tier stream(s)",
        now,
        generation,
    )
    return {
        "desiredReplicas": decision.desired,
        "backlog": obs.total_backlog,
        "oldestAgeSeconds": round(max((t.oldest_age_seconds for t in obs.tiers), default=0.0), 3),
        "tiers": tier_status(obs),
        "deadLetters": obs.dlq,
        "scheduled": obs.scheduled,
        "throttled": obs.throttled,
        "lastScale": {"desired": decision.desired, "from": current, "reason": decision.reason, "time": timestamp(now)}
        if decision.desired != current
        else None,
        "scaler": decision.history.to_json(),
        "conditionUpdates": [streams, scaling],
        "readyReplicas": ready,
    }


def status_write_due(
    current: Mapping[str, Any],
    fields: Mapping[str, Any],
    now: float,
    refresh: float,
    written: tuple[Mapping[str, Any], float] | None = None,
) -> bool:
    """Whether a scaling pass should write status: when a field users read changed, or when the scaler's memory
    (``scaler``, kept in status so a restart loses nothing) was last saved ``refresh`` seconds ago or more.
    ``written``: the fields this scaler last wrote, and when. kopf's copy of the status (``current``) can lag
    behind the scaler's own writes: at 1,000 pools on a busy event loop by more than a pass, and every pass then
    wrote again what it had just written, each write one more event to process (a feedback that kept the loop
    busy). Fields unchanged since its own write, within ``refresh``, are not written again. Pure."""
    if written is not None and now - written[1] < refresh and not _changed(written[0], fields):
        return False
    if _changed(current, fields):
        return True
    saved_at = (current.get("scaler") or {}).get("at")
    return saved_at is None or now - float(saved_at) >= refresh


def _changed(before: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    """Whether any field but the scaler's memory differs from ``before`` (None equals absent). Conditions are
    compared without their lastTransitionTime: the caller merges its updates into kopf's copy, and where that
    copy lags, the merge stamps a condition new on every pass, while the write itself (``write_status``, merged
    into the conditions read fresh) keeps the time the API server holds."""
    return any(
        _comparable(key, before.get(key)) != _comparable(key, value) for key, value in fields.items() if key != "scaler"
    )


def _comparable(key: str, value: Any) -> Any:
    if key != "conditions" or not isinstance(value, list):
        return value
    return sorted(({k: v for k, v in found.items() if k != "lastTransitionTime"} for found in value), key=_order)
