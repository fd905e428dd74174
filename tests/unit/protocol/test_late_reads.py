"""tierpool.protocol.late_reads: when a read's entries must have their ownership confirmed before they start."""

from __future__ import annotations

import pytest

from tierpool.model.spec import RecoverySpec
from tierpool.protocol.late_reads import confirm_threshold, must_confirm
from tierpool.protocol.policy import reclaim_interval


@pytest.mark.parametrize(
    ("claim_idle", "heartbeat", "threshold"),
    [
        (60.0, 10.0, 25.0),  # the defaults
        (1.0, 0.2, 0.4),
        (30.0, 10.0, 10.0),
        (2.0, 1.9, 0.05),  # a heartbeat close to claimIdle: a small threshold (reads pay a round trip)
        (1.0, 1.0, 0.0),  # never reached (the spec refuses it): every read is confirmed
        (1.0, 2.0, 0.0),
    ],
)
def test_confirm_threshold(claim_idle: float, heartbeat: float, threshold: float) -> None:
    assert confirm_threshold(claim_idle, heartbeat) == pytest.approx(threshold)


@pytest.mark.parametrize(("claim_idle", "heartbeat"), [(60.0, 10.0), (1.0, 0.2), (3.0, 2.9), (10.0, 0.1)])
def test_an_unchecked_entry_is_refreshed_before_anyone_may_reclaim_it(claim_idle: float, heartbeat: float) -> None:
    """Started unchecked, an entry is idle for less than the threshold, then at most one heartbeat interval more."""
    assert confirm_threshold(claim_idle, heartbeat) + heartbeat < claim_idle


@pytest.mark.parametrize("retry_backoff", [0.05, 1.0, 100.0])
def test_the_default_settings_never_confirm_a_read_that_blocked_its_whole_block(retry_backoff: float) -> None:
    recovery = RecoverySpec()
    longest_block = min(0.5, reclaim_interval(recovery.claim_idle, retry_backoff))
    threshold = confirm_threshold(recovery.claim_idle, recovery.heartbeat)
    assert not must_confirm(100.0, 100.0 + longest_block + 1.0, threshold)  # a second of latency on top


@pytest.mark.parametrize(
    ("sent_at", "now", "threshold", "confirm"),
    [
        (10.0, 10.001, 25.0, False),  # a prompt read
        (10.0, 35.0, 25.0, False),  # exactly the threshold: still prompt
        (10.0, 35.001, 25.0, True),
        (10.0, 600.0, 25.0, True),  # frozen for minutes
        (10.0, 9.0, 25.0, False),  # a clock that went backwards
        (10.0, 10.0, 0.0, False),
        (10.0, 10.001, 0.0, True),
    ],
)
def test_must_confirm(sent_at: float, now: float, threshold: float, confirm: bool) -> None:
    assert must_confirm(sent_at, now, threshold) is confirm
