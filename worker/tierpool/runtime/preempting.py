"""Preemption on the worker: with every slot held, a task of a higher tier that this worker reads takes the slot of
a preemptible lower-tier run (tierpool.protocol.preemption decides which).

Each worker preempts only for the work it reads itself: while every slot is held and some run may be preempted,
its read loop blocks on the tiers above that run's tier (COUNT 1 a stream, ended as soon as a slot frees by
itself). Redis gives an entry to whichever blocked worker waited longest, so a full worker may preempt while
another had a free slot; in exchange no coordination is needed, and no worker stops a run for a task another
worker is starting.

When the read returns a task, it first passes every check of a read (the worker's ``_runnable``), so a task that
will not run stops nothing. Then the chosen run is stopped the way a cancel stops it (``CancelledError`` at its
current ``await``; only once its handler has started, past the rate-limit throttle). Its run ends with a PREEMPT
outcome rather than none: queued to the outcome writer like any outcome, so the entry stays held and heartbeated
until PREEMPT has handed it back (delivery not counted, the task's preemption count raised), and no other worker
can take it while the run is still stopping. The slot frees as the outcome is queued, and the task read takes it.
A run that does not stop within ``STOP_WAIT`` (a handler that swallows the cancellation, or computes without
awaiting) keeps its slot: the task read is handed back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from tierpool.model.durations import ms
from tierpool.model.spec import PoolSpec
from tierpool.protocol import preemption
from tierpool.protocol.dispatch import TakePlan
from tierpool.protocol.envelope import Task
from tierpool.runtime.ledger import Key, SlotLedger
from tierpool.runtime.metrics import TierSeries
from tierpool.runtime.reads import Reads
from tierpool.store.streams import Entry, Outcome, PoolStreams

log = logging.getLogger("tierpool.worker")
Runnable = tuple[Entry, Task, int]
"""An entry that may start, its task, and how often the task was preempted before (tierpool.runtime.worker)."""
STOP_WAIT = 2.0
"""Seconds a preempted run may take to stop before the task read for it is handed back instead."""
ENTERING_POLL = 0.01
"""Seconds between two looks while a preemptible run that just started has not entered its handler yet."""


def rules_of(spec: PoolSpec) -> preemption.Rules:
    tiers = spec.tiers
    return preemption.Rules(
        tuple(tier.preemptible for tier in tiers),
        tuple(tier.preempt_after for tier in tiers),
        tuple(tier.max_preemptions for tier in tiers),
    )


class Preemptor:
    """One worker's preemptions. Used from the event loop only."""

    def __init__(
        self,
        spec: PoolSpec,
        streams: PoolStreams,
        ledger: SlotLedger,
        reads: Reads,
        consumer: str,
        count_ttl_ms: int,
        series: Sequence[TierSeries],
        stoppable: bool,
    ) -> None:
        self.rules = rules_of(spec)
        self.streams, self.ledger, self.reads, self.consumer = streams, ledger, reads, consumer
        self.idle_ms, self.count_ttl_ms = ms(spec.recovery.claim_idle), count_ttl_ms
        self.series, self.stoppable = series, stoppable
        self.caps = [tier.max_concurrency for tier in spec.tiers]
        self.requested: set[Key] = set()
        """Runs stopped for a higher-tier task: their run ends with the PREEMPT outcome."""
        self.stop_wait = STOP_WAIT

    def runs(self, entering: bool = False) -> list[preemption.Run]:
        """The runs going now; ``entering``: count a run about to enter its handler as stoppable too (it will be
        by the time it is old enough to preempt)."""
        return [
            preemption.Run(key, slot.started, slot.checkpointed, slot.preemptions, self._stoppable(key, entering))
            for key, slot in self.ledger.slots.items()
            if slot.running and not slot.zombie
        ]

    def _stoppable(self, key: Key, entering: bool = False) -> bool:
        slot = self.ledger.slots[key]
        if not self.stoppable or slot.thread or key in self.requested:
            return False
        return entering or (slot.handler and slot.run is not None)

    def plan(self, draining: bool) -> TakePlan | None:
        """The read that could preempt now: one task of the tiers above the lowest preemptible run (within their
        ``maxConcurrency``), or None (a free slot, nothing preemptible, draining)."""
        if not self.rules.any or draining or self.ledger.free() > 0:
            return None
        served = preemption.served_tiers(self.runs(), self.rules, time.monotonic(), draining)
        room = [
            (-1 if cap is None else max(cap - running, 0)) if index < served else 0
            for index, (cap, running) in enumerate(zip(self.caps, self.ledger.running, strict=True))
        ]
        if not any(room):
            return None
        return TakePlan(tuple(1 if r else 0 for r in room), tuple(room))

    async def wait_and_preempt(
        self,
        block_ms: int,
        draining: Callable[[], bool],
        runnable: Callable[[list[Entry]], Awaitable[list[Runnable]]],
        start: Callable[[list[Runnable]], None],
        rate_limited: Callable[[Task], bool],
    ) -> bool:
        """With every slot held: block on the tiers preemption could serve, and give one task read the slot of the
        run :func:`preemption.victim` picks, once the tasks have passed every check a read's entries pass
        (``runnable``: cancelled, malformed, expired, gated or late entries stop no run). A task with a rate limit
        (``rate_limited``) stops no run either: it may not start when it gets the slot. False when there is nothing
        to preempt (the caller waits for a slot as before)."""
        plan = self.plan(self._halted(draining))
        if plan is None:
            return await self._until_eligible(block_ms / 1000, self._halted(draining))
        self.ledger.changed.clear()
        entries = await self.reads.wait_for_work(plan, block_ms, self.ledger.changed)
        if not entries:
            return True
        held: list[Key] = []
        try:
            ready = sorted(await runnable(entries), key=lambda item: item[0].tier_index)
            for entry, task, _ in ready:  # held (heartbeated) while a run stops: no other worker takes them
                if self.ledger.hold((entry.tier_index, entry.id), task.id):
                    held.append((entry.tier_index, entry.id))
            if ready and not rate_limited(ready[0][1]):
                chosen = preemption.victim(self.runs(), self.rules, ready[0][0].tier_index, time.monotonic())
                if chosen is not None and self.ledger.free() == 0 and not self._halted(draining):
                    await self._stop(chosen)
        except asyncio.CancelledError:
            for key in held:
                self.ledger.release(key)
            self.reads.hand_back_later(entries, self.ledger.holds)
            raise
        for key in held:
            self.ledger.release(key)
        first = ready[:1] if ready and self.ledger.free() > 0 and not self._halted(draining) else []
        if first:
            start(first)
        back = [entry for entry, _, _ in ready[len(first) :]]  # COUNT 1 counts per stream: one task a preemption
        if back:
            log.info("preemption: %d entries back to the pool (one task per preemption, or no slot freed)", len(back))
            await self.reads.hand_back(back)
        return True

    def _halted(self, draining: Callable[[], bool]) -> bool:
        return draining() or self.reads.pause.is_set()

    async def _until_eligible(self, longest: float, halted: bool) -> bool:
        """Nothing to preempt now: when a run becomes eligible within ``longest`` (its ``preemptAfter`` is not
        over yet, or it is about to enter its handler), wait until then (or until a slot frees) and return True;
        else False."""
        if not self.rules.any or halted or self.ledger.free() > 0:
            return False
        now = time.monotonic()
        wait = preemption.eligible_in(self.runs(entering=True), self.rules, now)
        if self._entering(now):
            wait = ENTERING_POLL if wait is None else min(wait, ENTERING_POLL)
        if wait is None or wait >= longest:
            return False
        self.ledger.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ledger.changed.wait(), wait + 0.001)
        return True

    def _entering(self, now: float) -> bool:
        """A run of a preemptible tier that just started and has not entered its handler yet (on Python 3.11 a run
        starts at the loop's next pass): it may be eligible as soon as it has."""
        return self.stoppable and any(
            slot.running and not slot.handler and not slot.zombie and now - slot.started < ENTERING_POLL * 100
            and slot.tier < len(self.rules.preemptible) and self.rules.preemptible[slot.tier]
            for slot in self.ledger.slots.values()
        )  # fmt: skip

    async def _stop(self, run: preemption.Run) -> None:
        slot = self.ledger.slots.get(run.key)
        if slot is None or slot.run is None:
            return
        log.info(
            "preempting task %s (entry %s of %s, %.1fs of work since its last checkpoint) for a higher-tier task",
            slot.task_id,
            run.key[1],
            self.streams.tiers[run.tier],
            run.work_at_risk(time.monotonic()),
        )
        self.requested.add(run.key)
        running = slot.run
        running.cancel()
        await asyncio.wait([running], timeout=self.stop_wait)

    def preempted(self, key: Key) -> bool:
        return key in self.requested

    def handed_back(self, index: int, task: Task) -> Outcome:
        """The outcome of a preempted run: PREEMPT (owner-checked), which gives the entry back."""
        slot = self.ledger.slots.get((index, task.stream_id))
        if slot is not None:
            since = slot.started if slot.checkpointed is None else slot.checkpointed
            self.series[index].preempted_work.observe(max(time.monotonic() - since, 0.0))
        self.series[index].preempted.inc()
        call = self.streams.preempt_call(index, self.consumer, task.stream_id, task.id, self.idle_ms, self.count_ttl_ms)
        return Outcome(index, task.stream_id, call)

    def landed(self, key: Key) -> None:
        self.requested.discard(key)


def _tier(entry: Entry) -> int:
    return entry.tier_index
