"""tierpool: priority-tiered agent worker pools on Redis Streams.

The producer API: :class:`Client` / :class:`AsyncClient`. Handlers receive a :class:`Task` and must be
idempotent by ``task.id``: delivery is at-least-once.
"""

from tierpool.client import AsyncClient, Client
from tierpool.envelope import Task
from tierpool.resource import AgentPool, SpecError, load_pool_file
from tierpool.spec import PoolSpec
from tierpool.submission import SubmitError, TaskRequest, TaskResult

__all__ = [
    "AgentPool",
    "AsyncClient",
    "Client",
    "PoolSpec",
    "SpecError",
    "SubmitError",
    "Task",
    "TaskRequest",
    "TaskResult",
    "load_pool_file",
]
__version__ = "0.1.0"
