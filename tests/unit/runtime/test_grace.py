"""The drain's grace period leaves the pod enough of its termination grace for what follows the drain."""

from __future__ import annotations

import pytest

from tierpool.runtime.drain import AFTER_GRACE_SECONDS
from tierpool.runtime.startup import grace_seconds


@pytest.mark.parametrize(
    ("termination_grace", "expected"),
    [
        (1, 1.0),  # too short for anything: at least a second of drain
        (5, 1.0),
        (8, 1.0),
        (10, 3.0),  # the after-grace reserve (7 s), not a tenth (1 s)
        (30, 23.0),  # not 27: min(5 s, 10 %) = 3 s would not cover cancel + hand-back + writes + exit
        (60, 53.0),
        (70, 63.0),  # a tenth (7 s) equals the reserve
        (100, 93.0),
        (300, 293.0),  # a tenth is capped at 5 s, below the reserve
    ],
)
def test_grace_seconds(termination_grace: float, expected: float) -> None:
    assert grace_seconds(termination_grace) == expected


@pytest.mark.parametrize("termination_grace", [8, 10, 30, 45, 60, 120, 600, 3600])
def test_the_drain_and_what_follows_it_fit_in_the_termination_grace(termination_grace: float) -> None:
    assert AFTER_GRACE_SECONDS == 7.0
    assert grace_seconds(termination_grace) + AFTER_GRACE_SECONDS <= termination_grace
