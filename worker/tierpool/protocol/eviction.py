"""Whether a Redis server's eviction policy is safe for the pool's keys. Pure.

Under memory pressure an ``allkeys-*`` policy (a common cache setting) deletes any key: tier streams, the due-time
index, dedupe keys, results. Tasks then vanish without a word. ``volatile-*`` policies delete only keys with a TTL:
results, dedupe keys and cancel markers, never a stream; an early-expired dedupe key lets a duplicate through.
"""

from __future__ import annotations

import logging
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


class EvictionAction(StrEnum):
    NONE = "none"
    PAUSE = "pause"
    """Stop taking new work: entries already running finish, no new read or claim starts."""
    RESUME = "resume"


@dataclass(frozen=True)
class EvictionChange:
    action: EvictionAction
    level: int | None
    """The ``logging`` level of the one line to log; None: nothing to log."""
    line: str = ""


def eviction_change(previous: EvictionVerdict | None, current: EvictionVerdict, recheck: float) -> EvictionChange:
    """What a worker does on a new reading of the policy, given the last one (None: the first reading, at
    start-up). It pauses when the policy turns refused and resumes when it no longer is; every other change (a
    volatile-* or unreadable policy, say) only warns. An unchanged policy logs nothing, so a recheck every
    ``recheck`` seconds does not flood the log."""
    if previous is not None and current.message == previous.message:
        return EvictionChange(EvictionAction.NONE, None)
    was_refused = previous is not None and previous.refuse
    if current.refuse:
        line = f"not serving: {current.message}; checking again every {recheck:g} s"
        return EvictionChange(EvictionAction.NONE if was_refused else EvictionAction.PAUSE, logging.ERROR, line)
    if was_refused:
        level = logging.INFO if current.risk is EvictionRisk.NONE else logging.WARNING
        return EvictionChange(EvictionAction.RESUME, level, f"serving again: {current.message}")
    if current.risk is EvictionRisk.NONE:  # said only when it ends a warning, not at start-up
        if previous is None:
            return EvictionChange(EvictionAction.NONE, None)
        return EvictionChange(EvictionAction.NONE, logging.INFO, current.message)
    return EvictionChange(EvictionAction.NONE, logging.WARNING, current.message)
