"""Reserved slots and paced refills (tierpool.protocol.slots). Pure and table-driven."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierpool.protocol.slots import (
    PACE_SLOT,
    STAGGER_MAX,
    STAGGER_SLOT,
    ReadWindow,
    block_ms,
    held_back,
    pace,
    read_window,
    stagger,
    usable_slots,
)


@pytest.mark.parametrize(
    ("reserved", "held", "usable"),
    [
        ((0, 0, 0), (0, 0, 0), (8, 8, 8)),
        ((1, 0, 0), (0, 1, 1), (8, 7, 7)),
        ((2, 1, 0), (0, 2, 3), (8, 6, 5)),
        ((0, 3, 0), (0, 0, 3), (8, 8, 5)),
        ((1,), (0,), (8,)),
    ],
)
def test_held_back_and_usable(reserved: tuple[int, ...], held: tuple[int, ...], usable: tuple[int, ...]) -> None:
    assert held_back(reserved) == held
    assert usable_slots(8, reserved) == usable


WINDOW_CASES = [
    # (free, held back per tier, paced, size, open tiers)
    ("no reservation: every free slot, every tier", 4, (0, 0, 0), False, 4, (True, True, True)),
    ("every slot busy", 0, (0, 1, 1), False, 0, (False, False, False)),
    ("p0 reserves 1: lower tiers leave one slot free", 4, (0, 1, 1), False, 3, (True, True, True)),
    ("the last free slot is p0's", 1, (0, 1, 1), False, 1, (True, False, False)),
    ("two reserved (p0 2, p1 0): two free slots stay p0's", 2, (0, 2, 2), False, 2, (True, False, False)),
    ("p0 1 and p1 1: the last two free slots are p1's and above", 2, (0, 1, 2), False, 1, (True, True, False)),
    ("p0 1 and p1 1: the very last is p0's", 1, (0, 1, 2), False, 1, (True, False, False)),
    ("p0 1 and p1 1, 5 free: p2 fills 3", 5, (0, 1, 2), False, 3, (True, True, True)),
    ("paced: one slot a read", 4, (0, 0, 0), True, 1, (True, True, True)),
    ("paced in the reserve", 1, (0, 1, 1), True, 1, (True, False, False)),
]


@pytest.mark.parametrize(
    ("case", "free", "held", "paced", "size", "open_tiers"), WINDOW_CASES, ids=[c[0] for c in WINDOW_CASES]
)
def test_read_window(
    case: str, free: int, held: tuple[int, ...], paced: bool, size: int, open_tiers: tuple[bool, ...]
) -> None:
    assert read_window(free, held, paced) == ReadWindow(size, open_tiers)


@given(
    st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=5),
    st.integers(min_value=1, max_value=12),
    st.data(),
)
def test_no_sequence_of_reads_breaks_a_reservation(reserved: list[int], concurrency: int, data: st.DataObject) -> None:
    """Whatever tiers a read's slots go to (within its window), tier i never starts a task that leaves fewer than
    H_i slots free; the top tier can always fill every slot."""
    held = held_back(reserved)
    free = concurrency
    while free > 0:
        window = read_window(free, held)
        assert window.size >= 1 and window.open[0]
        taken = data.draw(
            st.lists(st.sampled_from([i for i, ok in enumerate(window.open) if ok]), max_size=window.size)
        )
        if not taken:
            break
        for count, tier in enumerate(sorted(taken, reverse=True), start=1):  # lowest tiers first: the worst order
            assert free - count >= held[tier]
        free -= len(taken)


@pytest.mark.parametrize(
    ("last_run", "concurrency", "paced"),
    [
        (None, 8, False),
        (0.0001, 8, False),
        (0.02, 8, True),
        (8 * PACE_SLOT, 8, True),
        (0.05, 64, False),
        (30.0, 64, True),
    ],
)
def test_pace(last_run: float | None, concurrency: int, paced: bool) -> None:
    assert pace(last_run, concurrency) is paced


@pytest.mark.parametrize(
    ("configured", "until_reclaim", "block"), [(500, 10_000, 500), (500, 120, 120), (500, -30, 10), (5, 10_000, 10)]
)
def test_block_ms(configured: int, until_reclaim: int, block: int) -> None:
    assert block_ms(configured, until_reclaim) == block


@pytest.mark.parametrize(
    ("last_run", "concurrency", "since_start", "wait"),
    [
        (None, 8, 0.0, 0.0),  # no run has ended yet
        (0.016, 8, 0.0, 0.0),  # a start needed every 2 ms: under STAGGER_SLOT, no spacing
        (0.13, 64, 0.0, 0.0),  # 130 ms tasks on 64 slots: a start every 2.03 ms, no spacing
        (0.02, 8, 0.0, 0.000625),  # 20 ms tasks on 8 slots: starts 0.625 ms apart
        (0.02, 8, 0.0005, 0.000125),  # part of the spacing has passed since the last start
        (0.02, 8, 0.01, 0.0),  # the last start is old enough: no wait
        (0.0328, 8, 0.0, 0.001),  # 1.025 ms: whole ms from 1 ms on, rounded down
        (3.0, 4, 0.0, STAGGER_MAX),  # long tasks: never more than STAGGER_MAX
        (300.0, 64, 0.001, STAGGER_MAX - 0.001),
    ],
)
def test_stagger(last_run: float | None, concurrency: int, since_start: float, wait: float) -> None:
    assert stagger(last_run, concurrency, since_start) == pytest.approx(wait)


def test_a_spaced_start_and_its_pass_fit_in_60_percent_of_the_interval_the_slots_need() -> None:
    """Wherever spacing applies, the wait (rounded up to asyncio's whole ms) plus a 0.5 ms pass of its own is at most
    60% of ``last_run / concurrency``, the interval between starts the slots need."""
    for concurrency in (1, 2, 4, 8, 16, 64, 256):
        for per_start in (STAGGER_SLOT, 0.003, 0.0041, 0.006, 0.01, 0.05, 1.0):
            last_run = per_start * concurrency
            spacing = stagger(last_run, concurrency, 0.0)
            assert spacing > 0, (concurrency, per_start)
            waited = math.ceil(round(spacing * 1000, 9)) / 1000
            assert waited + 0.0005 <= 0.6 * per_start + 1e-12, (concurrency, per_start, spacing)
