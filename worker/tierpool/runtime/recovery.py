"""The worker's recovery: the heartbeat loop for everything it holds, and reclaim of other workers' idle entries
(run by the read loop, between reads, so that reads and claims share one free-slot count)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tierpool.model.durations import ms
from tierpool.model.spec import RecoverySpec
from tierpool.protocol.envelope import not_utf8_reason
from tierpool.runtime.ledger import Key, SlotLedger
from tierpool.runtime.metrics import TierSeries
from tierpool.store.connection import UNREACHABLE
from tierpool.store.streams import Entry, PoolStreams, ReclaimResult

log = logging.getLogger("tierpool.recovery")
RECLAIM_BATCH = 64
HEARTBEAT_RETRY = 0.25
"""After a failed heartbeat, retry this soon (Redis may be back), not a whole interval later."""


@dataclass
class Recovery:
    streams: PoolStreams
    ledger: SlotLedger
    consumer: str
    recovery: RecoverySpec
    series: list[TierSeries]
    launch: Callable[[list[Entry], float], Awaitable[None]]
    """(entries, the claim's send time on ``clock``): start claimed entries (the worker's ``_launch``)."""
    stopping: asyncio.Event
    on_redis_error: Callable[[], None]
    dead_letter: Callable[[Entry, str, str, int], None]
    """(entry, task_id, reason, attempts): dead-letter an entry this worker owns (the worker's outcome writer)."""
    check_cancels: Callable[[], Awaitable[int]] | None = None
    """Run after every heartbeat pass: stops the runs whose task was cancelled (tierpool.runtime.task_control)."""
    held_back: tuple[int, ...] = ()
    """Per tier: free slots its claims must leave (the reservations of the tiers above it, see
    tierpool.protocol.slots)."""
    screen: Callable[[list[Entry]], Awaitable[list[Entry]]] | None = None
    """Entries claimed past ``maxDeliveries``: the cancelled ones get their cancelled outcome (a cancel wins over
    the dead letter); returns the others (tierpool.runtime.task_control)."""
    clock: Callable[[], float] = time.monotonic
    """The clock a claim's send time is taken on: the one the launch measures a late claim with."""

    def __post_init__(self) -> None:
        self._cursors = ["0-0"] * len(self.streams.tiers)
        self._orphans: dict[int, list[str]] = {}

    async def _claim(self, index: int, count: int, adopt: list[str]) -> ReclaimResult:
        return await self.streams.reclaim(
            index,
            self.consumer,
            ms(self.recovery.claim_idle),
            self._cursors[index],
            count,
            self.recovery.max_deliveries,
            [entry_id for entry_id in adopt if not self.ledger.holds((index, entry_id))],
        )

    # --- heartbeat -------------------------------------------------------------------------------------------

    async def heartbeat_loop(self, beat: Callable[[], None]) -> None:
        """Runs until cancelled, through the drain too: long tasks and queued outcomes keep their entries."""
        interval = self.recovery.heartbeat
        delay = interval
        while True:
            await asyncio.sleep(delay)
            try:
                await self.heartbeat_once()
                delay = interval
            except UNREACHABLE as error:  # handled: Redis is away, and a restart would not bring it back
                self.on_redis_error()
                log.warning("heartbeat failed, retrying in %.2fs: %s", min(HEARTBEAT_RETRY, interval), error)
                delay = min(HEARTBEAT_RETRY, interval)
            beat()  # only after a pass that did not fail: other errors reach the supervisor, with no beat

    async def heartbeat_once(self) -> int:
        """Refresh every held entry; stop the runs whose entries another worker has taken. Returns that count."""
        stopped = 0
        for tier, ids in self.ledger.ids_by_tier().items():
            for entry_id in await self.streams.heartbeat(tier, self.consumer, ids):
                stopped += self.lost((tier, entry_id))
        if self.check_cancels is not None:
            stopped += await self.check_cancels()
        return stopped

    def lost(self, key: Key) -> int:
        """The entry is no longer this worker's (another owns it, acked it, or it was deleted): cancel the local
        run (its outcome would be refused anyway). A sync handler's thread cannot be stopped: its slot stays held,
        as a zombie, until the thread returns."""
        slot = self.ledger.slots.get(key)
        if slot is None or not slot.running or slot.zombie:
            return 0  # finished already (the outcome script finds out and reports it), or stopped before
        run = slot.run
        self.ledger.stop(key)
        if run is not None:
            run.cancel()
        self.series[key[0]].lost_ownership.inc()
        log.warning(
            "task %s (entry %s) is no longer this worker's (taken over, acked or deleted); stopped its run here",
            slot.task_id,
            key[1],
        )
        return 1

    # --- reclaim ---------------------------------------------------------------------------------------------

    async def reclaim_once(self) -> int:
        """Claim other consumers' idle entries into free slots (shared with the read loop); dead-letter the
        exhausted ones. Entries this worker's own consumer owns are never claimed back."""
        claimed = 0
        for index, tier in enumerate(self.streams.tiers):
            if self.stopping.is_set():
                break
            held = self.held_back[index] if self.held_back else 0
            reserved = self.ledger.reserve(min(RECLAIM_BATCH, self.ledger.free() - held))
            if reserved == 0:  # no free slot this tier may fill, nor any tier below it
                break
            try:
                sent_at = self.clock()
                result = await self._claim(index, reserved, self._orphans.get(index, []))
            finally:
                self.ledger.unreserve(reserved)
            # own idle entries this process does not hold: a read whose reply was lost (Redis died after it).
            # Nobody else runs them while this consumer lives, so they are adopted on the next pass.
            self._orphans[index] = [i for i in result.own_idle if not self.ledger.holds((index, i))]
            self._cursors[index] = result.cursor
            series = self.series[index]
            if result.deleted_ids:
                series.lost.inc(len(result.deleted_ids))
                log.error("pending entries deleted before reclaim in %s: %s", tier, ", ".join(result.deleted_ids))
            exhausted = result.exhausted
            if exhausted and self.screen is not None:
                exhausted = await self.screen(exhausted)
            if exhausted:
                reason = f"exceeded maxDeliveries ({self.recovery.max_deliveries})"
                for entry in exhausted:  # the claim counted a delivery that never runs
                    why = not_utf8_reason(entry.fields) or reason  # bytes no run could ever take: say so
                    self.dead_letter(entry, entry.fields.get("task_id", ""), why, entry.deliveries - 1)
                log.warning("dead-lettering %d task(s) past maxDeliveries in %s", len(exhausted), tier)
            if result.claimed:
                series.reclaimed.inc(len(result.claimed))
                await self.launch(result.claimed, sent_at)
            claimed += len(result.claimed)
        return claimed
