"""Which waits go through the due-time index (protocol 5), and delayed-submit parsing. Table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tierpool.protocol import policy
from tierpool.protocol.delays import (
    MAX_BACKOFF,
    DelayError,
    DueRoute,
    delay_ms,
    due_route,
    not_before_ms,
    retry_backoff,
    visible_since_ms,
)
from tierpool.protocol.errors import ErrorKind

F, N, W = ErrorKind.FAILED, ErrorKind.NON_RETRYABLE, ErrorKind.DEFERRED
CLAIM_IDLE = 10.0


@pytest.mark.parametrize(
    ("kind", "attempt", "base", "retry_after", "expected"),
    [
        # waits that fit within claimIdle keep the parked-entry route (protocol 2/3)
        (F, 1, 1.0, None, None),
        (F, 4, 1.0, None, None),  # 8 s
        (W, 1, 1.0, 9.0, None),
        # a backoff beyond claimIdle: a retry through the index, the whole backoff
        (F, 5, 1.0, None, DueRoute("retry", 16_000)),
        (F, 1, 30.0, None, DueRoute("retry", 30_000)),
        (F, 5, 10_000.0, None, DueRoute("retry", int(MAX_BACKOFF * 1000))),
        # last delivery: dead-lettered, no route
        (F, 6, 30.0, None, None),
        (N, 1, 30.0, None, None),
        # RetryAfter beyond claimIdle: deferred as asked; past its deferrals the fallback waits at least as long
        (W, 1, 1.0, 45.0, DueRoute("defer", 45_000, 45_000)),
        (W, 2, 60.0, 45.0, DueRoute("defer", 45_000, 120_000)),
        # ... and on the last delivery the fallback is immediate (then dead-lettered at take: delivery 7 > 6)
        (W, 6, 1.0, 45.0, DueRoute("defer", 45_000, 0)),
    ],
)
def test_due_route(
    kind: ErrorKind, attempt: int, base: float, retry_after: float | None, expected: DueRoute | None
) -> None:
    plan = policy.plan_failure(kind, "x", attempt, 6, 10, base, CLAIM_IDLE, retry_after)
    assert due_route(plan, kind, attempt, 6, base, CLAIM_IDLE, retry_after) == expected


@pytest.mark.parametrize(
    ("kind", "attempt", "retry_after", "expected"),
    [
        (F, 1, None, DueRoute("retry", 1_000)),
        (W, 1, 0.5, DueRoute("defer", 500, 1_000)),
        (F, 6, None, None),  # the last delivery is still dead-lettered
    ],
)
def test_a_rate_limited_task_always_goes_back_through_the_index(
    kind: ErrorKind, attempt: int, retry_after: float | None, expected: DueRoute | None
) -> None:
    """Its paid reservation is used up: back through the index, it draws from its bucket again."""
    plan = policy.plan_failure(kind, "x", attempt, 6, 10, 1.0, CLAIM_IDLE, retry_after)
    assert due_route(plan, kind, attempt, 6, 1.0, CLAIM_IDLE, retry_after, rate_limited=True) == expected


def test_deferrals_off_make_a_long_retry_after_a_failed_attempt_that_still_waits() -> None:
    plan = policy.plan_failure(W, "x", 1, 6, 0, 1.0, CLAIM_IDLE, 45.0)
    assert due_route(plan, W, 1, 6, 1.0, CLAIM_IDLE, 45.0) == DueRoute("retry", 45_000)


@pytest.mark.parametrize(
    ("attempt", "base", "expected"), [(1, 2.0, 2.0), (3, 2.0, 8.0), (0, 2.0, 2.0), (60, 1.0, MAX_BACKOFF)]
)
def test_retry_backoff_is_not_capped_at_claim_idle(attempt: int, base: float, expected: float) -> None:
    assert retry_backoff(attempt, base) == expected


@pytest.mark.parametrize(
    ("delay", "expected"), [(None, 0), (0, 0), (1.5, 1500), (timedelta(minutes=2), 120_000), (0.0001, 1)]
)
def test_delay_ms(delay: float | timedelta | None, expected: int) -> None:
    assert delay_ms(delay) == expected


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (None, 0),
        ("2030-01-01T00:00:00Z", 1_893_456_000_000),
        ("2030-01-01T01:00:00+01:00", 1_893_456_000_000),
        (datetime(2030, 1, 1, tzinfo=UTC), 1_893_456_000_000),
    ],
)
def test_not_before_ms(when: datetime | str | None, expected: int) -> None:
    assert not_before_ms(when) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [(-1, "between"), (400 * 86_400, "between"), ("soon", "ISO 8601"), (datetime(2030, 1, 1), "time zone")],
)
def test_bad_delays(value: object, message: str) -> None:
    parse = delay_ms if isinstance(value, int) else not_before_ms
    with pytest.raises(DelayError, match=message):
        parse(value)  # type: ignore[operator]


@pytest.mark.parametrize(("created", "due", "expected"), [(100, None, 100), (100, 500, 500), (100, 50, 100)])
def test_queue_wait_counts_from_the_due_time(created: int, due: int | None, expected: int) -> None:
    assert visible_since_ms(created, due) == expected
