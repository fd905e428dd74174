"""Pool upkeep run by whichever worker holds the escalator lease: escalation, retention (tier streams and the
dead-letter stream), consumer cleanup."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tierpool.model.durations import ms
from tierpool.model.spec import PoolSpec
from tierpool.protocol import policy
from tierpool.runtime.metrics import WorkerMetrics
from tierpool.store.connection import UNREACHABLE
from tierpool.store.due import DueMover
from tierpool.store.streams import PoolStreams

log = logging.getLogger("tierpool.maintenance")
ESCALATE_BATCH = 500
CLEANUP_EVERY = 10


@dataclass
class SweepReport:
    escalated: dict[str, int]
    trimmed: int
    """Acknowledged entries deleted from the tier streams."""
    removed_consumers: list[str]
    moved_due: int = 0
    dead_letters_trimmed: int = 0
    """Dead letters deleted by ``deadLetters`` (length and age)."""
    pruned: int = 0
    """Stale places dropped from the task-id index (left by scripts of an older release, or lost entries)."""


class Maintainer:
    """Holds the pool's escalator lease (SET NX PX, renewed) and sweeps while it holds it."""

    def __init__(
        self,
        streams: PoolStreams,
        spec: PoolSpec,
        holder: str,
        metrics: WorkerMetrics | None = None,
        clock: Callable[[], float] = time.time,
        mover: DueMover | None = None,
    ) -> None:
        self.streams, self.spec, self.holder = streams, spec, holder
        self.mover = mover or DueMover(streams)
        self.metrics, self.clock = metrics, clock
        self.ttl_ms = ms(policy.lease_ttl_seconds(spec.recovery.sweep_interval))
        self.holding = False
        self.acked_cursors: dict[int, str] = {}
        """Per tier index, where the next DELETE_ACKED walk of the pending entries starts."""
        self.index_cursor = "0"
        """Where the next sweep's page of the task-id index starts (PRUNE_WHERE)."""
        self.beat: Callable[[], None] = lambda: None
        """Called after every pass that did not fail, for the liveness check."""
        self.resume_parked: Callable[[], Awaitable[int]] | None = None
        """Resumes the parked parents whose children all have an outcome (tierpool.runtime.gathering)."""

    async def run(self, stopping: asyncio.Event) -> None:
        sweeps = 0
        while not stopping.is_set():
            try:
                self.holding = await self.streams.hold_lease(self.holder, self.ttl_ms)
                if self.holding:
                    await self.sweep(cleanup=sweeps % CLEANUP_EVERY == 0)
                    sweeps += 1
                self.beat()  # only after a pass that worked: one failing every time must look stalled
            except UNREACHABLE as error:
                log.warning("maintenance skipped, redis unreachable: %s", error)
                self.beat()
            except Exception:
                log.exception("maintenance sweep failed; retrying next interval")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.spec.recovery.sweep_interval)
        await self.release()

    async def release(self) -> None:
        if self.holding:
            with contextlib.suppress(*UNREACHABLE):  # unreleased, the lease expires on its own
                await self.streams.release_lease(self.holder)
            self.holding = False

    async def sweep(self, cleanup: bool = True) -> SweepReport:
        """One pass: move due tasks, resume parked parents, escalate stale undelivered tasks, trim acknowledged
        history and old dead letters, check a page of the task-id index, drop dead consumers."""
        moved = await self.mover.move()
        if self.resume_parked is not None and (resumed := await self.resume_parked()):
            log.info("resumed %d parked parent(s) whose children had all finished", resumed)
        escalated = await self.escalate_all()
        for tier, fix in (await self.streams.repair_tenants()).items():  # after escalation: it releases those
            if fix.released or fix.drift:
                log.info("tenant counts of %s: %d missed release(s), drift %d repaired", tier, fix.released, fix.drift)
        trimmed = await self.trim_all()
        retention = self.spec.dead_letters
        expired = await self.streams.trim_dead_letters(retention) if retention.max_length or retention.max_age else 0
        self.index_cursor, pruned = await self.streams.prune_index(self.index_cursor)
        if pruned:
            log.info("dropped %d stale place(s) from the task-id index", pruned)
        removed: list[str] = []
        if cleanup:
            idle_ms = policy.dead_consumer_idle_ms(self.spec.recovery.claim_idle)
            for index in range(len(self.spec.tiers)):
                removed += await self.streams.remove_dead_consumers(index, idle_ms)
            if removed:
                log.info("removed dead consumers that owned nothing: %s", ", ".join(sorted(set(removed))))
        return SweepReport(escalated, trimmed, removed, moved, expired, pruned)

    async def trim_all(self) -> int:
        """Acknowledged entries of every tier: those below the oldest pending entry, then those above it (a walk
        of the pending entries that goes on from where the last sweep stopped), so that no hung task holds
        retention up."""
        trimmed = 0
        for index in range(len(self.spec.tiers)):
            trimmed += await self.streams.trim_acknowledged(index)
            deleted, self.acked_cursors[index] = await self.streams.delete_acked(
                index, self.acked_cursors.get(index, "-")
            )
            trimmed += deleted
        return trimmed

    async def escalate_all(self) -> dict[str, int]:
        now = ms(self.clock())
        moved: dict[str, int] = {}
        for index, tier in enumerate(self.spec.tiers):
            if index == 0 or (tier.escalate_after is None and tier.stream is None):
                continue  # a tier that adopts a stream: its entries' own priority_ttl_s escalate them
            after = None if tier.escalate_after is None else ms(tier.escalate_after)
            total = 0
            while True:
                count = await self.streams.escalate(
                    index, now, after, ESCALATE_BATCH, tier.escalate_max_target_backlog, tier.stream is not None
                )
                total += count
                if count < ESCALATE_BATCH:
                    break
            if total:
                moved[tier.name] = total
                if self.metrics:
                    self.metrics.for_tier(self.streams.keys.ref, tier.name).escalated.inc(total)
                log.info("escalated %d stale task(s) from %s to %s", total, tier.name, self.spec.tiers[index - 1].name)
        return moved
