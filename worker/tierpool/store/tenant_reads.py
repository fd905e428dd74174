"""Protocol 6 reads for the CLI: held and admitted tasks per tier (``tierpool status``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tierpool.model.keys import PoolKeys


async def held_counts(client: Any, keys: PoolKeys, tiers: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Per tier: (held tasks waiting for their tenant's turn, admitted tenant entries not yet finished)."""
    pipe = client.pipeline(transaction=False)
    for tier in tiers:
        pipe.zcard(keys.held(tier))
        pipe.hlen(keys.admitted(tier))
    replies = await pipe.execute()
    return {tier: (int(replies[2 * i]), int(replies[2 * i + 1])) for i, tier in enumerate(tiers)}


def add_to_status(status: dict[str, Any], counts: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """``tierpool status --json`` with ``held`` and ``admitted`` in each tier (protocol 6)."""
    for tier in status["tiers"]:
        tier["held"], tier["admitted"] = counts.get(tier["name"], (0, 0))
    return status


HELD_SCAN = 1000


def held_task_id(member: str) -> str | None:
    """The task_id of a held-task member (``<tenant>\\0<seq>\\0<fields JSON>``), or None when it is not one."""
    parts = member.split("\0", 2)
    if len(parts) != 3:
        return None
    try:
        fields = json.loads(parts[2])
    except ValueError:
        return None
    pairs = dict(zip(fields[::2], fields[1::2], strict=False)) if isinstance(fields, list) else {}
    task_id = pairs.get("task_id")
    return task_id if isinstance(task_id, str) else None
