"""The ownership check before a late read's entries start (see tierpool.protocol.late_reads for when).

The check is the heartbeat script (HEARTBEAT): read-only for an entry that is no longer this consumer's (another
consumer owns it, it was acked, or deleted), and for the others a refresh of their idle time, the same as the
heartbeat that would follow their start. An XCLAIM to this consumer would not do: on an entry another worker owns
now it would take it back from that worker. Every tier's calls go in one pipelined round trip.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from tierpool.protocol.late_reads import must_confirm
from tierpool.runtime.ledger import Key
from tierpool.runtime.metrics import TierSeries
from tierpool.store.script_registry import ScriptCall
from tierpool.store.streams import HEARTBEAT_CHUNK, Entry, PoolStreams

log = logging.getLogger("tierpool.worker")


def ownership_calls(streams: PoolStreams, consumer: str, entries: Sequence[Entry]) -> list[tuple[int, ScriptCall]]:
    """(tier index, HEARTBEAT call) for ``entries``: one call per tier in tier order, in chunks of
    HEARTBEAT_CHUNK IDs (Lua's ``unpack`` fails above about 8,000 values)."""
    by_tier: dict[int, list[str]] = {}
    for entry in entries:
        by_tier.setdefault(entry.tier_index, []).append(entry.id)
    return [
        (
            index,
            (
                "HEARTBEAT",
                [streams.streams[index]],
                [streams.keys.group, consumer, *ids[start : start + HEARTBEAT_CHUNK]],
            ),
        )
        for index, ids in sorted(by_tier.items())
        for start in range(0, len(ids), HEARTBEAT_CHUNK)
    ]


class LateReads:
    """Drops, before they start, the entries of a late read that are no longer this consumer's."""

    def __init__(
        self,
        streams: PoolStreams,
        consumer: str,
        threshold: float,
        series: Sequence[TierSeries],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.streams, self.consumer, self.threshold, self.series = streams, consumer, threshold, series
        self.monotonic = monotonic
        """The clock a read's send time is taken on (``now``) and its lateness measured with."""
        self.checks = 0
        """Ownership checks made (round trips): reads that returned late."""

    def now(self) -> float:
        """The time to record just before a read is sent."""
        return self.monotonic()

    async def confirm(self, entries: list[Entry], sent_at: float) -> list[Entry]:
        """The entries still this consumer's: all of them, without a round trip, when the read sent at
        ``sent_at`` returned promptly; otherwise those the check confirms (the others are counted and logged)."""
        now = self.monotonic()
        if not entries or not must_confirm(sent_at, now, self.threshold):
            return entries
        self.checks += 1
        calls = ownership_calls(self.streams, self.consumer, entries)
        replies = await self.streams.run_batch([call for _, call in calls])
        refused: set[Key] = set()
        for (index, _), reply in zip(calls, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            taken, gone = reply
            refused.update((index, str(entry_id)) for entry_id in [*taken, *gone])
        kept: list[Entry] = []
        for entry in entries:
            if (entry.tier_index, entry.id) not in refused:
                kept.append(entry)
                continue
            self.series[entry.tier_index].stale_skipped.inc()
            log.info(
                "task %s (entry %s) not started: its read returned %.1fs after it was sent, and another worker "
                "has taken or finished it meanwhile",
                entry.fields.get("task_id", "?"),
                entry.id,
                now - sent_at,
            )
        return kept
