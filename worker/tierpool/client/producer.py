"""The producer client: submit tasks, submit batches, wait for results, follow and cancel tasks
(tierpool.client.tracking).
Sync (`Client`) and async (`AsyncClient`): each operation is written once, as a plan (tierpool.client.submits,
tracking, cancels; tierpool.store.registry), which ``Client`` runs with the sync driver and ``AsyncClient`` with
the async one (tierpool.store.drivers)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from tierpool.client import cancels
from tierpool.client.submits import submit_plan
from tierpool.client.tracking import CancelReport, follow_plan, result_plan
from tierpool.model.durations import ms_floor
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.model.spec import PoolSpec
from tierpool.protocol.submission import TaskRequest, TaskResult
from tierpool.protocol.task_state import TaskEvent, marker_ttl_ms
from tierpool.store.connection import AsyncRedis, SyncRedis
from tierpool.store.drivers import run_async, run_sync, stream_async, stream_sync
from tierpool.store.plans import Plan
from tierpool.store.registry import load_spec_plan
from tierpool.store.replication import Wait, WaitGate


class Client:
    """Synchronous producer for one pool."""

    def __init__(self, connection: SyncRedis, pool: AgentPool | str, spec: PoolSpec | None = None) -> None:
        self.redis = connection
        self.keys = PoolKeys.parse(pool.ref if isinstance(pool, AgentPool) else pool)
        self.spec = (
            pool.spec if isinstance(pool, AgentPool) else (spec or run_sync(connection, load_spec_plan(self.keys)))
        )
        self.wait = WaitGate(Wait.of(self.spec.redis))

    def submit(
        self,
        tier: str,
        payload: Any,
        task_id: str | None = None,
        deadline: Any = None,
        timeout: Any = None,
        **later: Any,
    ) -> str:
        """Enqueue one task and return its task_id. A task_id already seen within the dedupe window is not re-added.
        ``timeout`` (seconds or a timedelta) limits each run of it, instead of the pool's ``tasks.timeout``.
        Scheduling: ``delay`` (seconds or a timedelta) or ``not_before`` (an aware datetime or ISO 8601
        text) make it visible only then; ``rate_limit`` and ``cost`` draw it from a pool rate limit.
        ``tenant``: on a tier with ``tenantConcurrency`` the task waits while its tenant has that many admitted."""
        return self.submit_many([TaskRequest(tier, payload, task_id, deadline, timeout, **later)])[0]

    def submit_many(self, requests: Iterable[TaskRequest]) -> list[str]:
        """Validate all, then enqueue in pipelined chunks. Returns the task_ids in order."""
        return run_sync(self.redis, submit_plan(self.spec, self.keys, requests, self.wait))

    def result(self, task_id: str) -> TaskResult | None:
        return run_sync(self.redis, result_plan(self.keys, task_id))

    def wait_result(self, task_id: str, timeout: float) -> TaskResult:
        """Block until the task's result record exists (on its event stream, not by polling; see
        tierpool.client.tracking); TimeoutError after ``timeout`` seconds."""
        return run_sync(self.redis, follow_plan(self.keys, task_id, timeout, _ttl_ms(self.spec)))

    def follow(self, task_id: str, timeout: float) -> Iterator[TaskEvent | TaskResult]:
        """The task's progress events as they come, then its final event and its result record (last)."""
        return stream_sync(self.redis, follow_plan(self.keys, task_id, timeout, _ttl_ms(self.spec)))

    def cancel(self, task_id: str) -> CancelReport:
        """Cancel a task: a waiting one never runs, a running one is stopped within about one heartbeat, and its
        result record says ``cancelled``. The report says what was found (waiting, running, finished, unknown)."""
        return self.cancel_many([task_id])[0]

    def cancel_many(self, task_ids: Sequence[str]) -> list[CancelReport]:
        """Cancel many tasks: every marker in one pipelined round trip, then a few shared lookups; one report per
        task_id, in order (see tierpool.client.cancels)."""
        plan = _cancel_plan(self.keys, self.spec, task_ids)
        return run_sync(self.redis, plan)

    def uncancel(self, task_id: str) -> bool:
        """Take a cancel back: delete the task's cancel marker; True when there was one. A worker that acted on the
        marker already (wrote the ``cancelled`` record, or is stopping the run) is not undone."""
        return run_sync(self.redis, cancels.uncancel_plan(self.keys, task_id))


class AsyncClient:
    """Asynchronous producer for one pool. Build with :meth:`create` when only a pool ref is known."""

    def __init__(self, connection: AsyncRedis, pool: AgentPool | PoolKeys, spec: PoolSpec) -> None:
        self.redis = connection
        self.keys = PoolKeys.parse(pool.ref) if isinstance(pool, AgentPool) else pool
        self.spec = spec
        self.wait = WaitGate(Wait.of(spec.redis))

    @classmethod
    async def create(cls, connection: AsyncRedis, pool: AgentPool | str) -> AsyncClient:
        if isinstance(pool, AgentPool):
            return cls(connection, pool, pool.spec)
        keys = PoolKeys.parse(pool)
        return cls(connection, keys, await run_async(connection, load_spec_plan(keys)))

    async def submit(
        self,
        tier: str,
        payload: Any,
        task_id: str | None = None,
        deadline: Any = None,
        timeout: Any = None,
        **later: Any,
    ) -> str:
        """See :meth:`Client.submit` (``delay``, ``not_before``, ``rate_limit``, ``cost``, ``tenant``)."""
        return (await self.submit_many([TaskRequest(tier, payload, task_id, deadline, timeout, **later)]))[0]

    async def submit_many(self, requests: Iterable[TaskRequest]) -> list[str]:
        """See :meth:`Client.submit_many`."""
        return await run_async(self.redis, submit_plan(self.spec, self.keys, requests, self.wait))

    async def result(self, task_id: str) -> TaskResult | None:
        return await run_async(self.redis, result_plan(self.keys, task_id))

    async def wait_result(self, task_id: str, timeout: float) -> TaskResult:
        """Block until the task's result record exists (see :meth:`Client.wait_result`)."""
        return await run_async(self.redis, follow_plan(self.keys, task_id, timeout, _ttl_ms(self.spec)))

    def follow(self, task_id: str, timeout: float) -> AsyncIterator[TaskEvent | TaskResult]:
        """The task's progress events as they come, then its final event and its result record (last)."""
        return stream_async(self.redis, follow_plan(self.keys, task_id, timeout, _ttl_ms(self.spec)))

    async def cancel(self, task_id: str) -> CancelReport:
        """Cancel a task (see :meth:`Client.cancel`)."""
        return (await self.cancel_many([task_id]))[0]

    async def cancel_many(self, task_ids: Sequence[str]) -> list[CancelReport]:
        """Cancel many tasks in one round trip (see :meth:`Client.cancel_many`)."""
        plan = _cancel_plan(self.keys, self.spec, task_ids)
        return await run_async(self.redis, plan)

    async def uncancel(self, task_id: str) -> bool:
        """Take a cancel back (see :meth:`Client.uncancel`)."""
        return await run_async(self.redis, cancels.uncancel_plan(self.keys, task_id))


def _ttl_ms(spec: PoolSpec) -> int:
    return ms_floor(spec.tasks.result_ttl)


def _cancel_plan(keys: PoolKeys, spec: PoolSpec, task_ids: Sequence[str]) -> Plan[list[CancelReport]]:
    return cancels.cancel_plan(keys, spec.tier_names, task_ids, _marker_ttl_ms(spec), _ttl_ms(spec), spec.tenant_limits)


def _marker_ttl_ms(spec: PoolSpec) -> int:
    return marker_ttl_ms(spec.tasks.result_ttl, spec.tasks.dedupe_window)
