"""Pool-wide rate limits (protocol 5): bucket parameters, which limit applies, and the GCRA arithmetic of the
THROTTLE script (mirrored in tierpool.protocol.rate_limits). Table-driven."""

from __future__ import annotations

import pytest

from tierpool.model.spec import RateLimit
from tierpool.protocol.rate_limits import (
    Bucket,
    claimed_reservation,
    gcra,
    handler_limit,
    late_tolerance_ms,
    limit_for,
    limit_refusal,
    needs_check,
    rate_limited,
)

PER_SECOND = Bucket.of(RateLimit(name="a", per_minute=60))
"""One task a second, burst 1."""
FAST = Bucket.of(RateLimit(name="b", per_minute=600))
"""Ten a second, burst 10."""
TOKENS = Bucket.of(RateLimit(name="c", per_minute=6000, tokens_per_minute=600))
"""100 tasks a second; 10 tokens a second, token burst 10."""


def test_bucket_parameters() -> None:
    assert (PER_SECOND.per_ms, PER_SECOND.burst, PER_SECOND.per_token_ms) == (1000.0, 1.0, 0.0)
    assert (FAST.per_ms, FAST.burst) == (100.0, 10.0)
    assert (TOKENS.per_token_ms, TOKENS.token_burst) == (100.0, 10.0)
    assert Bucket.of(RateLimit(name="d", per_minute=1)).burst == 1.0


@pytest.mark.parametrize(
    ("bucket", "tat", "tokens_tat", "now", "cost", "start", "new_tat", "new_tokens"),
    [
        # an empty bucket: at once
        (PER_SECOND, 0.0, 0.0, 10_000.0, 1, 10_000.0, 11_000.0, 0.0),
        # the next one a second later: reserved for then (its start), the bucket charged as of it
        (PER_SECOND, 11_000.0, 0.0, 10_000.0, 1, 11_000.0, 12_000.0, 0.0),
        (PER_SECOND, 12_000.0, 0.0, 10_000.0, 1, 12_000.0, 13_000.0, 0.0),
        # a burst of ten goes at once, the eleventh waits 100 ms
        (FAST, 10_900.0, 0.0, 10_000.0, 1, 10_000.0, 11_000.0, 0.0),
        (FAST, 11_000.0, 0.0, 10_000.0, 1, 10_100.0, 11_100.0, 0.0),
        # tokens: a cost within the burst goes at once; the next waits for its tokens
        (TOKENS, 0.0, 0.0, 10_000.0, 5, 10_000.0, 10_010.0, 10_500.0),
        (TOKENS, 10_010.0, 10_500.0, 10_000.0, 8, 10_300.0, 10_310.0, 11_300.0),
        # a cost above the burst starts when the bucket is full, then holds the next ones back for all of it
        (TOKENS, 0.0, 0.0, 10_000.0, 30, 10_000.0, 10_010.0, 13_000.0),
        (TOKENS, 0.0, 10_500.0, 10_000.0, 30, 10_500.0, 10_510.0, 13_500.0),
    ],
)
def test_gcra(
    bucket: Bucket,
    tat: float,
    tokens_tat: float,
    now: float,
    cost: int,
    start: float,
    new_tat: float,
    new_tokens: float,
) -> None:
    step = gcra(bucket, tat, tokens_tat, now, cost)
    assert (step.start, step.tat, step.tokens_tat) == (start, new_tat, new_tokens)


def test_a_minute_of_reservations_sits_at_the_limit() -> None:
    tat, starts = 0.0, []
    for _ in range(120):
        step = gcra(FAST, tat, 0.0, 0.0)
        tat = step.tat
        starts.append(step.start)
    # a burst of ten at once, then one every 100 ms: 109 start within the first ten seconds
    assert sum(1 for start in starts if start < 10_000) == 109
    assert starts[10:13] == [100.0, 200.0, 300.0]


@pytest.mark.parametrize(
    ("task_limit", "handler", "paid", "deliveries", "limit", "check"),
    [
        (None, None, None, 1, None, False),
        ("ai", None, None, 1, "ai", True),
        (None, "ai", None, 1, "ai", True),
        ("other", "ai", None, 1, "other", True),
        ("ai", None, 5, 1, "ai", False),  # paid for: runs without drawing again
        ("ai", None, 5, 2, "ai", True),  # a retry of the same entry draws again
    ],
)
def test_which_limit_and_when_to_draw(
    task_limit: str | None, handler: str | None, paid: int | None, deliveries: int, limit: str | None, check: bool
) -> None:
    assert limit_for(task_limit, handler) == limit
    assert needs_check(limit, paid, deliveries) is check


def test_rate_limited_marks_a_handler() -> None:
    @rate_limited("ai")
    async def handle(task: object) -> None:
        return None

    assert handler_limit(handle) == "ai" and handler_limit(print) is None


@pytest.mark.parametrize(
    ("paid", "deliveries", "now", "check"),
    [
        (10_000, 1, 10_900, False),  # on time (within a second): the reservation holds
        (10_000, 1, 11_000, False),
        (10_000, 1, 11_001, True),  # late behind busy slots: draws again, no herd of late reservations
        (10_000, 2, 10_100, True),  # a retry draws again
        (None, 1, 10_000, True),
        (10_000, 1, None, False),  # no clock given: as before
    ],
)
def test_a_reservation_holds_only_on_time(paid: int | None, deliveries: int, now: float | None, check: bool) -> None:
    assert needs_check("a", paid, deliveries, now, late_tolerance_ms(PER_SECOND, 1)) is check


@pytest.mark.parametrize(
    ("bucket", "cost", "late_ms"),
    [
        (PER_SECOND, 1, 1000.0),  # the floor: more than the mover's latency
        (FAST, 1, 1000.0),
        (TOKENS, 10, 1000.0),  # ten tokens at 100 ms each: half is 500 ms, under the floor
        (TOKENS, 40, 2000.0),
        (Bucket.of(RateLimit(name="slow", per_minute=6)), 1, 5000.0),  # half of ten seconds
    ],
)
def test_late_tolerance(bucket: Bucket, cost: int, late_ms: float) -> None:
    assert late_tolerance_ms(bucket, cost) == late_ms


@pytest.mark.parametrize(
    ("limit", "paid", "deliveries", "now", "claimed"),
    [
        ("a", 10_000, 1, 10_500, 10_000),  # on time: THROTTLE is asked to run it on its reservation
        ("a", 10_000, 1, 11_001, None),  # late: draws
        ("a", 10_000, 2, 10_100, None),  # a retry draws
        ("a", None, 1, 10_000, None),  # never paid
        (None, 10_000, 1, 10_000, None),  # no limit: nothing to claim
    ],
)
def test_a_task_claims_its_paid_time_only_when_it_would_skip_its_bucket(
    limit: str | None, paid: int | None, deliveries: int, now: float, claimed: int | None
) -> None:
    assert claimed_reservation(limit, paid, deliveries, now, late_tolerance_ms(PER_SECOND, 1)) == claimed


def test_an_undefined_rate_limit_is_refused_with_the_defined_ones_named() -> None:
    assert limit_refusal(None, ["a"]) is None and limit_refusal("a", ["a", "b"]) is None
    assert limit_refusal("x", ["b", "a"]) == "bad envelope: rate_limit 'x' is not one of spec.rateLimits (a, b)"
    assert limit_refusal("", []) == "bad envelope: rate_limit '' is not one of spec.rateLimits (none)"
