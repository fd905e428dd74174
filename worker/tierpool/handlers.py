"""Built-in handlers for demos, tests and benchmarks (``tierpool.handlers:simulate``, ``tierpool.handlers:noop``)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tierpool.protocol.envelope import Task


class SimulatedFailure(RuntimeError):
    """Raised by :func:`simulate` for ``{"fail": true}`` payloads."""


async def simulate(task: Task) -> dict[str, Any]:
    """A stand-in agent: ``work_ms`` sleeps (async, like a model call), ``fail`` raises,
    ``exit_code`` kills the process with that code (a crash), ``fail_attempts: N`` fails the first N attempts."""
    payload = task.payload if isinstance(task.payload, dict) else {}
    if "exit_code" in payload:
        os._exit(int(payload["exit_code"]))
    if payload.get("fail") or task.attempt <= int(payload.get("fail_attempts", 0)):
        raise SimulatedFailure(f"simulated failure of task {task.id} on attempt {task.attempt}")
    work_ms = float(payload.get("work_ms", 0))
    if work_ms > 0:
        await asyncio.sleep(work_ms / 1000)
    return {"ok": True, "tier": task.tier, "attempt": task.attempt, "work_ms": work_ms}


async def noop(task: Task) -> None:
    """Does nothing; used to measure the runtime's own overhead."""
