"""The stream protocol as async operations on one pool: each call is one round trip or one atomic script."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import ResponseError

from tierpool.model.adoption import GroupRefused, group_refusal
from tierpool.model.durations import ms
from tierpool.model.keys import ESCALATOR_CONSUMER, RETRY_CONSUMER, PoolKeys, adopting
from tierpool.model.spec import DeadLetterSpec
from tierpool.protocol import tenancy, utf8
from tierpool.protocol.dispatch import TakePlan
from tierpool.protocol.task_state import EVENTS_MAXLEN
from tierpool.store import script_registry
from tierpool.store.connection import AsyncRedis
from tierpool.store.replication import WaitGate
from tierpool.store.script_registry import ScriptCall

WORKER_SCRIPTS = (
    "TAKE",
    "COMPLETE_MANY",
    "RETRY_LATER",
    "DEFER",
    "DEAD_LETTER",
    "RECLAIM",
    "HEARTBEAT",
    "ESCALATE",
    "TRIM",
    "DELETE_ACKED",
    "TRIM_DEAD_LETTERS",
    "CLEANUP_CONSUMERS",
    "LEASE",
    "RELEASE",
    "REPLAY",
    "CANCELLED",
    "CHECKPOINT",
    "SCHEDULE",
    "RESCHEDULE",
    "THROTTLE",
    "MOVE_DUE",
    "HAND_BACK",
    "PREEMPT",
    "RELEASE_TENANTS",
    "REPAIR_TENANTS",
    "ADMIT_ENTRIES",
    "PRUNE_WHERE",
    "PARK",
    "GATHERED",
    "SUBMIT",
    "SUBMIT_ONCE",
    "SUBMIT_GATED",
)
"""Every script a worker loads, by name (tierpool.scripts), the submits of ``task.spawn`` among them; CANCEL and
REPLAY_GATED are loaded by their callers."""
HEARTBEAT_CHUNK = 1000
"""Entry IDs per heartbeat script call."""
ACKED_WALK = 1000
"""Pending entries one DELETE_ACKED call walks past (ids only)."""
ACKED_BUDGET = 1000
"""Acknowledged entries one DELETE_ACKED call deletes at most."""
ACKED_BYTES = 4 * 1024 * 1024
"""Bytes of acknowledged entries (ids, field names and values) one DELETE_ACKED call reads at most, plus one
entry: it must read an entry to learn its id, so this bounds the script's memory whatever the payloads."""
DEAD_LETTER_AGE_LIMIT = 10_000
"""Dead letters one sweep deletes by age at most (whole stream nodes: TRIM_DEAD_LETTERS)."""
PRUNE_PAGE = 200
"""Fields of the task-id index the lease holder checks per sweep (HSCAN COUNT)."""


@dataclass(slots=True)
class Completion:
    """A finished task waiting to be acknowledged together with others of its tier."""

    tier_index: int
    entry_id: str
    task_id: str
    record_json: bytes
    retried: bool
    attempts: int = 0
    """Failed writes so far (the writer gives up after a few errors that are not connection errors)."""


@dataclass(frozen=True, slots=True)
class DeferPlan:
    """How a RetryAfter parks its entry (see the DEFER script)."""

    idle_ms: int
    fallback_idle_ms: int
    max_deferrals: int
    memory_ms: int


@dataclass(slots=True)
class Outcome:
    """Any other outcome of one entry (a retry mark, a dead letter) as the script call that writes it."""

    tier_index: int
    entry_id: str
    call: ScriptCall
    attempts: int = 0


@dataclass(slots=True)
class Entry:
    """A raw stream entry as read: the tier index, its ID, its fields and its delivery count."""

    tier_index: int
    id: str
    fields: dict[str, str]
    deliveries: int = 1


@dataclass
class ReclaimResult:
    cursor: str
    claimed: list[Entry] = field(default_factory=list)
    deleted_ids: list[str] = field(default_factory=list)
    exhausted: list[Entry] = field(default_factory=list)
    """Claimed past max deliveries: to be dead-lettered by the claimer (which owns them now)."""
    own_idle: list[str] = field(default_factory=list)


def flat_to_dict(flat: Sequence[Any]) -> dict[str, str]:
    """A field-value list from a script reply (the client decodes responses, so these are text) as a dict."""
    pairs = iter(flat)
    return dict(zip(pairs, pairs, strict=False))


def is_nogroup(error: ResponseError) -> bool:
    return "NOGROUP" in str(error)


class PoolStreams:
    """Async operations on a pool's streams. Holds no state beyond the client and the script handles."""

    def __init__(
        self,
        client: AsyncRedis,
        keys: PoolKeys,
        tiers: Sequence[str],
        tenant_limits: Sequence[int | None] = (),
        dead_letters: DeadLetterSpec | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.tiers = list(tiers)
        self.tenant_limits = list(tenant_limits)
        """Each tier's ``tenantConcurrency``; empty: none."""
        self.dead_letters = dead_letters or DeadLetterSpec()
        """The dead-letter stream's retention (``spec.deadLetters``)."""
        self.streams = [keys.tier(tier) for tier in self.tiers]

    async def load_scripts(self) -> None:
        """Load every script (again after a server restart flushed the script cache)."""
        await script_registry.load_async(self.client, WORKER_SCRIPTS)

    async def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script by name (loading the scripts again if the server lost them)."""
        return await self._run(name, keys, args)

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await script_registry.run_async(self.client, name, keys, args, reload=WORKER_SCRIPTS)

    async def run_batch(self, calls: Sequence[ScriptCall], gate: WaitGate | None = None) -> list[Any]:
        """Run many scripts in one pipelined round trip; each script stays atomic on its own. With ``wait``, a
        WAIT (``gate``'s) follows them in the same round trip (see tierpool.store.replication).

        Returns one result per call, an exception object where that call failed.
        """
        return await script_registry.run_batch_async(self.client, calls, gate, reload=WORKER_SCRIPTS)

    async def ensure_groups(self) -> None:
        """Create the pool's consumer group on every tier stream (MKSTREAM), at its start; an existing group (an
        adopted stream's) is never reset: it carries on from its last delivered entry, so acked entries never re-run.
        An adopted stream that has groups and none of the pool's name gets none, and neither does any other stream
        then: GroupRefused (model.adoption), checked before any group is made."""
        for tier, stream in self.keys.adopted:
            try:
                groups = await self.client.xinfo_groups(stream)
            except ResponseError as error:
                if "no such key" not in str(error).lower():
                    raise
                groups = []
            names = [utf8.as_text(group["name"]) for group in groups]
            refusal = group_refusal(tier, stream, self.keys.group, names)
            if refusal is not None:
                raise GroupRefused(refusal)
        for stream in self.streams:
            try:
                await self.client.xgroup_create(stream, self.keys.group, id="0", mkstream=True)
            except ResponseError as error:
                if "BUSYGROUP" not in str(error):
                    raise

    async def take(self, plan: TakePlan, consumer: str) -> list[Entry]:
        """Read the planned counts in one round trip; shortfalls go to other tiers in priority order."""
        reply = await self._run("TAKE", self.streams, [self.keys.group, consumer, *plan.want, *plan.room])
        return [
            Entry(int(index), str(entry[0]), flat_to_dict(entry[1])) for index, entries in reply for entry in entries
        ]

    def complete_many_call(
        self, tier_index: int, consumer: str, ttl_ms: int, items: Sequence[Completion], forget_errors: bool = False
    ) -> ScriptCall:
        """XACK plus the result record for many entries of one tier, for the entries ``consumer`` still owns; an
        entry already finished, or taken over by another worker, writes nothing (the reply says which: 1, 0, -1).

        ``forget_errors`` also drops the remembered error of retried tasks. A task cancelled while it ran gets a
        cancelled record instead; every written outcome appends the task's final event."""
        keys: list[str] = [self.streams[tier_index], self.keys.errors]
        args: list[Any] = [self.keys.group, consumer, ttl_ms, "1" if forget_errors else "0", EVENTS_MAXLEN]
        for item in items:
            task = item.task_id
            keys += [self.keys.result(task), self.keys.events(task), self.keys.checkpoint(task), self.keys.cancel(task)]
            args += [item.entry_id, task, item.record_json]
        return "COMPLETE_MANY", [*keys, self.keys.where], args

    def retry_later_call(
        self, tier_index: int, consumer: str, entry_id: str, task_id: str, error: str, idle_ms: int
    ) -> ScriptCall:
        """Keep a failed entry of ``consumer`` pending, reclaimable by any worker after the backoff (it moves to the
        retry consumer); remember its error. A no-op (reply 0) when ``consumer`` no longer owns it."""
        keys = [self.streams[tier_index], self.keys.errors]
        return "RETRY_LATER", keys, [self.keys.group, consumer, entry_id, idle_ms, task_id, error, RETRY_CONSUMER]

    def defer_call(
        self, tier_index: int, consumer: str, task_id: str, entry_id: str, error: str, plan: DeferPlan
    ) -> ScriptCall:
        """A RetryAfter: park the entry for the delay without counting a delivery while the task has deferrals
        left, else as a failed attempt (see the DEFER script). A no-op when ``consumer`` no longer owns it."""
        keys = [self.streams[tier_index], self.keys.errors, self.keys.deferrals(task_id)]
        args = [self.keys.group, consumer, entry_id, plan.idle_ms, task_id, error, RETRY_CONSUMER]
        return "DEFER", keys, [*args, plan.max_deferrals, plan.memory_ms, plan.fallback_idle_ms]

    def dead_letter_call(
        self,
        tier_index: int,
        consumer: str,
        entry_id: str,
        task_id: str,
        reason: str,
        error: str,
        deliveries: int,
        ttl_ms: int,
        cut: Sequence[int] = (),
        traceback: str = "",
    ) -> ScriptCall:
        """Move a pending entry that ``consumer`` owns to the dead-letter stream with the reason, and ack it,
        atomically (reply 1; 0 when it is no longer pending, -1 when another consumer owns it). The dead-letter
        stream is trimmed to about ``deadLetters.maxLength``. ``cut``: the bytes each field value is cut to and the
        most fields kept (an entry over the size limit; see the script). ``traceback``: the failed run's, bounded
        (tierpool.protocol.tracebacks), for the dead letter and the result record; empty: none."""
        keys = [self.streams[tier_index], self.keys.dlq, self.keys.result(task_id), self.keys.errors]
        keys += [self.keys.events(task_id), self.keys.checkpoint(task_id), self.keys.where]
        args = [
            self.keys.group,
            entry_id,
            reason,
            error,
            deliveries,
            self.tiers[tier_index],
            ttl_ms,
            consumer,
            EVENTS_MAXLEN,
        ]
        args += [self.dead_letters.max_length, *(cut or (0, 0)), traceback, task_id]
        return "DEAD_LETTER", keys, [*args, adopting(self.keys, self.tiers[tier_index])]

    def cancelled_call(
        self, tier_index: int, consumer: str, entry_id: str, task_id: str, record_json: bytes, ttl_ms: int
    ) -> ScriptCall:
        """Ack a cancelled task's entry with its cancelled record and final event, only if ``consumer`` owns it
        (reply 1; 0 when it is no longer pending, -1 when another consumer owns it). See the CANCELLED script."""
        keys = [self.streams[tier_index], self.keys.result(task_id), self.keys.events(task_id)]
        keys += [self.keys.checkpoint(task_id), self.keys.errors, self.keys.where]
        return "CANCELLED", keys, [self.keys.group, consumer, entry_id, task_id, record_json, ttl_ms, EVENTS_MAXLEN]

    async def save_checkpoint(
        self, tier_index: int, consumer: str, entry_id: str, task_id: str, state_json: str, ttl_ms: int
    ) -> int:
        """Save a running task's checkpoint if ``consumer`` owns its entry: 1, else 0 (not pending) or -1."""
        keys = [self.streams[tier_index], self.keys.checkpoint(task_id)]
        return int(await self._run("CHECKPOINT", keys, [self.keys.group, consumer, entry_id, state_json, ttl_ms]))

    def preempt_call(
        self, tier_index: int, consumer: str, entry_id: str, task_id: str, idle_ms: int, ttl_ms: int
    ) -> ScriptCall:
        """PREEMPT: give back a preempted run's entry if ``consumer`` owns it, its delivery not counted, and count
        the preemption (replies the task's preemptions so far, or -1: another consumer's entry)."""
        keys = [self.streams[tier_index], self.keys.preemptions(task_id)]
        return "PREEMPT", keys, [self.keys.group, consumer, RETRY_CONSUMER, idle_ms, entry_id, ttl_ms]

    async def reclaim(
        self,
        tier_index: int,
        consumer: str,
        min_idle_ms: int,
        cursor: str,
        count: int,
        max_deliveries: int,
        adopt: Sequence[str] = (),
    ) -> ReclaimResult:
        """Claim up to ``count`` idle entries that other consumers own (and ``adopt``: entries of this consumer
        that it does not hold); see the RECLAIM script. ``own_idle`` lists this consumer's idle entries it skipped;
        ``exhausted`` the claimed entries past ``max_deliveries``, which the caller must dead-letter."""
        args = [self.keys.group, consumer, min_idle_ms, cursor, count, max_deliveries, *adopt]
        next_cursor, claimed, deleted, exhausted, own = await self._run("RECLAIM", [self.streams[tier_index]], args)
        entries = [Entry(tier_index, str(e[0]), flat_to_dict(e[1]), int(e[2])) for e in claimed]
        result = ReclaimResult(str(next_cursor), entries, [str(i) for i in deleted])
        result.exhausted = [Entry(tier_index, str(e[0]), flat_to_dict(e[1]), int(e[2])) for e in exhausted]
        result.own_idle = [str(i) for i in own]
        return result

    async def heartbeat(self, tier_index: int, consumer: str, entry_ids: Sequence[str]) -> list[str]:
        """Refresh owned in-flight entries; returns the IDs no longer this consumer's: owned by another consumer,
        acked by another, or deleted.

        Sends the IDs in chunks: Lua's ``unpack`` fails above about 8,000 values."""
        lost: list[str] = []
        for start in range(0, len(entry_ids), HEARTBEAT_CHUNK):
            chunk = entry_ids[start : start + HEARTBEAT_CHUNK]
            taken, gone = await self._run("HEARTBEAT", [self.streams[tier_index]], [self.keys.group, consumer, *chunk])
            lost += [str(entry_id) for entry_id in [*taken, *gone]]
        return lost

    async def escalate(
        self,
        tier_index: int,
        now_ms: int,
        after_ms: int | None,
        limit: int,
        max_target_backlog: int | None = None,
        own_ttls: bool = False,
    ) -> int:
        """Move the oldest undelivered entries of tier ``tier_index`` that are due up one tier: those in the stream
        for the tier's ``after_ms`` (None: none), or with ``own_ttls`` (a tier that adopts a stream) for their own
        ``priority_ttl_s`` when they have one (tierpool.protocol.adopted.escalation_ms); with ``max_target_backlog``
        N, only as many as keep the next tier up below N waiting entries (0: one entry, and only when it has none
        waiting)."""
        keys = [self.streams[tier_index], self.streams[tier_index - 1], self.keys.where]
        target_cap = -1 if max_target_backlog is None else max_target_backlog
        args = [self.keys.group, ESCALATOR_CONSUMER, now_ms, limit, self.tiers[tier_index], self.tiers[tier_index - 1]]
        args += [target_cap, -1 if after_ms is None else after_ms, "1" if own_ttls else "0"]
        return int(await self._run("ESCALATE", keys, args))

    async def trim_acknowledged(self, tier_index: int) -> int:
        """Delete the acknowledged entries below the oldest pending one (all of them when none is pending)."""
        return int(await self._run("TRIM", [self.streams[tier_index]], [self.keys.group]))

    async def delete_acked(self, tier_index: int, cursor: str = "-") -> tuple[int, str]:
        """Delete acknowledged entries above the oldest pending one, walking the pending entries from ``cursor``
        (see the DELETE_ACKED script), reading at most :data:`ACKED_BYTES` of them and one more: (count deleted,
        the next call's cursor; ``-`` once the walk is through)."""
        args = [self.keys.group, cursor, ACKED_WALK, ACKED_BUDGET, ACKED_BYTES]
        deleted, after = await self._run("DELETE_ACKED", [self.streams[tier_index]], args)
        return int(deleted), str(after)

    async def trim_dead_letters(self, retention: DeadLetterSpec) -> int:
        """Apply ``retention`` to the dead-letter stream: about ``maxLength`` kept, none older than ``maxAge``
        (see the TRIM_DEAD_LETTERS script). Returns the count deleted."""
        args = [retention.max_length, ms(retention.max_age), DEAD_LETTER_AGE_LIMIT]
        return int(await self._run("TRIM_DEAD_LETTERS", [self.keys.dlq], args))

    async def remove_dead_consumers(self, tier_index: int, min_idle_ms: int) -> list[str]:
        return [
            str(name)
            for name in await self._run("CLEANUP_CONSUMERS", [self.streams[tier_index]], [self.keys.group, min_idle_ms])
        ]

    async def hold_lease(self, holder: str, ttl_ms: int) -> bool:
        return bool(await self._run("LEASE", [self.keys.escalator_lease], [holder, ttl_ms]))

    def tenant_release_calls(self, entries: Sequence[tuple[int, str]]) -> list[ScriptCall]:
        """RELEASE_TENANTS calls for an outcome batch's (tier index, entry id), to run right after its outcome
        scripts; none when no tier has ``tenantConcurrency``."""
        if not any(limit is not None for limit in self.tenant_limits):
            return []
        return tenancy.release_calls(self.keys, self.tiers, self.tenant_limits, entries)

    async def admit_entries(self, consumer: str, by_tier: Mapping[int, Sequence[str]]) -> dict[tuple[int, str], int]:
        """The tenant gate's decision on entries with a tenant that ``consumer`` took from limited tiers (entry ids
        by tier index), in one round trip: by (tier index, entry id), 1 run it (admitted, before or now), 0 held by
        the gate (acked: not to run), -1 not this consumer's (not to run). See the ADMIT_ENTRIES script."""
        limits = dict(enumerate(self.tenant_limits))
        asks = [(index, ids, limit) for index, ids in sorted(by_tier.items()) if (limit := limits.get(index))]
        calls = [tenancy.admit_call(self.keys, self.tiers[index], limit, consumer, ids) for index, ids, limit in asks]
        statuses: dict[tuple[int, str], int] = {}
        for (index, ids, _), reply in zip(asks, await self.run_batch(calls), strict=True):
            if isinstance(reply, Exception):
                raise reply
            statuses.update({(index, entry_id): int(status) for entry_id, status in zip(ids, reply, strict=True)})
        return statuses

    async def repair_tenants(self) -> dict[str, tenancy.RepairReport]:
        """The lease holder's repair of the tenant counts of every tier that has a limit or held tasks."""
        reports: dict[str, tenancy.RepairReport] = {}
        for index, tier in enumerate(self.tiers):
            limit = self.tenant_limits[index] if index < len(self.tenant_limits) else None
            leftovers = (self.keys.held(tier), self.keys.admitted(tier), self.keys.queued(tier))
            if limit is None and not await self.client.exists(*leftovers):
                continue
            name, keys, args = tenancy.repair_call(self.keys, tier, limit)
            reports[tier] = tenancy.repair_report(await self._run(name, keys, args))
        return reports

    async def prune_index(self, cursor: str, count: int = PRUNE_PAGE) -> tuple[str, int]:
        """Check a page of the task-id index from ``cursor`` and drop the places that do not check out (see the
        PRUNE_WHERE script): (next cursor, ``"0"`` after a full pass; how many were dropped)."""
        keys = [self.keys.due, self.keys.throttled, self.keys.stranded]
        for tier in self.tiers:
            keys += [self.keys.tier(tier), self.keys.held(tier)]
        args = [cursor, count, self.keys.group, RETRY_CONSUMER, *self.tiers]
        next_cursor, dropped = await self._run("PRUNE_WHERE", [*keys, self.keys.where], args)
        return str(next_cursor), int(dropped)

    async def release_lease(self, holder: str) -> None:
        await self._run("RELEASE", [self.keys.escalator_lease], [holder])
