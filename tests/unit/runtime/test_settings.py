"""A worker's settings read at start-up: the eviction recheck interval."""

from __future__ import annotations

import pytest

from tierpool.runtime.settings import EVICTION_RECHECK_SECONDS, eviction_recheck_seconds


@pytest.mark.parametrize(
    ("env", "seconds"),
    [
        ({}, EVICTION_RECHECK_SECONDS),
        ({"TIERPOOL_EVICTION_RECHECK_SECONDS": "0.2"}, 0.2),
        ({"TIERPOOL_EVICTION_RECHECK_SECONDS": " 5 "}, 5.0),
        ({"TIERPOOL_EVICTION_RECHECK_SECONDS": ""}, EVICTION_RECHECK_SECONDS),
        ({"TIERPOOL_EVICTION_RECHECK_SECONDS": "0"}, EVICTION_RECHECK_SECONDS),
        ({"TIERPOOL_EVICTION_RECHECK_SECONDS": "-1"}, EVICTION_RECHECK_SECONDS),
        ({"TIERPOOL_EVICTION_RECHECK_SECONDS": "nan"}, EVICTION_RECHECK_SECONDS),
        ({"TIERPOOL_EVICTION_RECHECK_SECONDS": "inf"}, EVICTION_RECHECK_SECONDS),
        ({"TIERPOOL_EVICTION_RECHECK_SECONDS": "30s"}, EVICTION_RECHECK_SECONDS),
    ],
)
def test_the_eviction_recheck_interval(env: dict[str, str], seconds: float) -> None:
    assert eviction_recheck_seconds(env) == seconds
