"""Whether a Redis server's eviction policy is safe for the pool's keys. Pure.

Under memory pressure an ``allkeys-*`` policy (a common cache setting) deletes any key: tier streams, the due-time
index, dedupe keys, results. Tasks then vanish without a word. ``volatile-*`` policies delete only keys with a TTL:
results, dedupe keys and cancel markers, never a stream; an early-expired dedupe key lets a duplicate through.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class EvictionRisk(StrEnum):
    NONE = "NoEviction"
    VOLATILE = "VolatileEviction"
    ALL_KEYS = "AllKeysEviction"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class EvictionVerdict:
    risk: EvictionRisk
    refuse: bool
    """True: workers do not start serving on this server (``spec.redis.allowEviction`` overrides it)."""
    message: str


def eviction_verdict(policy: str | None, allow_eviction: bool) -> EvictionVerdict:
    """What ``maxmemory-policy`` (None: it could not be read) means for the pool."""
    if policy is None:
        return EvictionVerdict(EvictionRisk.UNKNOWN, False, "the server's maxmemory-policy could not be read")
    if policy.startswith("allkeys-"):
        message = (
            f"the server's maxmemory-policy is {policy}: under memory pressure it deletes any key, tier streams "
            "and scheduled tasks included, and tasks are lost without a word; set maxmemory-policy noeviction"
        )
        if allow_eviction:
            return EvictionVerdict(EvictionRisk.ALL_KEYS, False, f"{message} (accepted: spec.redis.allowEviction)")
        return EvictionVerdict(
            EvictionRisk.ALL_KEYS, True, f"{message}, or accept the risk with spec.redis.allowEviction: true"
        )
    if policy.startswith("volatile-"):
        return EvictionVerdict(
            EvictionRisk.VOLATILE,
            False,
            f"the server's maxmemory-policy is {policy}: under memory pressure it deletes keys with a TTL early "
            "(results, dedupe keys, cancel markers); noeviction is safe",
        )
    return EvictionVerdict(EvictionRisk.NONE, False, f"the server's maxmemory-policy is {policy}")
