"""tierpool.runtime.reads' pure parts: which tiers a blocking read covers, and the HAND_BACK calls for read entries."""

from __future__ import annotations

import pytest

from tierpool.model.keys import GROUP, RETRY_CONSUMER, PoolKeys
from tierpool.protocol.dispatch import TakePlan
from tierpool.runtime.reads import blocked_tiers, hand_back_calls
from tierpool.store.streams import Entry, PoolStreams


@pytest.mark.parametrize(
    ("room", "tiers"),
    [((1, 1, 1), [0, 1, 2]), ((0, 2, -1), [1, 2]), ((0, 0), []), ((-1,), [0])],
)
def test_blocked_tiers(room: tuple[int, ...], tiers: list[int]) -> None:
    assert blocked_tiers(TakePlan(tuple(0 for _ in room), room)) == tiers


@pytest.mark.parametrize(
    ("entries", "calls"),
    [
        ([], []),
        ([(1, "5-0"), (0, "3-0"), (1, "6-0")], [(0, ["3-0"]), (1, ["5-0", "6-0"])]),
    ],
)
def test_hand_back_calls_one_per_tier_in_tier_order(
    entries: list[tuple[int, str]], calls: list[tuple[int, list[str]]]
) -> None:
    keys = PoolKeys("ns", "pool")
    streams = PoolStreams(None, keys, ["p0", "p1"])  # type: ignore[arg-type]
    found = hand_back_calls(streams, "w1", 30_000, [Entry(index, entry_id, {}) for index, entry_id in entries])
    assert found == [
        ("HAND_BACK", [keys.tier(["p0", "p1"][index])], [GROUP, "w1", RETRY_CONSUMER, 30_000, *ids])
        for index, ids in calls
    ]
