"""The producer client: submit tasks, submit batches, wait for results, follow and cancel tasks
(tierpool.client.tracking).
Sync (`Client`) and async (`AsyncClient`)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from redis.exceptions import NoScriptError

from tierpool.client import cancels
from tierpool.client.tracking import CancelReport, follow_async, follow_sync
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.model.spec import PoolSpec
from tierpool.protocol import tenancy
from tierpool.protocol.submission import Submission, TaskRequest, TaskResult, prepare
from tierpool.protocol.task_state import TaskEvent, marker_ttl_ms
from tierpool.store import script_registry
from tierpool.store.connection import AsyncRedis, SyncRedis
from tierpool.store.registry import load_spec_async, load_spec_sync
from tierpool.store.replication import Wait, WaitGate

BATCH_CHUNK = 1000
SCRIPT_ATTEMPTS = 3
SubmitCall = tuple[str | None, list[str], list[Any]]
"""One queued write of a submit: (the script's name, or None for a plain XADD; its keys; its arguments)."""


def _prepare_all(spec: PoolSpec, keys: PoolKeys, requests: Iterable[TaskRequest]) -> list[Submission]:
    """Validate every request before anything is written, so a bad one leaves nothing half-submitted."""
    now = int(time.time() * 1000)
    return [prepare(spec, keys, request, now) for request in requests]


class Client:
    """Synchronous producer for one pool."""

    def __init__(self, connection: SyncRedis, pool: AgentPool | str, spec: PoolSpec | None = None) -> None:
        self.redis = connection
        self.keys = PoolKeys.parse(pool.ref if isinstance(pool, AgentPool) else pool)
        self.spec = pool.spec if isinstance(pool, AgentPool) else (spec or load_spec_sync(connection, self.keys))
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
        Protocol 5 keywords: ``delay`` (seconds or a timedelta) or ``not_before`` (an aware datetime or ISO 8601
        text) make it visible only then; ``rate_limit`` and ``cost`` draw it from a pool rate limit. Protocol 6:
        ``tenant``: on a tier with ``tenantConcurrency`` the task waits while its tenant has that many admitted."""
        return self.submit_many([TaskRequest(tier, payload, task_id, deadline, timeout, **later)])[0]

    def submit_many(self, requests: Iterable[TaskRequest]) -> list[str]:
        """Validate all, then enqueue in pipelined chunks. Returns the task_ids in order."""
        prepared = _prepare_all(self.spec, self.keys, requests)
        calls = _submit_calls(self.keys, int(self.spec.tasks.dedupe_window * 1000), prepared)
        for start in range(0, len(calls), BATCH_CHUNK):
            todo = calls[start : start + BATCH_CHUNK]
            for _ in range(SCRIPT_ATTEMPTS):
                pipe = self.redis.pipeline(transaction=False)
                for call in todo:
                    _queue(pipe, call)
                wait = self.wait.queue(pipe)
                todo = _script_missing(todo, self.wait.split(pipe.execute(raise_on_error=False), wait, "submits"))
                if not todo:
                    break
                script_registry.load_sync(self.redis, {name for name, _, _ in todo if name})
            else:
                raise NoScriptError(f"{len(todo)} submit(s) refused with NOSCRIPT after loading the scripts")
        return [item.task_id for item in prepared]

    def result(self, task_id: str) -> TaskResult | None:
        raw = self.redis.get(self.keys.result(task_id))
        return TaskResult.from_json(str(raw)) if raw else None

    def wait_result(self, task_id: str, timeout: float) -> TaskResult:
        """Block until the task's result record exists (on its event stream, not by polling; see
        tierpool.client.tracking); TimeoutError after ``timeout`` seconds."""
        return _last(self.follow(task_id, timeout))

    def follow(self, task_id: str, timeout: float) -> Iterator[TaskEvent | TaskResult]:
        """The task's progress events as they come, then its final event and its result record (last)."""
        return follow_sync(self.redis, self.keys, task_id, timeout, _ttl_ms(self.spec))

    def cancel(self, task_id: str) -> CancelReport:
        """Cancel a task: a waiting one never runs, a running one is stopped within about one heartbeat, and its
        result record says ``cancelled``. The report says what was found (waiting, running, finished, unknown)."""
        return self.cancel_many([task_id])[0]

    def cancel_many(self, task_ids: Sequence[str]) -> list[CancelReport]:
        """Cancel many tasks: every marker in one pipelined round trip, then a few shared lookups; one report per
        task_id, in order (see tierpool.client.cancels)."""
        plan = cancels.cancel_plan(self.keys, self.spec.tier_names, task_ids, _marker_ttl_ms(self.spec))
        return list(cancels.run_sync(self.redis, plan))

    def uncancel(self, task_id: str) -> bool:
        """Take a cancel back: delete the task's cancel marker; True when there was one. A worker that acted on the
        marker already (wrote the ``cancelled`` record, or is stopping the run) is not undone."""
        return bool(self.redis.delete(self.keys.cancel(task_id)))


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
        """See :meth:`Client.submit` (``delay``, ``not_before``, ``rate_limit``, ``cost``, ``tenant``)."""
        return (await self.submit_many([TaskRequest(tier, payload, task_id, deadline, timeout, **later)]))[0]

    async def submit_many(self, requests: Iterable[TaskRequest]) -> list[str]:
        prepared = _prepare_all(self.spec, self.keys, requests)
        calls = _submit_calls(self.keys, int(self.spec.tasks.dedupe_window * 1000), prepared)
        for start in range(0, len(calls), BATCH_CHUNK):
            todo = calls[start : start + BATCH_CHUNK]
            for _ in range(SCRIPT_ATTEMPTS):
                pipe = self.redis.pipeline(transaction=False)
                for call in todo:
                    _queue(pipe, call)
                wait = self.wait.queue(pipe)
                replies = self.wait.split(await pipe.execute(raise_on_error=False), wait, "submits")
                todo = _script_missing(todo, replies)
                if not todo:
                    break
                await script_registry.load_async(self.redis, {name for name, _, _ in todo if name})
            else:
                raise NoScriptError(f"{len(todo)} submit(s) refused with NOSCRIPT after loading the scripts")
        return [item.task_id for item in prepared]

    async def result(self, task_id: str) -> TaskResult | None:
        raw = await self.redis.get(self.keys.result(task_id))
        return TaskResult.from_json(str(raw)) if raw else None

    async def wait_result(self, task_id: str, timeout: float) -> TaskResult:
        """Block until the task's result record exists (see :meth:`Client.wait_result`)."""
        last: TaskEvent | TaskResult | None = None
        async for last in self.follow(task_id, timeout):  # noqa: B007 - only the last item (the result) counts
            pass
        assert isinstance(last, TaskResult)
        return last

    def follow(self, task_id: str, timeout: float) -> AsyncIterator[TaskEvent | TaskResult]:
        """The task's progress events as they come, then its final event and its result record (last)."""
        return follow_async(self.redis, self.keys, task_id, timeout, _ttl_ms(self.spec))

    async def cancel(self, task_id: str) -> CancelReport:
        """Cancel a task (see :meth:`Client.cancel`)."""
        return (await self.cancel_many([task_id]))[0]

    async def cancel_many(self, task_ids: Sequence[str]) -> list[CancelReport]:
        """Cancel many tasks in one round trip (see :meth:`Client.cancel_many`)."""
        plan = cancels.cancel_plan(self.keys, self.spec.tier_names, task_ids, _marker_ttl_ms(self.spec))
        return list(await cancels.run_async(self.redis, plan))

    async def uncancel(self, task_id: str) -> bool:
        """Take a cancel back (see :meth:`Client.uncancel`)."""
        return bool(await self.redis.delete(self.keys.cancel(task_id)))


def _ttl_ms(spec: PoolSpec) -> int:
    return int(spec.tasks.result_ttl * 1000)


def _marker_ttl_ms(spec: PoolSpec) -> int:
    return marker_ttl_ms(spec.tasks.result_ttl, spec.tasks.dedupe_window)


def _last(items: Iterator[TaskEvent | TaskResult]) -> TaskResult:
    last: TaskEvent | TaskResult | None = None
    for last in items:  # noqa: B007 - only the last item (the result) counts
        pass
    assert isinstance(last, TaskResult)
    return last


def _submit_calls(keys: PoolKeys, ttl: int, prepared: Sequence[Submission]) -> list[SubmitCall]:
    """The write of each prepared task: the schedule, tenant-gate or dedupe script, or a plain XADD. Pure."""
    calls: list[SubmitCall] = []
    for item in prepared:
        if item.scheduled:
            calls.append(("SCHEDULE", _schedule_keys(keys, item), _schedule_args(ttl, item)))
        elif item.gate:
            args = tenancy.submit_args(item.gate, ttl if item.dedupe_key else 0, item.fields)
            calls.append(("SUBMIT_GATED", list(item.gate.keys), list(args)))
        elif item.dedupe_key:
            calls.append(("SUBMIT_ONCE", [item.stream, item.dedupe_key], [ttl, *_flat(item)]))
        else:
            calls.append((None, [item.stream], list(_flat(item))))
    return calls


def _queue(pipe: Any, call: SubmitCall) -> None:
    """Queue one call by EVALSHA (the server may not know the script yet: see :func:`_script_missing`)."""
    name, keys, args = call
    if name is None:
        pipe.execute_command("XADD", keys[0], "*", *args)
    else:
        script_registry.queue(pipe, name, keys, args)


def _script_missing(calls: Sequence[SubmitCall], replies: Sequence[Any]) -> list[SubmitCall]:
    """The calls to send again after loading their scripts: those the server refused with NOSCRIPT (a fresh server,
    or in a cluster the shard that serves the pool, which redis-py's cluster pipelines do not load scripts on).
    Such a call did nothing, so sending it again is safe. Any other error is raised, as a pipeline would. Pure."""
    for reply in replies:
        if isinstance(reply, Exception) and not isinstance(reply, NoScriptError):
            raise reply
    return [call for call, reply in zip(calls, replies, strict=True) if isinstance(reply, NoScriptError)]


def _flat(item: Submission) -> Sequence[str]:
    return [part for pair in item.fields.items() for part in pair]


def _schedule_keys(keys: PoolKeys, item: Submission) -> list[str]:
    return [keys.due, item.stream, item.dedupe_key or keys.dedupe(item.task_id)]


def _schedule_args(ttl: int, item: Submission) -> list[Any]:
    dedupe_ttl = ttl if item.dedupe_key else 0
    gated = "1" if item.gate is not None else "0"
    return [dedupe_ttl, item.delay_ms, item.not_before_ms, item.fields["tier"], gated, *_flat(item)]
