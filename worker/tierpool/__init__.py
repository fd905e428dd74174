"""tierpool: priority-tiered agent worker pools on Redis Streams.

The producer API: :class:`Client` / :class:`AsyncClient`. Handlers receive a :class:`Task` and must be
idempotent by ``task.id``: delivery is at-least-once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tierpool._version import __version__ as __version__

if TYPE_CHECKING:
    from tierpool.client.handles import AsyncTaskHandle, TaskHandle
    from tierpool.client.producer import AsyncClient, Client
    from tierpool.client.tracking import CancelReport
    from tierpool.model.resource import AgentPool, SpecError, load_pool_file
    from tierpool.model.spec import PoolSpec
    from tierpool.protocol.apps import App, InvalidInput, TaskDef, TaskFailed
    from tierpool.protocol.compat import NewerProtocol
    from tierpool.protocol.envelope import Task
    from tierpool.protocol.errors import NonRetryable, RetryAfter, TaskLost
    from tierpool.protocol.gather import ChildFailed
    from tierpool.protocol.rate_limits import rate_limited
    from tierpool.protocol.submission import SubmitError, TaskRequest, TaskResult
    from tierpool.protocol.task_state import CancelState, CheckpointTooLarge, TaskEvent
    from tierpool.store.registry import UnknownPool

_HOMES = {
    "AgentPool": "tierpool.model.resource",
    "App": "tierpool.protocol.apps",
    "AsyncClient": "tierpool.client.producer",
    "AsyncTaskHandle": "tierpool.client.handles",
    "CancelReport": "tierpool.client.tracking",
    "CancelState": "tierpool.protocol.task_state",
    "CheckpointTooLarge": "tierpool.protocol.task_state",
    "ChildFailed": "tierpool.protocol.gather",
    "Client": "tierpool.client.producer",
    "InvalidInput": "tierpool.protocol.apps",
    "NewerProtocol": "tierpool.protocol.compat",
    "NonRetryable": "tierpool.protocol.errors",
    "PoolSpec": "tierpool.model.spec",
    "RetryAfter": "tierpool.protocol.errors",
    "SpecError": "tierpool.model.resource",
    "SubmitError": "tierpool.protocol.submission",
    "Task": "tierpool.protocol.envelope",
    "TaskDef": "tierpool.protocol.apps",
    "TaskEvent": "tierpool.protocol.task_state",
    "TaskFailed": "tierpool.protocol.apps",
    "TaskHandle": "tierpool.client.handles",
    "TaskLost": "tierpool.protocol.errors",
    "TaskRequest": "tierpool.protocol.submission",
    "TaskResult": "tierpool.protocol.submission",
    "UnknownPool": "tierpool.store.registry",
    "load_pool_file": "tierpool.model.resource",
    "rate_limited": "tierpool.protocol.rate_limits",
}

__all__ = [
    "AgentPool",
    "App",
    "AsyncClient",
    "AsyncTaskHandle",
    "CancelReport",
    "CancelState",
    "CheckpointTooLarge",
    "ChildFailed",
    "Client",
    "InvalidInput",
    "NewerProtocol",
    "NonRetryable",
    "PoolSpec",
    "RetryAfter",
    "SpecError",
    "SubmitError",
    "Task",
    "TaskDef",
    "TaskEvent",
    "TaskFailed",
    "TaskHandle",
    "TaskLost",
    "TaskRequest",
    "TaskResult",
    "UnknownPool",
    "load_pool_file",
    "rate_limited",
]


def __getattr__(name: str) -> Any:
    """The public names are imported on first use, so that ``python -m tierpool worker`` can install its signal
    handling before redis, pydantic and the rest are imported (a second or two on a busy node)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tierpool' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
