"""Recovery policy: what to do with a failed, reclaimed or expired task. Pure functions, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tierpool.model.durations import ms_floor
from tierpool.protocol.errors import ErrorKind


class FailureAction(StrEnum):
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"
    DEFER = "defer"


def after_failure(attempt: int, max_deliveries: int) -> FailureAction:
    """A handler error on delivery ``attempt``: retry while deliveries remain, else dead-letter.

    With maxDeliveries 3 a task that always fails runs exactly three times.
    """
    return FailureAction.DEAD_LETTER if attempt >= max_deliveries else FailureAction.RETRY


def retry_backoff_seconds(attempt: int, base: float, claim_idle: float) -> float:
    """Exponential backoff (base, 2*base, 4*base ...) capped at claimIdle: what a parked entry can wait. A longer
    backoff goes through the due-time index instead (see tierpool.protocol.delays.due_route)."""
    return min(base * 2.0 ** max(attempt - 1, 0), claim_idle)


def retry_idle_ms(attempt: int, base: float, claim_idle: float) -> int:
    """The idle time to stamp on a failed entry so reclaim picks it up after the backoff.

    Reclaim takes entries idle >= claimIdle, so stamping claimIdle - backoff delays it by the backoff.
    """
    backoff = retry_backoff_seconds(attempt, base, claim_idle)
    return max(ms_floor(claim_idle - backoff), 0)


@dataclass(frozen=True)
class FailurePlan:
    """What a failed run writes for its entry."""

    action: FailureAction
    idle_ms: int = 0
    """RETRY and DEFER: the idle time to stamp, so that reclaim picks the entry up after the delay."""
    fallback_idle_ms: int = 0
    """DEFER: the idle time to stamp instead when the task's deferrals are used up (then it is a failed attempt)."""
    reason: str = ""
    """DEAD_LETTER: the dead-letter reason."""
    clamped: bool = False
    """DEFER: the delay asked for was longer than claimIdle and was cut to it."""


def defer_delay(requested: float, claim_idle: float) -> float:
    """The delay a RetryAfter gets: what it asks for, capped at claimIdle (the longest the idle-time mechanism
    can hold an entry back)."""
    return min(max(requested, 0.0), claim_idle)


def plan_failure(
    kind: ErrorKind,
    message: str,
    attempt: int,
    max_deliveries: int,
    max_deferrals: int,
    retry_backoff: float,
    claim_idle: float,
    retry_after: float | None = None,
) -> FailurePlan:
    """What a handler error on delivery ``attempt`` means for the entry: dead-letter it now (non-retryable, or
    the last delivery failed), defer it (RetryAfter, while deferrals remain: counted in Redis, not here), or
    retry it after the backoff. A RetryAfter past its deferrals is a failed attempt whose backoff is at least the
    delay it asked for; on the last delivery it waits no longer (reclaim then dead-letters it)."""
    if kind is ErrorKind.NON_RETRYABLE:
        return FailurePlan(FailureAction.DEAD_LETTER, reason=f"non-retryable: {message}")
    last = after_failure(attempt, max_deliveries) is FailureAction.DEAD_LETTER
    if kind is ErrorKind.DEFERRED and max_deferrals > 0:
        delay = defer_delay(retry_after or 0.0, claim_idle)
        backoff = max(retry_backoff_seconds(attempt, retry_backoff, claim_idle), delay)
        fallback = 0.0 if last else backoff
        return FailurePlan(
            FailureAction.DEFER,
            idle_ms=_idle_ms(claim_idle, delay),
            fallback_idle_ms=_idle_ms(claim_idle, fallback),
            clamped=(retry_after or 0.0) > claim_idle,
        )
    if last:
        return FailurePlan(FailureAction.DEAD_LETTER, reason=f"handler failed on all {max_deliveries} deliveries")
    if kind is ErrorKind.DEFERRED:  # deferrals switched off: a failed attempt that still waits as asked
        backoff = max(
            retry_backoff_seconds(attempt, retry_backoff, claim_idle), defer_delay(retry_after or 0.0, claim_idle)
        )
        return FailurePlan(FailureAction.RETRY, idle_ms=_idle_ms(claim_idle, backoff))
    return FailurePlan(FailureAction.RETRY, idle_ms=retry_idle_ms(attempt, retry_backoff, claim_idle))


def _idle_ms(claim_idle: float, delay: float) -> int:
    return max(ms_floor(claim_idle - delay), 0)  # rounded down: never sooner than asked


def deferral_memory_ms(max_deferrals: int, claim_idle: float, result_ttl: float) -> int:
    """How long a task's deferral count is kept: longer than all its deferrals could take, and at least as long
    as its result record."""
    return ms_floor(max(result_ttl, 2 * (max_deferrals + 1) * claim_idle))


def time_limit(task_timeout_ms: int | None, pool_timeout: float | None) -> float | None:
    """The run's time limit in seconds: the task's own (from submit) wins over the pool's ``tasks.timeout``."""
    return task_timeout_ms / 1000 if task_timeout_ms is not None else pool_timeout


def reclaim_interval(claim_idle: float, retry_backoff: float) -> float:
    """How often a worker runs XAUTOCLAIM: often enough for retries and for dead workers' tasks."""
    return max(0.1, min(retry_backoff / 2, claim_idle / 4))


def dead_consumer_idle_ms(claim_idle: float) -> int:
    """A consumer that owns nothing and has been idle this long is removed from the group."""
    return ms_floor(max(claim_idle * 3, 60.0))


def deadline_passed(deadline_ms: int | None, now_ms: int) -> bool:
    return deadline_ms is not None and now_ms > deadline_ms


def deadline_reason(attempt: int, resumes_gather: bool) -> str:
    """The dead-letter reason of a task taken after its deadline: it never started, a resumed gather or a retry
    never started (a deadline is when the task must have started; a run that started goes on past it)."""
    if resumes_gather:
        return "deadline passed while the task waited for its children (gather); not resumed"
    if attempt > 1:
        return f"deadline passed before attempt {attempt} started"
    return "deadline passed before the task started"


def sla_missed(queue_wait_seconds: float, sla: float | None) -> bool:
    return sla is not None and queue_wait_seconds > sla


def lease_ttl_seconds(sweep_interval: float) -> float:
    """The escalator lease outlives a few missed renewals but passes on quickly when its holder dies."""
    return max(sweep_interval * 5, 5.0)
