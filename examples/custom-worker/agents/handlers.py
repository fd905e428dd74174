"""An example handler. Idempotent by task.id: a re-run after a crash must not double-charge anyone."""

from typing import Any

from tierpool import Task


async def triage(task: Task) -> dict[str, Any]:
    ticket = task.payload.get("ticket")
    # ... call your model / tools here; use task.id as the idempotency key for side effects ...
    return {"ticket": ticket, "route": "billing" if task.tier == "p0" else "backlog", "attempt": task.attempt}
