"""Read-only observation of a pool's streams: backlog, pending, head-of-line and oldest pending age, counters.

Shared by ``tierpool status``, local mode's scaler and the operator. It only reads (XINFO, XRANGE, XPENDING,
XLEN, ZCARD, ZCOUNT, HGETALL).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from redis.client import NEVER_DECODE
from redis.exceptions import ResponseError

from tierpool.model.durations import ms_floor
from tierpool.model.keys import ESCALATOR_CONSUMER, RETRY_CONSUMER, PoolKeys
from tierpool.protocol.members import by_tier
from tierpool.scaling.observation import PoolObservation, TierObservation
from tierpool.store.connection import AsyncRedis, slot_node

COUNT_CAP = 10_000
"""When lag is NULL the backlog is counted entry by entry, up to this many."""
RECLAIMABLE_CAP = 1_000
"""Reclaimable entries are counted from XPENDING's idle filter, up to this many per tier."""
INTERNAL_CONSUMERS = frozenset({RETRY_CONSUMER, ESCALATOR_CONSUMER})
"""Consumers that run nothing: ``tierpool-retry`` parks entries waiting out a retry backoff,
``tierpool-escalator`` passes stale entries on to the next tier. Their entries are never busy."""
RAW: dict[str, Any] = {NEVER_DECODE: True}
"""Options that leave a reply undecoded. The observation reads entries (XRANGE, XINFO STREAM's first and last
entry) for their IDs only: it must never raise on their fields, whatever their bytes (a head entry that is not
UTF-8 failed every scaling pass of the operator, and a pool at zero never woke), nor pay for decoding them."""


def active_idle_seconds(heartbeat: float, claim_idle: float) -> float:
    """Consumer idle time below which a worker counts as live: its heartbeat (an XCLAIM of its running entries)
    touches it every ``heartbeat``; a dead consumer only ages."""
    return min(2 * heartbeat, claim_idle)


ABSENT = ("NOGROUP", "no such key", "ERR no such key")
"""The error replies that mean "not there yet": a tier whose stream or group no worker or producer has made."""


def absent(reply: Any) -> bool:
    """True when ``reply`` says its key or group does not exist; any other error reply is raised (NOPERM,
    WRONGTYPE, ...): read as "no stream", it would show an empty backlog where tasks wait."""
    if not isinstance(reply, Exception):
        return False
    if str(reply).startswith(ABSENT):
        return True
    raise reply


def _group(groups: Any, name: str) -> dict[str, Any] | None:
    if absent(groups):
        return None
    return next((g for g in groups if g.get("name") == name), None)


def _other_groups(tiers: Sequence[str], infos: Sequence[Any], groups: Sequence[Any]) -> dict[str, tuple[str, ...]]:
    """Tier -> the names of its stream's groups, for the streams that lack the pool's group."""
    found: dict[str, tuple[str, ...]] = {}
    for name, (_, group), reply in zip(tiers, infos, groups, strict=True):
        if group is None and not absent(reply):
            found[name] = tuple(str(n.decode() if isinstance(n, bytes) else n) for n in (g.get("name") for g in reply))
    return found


def _entry_ms(entry_id: bytes | str) -> int:
    return int((entry_id.decode() if isinstance(entry_id, bytes) else entry_id).split("-", 1)[0])


def _age(now_ms: int, head: Sequence[Any]) -> float:
    """Seconds since the head entry was added, both on Redis' clock (the id's milliseconds and TIME). The
    producer's ``created_at`` is for reporting: a skewed producer clock must not move the scaler."""
    if not head:
        return 0.0
    return max(now_ms - _entry_ms(head[0][0]), 0) / 1000


def _oldest_pending_age(now_ms: int, summary: Any) -> float:
    """Seconds since the oldest pending entry was added (XPENDING's summary: its id), on Redis' clock; 0 with
    nothing pending. A hung task that heartbeats keeps it growing."""
    oldest = summary.get("min") if isinstance(summary, dict) else None
    return max(now_ms - _entry_ms(str(oldest)), 0) / 1000 if oldest else 0.0


def _active(consumers: Any, active_idle_ms: int) -> int | None:
    """Entries held by live workers (consumer idle below the threshold), from XINFO CONSUMERS' per-consumer counts:
    exact however large the backlog. Entries of the internal consumers (backoff, escalation) never count."""
    if isinstance(consumers, Exception) or not isinstance(consumers, list):
        return None
    return sum(
        int(c.get("pending", 0))
        for c in consumers
        if c.get("name") not in INTERNAL_CONSUMERS and int(c.get("idle", 0)) < active_idle_ms
    )


def _busy_consumers(consumers: Any, active_idle_ms: int) -> set[str]:
    """Names of the live workers holding entries of one tier (see ``_active``)."""
    if isinstance(consumers, Exception) or not isinstance(consumers, list):
        return set()
    return {
        str(c.get("name"))
        for c in consumers
        if c.get("name") not in INTERNAL_CONSUMERS
        and int(c.get("idle", 0)) < active_idle_ms
        and int(c.get("pending", 0))
    }


def _reclaimable(entries: Any) -> int:
    """Entries idle past claimIdle (XPENDING IDLE), except the escalator's, which are mid-escalation."""
    if isinstance(entries, Exception) or not isinstance(entries, list):
        return 0
    return sum(1 for entry in entries if entry.get("consumer") != ESCALATOR_CONSUMER)


async def observe(
    client: AsyncRedis,
    keys: PoolKeys,
    tiers: Sequence[str],
    active_idle: float | None = None,
    claim_idle: float | None = None,
) -> PoolObservation:
    """Two pipelined round trips: stream and group info for every tier, then each tier's head (and, with
    ``active_idle`` in seconds, its consumers' pending counts and idle times, to count the running entries; with
    ``claim_idle`` too, the entries idle past it, which may run again now)."""
    streams = [keys.tier(name) for name in tiers]
    pipe = client.pipeline(transaction=False)
    node = await slot_node(client, keys.dlq)
    pipe.execute_command("TIME", **node)  # (cluster pipelines refuse .time())
    pipe.xlen(keys.dlq)
    pipe.zcard(keys.due)
    pipe.zcard(keys.throttled)
    pipe.hgetall(keys.reentered)
    for stream in streams:
        pipe.execute_command("XINFO STREAM", stream, **RAW)  # xinfo_stream() takes no options
        pipe.xinfo_groups(stream)
    pipe.execute_command("INFO", "memory", **node)  # the pool's shard, in cluster mode
    replies = await pipe.execute(raise_on_error=False)
    memory = replies.pop()
    for reply in replies[:5]:
        absent(reply)
    now_ms = int(replies[0][0]) * 1000 + int(replies[0][1]) // 1000  # TIME: seconds, microseconds
    infos = [(replies[5 + 2 * i], _group(replies[6 + 2 * i], keys.group)) for i in range(len(streams))]
    reentered = replies[4] if isinstance(replies[4], dict) else {}
    others = _other_groups(tiers, infos, replies[6::2][: len(streams)])

    heads = client.pipeline(transaction=False)
    sampled: list[bool] = []
    holding: list[bool] = []
    for stream, (_, group) in zip(streams, infos, strict=True):
        after = f"({group['last-delivered-id']}" if group else "-"
        count = 1 if (group and group.get("lag") is not None) or not group else COUNT_CAP
        heads.execute_command("XRANGE", stream, after, "+", "COUNT", count, **RAW)
        holding.append(group is not None and int(group.get("pending", 0)) > 0)
        sampled.append(active_idle is not None and holding[-1])
        if holding[-1]:
            heads.xpending(stream, keys.group)  # the oldest pending entry's id: no payload, O(consumers)
        if sampled[-1]:
            heads.xinfo_consumers(stream, keys.group)
            if claim_idle is not None:
                heads.xpending_range(stream, keys.group, "-", "+", RECLAIMABLE_CAP, idle=ms_floor(claim_idle))
    heads.zcount(keys.due, "-inf", now_ms)
    heads.zcount(keys.throttled, "-inf", now_ms)
    after_heads = await heads.execute(raise_on_error=False)
    for reply in after_heads:
        absent(reply)
    due_now = sum(reply for reply in after_heads[-2:] if isinstance(reply, int))
    per_tier = _per_tier(after_heads[:-2], holding, sampled, claim_idle is not None)

    idle_ms = ms_floor(active_idle or 0)
    observed, busy_workers = [], set()
    for name, (info, group), (head, summary, consumers, idle_entries) in zip(tiers, infos, per_tier, strict=True):
        tier = replace(
            _tier(name, info, group, head, now_ms),
            reentered=int(reentered.get(name, 0)),
            oldest_pending_age_seconds=_oldest_pending_age(now_ms, summary),
            other_groups=others.get(name, ()),
        )
        if active_idle is not None and tier.exists:
            active = 0 if consumers is None else _active(consumers, idle_ms)
            tier = replace(tier, active=active, reclaimable=_reclaimable(idle_entries))
            busy_workers |= _busy_consumers(consumers, idle_ms)
        observed.append(tier)
    dlq, scheduled, throttled = (reply if isinstance(reply, int) else 0 for reply in replies[1:4])
    workers = len(busy_workers) if active_idle is not None else None
    policy = memory.get("maxmemory_policy") if isinstance(memory, dict) else None  # INFO refused: not known
    return PoolObservation(
        keys.ref, now_ms / 1000, tuple(observed), dlq, scheduled, throttled, due_now, workers, policy
    )


def _per_tier(
    replies: list[Any], holding: list[bool], sampled: list[bool], reclaim: bool
) -> list[tuple[Any, Any, Any, Any]]:
    """The second round trip's replies per tier: (head, pending summary or None, consumers or None, entries idle
    past claimIdle or []), as ``observe`` queued them."""
    found = iter(replies)
    return [
        (
            next(found),
            next(found) if holds else None,
            next(found) if sample else None,
            next(found) if sample and reclaim else [],
        )
        for holds, sample in zip(holding, sampled, strict=True)
    ]


def _tier(name: str, info: Any, group: dict[str, Any] | None, head: Any, now_ms: int) -> TierObservation:
    head = [] if absent(head) else head
    if absent(info):  # no stream: nothing was ever submitted to this tier
        return TierObservation(name, False, 0, 0, False, 0, 0.0, 0, 0, None)
    if group is None:  # tasks submitted before any worker created the group: every entry is waiting
        length = int(info.get("length", 0))
        age = (
            _age(now_ms, [(info["first-entry"][0], info["first-entry"][1])])
            if length and info.get("first-entry")
            else 0.0
        )
        return TierObservation(name, False, length, length, True, 0, age, 0, int(info.get("entries-added", 0)), None)
    lag = group.get("lag")
    backlog = int(lag) if lag is not None else len(head)
    return TierObservation(
        name=name,
        exists=True,
        length=int(info.get("length", 0)),
        backlog=backlog,
        lag_exact=lag is not None,
        pending=int(group.get("pending", 0)),
        oldest_age_seconds=_age(now_ms, head[:1]) if backlog else 0.0,
        consumers=int(group.get("consumers", 0)),
        entries_added=int(info.get("entries-added", 0)),
        entries_read=None if group.get("entries-read") is None else int(group["entries-read"]),
    )


async def in_flight_by_consumer(
    client: AsyncRedis, keys: PoolKeys, tiers: Sequence[str], active_idle: float | None = None
) -> dict[str, int]:
    """Pending entries per worker consumer over every tier (XINFO CONSUMERS): how busy each worker is, for
    choosing whom to scale in. Internal consumers are left out, and with ``active_idle`` (seconds) also consumers
    idle that long or longer (dead: their heartbeat stopped, so their entries run nowhere). A tier without its
    stream or group yet runs nothing; any other error of a tier (NOPERM, WRONGTYPE, ...) is raised, as 0 in flight
    would be a wrong answer."""
    idle_ms = None if active_idle is None else ms_floor(active_idle)
    pipe = client.pipeline(transaction=False)
    for name in tiers:
        pipe.xinfo_consumers(keys.tier(name), keys.group)
    found: dict[str, int] = {}
    for consumers in await pipe.execute(raise_on_error=False):
        if absent(consumers):
            continue
        for consumer in consumers:
            live = idle_ms is None or int(consumer.get("idle", 0)) < idle_ms
            if consumer.get("name") not in INTERNAL_CONSUMERS and live:
                found[consumer["name"]] = found.get(consumer["name"], 0) + int(consumer.get("pending", 0))
    return found


STRANDED_SAMPLE = 1000
"""Members ``tierpool status`` reads to break the stranded tasks down by tier (the total is exact)."""


async def stranded_counts(client: Any, keys: PoolKeys) -> dict[str, Any]:
    """``{"total": n, "tiers": {tier: count}}`` of the scheduled tasks kept for a tier the pool's workers did not
    have when they came due; the breakdown covers the first STRANDED_SAMPLE members."""
    total = int(await client.zcard(keys.stranded))
    members = await client.execute_command("ZRANGE", keys.stranded, 0, STRANDED_SAMPLE - 1, **RAW) if total else []
    # for display only: a tier name that is not UTF-8 is counted under its readable form
    return {"total": total, "tiers": by_tier(member.decode("utf-8", "replace") for member in members)}


async def held_counts(client: Any, keys: PoolKeys, tiers: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Per tier: (held tasks waiting for their tenant's turn, tenant entries through the gate and not yet finished:
    queued by a producer's gate for a worker, or admitted by one)."""
    pipe = client.pipeline(transaction=False)
    for tier in tiers:
        pipe.zcard(keys.held(tier))
        pipe.hlen(keys.admitted(tier))
        pipe.zcard(keys.queued(tier))
    replies = await pipe.execute()
    return {
        tier: (int(replies[3 * i]), int(replies[3 * i + 1]) + int(replies[3 * i + 2])) for i, tier in enumerate(tiers)
    }


def add_held_counts(status: dict[str, Any], counts: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """``tierpool status --json`` with ``held`` and ``admitted`` in each tier."""
    for tier in status["tiers"]:
        tier["held"], tier["admitted"] = counts.get(tier["name"], (0, 0))
    return status


async def read_eviction_policy(client: AsyncRedis) -> str | None:
    """The server's ``maxmemory-policy`` (INFO memory); in cluster mode the riskiest of the nodes'. None when it
    cannot be read (INFO refused or renamed, as some managed services do)."""
    try:
        info = await client.info("memory")
    except ResponseError:
        return None
    infos = [info] if "maxmemory_policy" in info else [v for v in info.values() if isinstance(v, dict)]
    policies = sorted(str(i["maxmemory_policy"]) for i in infos if "maxmemory_policy" in i)
    risky = [p for p in policies if p.startswith("allkeys-")] or [p for p in policies if p.startswith("volatile-")]
    found = risky or policies
    return found[0] if found else None
