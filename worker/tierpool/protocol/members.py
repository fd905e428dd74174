"""Finding a task in the due-time index (protocol 5) for ``cancel``: delayed, rescheduled and throttled tasks
are in ``…:due`` and ``…:throttled``, not in a stream."""

from __future__ import annotations

import json


def member_task_id(member: str) -> str | None:
    """The task_id of a due-index member (the JSON array ``[tier, [field, value, …]]``), or None. Pure."""
    try:
        tier, fields = json.loads(member)
    except (ValueError, TypeError):
        return None
    if not isinstance(tier, str) or not isinstance(fields, list):
        return None
    pairs = dict(zip(fields[::2], fields[1::2], strict=False))
    found = pairs.get("task_id")
    return found if isinstance(found, str) else None


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis MATCH pattern. Pure."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
