"""Condition RedisEvictionSafe: whether the pool's Redis may evict its keys (tierpool.protocol.eviction). The
policy comes with each observation (INFO memory in the same pipeline), so it costs no extra round trip."""

from __future__ import annotations

from typing import Any

from tierpool.protocol.eviction import EvictionRisk, eviction_verdict
from tierpool.scaling.observation import PoolObservation
from tierpool_operator import conditions

EVICTION_SAFE = "RedisEvictionSafe"


def eviction_condition(obs: PoolObservation, allow: bool, now: float, generation: int | None) -> dict[str, Any]:
    """True only for a policy that never evicts; the reason is the risk, the message says what to do. Pure."""
    verdict = eviction_verdict(obs.eviction_policy, allow)
    return conditions.condition(
        EVICTION_SAFE, verdict.risk is EvictionRisk.NONE, verdict.risk.value, verdict.message, now, generation
    )
