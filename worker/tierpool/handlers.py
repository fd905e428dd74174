"""Built-in handlers for demos, tests and benchmarks, and loading a handler from ``module:function``."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
from collections.abc import Callable
from typing import Any

from tierpool.protocol.envelope import Task

Handler = Callable[[Task], Any]


class HandlerNotFound(ImportError):
    """The configured ``module:function`` cannot be imported or is not callable."""


def load_handler(path: str) -> Handler:
    """Import ``module:function``; HandlerNotFound with a clear message otherwise."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise HandlerNotFound(f"handler {path!r} should look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise HandlerNotFound(f"handler {path!r}: cannot import module {module_name!r}: {error}") from None
    handler = getattr(module, attribute, None)
    if not callable(handler):
        raise HandlerNotFound(f"handler {path!r}: module {module_name!r} has no callable {attribute!r}")
    return handler  # type: ignore[no-any-return]


def is_async(handler: Handler) -> bool:
    """True for ``async def`` functions and for objects whose ``__call__`` is ``async def``."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)


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
