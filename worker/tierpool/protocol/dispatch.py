"""Choosing which tiers to read: smooth weighted round-robin with per-tier caps. Pure, no I/O.

A worker with ``free`` open slots asks the planner for a per-tier count. The take script then reads those
counts in one round trip and hands any shortfall (a tier that had less work than planned) to the other tiers
in priority order, so no slot idles while any tier has work, and an empty tier's share goes to the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tierpool.model.spec import DispatchPolicy

UNLIMITED = -1


@dataclass
class WeightedOrder:
    """Deterministic smooth weighted round-robin (nginx's SWRR): exact shares, evenly interleaved."""

    weights: Sequence[int]
    current: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.weights or any(weight <= 0 for weight in self.weights):
            raise ValueError("weights must be a non-empty list of positive integers")
        self.current = [0] * len(self.weights)

    def pick(self, eligible: Sequence[bool]) -> int | None:
        """The next tier among the eligible ones; ties go to the higher-priority (lower index) tier."""
        best, best_value, total = None, 0, 0
        current, weights = self.current, self.weights
        for index, ok in enumerate(eligible):  # one pass: this runs once per free slot on every read
            if ok:
                weight = weights[index]
                total += weight
                value = current[index] = current[index] + weight
                if best is None or value > best_value:
                    best, best_value = index, value
        if best is not None:
            current[best] -= total
        return best


@dataclass(frozen=True)
class TakePlan:
    """How many entries to ask of each tier, and how many each tier may still start (UNLIMITED = no cap)."""

    want: tuple[int, ...]
    room: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.want)


class Planner:
    """Turns free slots into a TakePlan under the pool's dispatch policy."""

    def __init__(self, weights: Sequence[int], caps: Sequence[int | None], policy: DispatchPolicy) -> None:
        if len(weights) != len(caps):
            raise ValueError("weights and caps must have one entry per tier")
        self.order = WeightedOrder(weights)
        self.caps = tuple(caps)
        self.policy = policy

    def plan(self, free: int, running: Sequence[int], open_tiers: Sequence[bool] | None = None) -> TakePlan:
        """Plan ``free`` reads given each tier's running task count; a tier not in ``open_tiers`` (its free slots
        are reserved for the tiers above it, see tierpool.protocol.slots) gets no room at all."""
        room = [UNLIMITED if cap is None else max(cap - run, 0) for cap, run in zip(self.caps, running, strict=True)]
        if open_tiers is not None:
            room = [r if ok else 0 for r, ok in zip(room, open_tiers, strict=True)]
        want = [0] * len(room)
        eligible = [r != 0 for r in room]
        for _ in range(max(free, 0)):
            index = self._choose(eligible)
            if index is None:
                break
            want[index] += 1
            if want[index] == room[index]:
                eligible[index] = False
        return TakePlan(tuple(want), tuple(room))

    def _choose(self, eligible: list[bool]) -> int | None:
        if self.policy is DispatchPolicy.STRICT:
            return next((index for index, ok in enumerate(eligible) if ok), None)
        return self.order.pick(eligible)
