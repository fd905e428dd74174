"""Task control on the worker: cancelled tasks are screened out before they run and stopped while they run, and a
running task's progress events and checkpoints are written (see tierpool.protocol.task_state for the pure parts).

- **At take time** (reads and reclaims) one MGET fetches the cancel markers and checkpoints of the entries just
  taken. A cancelled entry is held, never run, and its cancelled outcome (ack, record, final event) is queued to
  the outcome writer like any other outcome, so only the entry's owner writes it.
- **While running**, every heartbeat pass also reads the markers of the running tasks. A cancelled run is
  stopped: an ``async def`` handler gets ``CancelledError`` at its current ``await``; a sync handler's thread
  cannot be stopped, so, as with a time limit, the worker stops waiting for it and writes the cancelled outcome,
  and the thread runs on to its end with its result discarded (counting against ``concurrency`` until then, see
  SlotLedger.detached_threads).
- **Run identity.** Progress and checkpoints are written only for the run still going in its slot (the ledger
  slot keeps the run's Task object): a stale run (timed out, cancelled, lost) gets ``TaskLost``, even while a later
  run of the same entry holds the slot on this worker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from pydantic_core import to_json

from tierpool.model.durations import ms
from tierpool.protocol.envelope import Task
from tierpool.protocol.errors import TaskLost
from tierpool.protocol.gather import lineage_of
from tierpool.protocol.task_state import EVENTS_MAXLEN, MAX_CHECKPOINT_BYTES, MAX_PROGRESS_BYTES, encode_limited
from tierpool.runtime.gathering import Gatherer
from tierpool.runtime.ledger import Key, SlotLedger
from tierpool.runtime.metrics import TierSeries
from tierpool.runtime.writer import CompletionWriter
from tierpool.store.streams import Entry, Outcome, PoolStreams

log = logging.getLogger("tierpool.worker")
BEFORE_START = "cancelled before it started"
WHILE_RUNNING = "cancelled while running"


class TaskControl:
    """Cancels, progress and checkpoints for one worker. Used from the event loop (``blocking`` from threads)."""

    def __init__(
        self,
        streams: PoolStreams,
        ledger: SlotLedger,
        writer: CompletionWriter,
        consumer: str,
        ttl_ms: int,
        marker_ttl_ms: int,
        clock: Callable[[], float],
        series: Sequence[TierSeries],
    ) -> None:
        self.series = series
        self.streams, self.ledger, self.writer, self.consumer = streams, ledger, writer, consumer
        self.keys = streams.keys
        self.ttl_ms, self.marker_ttl_ms, self.clock = ttl_ms, marker_ttl_ms, clock
        self.requested: set[Key] = set()
        """Running entries whose task was cancelled: their run ends with the cancelled outcome."""
        self.outcomes: set[Key] = set()
        """Entries whose cancelled outcome is queued: ``tasks_cancelled_total`` counts it once it lands."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.count_preemptions = False
        """Whether screening reads each task's preemption count (a pool with a preemptible tier)."""
        self.monotonic: Callable[[], float] = time.monotonic
        self.gatherer: Gatherer | None = None
        """Spawn and gather (tierpool.runtime.gathering), set by the worker."""

    # --- cancel ----------------------------------------------------------------------------------------------

    async def screen(self, entries: Sequence[Entry]) -> Screened:
        """Entries just taken: the cancelled ones are held and their cancelled outcome queued; returns the others,
        the checkpoint states (by task_id) of the tasks that have one and, on a pool with preemptible tiers, how
        often each task was preempted."""
        task_ids = [entry.fields.get("task_id") or "" for entry in entries]
        named = sorted({task_id for task_id in task_ids if task_id})
        if not named:
            return Screened(list(entries), {}, {})
        keys = [self.keys.cancel(t) for t in named] + [self.keys.checkpoint(t) for t in named]
        if self.count_preemptions:
            keys += [self.keys.preemptions(t) for t in named]
        values = await self.streams.client.mget(keys)
        n = len(named)
        cancelled = {task_id for task_id, value in zip(named, values[:n], strict=True) if value}
        cancelled |= await self._orphans(entries)
        states = {t: _state(v) for t, v in zip(named, values[n : 2 * n], strict=True) if v is not None}
        preempted = {t: _count(v) for t, v in zip(named, values[2 * n :], strict=False) if v is not None}
        keep: list[Entry] = []
        for entry, task_id in zip(entries, task_ids, strict=True):
            key = (entry.tier_index, entry.id)
            if task_id not in cancelled or not self.ledger.hold(key, task_id):
                keep.append(entry)  # not cancelled (or held already: _launch refuses it)
                continue
            log.info("task %s (entry %s) was cancelled before it started", task_id, entry.id)
            tier = self.streams.tiers[entry.tier_index]  # the stream's, whatever the envelope says
            attempts = entry.deliveries - 1  # runs attempted before (this delivery never runs)
            self.writer.submit(self.cancelled(entry.tier_index, entry.id, task_id, tier, attempts, BEFORE_START))
        return Screened(keep, states, preempted)

    async def check_running(self) -> int:
        """Stop the runs whose task was cancelled (called by every heartbeat pass). Returns how many."""
        running = {
            key: slot.task_id
            for key, slot in self.ledger.slots.items()
            if slot.running and not slot.zombie and key not in self.requested
        }
        if not running:
            return 0
        lineages = {key: _lineage(self.ledger.slots[key].task) for key in running}
        task_ids = sorted({*running.values(), *(a for lineage in lineages.values() for a in lineage)})
        values = await self.streams.client.mget([self.keys.cancel(task_id) for task_id in task_ids])
        marked = {task_id for task_id, value in zip(task_ids, values, strict=True) if value}
        stopped = 0
        for key, task_id in running.items():
            slot = self.ledger.slots.get(key)
            cancelled = task_id in marked or not marked.isdisjoint(lineages[key])
            if not cancelled or slot is None or not slot.running:
                continue
            log.info("task %s (entry %s) was cancelled; stopping its run", task_id, key[1])
            self.requested.add(key)
            if slot.run is not None:
                slot.run.cancel()
            stopped += 1
        return stopped

    async def _orphans(self, entries: Sequence[Entry]) -> set[str]:
        """The task ids of entries whose parent, or a task above it, was cancelled: cancelling a task cancels its
        descendants, wherever they are, through its marker."""
        lineages = {str(e.fields.get("task_id") or ""): lineage_of(e.fields) for e in entries}
        lineages = {task_id: lineage for task_id, lineage in lineages.items() if task_id and lineage}
        if not lineages:
            return set()
        named = sorted({a for lineage in lineages.values() for a in lineage})
        values = await self.streams.client.mget([self.keys.cancel(a) for a in named])
        marked = {a for a, value in zip(named, values, strict=True) if value}
        return {task_id for task_id, lineage in lineages.items() if not marked.isdisjoint(lineage)}

    def cancel_requested(self, key: Key) -> bool:
        return key in self.requested

    def landed(self, key: Key, status: int | None) -> None:
        """The writer's report on an entry: a cancelled outcome that was written (1) is counted; one refused (the
        entry was acked already, or another worker owns it) or given up is not."""
        self.requested.discard(key)
        if key in self.outcomes:
            self.outcomes.discard(key)
            if status == 1:
                self.series[key[0]].cancelled.inc()

    def cancelled(
        self, index: int, entry_id: str, task_id: str, tier: str | None, attempts: int, reason: str
    ) -> Outcome:
        """The outcome of a cancelled task: ack, the cancelled record and the final event, owner-checked."""
        record = {
            "task_id": task_id,
            "status": "cancelled",
            "tier": tier,
            "attempts": max(attempts, 0),
            "worker": self.consumer,
            "reason": reason,
            "finished_at": ms(self.clock()),
        }
        call = self.streams.cancelled_call(index, self.consumer, entry_id, task_id, to_json(record), self.ttl_ms)
        self.outcomes.add((index, entry_id))
        return Outcome(index, entry_id, call)

    def cancelled_run(self, index: int, task: Task) -> Outcome:
        return self.cancelled(index, task.stream_id, task.id, task.tier, task.attempt, WHILE_RUNNING)

    # --- the task context: progress and checkpoints ----------------------------------------------------------

    async def progress(self, task: Task, data: Any) -> None:
        text = encode_limited(data, MAX_PROGRESS_BYTES, "progress")
        if self.tier_of(task) is None:
            raise TaskLost(f"task {task.id}: this run is over (timed out, cancelled or lost); progress not written")
        key = self.keys.events(task.id)
        fields: Any = {"type": "progress", "data": text, "at": str(ms(self.clock()))}
        pipe = self.streams.client.pipeline(transaction=True)
        pipe.xadd(key, fields, maxlen=EVENTS_MAXLEN, approximate=True)
        pipe.pexpire(key, self.ttl_ms)
        await pipe.execute()

    async def checkpoint(self, task: Task, state: Any) -> None:
        text = encode_limited(state, MAX_CHECKPOINT_BYTES, "checkpoint")
        index = self.tier_of(task)
        if index is not None:
            saved = await self.streams.save_checkpoint(
                index, self.consumer, task.stream_id, task.id, text, self.marker_ttl_ms
            )
            if saved == 1:
                task.checkpoint_state = json.loads(text)
                slot = self.ledger.current((index, task.stream_id), task)
                if slot is not None:
                    slot.checkpointed = self.monotonic()
                return
        raise TaskLost(f"task {task.id} is no longer this worker's: its checkpoint was not saved")

    async def spawn(self, task: Task, target: Any, inp: Any, options: dict[str, Any]) -> Any:
        self._still_running(task)
        return await self._gatherer().spawn(task, target, inp, options)

    async def gather(self, task: Task, handles: Sequence[Any], return_exceptions: bool) -> list[Any]:
        self._still_running(task)
        return await self._gatherer().gather(task, handles, return_exceptions)

    def _gatherer(self) -> Gatherer:
        if self.gatherer is None:
            raise RuntimeError("spawn and gather need a task run by a tierpool worker")
        return self.gatherer

    def _still_running(self, task: Task) -> None:
        if self.tier_of(task) is None:
            raise TaskLost(f"task {task.id}: this run is over (timed out, cancelled or lost); nothing spawned")

    def blocking(self, task: Task, kind: str, value: Any) -> None:
        """progress or checkpoint from a sync handler's thread: runs on the worker's loop and waits for it."""
        if self.loop is None:
            raise RuntimeError("the worker is not running")
        call = self.progress(task, value) if kind == "progress" else self.checkpoint(task, value)
        asyncio.run_coroutine_threadsafe(call, self.loop).result()

    def tier_of(self, task: Task) -> int | None:
        """The tier of the entry ``task`` runs for, while this very run is still going here: a stale run (timed
        out or cancelled, its sync thread running on; lost to another worker) gets None even when a later run of
        the same entry, on this worker, holds the slot now."""
        for index in range(len(self.series)):
            if self.ledger.current((index, task.stream_id), task) is not None:
                return index
        return None


class Screened(NamedTuple):
    """What :meth:`TaskControl.screen` found in the entries just taken."""

    entries: list[Entry]
    """The entries to run (not cancelled)."""
    states: dict[str, Any]
    """Checkpoint states by task_id."""
    preemptions: dict[str, int]
    """How often each task was preempted, by task_id (only read on a pool with a preemptible tier)."""


def _lineage(task: Any) -> tuple[str, ...]:
    lineage: tuple[str, ...] = getattr(task, "lineage", ())
    return lineage


def _count(raw: str | bytes) -> int:
    try:
        return int(raw)
    except ValueError:
        return 0


def _state(raw: str | bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None
