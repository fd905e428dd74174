"""A worker's reads, safe against stopping: whatever the server delivered is run or handed back,
never dropped.

The server makes an entry pending on this consumer the moment it delivers it. A read that is cancelled while its
reply is in flight (or its entries cancelled before their runs start) would leave them pending with nobody running
them, until another worker reclaims them after ``claimIdle``. So:

- a blocking read (XREADGROUP BLOCK) runs on a connection of its own and is never cancelled: it is ended with
  CLIENT UNBLOCK, which makes it return as if it had timed out, or with what it had already been given;
- a stop request (or a pause: see ``Reads.pause``) ends a block at once; entries it returned are handed back
  (``HAND_BACK``: to the parking consumer with an idle time of claimIdle, their delivery not counted), so another
  worker runs them at once;
- a cancellation (the worker's task cancelled) lets the read finish (ended by CLIENT UNBLOCK) and hands back
  what it returned, and hands back entries whose runs had not started, before it propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from tierpool.model.keys import RETRY_CONSUMER
from tierpool.protocol.dispatch import TakePlan
from tierpool.store.connection import UNREACHABLE, slot_node
from tierpool.store.streams import Entry, PoolStreams

log = logging.getLogger("tierpool.worker")
SHORT_BLOCK_MS = 50
"""Longest block that leaves tiers out when CLIENT UNBLOCK cannot cut it short."""
SETTLE_SECONDS = 2.0
"""After a cancellation: how long ending the read and handing back its entries may take."""
Key = tuple[int, str]


def blocked_tiers(plan: TakePlan) -> list[int]:
    """The tiers a blocking read covers: those the plan may read."""
    return [index for index, room in enumerate(plan.room) if room != 0]


def hand_back_calls(
    streams: PoolStreams, consumer: str, idle_ms: int, entries: Sequence[Entry]
) -> list[tuple[str, list[str], list[Any]]]:
    """One HAND_BACK call per tier among ``entries``, in tier order."""
    by_tier: dict[int, list[str]] = {}
    for entry in entries:
        by_tier.setdefault(entry.tier_index, []).append(entry.id)
    return [
        ("HAND_BACK", [streams.streams[index]], [streams.keys.group, consumer, RETRY_CONSUMER, idle_ms, *ids])
        for index, ids in sorted(by_tier.items())
    ]


class Reads:
    """The worker's blocking reads and its guard around reading and launching (see the module)."""

    def __init__(self, streams: PoolStreams, consumer: str, claim_idle_ms: int, stop: asyncio.Event) -> None:
        self.streams, self.consumer, self.idle_ms, self.stop = streams, consumer, claim_idle_ms, stop
        self._blocker: aioredis.Redis | None = None
        self.unblock = isinstance(streams.client, aioredis.Redis)
        """Whether CLIENT ID and CLIENT UNBLOCK are allowed: False after the server refused CLIENT ID, and in
        cluster mode, where the read runs on a pooled connection of the slot's node that the unblock cannot name
        (there a block that leaves tiers out is short, and a stop waits for the block to end)."""
        self._settling: set[asyncio.Future[None]] = set()
        self.handed_back = 0
        self.pause = asyncio.Event()
        """Set while the worker takes no new work (tierpool.runtime.eviction_watch): like a stop, it ends a block
        at once and its entries are handed back, but reading resumes once it is cleared."""

    async def wait_for_work(self, plan: TakePlan, block_ms: int, wake: asyncio.Event) -> list[Entry]:
        """Block on every tier the plan may read, for one entry; only called when the take found them all empty.
        A stop request ends the block at once (its entries are handed back: returns []). A plan that leaves tiers
        out may let them in once a slot frees, so that block also ends as soon as ``wake`` is set."""
        tiers = blocked_tiers(plan)
        partial = len(tiers) < len(plan.room)
        halts = [self.stop, self.pause]
        if not tiers or any(halt.is_set() for halt in halts) or (partial and wake.is_set()):
            return []
        client_id = await self._client_id()
        if client_id is None and partial:
            block_ms = min(block_ms, SHORT_BLOCK_MS)
        read = asyncio.ensure_future(self._block(tiers, block_ms))
        waits = [asyncio.ensure_future(event.wait()) for event in ([*halts, wake] if partial else halts)]
        try:
            await asyncio.wait({read, *waits}, return_when=asyncio.FIRST_COMPLETED)
            entries = await self._end(read, client_id)
        except asyncio.CancelledError:
            self._settle_later(self._end(read, client_id))
            raise
        finally:
            for waiting in waits:
                waiting.cancel()
        if entries and any(halt.is_set() for halt in halts):
            await self.hand_back(entries)
            return []
        return entries

    async def guard(self, read: Awaitable[list[Entry]]) -> list[Entry]:
        """Await a non-blocking read (TAKE); when cancelled meanwhile, it runs on and its entries are handed back."""
        job = asyncio.ensure_future(read)
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            self._settle_later(job)
            raise

    async def launch(
        self, entries: list[Entry], launch: Callable[[list[Entry]], Awaitable[None]], holds: Callable[[Key], bool]
    ) -> None:
        """Start the entries; when cancelled before their runs are held, hand back those not held."""
        try:
            await launch(entries)
        except asyncio.CancelledError:
            self.hand_back_later(entries, holds)
            raise

    def hand_back_later(self, entries: Sequence[Entry], holds: Callable[[Key], bool]) -> None:
        """Hand back, shielded from cancellation, those of ``entries`` this worker does not hold."""
        left = [entry for entry in entries if not holds((entry.tier_index, entry.id))]
        if left:
            self._settle_later(_ready(left))

    async def hand_back(self, entries: Sequence[Entry]) -> None:
        """Give entries this worker read but will not run back to the pool, claimable at once (HAND_BACK)."""
        calls = hand_back_calls(self.streams, self.consumer, self.idle_ms, entries)
        try:
            replies = await self.streams.run_batch(calls)
        except UNREACHABLE as error:
            log.warning("could not hand back %d entries; reclaimed after claimIdle: %s", len(entries), error)
            return
        handed = sum(reply for reply in replies if isinstance(reply, int))
        self.handed_back += handed
        log.info("handed back %d entries read as the worker stopped or paused", handed)

    def _settle_later(self, entries: Awaitable[list[Entry]]) -> None:
        """Finish a cancelled read and hand back its entries, shielded from further cancellation (close() waits)."""

        async def settle() -> None:
            found = await entries
            if found:
                await self.hand_back(found)

        job = asyncio.ensure_future(asyncio.wait_for(settle(), SETTLE_SECONDS))
        self._settling.add(job)
        job.add_done_callback(self._settling.discard)

    async def _client_id(self) -> int | None:
        if not isinstance(self.streams.client, aioredis.Redis):
            return None
        if self._blocker is None:
            pool = self.streams.client.connection_pool
            self._blocker = aioredis.Redis(connection_pool=pool, single_connection_client=True)
        if not self.unblock:
            return None
        try:
            return int(await self._blocker.client_id())
        except ResponseError:  # an ACL without CLIENT (UNBLOCK is @admin): short blocks instead
            self.unblock = False
            return None

    async def _end(self, read: asyncio.Future[list[Entry]], client_id: int | None) -> list[Entry]:
        """End a block that is still waiting (CLIENT UNBLOCK: as if it timed out) and return what it read."""
        if not read.done() and client_id is not None:
            await self.streams.client.client_unblock(client_id)
        return await read

    async def _block(self, tiers: Sequence[int], block_ms: int) -> list[Entry]:
        client = self._blocker if self._blocker is not None else self.streams.client
        streams: Any = {self.streams.streams[index]: ">" for index in tiers}
        # in cluster mode, straight to the slot's node: redis-py would otherwise ask the server for the keys of
        # every XREADGROUP (COMMAND GETKEYS, one more round trip); MOVED and ASK are still followed
        node = await slot_node(client, self.streams.streams[0])
        # execute_command, not xreadgroup(): only it takes the cluster client's target_nodes (xreadgroup raised a
        # TypeError on every blocking read in cluster mode, and an idle worker took new work seconds late)
        reply: Any = await client.execute_command(
            *xreadgroup_args(self.streams.keys.group, self.consumer, streams, block_ms), **node
        )
        index_of = {stream: i for i, stream in enumerate(self.streams.streams)}
        return [
            Entry(index_of[stream], entry_id, dict(fields or {}))
            for stream, entries in reply or []
            for entry_id, fields in entries
        ]

    async def close(self) -> None:
        """Let cancelled reads settle (bounded), then give back the blocking reads' connection."""
        if self._settling:
            with contextlib.suppress(Exception):
                await asyncio.wait(list(self._settling), timeout=SETTLE_SECONDS)
        if self._blocker is not None:
            blocker, self._blocker = self._blocker, None
            await blocker.aclose(close_connection_pool=False)


def xreadgroup_args(group: str, consumer: str, streams: Mapping[str, str], block_ms: int) -> list[str | int]:
    """Pure: XREADGROUP through ``group`` for one entry from any of ``streams`` (name -> last id), blocking
    ``block_ms``."""
    return [
        "XREADGROUP",
        "GROUP",
        group,
        consumer,
        "COUNT",
        1,
        "BLOCK",
        block_ms,
        "STREAMS",
        *streams,
        *streams.values(),
    ]


async def _ready(entries: list[Entry]) -> list[Entry]:
    return entries
