"""What the worker enforces on the entries it takes, before any of them runs, whatever wrote them (the rules are
tierpool.protocol.entry_rules): entries over the size limit are dead-lettered undecoded; every task takes its
stream's tier and a plausible ``created_at``; a task naming a rate limit the pool does not define is dead-lettered
(tierpool.protocol.rate_limits.limit_refusal), unless the pool's published spec defines it (this worker's spec is
older, during a rollout: it runs without the limit, as before, with a warning); a paid one runs on its reservation
only if THROTTLE recorded it; a
task with a tenant on a tier with ``tenantConcurrency`` runs only
once the tenant gate admitted it (the ADMIT_ENTRIES script: admitted where it is, or held for its turn)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from pydantic import ValidationError
from redis.exceptions import RedisError

from tierpool.protocol import entry_rules
from tierpool.protocol import rate_limits as ratelimit
from tierpool.protocol.adopted import adopt_fields, task_id_of
from tierpool.protocol.envelope import MalformedEntry, Task, decode_many
from tierpool.store.drivers import run_async
from tierpool.store.registry import UnknownPool, load_spec_plan
from tierpool.store.streams import Entry, PoolStreams

log = logging.getLogger("tierpool.runtime.worker")
Decoded = tuple[Entry, Task | MalformedEntry]
DeadLetterNow = Callable[..., None]
"""The worker's ``_dead_letter_now(entry, task_id, reason, cut=...)``."""


class Admission:
    """The checks between taking entries and starting their tasks, for one worker."""

    def __init__(
        self,
        streams: PoolStreams,
        consumer: str,
        max_payload_bytes: int,
        dead_letter: DeadLetterNow,
        rate_limits: Collection[str] = (),
        published_limits: Callable[[], Awaitable[frozenset[str]]] | None = None,
    ) -> None:
        self.streams, self.consumer, self.max_payload_bytes = streams, consumer, max_payload_bytes
        self.dead_letter = dead_letter
        self.rate_limits = frozenset(rate_limits)
        """The rate limits the pool defines (spec.rateLimits)."""
        self.published_limits = published_limits or (lambda: published_rate_limits(streams))
        """The rate limits of the spec published for producers now (read only when a task names an unknown one)."""
        self.limited = any(limit is not None for limit in streams.tenant_limits)
        adopted = {tier for tier, _ in streams.keys.adopted}
        self.adopting = frozenset(index for index, tier in enumerate(streams.tiers) if tier in adopted)
        """The tiers that adopt a stream (``tiers[].stream``): their entries are taken in its producers' formats."""

    def within_limits(self, entries: Sequence[Entry]) -> list[Entry]:
        """The entries within the size limit. Each one over it is dead-lettered at once (never retried, never
        decoded), its dead letter cut (entry_rules.DEAD_LETTER_CUT), under the task_id a worker gives it (an
        adopted stream's entry without one: tierpool.protocol.adopted.task_id_of), so its result record is written."""
        kept: list[Entry] = []
        limit = self.max_payload_bytes
        for entry in entries:
            if entry_rules.within_size_at_a_glance(entry.fields, limit):
                kept.append(entry)
                continue
            reason = entry_rules.size_refusal(entry.fields, limit)
            if reason is None:
                kept.append(entry)
                continue
            log.warning("dead-lettering entry %s in %s: %s", entry.id, self._tier(entry), reason)
            fields = entry.fields
            if entry.tier_index in self.adopting and "task_id" not in fields:  # the id a worker gives it (adopted)
                stream = self.streams.streams[entry.tier_index]
                fields = {**fields, "task_id": task_id_of(fields, stream, entry.id)}
            task_id = entry_rules.dead_letter_task_id(fields)
            self.dead_letter(entry, task_id, reason, cut=entry_rules.DEAD_LETTER_CUT)
        return kept

    def decode(self, entries: Sequence[Entry], now_ms: int) -> list[Decoded]:
        """Each entry with its Task (or why it is malformed), the Task's tier its stream's and its ``created_at``
        as the rules read it; what differs from the envelope is logged, once for the entry. Entries of a tier that
        adopts a stream were completed by :meth:`adopt`."""
        tiers = self.streams.tiers
        tasks = decode_many([(entry.id, entry.fields, entry.deliveries) for entry in entries])
        for entry, task in zip(entries, tasks, strict=True):
            if not isinstance(task, Task):
                continue
            if task.tier != tiers[entry.tier_index] or not entry_rules.created_at_stands(task.created_at_ms, now_ms):
                self._settle(entry, task, now_ms)
        return list(zip(entries, tasks, strict=True))

    def adopt(self, entries: list[Entry]) -> list[Entry]:
        """The entries, those of a tier that adopts a stream completed in place (tierpool.protocol.adopted), before
        anything reads their task_id (the cancel and checkpoint screen, the envelope)."""
        if self.adopting:
            for entry in entries:
                index = entry.tier_index
                if index in self.adopting:
                    stream, tier = self.streams.streams[index], self.streams.tiers[index]
                    completed = adopt_fields(entry.fields, stream, entry.id, tier)
                    if completed is not entry.fields:
                        entry.fields = dict(completed)
        return entries

    def _settle(self, entry: Entry, task: Task, now_ms: int) -> None:
        """A task whose tier or ``created_at`` the rules read otherwise than its envelope."""
        tier = self._tier(entry)
        tier_note = entry_rules.tier_note(task.tier, tier)
        created = entry_rules.created_at_ms(task.created_at_ms, now_ms)
        notes = [note for note in (tier_note, created.note) if note is not None]
        if notes:  # an adopted stream's producers write seconds on purpose: not worth a warning per task
            level = logging.DEBUG if entry.tier_index in self.adopting and tier_note is None else logging.WARNING
            log.log(level, "entry %s in %s (task %s): %s", entry.id, tier, task.id, "; ".join(notes))
        task.tier, task.created_at_ms = tier, created.ms

    async def defined_limits(self, decoded: list[Decoded]) -> list[Decoded]:
        """Tasks naming a rate limit this worker's spec lacks: malformed, unless the published spec has it."""
        unknown = [i for i, (_, t) in enumerate(decoded) if isinstance(t, Task) and self._unknown_limit(t)]
        if not unknown:
            return decoded
        published = await self.published_limits()
        found = list(decoded)
        for position in unknown:
            entry, task = found[position]
            assert isinstance(task, Task)
            if task.rate_limit in published:
                log.warning(
                    "task %s names rate limit %r, which the pool's published spec defines and this worker's does "
                    "not (an older spec, during a rollout): it runs without the limit",
                    task.id,
                    task.rate_limit,
                )
                task.rate_limit = None
                continue
            found[position] = (entry, MalformedEntry(ratelimit.limit_refusal(task.rate_limit, self.rate_limits) or ""))
        return found

    def _unknown_limit(self, task: Task) -> bool:
        return ratelimit.limit_refusal(task.rate_limit, self.rate_limits) is not None

    async def gate(self, decoded: list[Decoded]) -> list[Decoded]:
        """The entries that may run now. A task with a tenant on a limited tier must be admitted by the gate
        (ADMIT_ENTRIES, one round trip for the read): one it holds was acked and waits for its tenant's turn, one
        with a tenant that is not a valid name is dead-lettered. Tasks naming an unknown rate limit are settled first
        (:meth:`defined_limits`)."""
        decoded = await self.defined_limits(decoded)
        if not self.limited:
            return decoded
        limits = self.streams.tenant_limits
        asks: dict[int, list[str]] = {}
        refused: set[tuple[int, str]] = set()
        for entry, task in decoded:
            index = entry.tier_index
            if not isinstance(task, Task) or not entry_rules.gated(task.tenant, _at(limits, index)):
                continue
            reason = entry_rules.tenant_refusal(task.tenant or "")
            if reason is None:
                asks.setdefault(index, []).append(entry.id)
                continue
            log.warning("dead-lettering entry %s in %s: %s", entry.id, self._tier(entry), reason)
            self.dead_letter(entry, task.id, reason)
            refused.add((index, entry.id))
        if not asks and not refused:
            return decoded
        statuses = await self.streams.admit_entries(self.consumer, asks) if asks else {}
        held = [entry.id for entry, _ in decoded if statuses.get((entry.tier_index, entry.id)) == 0]
        if held:
            log.info("%d entries that did not pass the tenant gate wait for their tenant's turn: %s", len(held), held)
        return [
            (entry, task)
            for entry, task in decoded
            if (entry.tier_index, entry.id) not in refused and statuses.get((entry.tier_index, entry.id), 1) == 1
        ]

    def _tier(self, entry: Entry) -> str:
        return self.streams.tiers[entry.tier_index]


def _at(limits: Sequence[Any], index: int) -> Any:
    return limits[index] if index < len(limits) else None


async def published_rate_limits(streams: PoolStreams) -> frozenset[str]:
    """The rate limit names of the pool's published spec; none when it cannot be read (so the task is refused)."""
    try:
        spec = await run_async(streams.client, load_spec_plan(streams.keys))
    except (UnknownPool, RedisError, ValidationError, ValueError):
        return frozenset()
    return frozenset(limit.name for limit in spec.rate_limits)
