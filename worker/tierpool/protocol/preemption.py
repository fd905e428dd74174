"""Preemption: whether a worker whose every slot is held stops a low-tier run for a higher-tier task, and which
run. Pure, no I/O (tierpool.runtime.preempting applies it).

A run may be preempted when its tier is ``preemptible``, it has run at least that tier's ``preemptAfter``, its task
was preempted fewer than ``maxPreemptions`` times, and its handler can be stopped (an ``async def`` handler: it
gets ``CancelledError`` at its current ``await``; a sync handler's thread cannot be stopped, so it is never
preempted). A worker preempts only for the work it reads itself, and never while it drains.

For a waiting task of tier t, the victim is a preemptible run of a lower tier (index above t): of the lowest tier
holding one, the run that loses the least work, that is the one whose last checkpoint (or, without one, its start)
is the most recent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Key = tuple[int, str]
"""(tier index, stream entry id)."""


@dataclass(frozen=True)
class Rules:
    """Per tier, in tier order: the pool's preemption settings."""

    preemptible: tuple[bool, ...]
    min_run: tuple[float, ...]
    """Seconds a run must have run before it may be preempted."""
    max_preemptions: tuple[int, ...]
    """Preemptions per task after which it runs to its end."""

    @property
    def any(self) -> bool:
        return any(self.preemptible)


@dataclass(frozen=True)
class Run:
    """What the decision needs of one running task."""

    key: Key
    started: float
    """When the run started (the caller's monotonic clock)."""
    checkpointed: float | None
    """When the run last saved a checkpoint, or None."""
    preemptions: int
    """How many times the task was preempted before this run."""
    stoppable: bool
    """An ``async def`` handler, still running (not stopping for another reason)."""

    @property
    def tier(self) -> int:
        return self.key[0]

    def work_at_risk(self, now: float) -> float:
        """Seconds of work a preemption now throws away: since the last checkpoint, or since the start."""
        return max(now - (self.started if self.checkpointed is None else self.checkpointed), 0.0)


def eligible(run: Run, rules: Rules, now: float) -> bool:
    tier = run.tier
    if tier >= len(rules.preemptible) or not rules.preemptible[tier] or not run.stoppable:
        return False
    return now - run.started >= rules.min_run[tier] and run.preemptions < rules.max_preemptions[tier]


def served_tiers(runs: Sequence[Run], rules: Rules, now: float, draining: bool) -> int:
    """How many of the top tiers preempting could serve now: tiers 0..n-1, where n is the lowest tier (highest
    index) with an eligible run; 0 when nothing may be preempted."""
    if draining or not rules.any:
        return 0
    return max((run.tier for run in runs if eligible(run, rules, now)), default=0)


def eligible_in(runs: Sequence[Run], rules: Rules, now: float) -> float | None:
    """Seconds until the first run that is too young to preempt becomes eligible (it would be but for
    ``preemptAfter``), or None: so a worker whose runs just started looks again as soon as one may be preempted."""
    waits = [
        rules.min_run[run.tier] - (now - run.started)
        for run in runs
        if run.tier < len(rules.preemptible) and rules.preemptible[run.tier] and run.stoppable
        and run.preemptions < rules.max_preemptions[run.tier] and now - run.started < rules.min_run[run.tier]
    ]  # fmt: skip
    return max(min(waits), 0.0) if waits else None


def victim(runs: Sequence[Run], rules: Rules, waiting_tier: int, now: float, draining: bool = False) -> Run | None:
    """The run to stop for a task of ``waiting_tier``, or None: an eligible run of the lowest tier below it, the
    one with the least work at risk (ties: the most recent start)."""
    if draining:
        return None
    below = [run for run in runs if run.tier > waiting_tier and eligible(run, rules, now)]
    if not below:
        return None
    lowest = max(run.tier for run in below)
    return min((run for run in below if run.tier == lowest), key=lambda run: (run.work_at_risk(now), -run.started))
