"""Tier choice: smooth weighted round-robin, caps, strict order. Pure and table-driven."""

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierpool.model.spec import DispatchPolicy
from tierpool.protocol.dispatch import UNLIMITED, Planner, WeightedOrder


@pytest.mark.parametrize(
    ("weights", "first_picks"),
    [
        ([5, 1, 1], [0, 0, 1, 0, 2, 0, 0]),  # nginx's documented SWRR sequence a a b a c a a
        ([1, 1], [0, 1, 0, 1]),
        ([70, 25, 5], [0, 1, 0, 0, 0, 1, 0, 0, 2, 0]),  # worked by hand: P2 first at pick 9
    ],
)
def test_swrr_sequence(weights: list[int], first_picks: list[int]) -> None:
    order = WeightedOrder(weights)
    assert [order.pick([True] * len(weights)) for _ in first_picks] == first_picks


@pytest.mark.parametrize("weights", [[70, 25, 5], [1, 1, 1], [3, 1], [50, 30, 15, 5], [1, 99]])
def test_exact_shares_over_10000_picks(weights: list[int]) -> None:
    order = WeightedOrder(weights)
    counts = Counter(order.pick([True] * len(weights)) for _ in range(10_000))
    total = sum(weights)
    for index, weight in enumerate(weights):
        assert abs(counts[index] / 10_000 - weight / total) < 0.001


@given(st.lists(st.integers(min_value=1, max_value=1000), min_size=1, max_size=8))
def test_swrr_one_cycle_is_exact(weights: list[int]) -> None:
    order = WeightedOrder(weights)
    counts = Counter(order.pick([True] * len(weights)) for _ in range(sum(weights)))
    assert [counts[i] for i in range(len(weights))] == weights


def test_ineligible_tiers_are_skipped() -> None:
    order = WeightedOrder([70, 25, 5])
    picks = Counter(order.pick([False, True, True]) for _ in range(300))
    assert picks[0] == 0
    assert picks[1] == 250 and picks[2] == 50


def test_nothing_eligible() -> None:
    assert WeightedOrder([1]).pick([False]) is None


@pytest.mark.parametrize("weights", [[], [0, 1], [1, -1]])
def test_bad_weights(weights: list[int]) -> None:
    with pytest.raises(ValueError):
        WeightedOrder(weights)


PLAN_CASES = [
    # (weights, caps, policy, free, running, want, room)
    ([70, 25, 5], [None] * 3, "weighted", 20, [0, 0, 0], (14, 5, 1), (UNLIMITED,) * 3),
    ([70, 25, 5], [None] * 3, "weighted", 1, [0, 0, 0], (1, 0, 0), (UNLIMITED,) * 3),
    ([70, 25, 5], [None] * 3, "weighted", 0, [0, 0, 0], (0, 0, 0), (UNLIMITED,) * 3),
    ([70, 25, 5], [None] * 3, "strict", 10, [0, 0, 0], (10, 0, 0), (UNLIMITED,) * 3),
    ([70, 25, 5], [2, None, None], "weighted", 20, [0, 0, 0], (2, 15, 3), (2, UNLIMITED, UNLIMITED)),
    ([70, 25, 5], [2, None, None], "weighted", 10, [2, 0, 0], (0, 8, 2), (0, UNLIMITED, UNLIMITED)),
    ([70, 25, 5], [2, None, None], "strict", 10, [1, 0, 0], (1, 9, 0), (1, UNLIMITED, UNLIMITED)),
    ([1, 1], [1, 1], "weighted", 10, [1, 1], (0, 0), (0, 0)),
    ([1, 1], [3, 1], "weighted", 10, [0, 0], (3, 1), (3, 1)),
]


@pytest.mark.parametrize(("weights", "caps", "policy", "free", "running", "want", "room"), PLAN_CASES)
def test_plan(
    weights: list[int],
    caps: list[int | None],
    policy: str,
    free: int,
    running: list[int],
    want: tuple[int, ...],
    room: tuple[int, ...],
) -> None:
    plan = Planner(weights, caps, DispatchPolicy(policy)).plan(free, running)
    assert plan.want == want
    assert plan.room == room


OPEN_CASES = [
    # (open tiers, free, want, room): a closed tier gets no room, so neither a want nor a shortfall reaches it
    ((True, True, True), 4, (3, 1, 0), (UNLIMITED,) * 3),
    ((True, True, False), 4, (3, 1, 0), (UNLIMITED, UNLIMITED, 0)),
    ((True, False, False), 4, (4, 0, 0), (UNLIMITED, 0, 0)),
]


@pytest.mark.parametrize(("open_tiers", "free", "want", "room"), OPEN_CASES)
def test_plan_only_reads_open_tiers(
    open_tiers: tuple[bool, ...], free: int, want: tuple[int, ...], room: tuple[int, ...]
) -> None:
    plan = Planner([70, 25, 5], [None] * 3, DispatchPolicy.WEIGHTED).plan(free, [0, 0, 0], open_tiers)
    assert plan.want == want
    assert plan.room == room
