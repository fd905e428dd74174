"""Status conditions and the AgentPool status document. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from tierpool.observation import PoolObservation
from tierpool.scaling import Decision

READY, REDIS_REACHABLE, SCALING = "Ready", "RedisReachable", "Scaling"


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
    order = {READY: 0, REDIS_REACHABLE: 1, SCALING: 2}
    return sorted(merged.values(), key=lambda c: (order.get(c["type"], 9), c["type"]))


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


def observed_status(obs: PoolObservation, decision: Decision, current: int, ready: int, now: float) -> dict[str, Any]:
    """Status fields from one scaling pass."""
    missing = [t.name for t in obs.tiers if not t.exists]
    scaling = condition(
        SCALING,
        decision.desired != current,
        decision.direction(current) if decision.desired != current else "Steady",
        decision.reason,
        now,
    )
    streams = condition(
        REDIS_REACHABLE,
        True,
        "StreamsMissing" if missing else "Observed",
        f"no consumer group yet for tier(s) {', '.join(missing)}; waiting tasks counted from the streams"
        if missing
        else f"observed {len(obs.tiers)} tier stream(s)",
        now,
    )
    return {
        "desiredReplicas": decision.desired,
        "backlog": obs.total_backlog,
        "oldestAgeSeconds": round(max((t.oldest_age_seconds for t in obs.tiers), default=0.0), 3),
        "tiers": tier_status(obs),
        "deadLetters": obs.dlq,
        "lastScale": {"desired": decision.desired, "from": current, "reason": decision.reason, "time": timestamp(now)}
        if decision.desired != current
        else None,
        "scaler": decision.history.to_json(),
        "conditionUpdates": [streams, scaling],
        "readyReplicas": ready,
    }


def status_write_due(current: Mapping[str, Any], fields: Mapping[str, Any], now: float, refresh: float) -> bool:
    """Whether a scaling pass should write status: when a field users read changed, or when the scaler's memory
    (``scaler``, kept in status so a restart loses nothing) was last saved ``refresh`` seconds ago or more."""
    if any(current.get(key) != value for key, value in fields.items() if key != "scaler"):
        return True
    saved_at = (current.get("scaler") or {}).get("at")
    return saved_at is None or now - float(saved_at) >= refresh
