import pytest

from tierpool.protocol import policy
from tierpool.protocol.errors import ErrorKind, NonRetryable, RetryAfter, TaskTimedOut, describe
from tierpool.protocol.policy import FailureAction, FailurePlan


@pytest.mark.parametrize(
    ("attempt", "max_deliveries", "action"),
    [
        (1, 3, FailureAction.RETRY),
        (2, 3, FailureAction.RETRY),
        (3, 3, FailureAction.DEAD_LETTER),
        (4, 3, FailureAction.DEAD_LETTER),
        (1, 1, FailureAction.DEAD_LETTER),
    ],
)
def test_after_failure(attempt: int, max_deliveries: int, action: FailureAction) -> None:
    assert policy.after_failure(attempt, max_deliveries) is action


@pytest.mark.parametrize(
    ("attempt", "base", "claim_idle", "backoff", "idle_ms"),
    [
        (1, 1.0, 60.0, 1.0, 59_000),
        (2, 1.0, 60.0, 2.0, 58_000),
        (3, 1.0, 60.0, 4.0, 56_000),
        (10, 1.0, 60.0, 60.0, 0),
        (1, 0.0, 5.0, 0.0, 5_000),
        (1, 10.0, 5.0, 5.0, 0),
    ],
)
def test_retry_backoff(attempt: int, base: float, claim_idle: float, backoff: float, idle_ms: int) -> None:
    assert policy.retry_backoff_seconds(attempt, base, claim_idle) == backoff
    assert policy.retry_idle_ms(attempt, base, claim_idle) == idle_ms


@pytest.mark.parametrize(("claim_idle", "backoff", "interval"), [(60.0, 1.0, 0.5), (1.0, 10.0, 0.25), (0.2, 0.01, 0.1)])
def test_reclaim_interval(claim_idle: float, backoff: float, interval: float) -> None:
    assert policy.reclaim_interval(claim_idle, backoff) == interval


@pytest.mark.parametrize(("claim_idle", "idle_ms"), [(60.0, 180_000), (1.0, 60_000)])
def test_dead_consumer_idle(claim_idle: float, idle_ms: int) -> None:
    assert policy.dead_consumer_idle_ms(claim_idle) == idle_ms


@pytest.mark.parametrize(
    ("attempt", "resumes", "reason"),
    [
        (1, False, "deadline passed before the task started"),
        (3, False, "deadline passed before attempt 3 started"),
        (1, True, "deadline passed while the task waited for its children (gather); not resumed"),
        (3, True, "deadline passed while the task waited for its children (gather); not resumed"),
    ],
)
def test_a_deadline_reason_says_which_start_it_missed(attempt: int, resumes: bool, reason: str) -> None:
    assert policy.deadline_reason(attempt, resumes) == reason


@pytest.mark.parametrize(("deadline", "now", "passed"), [(None, 10, False), (10, 10, False), (10, 11, True)])
def test_deadline(deadline: int | None, now: int, passed: bool) -> None:
    assert policy.deadline_passed(deadline, now) is passed


@pytest.mark.parametrize(("wait", "sla", "missed"), [(1.0, None, False), (1.0, 1.0, False), (1.5, 1.0, True)])
def test_sla_missed(wait: float, sla: float | None, missed: bool) -> None:
    assert policy.sla_missed(wait, sla) is missed


# --- error classes (issue #12, point 3) ---------------------------------------------------------------------

A, D, R = FailureAction.DEAD_LETTER, FailureAction.DEFER, FailureAction.RETRY
F, N, W = ErrorKind.FAILED, ErrorKind.NON_RETRYABLE, ErrorKind.DEFERRED


@pytest.mark.parametrize(
    ("kind", "attempt", "max_deliveries", "max_deferrals", "retry_after", "expected"),
    [
        # ordinary failures keep today's backoff (base 1s, claimIdle 10s) and dead-letter on the last delivery
        (F, 1, 3, 10, None, FailurePlan(R, idle_ms=9_000)),
        (F, 2, 3, 10, None, FailurePlan(R, idle_ms=8_000)),
        (F, 3, 3, 10, None, FailurePlan(A, reason="handler failed on all 3 deliveries")),
        # non-retryable: dead-lettered at once, whatever deliveries remain
        (N, 1, 3, 10, None, FailurePlan(A, reason="non-retryable: context too long")),
        (N, 1, 1, 0, None, FailurePlan(A, reason="non-retryable: context too long")),
        # RetryAfter: deferred by what it asks; the fallback (deferrals used up) waits at least as long
        (W, 1, 3, 10, 4.0, FailurePlan(D, idle_ms=6_000, fallback_idle_ms=6_000)),
        (W, 1, 3, 10, 0.5, FailurePlan(D, idle_ms=9_500, fallback_idle_ms=9_000)),
        (W, 1, 3, 10, 0.0, FailurePlan(D, idle_ms=10_000, fallback_idle_ms=9_000)),
        # ... even on the last delivery (a deferral does not use one up); its fallback is reclaimable at once
        (W, 3, 3, 10, 4.0, FailurePlan(D, idle_ms=6_000, fallback_idle_ms=10_000)),
        # ... capped at claimIdle, and says so
        (W, 1, 3, 10, 60.0, FailurePlan(D, idle_ms=0, fallback_idle_ms=0, clamped=True)),
        # deferrals switched off: a failed attempt that still waits as asked
        (W, 1, 3, 0, 4.0, FailurePlan(R, idle_ms=6_000)),
        (W, 3, 3, 0, 4.0, FailurePlan(A, reason="handler failed on all 3 deliveries")),
    ],
)
def test_plan_failure(
    kind: ErrorKind,
    attempt: int,
    max_deliveries: int,
    max_deferrals: int,
    retry_after: float | None,
    expected: FailurePlan,
) -> None:
    plan = policy.plan_failure(kind, "context too long", attempt, max_deliveries, max_deferrals, 1.0, 10.0, retry_after)
    assert plan == expected


@pytest.mark.parametrize(
    ("error", "kind", "text", "retry_after"),
    [
        (RuntimeError("boom"), F, "RuntimeError: boom", None),
        (NonRetryable("context too long"), N, "NonRetryable: context too long", None),
        (RetryAfter(30), W, "RetryAfter: retry after 30s", 30.0),
        (RetryAfter(1.5, "429 from the provider"), W, "RetryAfter: 429 from the provider", 1.5),
        (TaskTimedOut(2.5), F, "timed out after 2.5s", None),
        (TimeoutError("the handler's own"), F, "TimeoutError: the handler's own", None),
        (
            ConnectionError("redis://app:s3cr/t@cache:6379/0 refused"),
            F,
            "ConnectionError: redis://app:***@cache:6379/0 refused",
            None,
        ),
        (NonRetryable("bad url rediss://:tok@h/1"), N, "NonRetryable: bad url rediss://:***@h/1", None),
    ],
)
def test_describe_error(error: Exception, kind: ErrorKind, text: str, retry_after: float | None) -> None:
    info = describe(error)
    assert (info.kind, info.text, info.retry_after) == (kind, text, retry_after)


@pytest.mark.parametrize("seconds", [-1.0, float("nan"), float("inf")])
def test_retry_after_refuses_impossible_delays(seconds: float) -> None:
    with pytest.raises(ValueError, match="RetryAfter needs"):
        RetryAfter(seconds)


def test_deferral_memory_outlives_every_deferral_and_the_result() -> None:
    assert policy.deferral_memory_ms(10, 60.0, 3600.0) == 3600_000
    assert policy.deferral_memory_ms(100, 60.0, 3600.0) == 2 * 101 * 60_000


# --- time limits (issue #12, point 2) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task_ms", "pool", "limit"), [(None, None, None), (None, 30.0, 30.0), (2500, None, 2.5), (2500, 30.0, 2.5)]
)
def test_time_limit_task_wins_over_pool(task_ms: int | None, pool: float | None, limit: float | None) -> None:
    assert policy.time_limit(task_ms, pool) == limit
