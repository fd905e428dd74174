"""The handler for bench/scaling_faults.py: a stand-in agent whose model provider is down for a while.

A payload ``{"work_ms": N, "down": [from_ms, until_ms]}`` sleeps N ms like a model call, except while the wall
clock is inside ``down``: then the call is refused after 50 ms, as an unavailable provider answers, and the task
fails (and backs off). It uses only the Task API that every protocol version has, so the same handler runs on the
code before and after the scaler fixes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any


class ProviderUnavailable(RuntimeError):
    """The simulated provider refused the call."""


async def handle(task: Any) -> dict[str, Any]:
    payload = task.payload if isinstance(task.payload, dict) else {}
    down = payload.get("down")
    if down and down[0] <= time.time() * 1000 < down[1]:
        await asyncio.sleep(0.05)
        raise ProviderUnavailable("provider answered 503 Service Unavailable")
    await asyncio.sleep(float(payload.get("work_ms", 0)) / 1000)
    return {"ok": True}
