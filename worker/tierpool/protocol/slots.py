"""Which free slots one read may fill: reserved slots per tier, and paced refills. Pure, no I/O.

**Reserved slots.** ``tiers[i].reservedSlots`` (r_i) keeps r_i slots of every worker free for tier i or the tiers
above it. Tier i may start a task only if, once it has started, at least ``H_i = r_0 + ... + r_{i-1}`` slots (the
reservations of the tiers above it) are still free. So the top tier may fill every slot, and no tier below it
ever leaves fewer than its H_i slots free: a task of a reserving tier that arrives while long lower-tier tasks
fill the rest starts at once. Reserved slots idle only while no tier allowed into them has work; tier i's
capacity per worker is ``concurrency - H_i`` (what :func:`usable_slots` gives the scaler). A reservation on the
lowest tier would reserve for nobody below it, so the spec refuses it.

One read must keep every tier within its bound whatever the take script's shortfall hand-off does, so a read has
a size and a set of open tiers: the lowest tier m with ``H_m <= free - 1`` and every tier above it are open, and
the read fills at most ``free - H_m`` slots. For every open tier i, tiers i..n then take at most
``free - H_m <= free - H_i``. When higher-tier work has filled part of the reserve, the next read opens fewer tiers.

**Paced refills.** Slots filled by one read start in the same event-loop pass; tasks of equal length then end in
the same pass and are refilled together again, so the slots move as one cohort and a P0 task that arrives just
after a refill waits for a whole task time (the saw-tooth of issue #14). When the task that just freed a slot ran
for at least ``concurrency * PACE_SLOT`` seconds, reads fill one slot at a time: a cohort is refilled over several
round trips, its slots drift apart, and a P0 task waits less for a slot to free (bench/p0_wait.py). The
bound keeps pacing at most 1/PACE_SLOT reads a second (tasks shorter than that keep whole-cohort reads, where the
round trip would cost more than the cohort's spread).

**Spaced starts.** Paced reads alone keep a cohort bunched: its slots, refilled one round trip apart, free again
within a few ms of each other, and a P0 task that arrives between two bunches waits for the next one (p95 15 ms
for a P0 task behind 20 ms tasks on 8 slots, where evenly spread slots would free one every 2.5 ms). So when the
slots need a start at most every STAGGER_SLOT seconds (``last_run / concurrency``), a paced read waits until the
last start is a quarter of that old (below 1 ms as it is, above it in whole ms, at most STAGGER_MAX): a bunch
spreads out once, and equal tasks then keep their spread. asyncio's timers wait whole ms, and each paced start
also costs its own pass (a read, a screen, the launch; about 0.5 ms on a local server), so the bound keeps the
wait plus such a pass within 60% of the interval the slots need.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

PACE_SLOT = 0.001
"""Seconds of task run time per slot above which reads fill one slot at a time (see the module docstring)."""
MIN_BLOCK_MS = 10


def held_back(reserved: Sequence[int]) -> tuple[int, ...]:
    """Per tier: the free slots it must leave (the reservations of the tiers above it)."""
    total, out = 0, []
    for slots in reserved:
        out.append(total)
        total += max(slots, 0)
    return tuple(out)


def usable_slots(concurrency: int, reserved: Sequence[int]) -> tuple[int, ...]:
    """Per tier: the slots of one worker that tier (with the tiers below it) may fill."""
    return tuple(max(concurrency - held, 0) for held in held_back(reserved))


@dataclass(frozen=True)
class ReadWindow:
    """What the next read may fill: at most ``size`` slots, from the ``open`` tiers only."""

    size: int
    open: tuple[bool, ...]


def read_window(free: int, held: Sequence[int], paced: bool = False) -> ReadWindow:
    """The next read's size and open tiers for ``free`` free slots and each tier's held-back count."""
    if free <= 0 or not held:
        return ReadWindow(0, tuple(False for _ in held))
    lowest = max(index for index, hold in enumerate(held) if hold <= free - 1)
    size = free - held[lowest]
    return ReadWindow(min(size, 1) if paced else size, tuple(index <= lowest for index in range(len(held))))


def pace(last_run: float | None, concurrency: int) -> bool:
    """Whether reads fill one slot at a time, given how long the task that last freed a slot ran."""
    return last_run is not None and last_run >= concurrency * PACE_SLOT


STAGGER_SLOT = 0.0025
"""Seconds per start the slots need (``last_run / concurrency``) from which paced starts are spaced apart."""
STAGGER_MAX = 0.005
"""Longest spacing, in seconds, between two paced starts."""


def stagger(last_run: float | None, concurrency: int, since_start: float) -> float:
    """Seconds a paced read waits first, given how long ago the last task started (see the module docstring)."""
    if last_run is None or last_run < concurrency * STAGGER_SLOT:
        return 0.0
    spacing = last_run / (4 * concurrency)
    if spacing >= 0.001:
        spacing = math.floor(spacing * 1000) / 1000
    return max(min(spacing, STAGGER_MAX) - since_start, 0.0)


def block_ms(configured: int, until_reclaim: int) -> int:
    """How long a blocking read (every open tier empty) may wait: the configured block, but no later than the
    next reclaim, and never under MIN_BLOCK_MS."""
    return max(min(configured, until_reclaim), MIN_BLOCK_MS)
