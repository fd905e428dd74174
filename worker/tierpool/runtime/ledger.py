"""The slot ledger: the single owner of "what this process runs".

Every stream entry this worker holds has exactly one slot here, from the read or claim that delivered it until
its outcome (ack and result, retry mark or dead letter) has landed in Redis, or until it is handed back or lost
to another worker (a sync handler's slot is kept, as a zombie, until its thread returns). The heartbeat refreshes
every held entry, running or completing, so that finished work whose outcome is still on its way is not
reclaimed and run again. The read loop and the reclaim loop take their free slots from here, reserving them
across the round trip, so together they never exceed ``concurrency``; an entry already held is never started a
second time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Key = tuple[int, str]
"""(tier index, stream entry ID)."""


@dataclass(slots=True)
class Slot:
    tier: int
    entry_id: str
    task_id: str
    running: bool
    """True while the handler runs (the slot counts against ``concurrency``); False while its outcome is written."""
    run: asyncio.Future[None] | None = None
    task: Any = None
    """The run's identity (its Task object): a later run of the same entry, here, gets a new one, so that a stale
    run (timed out or cancelled, its thread running on) can never write in the name of the current one."""
    thread: bool = False
    """A sync handler call for this entry is running in a thread (which nothing can stop)."""
    zombie: bool = False
    """The run was stopped (lost, or cancelled at the hand-back) while its thread still runs user code: the slot
    keeps counting against ``concurrency`` (the thread holds an executor worker) and keeps the entry from being
    started again here, but it is no longer heartbeated and no outcome is written for it."""
    started: float = 0.0
    """time.monotonic() when the run started."""
    checkpointed: float | None = None
    """time.monotonic() when the run last saved a checkpoint (preemption prefers the run that loses least)."""
    preemptions: int = 0
    """How many times the task was preempted before this run (``tiers[].maxPreemptions``)."""
    handler: bool = False
    """The handler has started (past the rate-limit throttle): only then may the run be preempted."""


class SlotLedger:
    """What this process holds. Used from the event loop only."""

    def __init__(self, concurrency: int, tiers: int) -> None:
        self.concurrency = concurrency
        self.slots: dict[Key, Slot] = {}
        self.running = [0] * tiers
        """Running handlers per tier (what per-tier caps and the in-flight gauge read)."""
        self._running_total = 0
        self._reserved = 0
        self.detached_threads = 0
        """Sync handler threads still running user code for a run that no longer counts as running (timed out or
        cancelled: its outcome is written, or on its way). Each still holds one of the executor's ``concurrency``
        threads, so it counts against ``free()`` until it returns: otherwise the next task would wait in the
        executor's queue while counted as running, its time limit ticking."""
        self.changed = asyncio.Event()
        """Set whenever a slot frees: wakes a read loop waiting for room."""
        self.last_run: float | None = None
        """How long the run that last freed a slot ran, in seconds (None before the first): paces refills."""
        self.last_start = 0.0
        """Monotonic time of the last start (0.0 before the first): spaces paced starts."""
        self.on_run_ended: Callable[[], None] = lambda: None
        """Called whenever a run stops counting against concurrency (tierpool.runtime.refills)."""

    # --- room ------------------------------------------------------------------------------------------------

    def free(self) -> int:
        return max(self.concurrency - self._running_total - self.detached_threads - self._reserved, 0)

    def reserve(self, wanted: int) -> int:
        """Reserve up to ``wanted`` free slots for a read or claim in flight; returns how many were reserved."""
        granted = min(max(wanted, 0), self.free())
        self._reserved += granted
        return granted

    def unreserve(self, count: int) -> None:
        self._reserved -= count
        if count:
            self.changed.set()

    # --- slots -----------------------------------------------------------------------------------------------

    def holds(self, key: Key) -> bool:
        return key in self.slots

    def start(self, key: Key, task_id: str, task: Any = None, preemptions: int = 0) -> bool:
        """A delivered entry starts running (``task``: the run's identity); False (and nothing changes) when this
        process already holds it."""
        if key in self.slots:
            return False
        self.slots[key] = Slot(
            key[0], key[1], task_id, running=True, started=time.monotonic(), task=task, preemptions=preemptions
        )
        self.running[key[0]] += 1
        self._running_total += 1
        self.last_start = time.monotonic()
        return True

    def hold(self, key: Key, task_id: str) -> bool:
        """Hold an entry that will not run (its outcome, e.g. a dead letter, is written at once)."""
        if key in self.slots:
            return False
        self.slots[key] = Slot(key[0], key[1], task_id, running=False)
        return True

    def in_handler(self, key: Key, task: Any) -> None:
        """The run ``task`` of ``key`` enters its handler."""
        slot = self.current(key, task)
        if slot is not None:
            slot.handler = True

    def attach(self, key: Key, run: asyncio.Future[None]) -> None:
        slot = self.slots.get(key)
        if slot is not None and slot.running:
            slot.run = run

    def run_ended(self, key: Key, outcome_queued: bool) -> None:
        """The handler is over. With its outcome queued the entry stays held (heartbeated) until the write
        lands; without one (cancelled) the slot is gone."""
        slot = self.slots.get(key)
        if slot is None or not slot.running or slot.zombie:
            return
        if slot.thread and not outcome_queued:  # cancelled while its thread goes on
            slot.zombie = True
            return
        self._stop_running(slot)
        if outcome_queued:
            slot.run = None
        else:
            del self.slots[key]

    def release(self, key: Key) -> Slot | None:
        """The entry's outcome landed (or it was handed back or taken over): forget it."""
        slot = self.slots.pop(key, None)
        if slot is not None and slot.running:
            self._stop_running(slot)
        return slot

    def stop(self, key: Key) -> Slot | None:
        """Another worker owns the entry now: forget it, or, while its thread still runs, keep it as a zombie."""
        slot = self.slots.get(key)
        if slot is not None and slot.thread:
            slot.zombie = True
            return slot
        return self.release(key)

    def abandon(self, key: Key) -> None:
        """A run that would not stop: no longer heartbeated, but held (and counted) until the process exits."""
        slot = self.slots.get(key)
        if slot is not None and slot.running:
            slot.zombie = True

    def current(self, key: Key, task: Any) -> Slot | None:
        """The slot of ``key`` if ``task`` is its run and that run is still going (not stopped, not a zombie)."""
        slot = self.slots.get(key)
        if slot is None or slot.task is not task or not slot.running or slot.zombie:
            return None
        return slot

    def thread_started(self, key: Key, task: Any = None) -> bool:
        """A sync call for the run ``task`` of ``key`` starts in a thread; False when that run is not held."""
        slot = self.slots.get(key)
        if slot is None or (task is not None and slot.task is not task) or not slot.running:
            return False
        slot.thread = True
        return True

    def thread_ended(self, key: Key, task: Any = None) -> None:
        """A sync call (started with thread_started returning True) returned: a zombie slot is let go of now; a
        detached thread (its run stopped counting as running) frees its executor thread."""
        slot = self.slots.get(key)
        if slot is not None and slot.thread and (task is None or slot.task is task) and slot.running:
            slot.thread = False
            if slot.zombie:
                self.release(key)
            return
        if slot is not None and slot.thread and (task is None or slot.task is task):
            slot.thread = False  # its run ended (outcome on its way) while the thread ran on
        self.detached_threads -= 1
        self.changed.set()

    def _stop_running(self, slot: Slot) -> None:
        if slot.thread:  # the thread goes on without its run: it still holds an executor thread
            self.detached_threads += 1
        slot.running = False
        self.last_run = time.monotonic() - slot.started
        self.running[slot.tier] -= 1
        self._running_total -= 1
        self.on_run_ended()
        self.changed.set()

    # --- views -----------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def running_total(self) -> int:
        return self._running_total

    def ids_by_tier(self) -> dict[int, list[str]]:
        """Every held entry (running or completing), grouped by tier: what the heartbeat refreshes."""
        by_tier: dict[int, list[str]] = {}
        for (tier, entry_id), slot in self.slots.items():
            if not slot.zombie:
                by_tier.setdefault(tier, []).append(entry_id)
        return by_tier

    def runs(self) -> dict[Key, asyncio.Future[None]]:
        """The handler runs still going."""
        return {
            key: slot.run
            for key, slot in self.slots.items()
            if slot.running and not slot.zombie and slot.run is not None
        }

    def zombies(self) -> list[Key]:
        """Entries whose run was stopped while its sync thread still runs user code."""
        return [key for key, slot in self.slots.items() if slot.zombie]
