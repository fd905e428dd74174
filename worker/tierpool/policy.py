"""Recovery policy: what to do with a failed, reclaimed or expired task. Pure functions, no I/O."""

from __future__ import annotations

from enum import StrEnum


class FailureAction(StrEnum):
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"


def after_failure(attempt: int, max_deliveries: int) -> FailureAction:
    """A handler error on delivery ``attempt``: retry while deliveries remain, else dead-letter.

    With maxDeliveries 3 a task that always fails runs exactly three times.
    """
    return FailureAction.DEAD_LETTER if attempt >= max_deliveries else FailureAction.RETRY


def retry_backoff_seconds(attempt: int, base: float, claim_idle: float) -> float:
    """Exponential backoff (base, 2*base, 4*base ...) capped at claimIdle."""
    return min(base * 2.0 ** max(attempt - 1, 0), claim_idle)


def retry_idle_ms(attempt: int, base: float, claim_idle: float) -> int:
    """The idle time to stamp on a failed entry so reclaim picks it up after the backoff.

    Reclaim takes entries idle >= claimIdle, so stamping claimIdle - backoff delays it by the backoff.
    """
    backoff = retry_backoff_seconds(attempt, base, claim_idle)
    return max(int((claim_idle - backoff) * 1000), 0)


def reclaim_interval(claim_idle: float, retry_backoff: float) -> float:
    """How often a worker runs XAUTOCLAIM: often enough for retries and for dead workers' tasks."""
    return max(0.1, min(retry_backoff / 2, claim_idle / 4))


def dead_consumer_idle_ms(claim_idle: float) -> int:
    """A consumer that owns nothing and has been idle this long is removed from the group."""
    return int(max(claim_idle * 3, 60.0) * 1000)


def deadline_passed(deadline_ms: int | None, now_ms: int) -> bool:
    return deadline_ms is not None and now_ms > deadline_ms


def sla_missed(queue_wait_seconds: float, sla: float | None) -> bool:
    return sla is not None and queue_wait_seconds > sla


def lease_ttl_seconds(sweep_interval: float) -> float:
    """The escalator lease outlives a few missed renewals but passes on quickly when its holder dies."""
    return max(sweep_interval * 5, 5.0)
