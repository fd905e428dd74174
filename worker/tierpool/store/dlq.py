"""Reading, replaying and purging the dead-letter stream."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.client import NEVER_DECODE

from tierpool.model.keys import PoolKeys
from tierpool.protocol import utf8
from tierpool.store import script_registry
from tierpool.store.connection import AsyncRedis


@dataclass(frozen=True)
class DeadLetter:
    id: str
    task_id: str
    source_tier: str
    reason: str
    error: str
    deliveries: int
    fields: dict[str, str]
    """Every field as stored, bytes that are not UTF-8 kept as lone surrogates (tierpool.protocol.utf8)."""

    @property
    def traceback(self) -> str | None:
        """The traceback of the run whose failure dead-lettered it (its last 8 KiB), when there was one."""
        return self.fields.get("traceback") or None

    @property
    def is_envelope(self) -> bool:
        """A whole task envelope, to replay: not one that does not decode, nor one cut to fit (``truncated``)."""
        whole = "truncated" not in self.fields
        return whole and all(self.fields.get(name) for name in ("task_id", "payload", "created_at"))

    @property
    def not_utf8(self) -> dict[str, str]:
        """The fields whose bytes are not UTF-8, each value's original bytes in base64, by field name (a name
        that is not UTF-8 itself: ``base64:`` and its bytes in base64)."""
        return {
            (name if utf8.is_utf8(name) else "base64:" + _base64(name)): _base64(value)
            for name, value in self.fields.items()
            if not (utf8.is_utf8(name) and utf8.is_utf8(value))
        }

    def to_json(self) -> dict[str, Any]:
        """For ``tierpool dlq list --json``: the text fields readable (a bad byte shown as U+FFFD), the exact
        bytes of each field that is not UTF-8 in ``not_utf8``; the payload as the JSON it holds (an object, not a
        string to parse again), or as text when it is not JSON."""
        shown = {
            "id": self.id,
            "task_id": self.task_id,
            "source_tier": self.source_tier,
            "reason": self.reason,
            "error": self.error,
        }
        payload = self.fields.get("payload")
        return {key: utf8.readable(value) for key, value in shown.items()} | {
            "deliveries": self.deliveries,
            "payload": None if payload is None else _json_or_text(payload),
            "traceback": None if self.traceback is None else utf8.readable(self.traceback),
            "not_utf8": self.not_utf8,
        }


def _json_or_text(value: str) -> Any:
    """``value`` parsed, when it is JSON (and UTF-8: a bad byte is shown as text, U+FFFD); else as text."""
    if utf8.is_utf8(value):
        try:
            return json.loads(value)
        except ValueError:
            pass
    return utf8.readable(value)


def _base64(text: str) -> str:
    return base64.b64encode(utf8.original(text)).decode("ascii")


def _read(entries: Any) -> list[DeadLetter]:
    """Dead letters from an undecoded XRANGE reply: any client can list them, whatever their bytes."""
    return [
        _from_entry(utf8.as_text(entry_id), {utf8.as_text(k): utf8.as_text(v) for k, v in fields.items()})
        for entry_id, fields in entries
    ]


def _from_entry(entry_id: str, fields: dict[str, str]) -> DeadLetter:
    deliveries = fields.get("deliveries", "0")
    return DeadLetter(
        id=entry_id,
        task_id=fields.get("task_id", ""),
        source_tier=fields.get("source_tier", fields.get("tier", "")),
        reason=fields.get("reason", ""),
        error=fields.get("error", ""),
        deliveries=int(deliveries) if deliveries.isdigit() else 0,
        fields=fields,
    )


async def list_dead(client: AsyncRedis, keys: PoolKeys, count: int = 100) -> list[DeadLetter]:
    return _read(await client.execute_command("XRANGE", keys.dlq, "-", "+", "COUNT", count, **{NEVER_DECODE: True}))


async def replay(
    client: AsyncRedis,
    keys: PoolKeys,
    entry_ids: list[str],
    tier: str | None,
    known_tiers: list[str],
    tenant_limits: Sequence[int | None] = (),
) -> list[str]:
    """Re-enqueue dead letters (to their source tier, or ``tier``) and remove them from the DLQ, atomically each.

    Named entries that are not task envelopes are an error; when replaying everything they are left in place.
    A task with a tenant keeps it and, on a tier with ``tenantConcurrency`` (``tenant_limits``, in tier order),
    goes through the tenant gate like a submit (the REPLAY_GATED script); elsewhere it keeps its tenant, uncounted.
    Each replayed task loses its old result record, its cancel marker and its event stream (see the REPLAY script):
    it is waiting again, a cancel finds it waiting, and ``wait_result`` waits for its new outcome.
    """
    limits = dict(zip(known_tiers, tenant_limits, strict=False))
    replayed = []
    for dead in await _select(client, keys, entry_ids):
        if not dead.is_envelope or dead.not_utf8:  # a replay of bytes that are not UTF-8 is refused again
            if entry_ids and "truncated" in dead.fields:
                cut = dead.fields["truncated"]
                raise ValueError(f"dead letter {dead.id} was cut to fit the dead-letter stream ({cut}); purge it")
            if entry_ids:
                why = utf8.readable(dead.reason)
                if dead.not_utf8:
                    raise ValueError(
                        f"dead letter {dead.id} is not UTF-8 ({why}): fix the task and submit it, or purge"
                    )
                raise ValueError(f"dead letter {dead.id} is not a task envelope ({why}); purge it instead")
            continue
        target = tier or dead.source_tier
        if target not in known_tiers:
            raise ValueError(f"dead letter {dead.id}: tier {target!r} is not one of {', '.join(known_tiers)}")
        task_keys = [keys.result(dead.task_id), keys.cancel(dead.task_id), keys.events(dead.task_id)]
        limit = limits.get(target)
        if limit is None:  # keeps the tenant; not counted on a tier without a limit
            replay_keys = [keys.dlq, keys.tier(target), *task_keys, keys.where]
            await script_registry.run_async(client, "REPLAY", replay_keys, [dead.id, target])
        else:  # the same new life, through the tenant gate
            gated = [keys.queued(target), keys.held(target), keys.held_seq(target)]
            gated_keys = [keys.dlq, keys.tier(target), *gated, *task_keys, keys.where]
            args = [dead.id, target, limit, keys.tenants(target)]  # read only: see helpers/tenants.lua
            await script_registry.run_async(client, "REPLAY_GATED", gated_keys, args)
        replayed.append(dead.id)
    return replayed


async def count_dead(client: AsyncRedis, keys: PoolKeys) -> int:
    """How many dead letters the pool has."""
    return int(await client.xlen(keys.dlq))


async def purge(client: AsyncRedis, keys: PoolKeys, entry_ids: list[str]) -> int:
    """Delete the given dead letters, or all of them when ``entry_ids`` is empty."""
    if entry_ids:
        return int(await client.xdel(keys.dlq, *entry_ids))
    length = int(await client.xlen(keys.dlq))
    await client.delete(keys.dlq)
    return length


async def _select(client: AsyncRedis, keys: PoolKeys, entry_ids: list[str]) -> list[DeadLetter]:
    if not entry_ids:
        return await list_dead(client, keys, count=1_000_000)
    found = []
    for entry_id in entry_ids:
        entries = _read(await client.execute_command("XRANGE", keys.dlq, entry_id, entry_id, **{NEVER_DECODE: True}))
        if not entries:
            raise ValueError(f"no dead letter with id {entry_id}")
        found.append(entries[0])
    return found
