"""When a task runs later: delayed submits, and which retries and deferrals go through the due-time index.
Pure functions, no I/O.

A failed or deferred task waits one of two ways. A wait that fits within ``recovery.claimIdle`` keeps the
parking mechanism: the pending entry is parked on consumer ``tierpool-retry`` with the wait stamped as
idle time (no new entry, nothing to move). A longer wait cannot be stamped, so the entry is acked and the task
scheduled in the pool's due set, carrying the deliveries counted so far (``RESCHEDULE``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tierpool.model.durations import ms_ceil
from tierpool.protocol.errors import ErrorKind
from tierpool.protocol.policy import FailureAction, FailurePlan

MAX_BACKOFF = 86_400.0
"""Longest retry backoff, in seconds (one day): exponential backoff stops doubling there."""
MAX_DELAY = 366 * 86_400.0
"""Longest delay a submit may ask for (a year)."""


class DelayError(ValueError):
    """A delay or not-before time that cannot be used."""


def delay_ms(delay: float | timedelta | None) -> int:
    """A submit's ``delay`` (seconds or a timedelta) in ms; 0 for none."""
    if delay is None:
        return 0
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if not 0 <= seconds <= MAX_DELAY:
        raise DelayError(f"delay must be between 0 and {MAX_DELAY:g} seconds, not {delay!r}")
    return ms_ceil(seconds)


def not_before_ms(when: datetime | str | None) -> int:
    """A submit's ``not_before`` (a timezone-aware datetime or an ISO 8601 text with its offset) in ms since the
    epoch; 0 for none."""
    if when is None:
        return 0
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when.replace("Z", "+00:00"))
        except ValueError:
            raise DelayError(f"not_before {when!r} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        raise DelayError("not_before must carry a time zone (e.g. 2026-01-01T09:00:00Z)")
    return ms_ceil(when.timestamp())


def retry_backoff(attempt: int, base: float) -> float:
    """Exponential backoff after failed delivery ``attempt``: base, 2*base, 4*base ..., at most MAX_BACKOFF."""
    return min(base * 2.0 ** max(attempt - 1, 0), MAX_BACKOFF)


@dataclass(frozen=True)
class DueRoute:
    """A failed run's wait that goes through the due-time index (``RESCHEDULE``)."""

    mode: str
    """``retry`` (a failed attempt) or ``defer`` (a RetryAfter that counts no delivery while deferrals remain)."""
    delay_ms: int
    fallback_ms: int = 0
    """``defer``: the wait when the task's deferrals are used up (then a failed attempt)."""


def due_route(
    plan: FailurePlan,
    kind: ErrorKind,
    attempt: int,
    max_deliveries: int,
    retry_backoff_base: float,
    claim_idle: float,
    retry_after: float | None,
    rate_limited: bool = False,
) -> DueRoute | None:
    """The due-index route for a failure that ``policy.plan_failure`` planned, when its real wait is longer than
    claimIdle (the most a parked entry can wait), or whatever the wait for a ``rate_limited`` task (its paid
    reservation is used up: back through the index, it draws from its bucket again); None keeps the
    parked-entry route."""
    asked = retry_after or 0.0
    backoff = retry_backoff(attempt, retry_backoff_base)
    if plan.action is FailureAction.RETRY:
        wait = max(backoff, asked) if kind is ErrorKind.DEFERRED else backoff
        return DueRoute("retry", ms_ceil(wait)) if wait > claim_idle or rate_limited else None
    if plan.action is FailureAction.DEFER and (asked > claim_idle or rate_limited):
        last = attempt >= max_deliveries
        fallback = 0.0 if last else max(backoff, asked)
        return DueRoute("defer", ms_ceil(asked), ms_ceil(fallback))
    return None


def visible_since_ms(created_at_ms: int, due_ms: int | None) -> int:
    """When a task became visible to workers: its submit time, or its due time when it was scheduled later
    (queue wait and SLA misses count from here)."""
    return created_at_ms if due_ms is None else max(created_at_ms, due_ms)
