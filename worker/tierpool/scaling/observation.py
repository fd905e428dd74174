"""What one look at a pool's streams found: per-tier backlog, pending, head-of-line age. Pure data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TierObservation:
    name: str
    exists: bool
    """False when the stream or its consumer group is missing (counts as empty, raises a condition)."""
    length: int
    backlog: int
    """Entries not yet delivered: the group's lag, or a capped count when lag is NULL."""
    lag_exact: bool
    """True when backlog came from the group's lag; False when it was counted (or capped)."""
    pending: int
    """Delivered but not acknowledged (the PEL)."""
    oldest_age_seconds: float
    """Age of the oldest undelivered entry on Redis' clock: since it was added to this tier's stream (the entry
    id is the server's time), so neither a producer's clock nor an escalation's earlier tier counts; 0 with no
    backlog."""
    consumers: int
    entries_added: int
    entries_read: int | None
    reentered: int = 0
    """Entries added to this stream by the due-time mover for tasks coming back (a throttle, a long retry):
    not new work, so not arrivals."""
    active: int | None = None
    """Pending entries a live worker is running now: refreshed by a heartbeat lately, so neither waiting out a
    retry backoff nor held by a dead consumer. None when not measured (then ``pending`` stands in)."""

    reclaimable: int = 0
    """Pending entries that no live worker runs and that may run again now: a retry whose backoff has passed, or a
    dead consumer's entry idle past claimIdle. They wait for a free slot like the backlog does (counted up to
    ``observe.RECLAIMABLE_CAP``; 0 when not measured)."""

    oldest_pending_age_seconds: float = 0.0
    """Age of the oldest pending (delivered, unacknowledged) entry on Redis' clock, since it was added to this
    tier's stream; 0 with nothing pending. A task that runs far longer than its peers (hung, heartbeating) shows
    here."""

    other_groups: tuple[str, ...] = ()
    """The stream's consumer groups when none is the pool's (``spec.consumerGroup``): an adopted stream that a
    worker gives no group (tierpool.model.adoption.group_refusal); empty otherwise."""

    @property
    def waiting(self) -> int:
        """Entries that could start now if a slot were free: the backlog and the reclaimable entries."""
        return self.backlog + self.reclaimable

    @property
    def busy(self) -> int:
        """Entries that keep a worker slot busy: ``active`` when measured, else every pending entry."""
        return self.pending if self.active is None else min(self.active, self.pending)

    def to_status(self) -> dict[str, Any]:
        """The stable ``tierpool status --json`` shape for one tier."""
        return {
            "name": self.name,
            "exists": self.exists,
            "length": self.length,
            "lag": self.backlog,
            "lag_exact": self.lag_exact,
            "pending": self.pending,
            "reclaimable": self.reclaimable,
            "oldest_age_seconds": round(self.oldest_age_seconds, 3),
            "consumers": self.consumers,
        }


@dataclass(frozen=True)
class PoolObservation:
    pool: str
    at: float
    """Redis server time, in seconds."""
    tiers: tuple[TierObservation, ...]
    dlq: int
    scheduled: int = 0
    """Tasks in the due-time index (delayed submits, long retries and deferrals), not yet in a stream."""
    throttled: int = 0
    """Tasks waiting for a rate limit: more replicas could not run them sooner."""
    due_now: int = 0
    """Of those scheduled or throttled, how many are due already (a worker's mover puts them in their streams:
    a pool at zero must wake for them)."""
    busy_workers: int | None = None
    """Live workers holding at least one running entry (None when not measured). Running tasks do not move between
    workers, so keeping them all takes this many replicas, not ``total_busy / concurrency``."""
    eviction_policy: str | None = None
    """The server's ``maxmemory-policy`` (None: not read, or INFO refused)."""

    @property
    def total_backlog(self) -> int:
        return sum(tier.backlog for tier in self.tiers)

    @property
    def total_waiting(self) -> int:
        return sum(tier.waiting for tier in self.tiers)

    @property
    def total_pending(self) -> int:
        return sum(tier.pending for tier in self.tiers)

    @property
    def total_busy(self) -> int:
        return sum(tier.busy for tier in self.tiers)

    def to_status(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "tiers": [t.to_status() for t in self.tiers],
            "dlq": self.dlq,
            "scheduled": self.scheduled,
            "throttled": self.throttled,
        }
