"""The producer client: submit tasks, submit batches, wait for results. Sync (`Client`) and async (`AsyncClient`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from typing import Any

import redis
import redis.asyncio as aioredis

from tierpool import lua, lua_due
from tierpool.keys import PoolKeys
from tierpool.registry import load_spec_async, load_spec_sync
from tierpool.resource import AgentPool
from tierpool.spec import PoolSpec
from tierpool.submission import Submission, TaskRequest, TaskResult, prepare

BATCH_CHUNK = 1000
POLL_START, POLL_CAP = 0.005, 0.1


def _prepare_all(spec: PoolSpec, keys: PoolKeys, requests: Iterable[TaskRequest]) -> list[Submission]:
    """Validate every request before anything is written, so a bad one leaves nothing half-submitted."""
    now = int(time.time() * 1000)
    return [prepare(spec, keys, request, now) for request in requests]


class Client:
    """Synchronous producer for one pool."""

    def __init__(self, connection: redis.Redis, pool: AgentPool | str, spec: PoolSpec | None = None) -> None:
        self.redis = connection
        self.keys = PoolKeys.parse(pool.ref if isinstance(pool, AgentPool) else pool)
        self.spec = pool.spec if isinstance(pool, AgentPool) else (spec or load_spec_sync(connection, self.keys))
        self._submit_once = connection.register_script(lua.SUBMIT_ONCE)
        self._schedule = connection.register_script(lua_due.SCHEDULE)

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
        Protocol 5 keywords: ``delay`` (seconds or a timedelta) or ``not_before`` (an aware datetime or ISO 8601
        text) make it visible only then; ``rate_limit`` and ``cost`` draw it from a pool rate limit."""
        return self.submit_many([TaskRequest(tier, payload, task_id, deadline, timeout, **later)])[0]

    def submit_many(self, requests: Iterable[TaskRequest]) -> list[str]:
        """Validate all, then enqueue in pipelined chunks. Returns the task_ids in order."""
        prepared = _prepare_all(self.spec, self.keys, requests)
        ttl = int(self.spec.tasks.dedupe_window * 1000)
        for start in range(0, len(prepared), BATCH_CHUNK):
            pipe = self.redis.pipeline(transaction=False)
            for item in prepared[start : start + BATCH_CHUNK]:
                if item.scheduled:
                    self._schedule(keys=_schedule_keys(self.keys, item), args=_schedule_args(ttl, item), client=pipe)
                elif item.dedupe_key:
                    self._submit_once(keys=[item.stream, item.dedupe_key], args=[ttl, *_flat(item)], client=pipe)
                else:
                    pipe.xadd(item.stream, item.fields)  # type: ignore[arg-type]
            pipe.execute()
        return [item.task_id for item in prepared]

    def result(self, task_id: str) -> TaskResult | None:
        raw = self.redis.get(self.keys.result(task_id))
        return TaskResult.from_json(str(raw)) if raw else None

    def wait_result(self, task_id: str, timeout: float) -> TaskResult:
        """Poll the result record with backoff; TimeoutError after ``timeout`` seconds."""
        deadline, delay = time.monotonic() + timeout, POLL_START
        while True:
            found = self.result(task_id)
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no result for task {task_id} within {timeout:g}s")
            time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, POLL_CAP)


class AsyncClient:
    """Asynchronous producer for one pool. Build with :meth:`create` when only a pool ref is known."""

    def __init__(self, connection: aioredis.Redis, pool: AgentPool | PoolKeys, spec: PoolSpec) -> None:
        self.redis = connection
        self.keys = PoolKeys.parse(pool.ref) if isinstance(pool, AgentPool) else pool
        self.spec = spec
        self._submit_once = connection.register_script(lua.SUBMIT_ONCE)
        self._schedule = connection.register_script(lua_due.SCHEDULE)

    @classmethod
    async def create(cls, connection: aioredis.Redis, pool: AgentPool | str) -> AsyncClient:
        if isinstance(pool, AgentPool):
            return cls(connection, pool, pool.spec)
        keys = PoolKeys.parse(pool)
        return cls(connection, keys, await load_spec_async(connection, keys))

    async def submit(
        self,
        tier: str,
        payload: Any,
        task_id: str | None = None,
        deadline: Any = None,
        timeout: Any = None,
        **later: Any,
    ) -> str:
        """See :meth:`Client.submit` (``delay``, ``not_before``, ``rate_limit``, ``cost``)."""
        return (await self.submit_many([TaskRequest(tier, payload, task_id, deadline, timeout, **later)]))[0]

    async def submit_many(self, requests: Iterable[TaskRequest]) -> list[str]:
        prepared = _prepare_all(self.spec, self.keys, requests)
        ttl = int(self.spec.tasks.dedupe_window * 1000)
        for start in range(0, len(prepared), BATCH_CHUNK):
            pipe = self.redis.pipeline(transaction=False)
            for item in prepared[start : start + BATCH_CHUNK]:
                if item.scheduled:
                    keys, args = _schedule_keys(self.keys, item), _schedule_args(ttl, item)
                    await self._schedule(keys=keys, args=args, client=pipe)
                elif item.dedupe_key:
                    await self._submit_once(keys=[item.stream, item.dedupe_key], args=[ttl, *_flat(item)], client=pipe)
                else:
                    pipe.xadd(item.stream, item.fields)  # type: ignore[arg-type]
            await pipe.execute()
        return [item.task_id for item in prepared]

    async def result(self, task_id: str) -> TaskResult | None:
        raw = await self.redis.get(self.keys.result(task_id))
        return TaskResult.from_json(str(raw)) if raw else None

    async def wait_result(self, task_id: str, timeout: float) -> TaskResult:
        deadline, delay = time.monotonic() + timeout, POLL_START
        while True:
            found = await self.result(task_id)
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no result for task {task_id} within {timeout:g}s")
            await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, POLL_CAP)


def _flat(item: Submission) -> Sequence[str]:
    return [part for pair in item.fields.items() for part in pair]


def _schedule_keys(keys: PoolKeys, item: Submission) -> list[str]:
    return [keys.due, item.stream, item.dedupe_key or keys.dedupe(item.task_id)]


def _schedule_args(ttl: int, item: Submission) -> list[Any]:
    dedupe_ttl = ttl if item.dedupe_key else 0
    return [dedupe_ttl, item.delay_ms, item.not_before_ms, item.fields["tier"], *_flat(item)]
