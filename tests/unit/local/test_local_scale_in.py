"""Local mode scales in the least busy workers first (pure choice)."""

from __future__ import annotations

import pytest

from tierpool.local.supervisor import to_drain


@pytest.mark.parametrize(
    ("in_flight", "count", "drained"),
    [
        ({}, 1, {3}),  # nothing known: newest first, like a ReplicaSet
        ({"w3": 4, "w2": 4}, 1, {1}),  # the newest idle one
        ({"w0": 4, "w1": 0, "w2": 3, "w3": 4}, 2, {1, 2}),  # idle, then the least busy
        ({"w0": 1, "w1": 1, "w2": 1, "w3": 1}, 4, {0, 1, 2, 3}),
        ({"w0": 1}, 0, set()),
    ],
)
def test_scale_in_prefers_idle_workers(in_flight: dict[str, int], count: int, drained: set[int]) -> None:
    assert to_drain(["w0", "w1", "w2", "w3"], in_flight, count) == drained
