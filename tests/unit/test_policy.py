import pytest

from tierpool import policy
from tierpool.policy import FailureAction


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


@pytest.mark.parametrize(("deadline", "now", "passed"), [(None, 10, False), (10, 10, False), (10, 11, True)])
def test_deadline(deadline: int | None, now: int, passed: bool) -> None:
    assert policy.deadline_passed(deadline, now) is passed


@pytest.mark.parametrize(("wait", "sla", "missed"), [(1.0, None, False), (1.0, 1.0, False), (1.5, 1.0, True)])
def test_sla_missed(wait: float, sla: float | None, missed: bool) -> None:
    assert policy.sla_missed(wait, sla) is missed
