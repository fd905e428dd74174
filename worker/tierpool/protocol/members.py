"""Decoding the members the scripts store outside the streams. Pure.

- A scheduled member (the due-time index ``…:due``, the throttled set ``…:throttled`` and ``…:stranded``) is the
  JSON array ``[tier, [field, value, …]]``: the tier its entry goes back to and the entry's fields.
- A held member (a tenant's waiting tasks, ``…:held:<tier>``) is ``<tenant>\\0<seq>\\0<fields JSON>``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StoredMember:
    """What a stored member says: its tier (None for a held member, whose tier is its key's) and its fields."""

    tier: str | None
    fields: dict[Any, Any]

    @property
    def task_id(self) -> str | None:
        found = self.fields.get("task_id")
        return found if isinstance(found, str) else None


def _pairs(flat: list[Any]) -> dict[Any, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=False))


def scheduled_member(member: str) -> StoredMember | None:
    """A scheduled member (``[tier, [field, value, …]]``), or None when it is not one."""
    try:
        item = json.loads(member)
    except (ValueError, TypeError):
        return None
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
        return None
    tier, fields = item
    return StoredMember(tier, _pairs(fields) if isinstance(fields, list) else {})


def held_member(member: str) -> StoredMember | None:
    """A held member (``<tenant>\\0<seq>\\0<fields JSON>``), or None when it is not one."""
    parts = member.split("\0", 2)
    if len(parts) != 3:
        return None
    try:
        fields = json.loads(parts[2])
    except ValueError:
        return None
    return StoredMember(None, _pairs(fields) if isinstance(fields, list) else {})


def member_task_id(member: str) -> str | None:
    """The task_id of a scheduled member, or None."""
    decoded = scheduled_member(member)
    return decoded.task_id if decoded else None


def held_task_id(member: str) -> str | None:
    """The task_id of a held member, or None."""
    decoded = held_member(member)
    return decoded.task_id if decoded else None


def tier_of(member: str) -> str | None:
    """The tier a scheduled member names, or None when it is not one."""
    decoded = scheduled_member(member)
    return decoded.tier if decoded else None


def by_tier(members: Iterable[str]) -> dict[str, int]:
    """How many of ``members`` name each tier (undecodable ones under ``?``)."""
    return dict(Counter(tier_of(member) or "?" for member in members))


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
