"""A bench handler that reports, in its result, when it started: ``{"sent": <epoch s>, "work_ms": N}``.

It depends on nothing in tierpool beyond the Task it is given, so it runs on any revision of the worker."""

from __future__ import annotations

import asyncio
import time
from typing import Any


async def timed(task: Any) -> dict[str, Any]:
    started = time.time()
    payload = task.payload if isinstance(task.payload, dict) else {}
    sent = float(payload.get("sent", started))
    work_ms = float(payload.get("work_ms", 0))
    if work_ms > 0:
        await asyncio.sleep(work_ms / 1000)
    return {"wait_ms": (started - sent) * 1000, "started": started}
