"""tierpool: priority-tiered agent worker pools on Redis Streams.

The producer API: :class:`Client` / :class:`AsyncClient`. Handlers receive a :class:`Task` and must be
idempotent by ``task.id``: delivery is at-least-once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierpool.client import AsyncClient, Client
    from tierpool.envelope import Task
    from tierpool.errors import NonRetryable, RetryAfter, TaskLost
    from tierpool.ratelimit import rate_limited
    from tierpool.resource import AgentPool, SpecError, load_pool_file
    from tierpool.spec import PoolSpec
    from tierpool.submission import SubmitError, TaskRequest, TaskResult
    from tierpool.taskstate import CancelState, CheckpointTooLarge, TaskEvent
    from tierpool.tracking import CancelReport

_HOMES = {
    "AgentPool": "tierpool.resource",
    "AsyncClient": "tierpool.client",
    "CancelReport": "tierpool.tracking",
    "CancelState": "tierpool.taskstate",
    "CheckpointTooLarge": "tierpool.taskstate",
    "Client": "tierpool.client",
    "NonRetryable": "tierpool.errors",
    "PoolSpec": "tierpool.spec",
    "RetryAfter": "tierpool.errors",
    "SpecError": "tierpool.resource",
    "SubmitError": "tierpool.submission",
    "Task": "tierpool.envelope",
    "TaskEvent": "tierpool.taskstate",
    "TaskLost": "tierpool.errors",
    "TaskRequest": "tierpool.submission",
    "TaskResult": "tierpool.submission",
    "load_pool_file": "tierpool.resource",
    "rate_limited": "tierpool.ratelimit",
}

__all__ = [
    "AgentPool",
    "AsyncClient",
    "CancelReport",
    "CancelState",
    "CheckpointTooLarge",
    "Client",
    "NonRetryable",
    "PoolSpec",
    "RetryAfter",
    "SpecError",
    "SubmitError",
    "Task",
    "TaskEvent",
    "TaskLost",
    "TaskRequest",
    "TaskResult",
    "load_pool_file",
    "rate_limited",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The public names are imported on first use, so that ``python -m tierpool worker`` can install its signal
    handling before redis, pydantic and the rest are imported (a second or two on a busy node)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tierpool' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
