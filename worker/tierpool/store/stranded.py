"""Scheduled tasks for a tier the pool's workers did not have when they came due (protocol 7): kept in
``…:stranded`` and tried again (the MOVE_DUE script), never dead-lettered for it. ``tierpool status`` shows them."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from tierpool.model.keys import PoolKeys

SAMPLE = 1000
"""Members ``tierpool status`` reads to break the stranded tasks down by tier (the total is exact)."""


def tier_of(member: str) -> str | None:
    """The tier a scheduled member (``[tier, [field, value, ...]]``) names, or None when it is not one."""
    try:
        item = json.loads(member)
    except ValueError:
        return None
    if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str):
        return item[0]
    return None


def by_tier(members: Iterable[str]) -> dict[str, int]:
    """How many of ``members`` name each tier (undecodable ones under ``?``)."""
    return dict(Counter(tier_of(member) or "?" for member in members))


async def stranded_counts(client: Any, keys: PoolKeys) -> dict[str, Any]:
    """``{"total": n, "tiers": {tier: count}}``; the breakdown covers the first SAMPLE members."""
    total = int(await client.zcard(keys.stranded))
    members = await client.zrange(keys.stranded, 0, SAMPLE - 1) if total else []
    return {"total": total, "tiers": by_tier(str(member) for member in members)}
