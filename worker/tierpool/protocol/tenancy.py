"""Fairness inside a tier: which submits go through the tenant gate, and which entries an outcome
batch asks to release. Pure: it builds script calls (name, keys, args) and never talks to Redis.

See tierpool/scripts/helpers/tenants.lua for the keys, and tierpool/scripts/tenants/ for the scripts."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tierpool.model.keys import PoolKeys, adopting

TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}$")
"""A tenant: 1-128 characters, letters, digits and ``._:@/+=-``, starting with a letter or digit (it is part of
stored sorted-set members, so it may hold no NUL or control characters)."""
REPAIR_CAP = 1000
"""Most held tasks the lease holder's repair admits per tier and pass."""
NO_LIMIT = -1

Call = tuple[str, Sequence[str], Sequence[Any]]


def tenant_error(tenant: str) -> str | None:
    """Why ``tenant`` is not a valid tenant name, or None."""
    if TENANT_PATTERN.match(tenant):
        return None
    return "tenant must be 1-128 characters: letters, digits and ._:@/+=-, starting with a letter or digit"


@dataclass(frozen=True)
class Gate:
    """How one submission is written when its tenant is limited on its tier."""

    keys: tuple[str, str, str, str, str]
    """stream, dedupe, queued, held, held seq (the SUBMIT_GATED script)."""
    tenants: str
    """The tier's tenant counts, which the script reads but a producer may not write: passed in ARGV, since a key
    in KEYS needs write access."""
    limit: int
    tenant: str


def gate_for(keys: PoolKeys, tier: str, tenant: str | None, limit: int | None, task_id: str) -> Gate | None:
    """The gate a submission goes through: only a task with a tenant, to a tier with ``tenantConcurrency``."""
    if tenant is None or limit is None:
        return None
    return Gate(
        (keys.tier(tier), keys.dedupe(task_id), keys.queued(tier), keys.held(tier), keys.held_seq(tier)),
        keys.tenants(tier),
        limit,
        tenant,
    )


def submit_args(gate: Gate, dedupe_ttl_ms: int, fields: Mapping[str, str]) -> list[Any]:
    """ARGV of SUBMIT_GATED (a dedupe ttl of 0: the task_id was generated, nothing to deduplicate)."""
    pairs = [part for pair in fields.items() for part in pair]
    return [dedupe_ttl_ms, gate.limit, gate.tenant, gate.tenants, *pairs]


def tier_keys(keys: PoolKeys, tier: str) -> list[str]:
    """KEYS of RELEASE_TENANTS: stream, tenants, admitted, queued, held, and the task-id index (the held tasks it
    admits move)."""
    names = [keys.tier(tier), keys.tenants(tier), keys.admitted(tier), keys.queued(tier), keys.held(tier)]
    return [*names, keys.where]


def release_calls(
    keys: PoolKeys, tiers: Sequence[str], limits: Sequence[int | None], entries: Iterable[tuple[int, str]]
) -> list[Call]:
    """One RELEASE_TENANTS call per limited tier among ``entries`` ((tier index, entry id) of an outcome batch),
    in tier order. Tiers without a limit cost nothing."""
    by_tier: dict[int, list[str]] = {}
    for index, entry_id in entries:
        if index < len(limits) and limits[index] is not None:
            by_tier.setdefault(index, []).append(entry_id)
    return [
        ("RELEASE_TENANTS", tier_keys(keys, tiers[index]), [keys.group, limits[index], *ids])
        for index, ids in sorted(by_tier.items())
    ]


def admit_call(keys: PoolKeys, tier: str, limit: int, consumer: str, entry_ids: Sequence[str]) -> Call:
    """ADMIT_ENTRIES for entries with a tenant that ``consumer`` took from a limited tier: the gate's decision on
    each one not admitted yet (KEYS: stream, tenants, admitted, queued, held, held seq; a tier that adopts a stream
    is named in ARGV, so a held entry is completed first)."""
    names = [keys.tier(tier), keys.tenants(tier), keys.admitted(tier), keys.queued(tier), keys.held(tier)]
    names.append(keys.held_seq(tier))
    return "ADMIT_ENTRIES", [*names, keys.where], [keys.group, consumer, limit, adopting(keys, tier), *entry_ids]


def repair_call(keys: PoolKeys, tier: str, limit: int | None, cap: int = REPAIR_CAP) -> Call:
    """The lease holder's REPAIR_TENANTS for one tier; a tier without a limit admits everything still held (its
    limit was removed). KEYS: those of RELEASE_TENANTS with the throttled set before the index (a throttled task's
    slot is released once its task is no longer throttled)."""
    names = tier_keys(keys, tier)
    names.insert(-1, keys.throttled)
    return "REPAIR_TENANTS", names, [keys.group, NO_LIMIT if limit is None else limit, cap]


@dataclass(frozen=True)
class RepairReport:
    released: int
    """Finished entries still counted (missed releases: a worker died between outcome and release, escalation)."""
    drift: int
    """Sum over tenants of |stored count - admitted entries| before the recount (0 unless a count had leaked)."""
    admitted: int
    """Held tasks admitted."""


def repair_report(reply: Sequence[Any]) -> RepairReport:
    released, drift, admitted = (int(value) for value in reply)
    return RepairReport(released, drift, admitted)
