"""The producer client: submit tasks, submit batches, wait for results, follow and cancel tasks
(tierpool.client.tracking).
Sync (`Client`) and async (`AsyncClient`): each operation is written once, as a plan (tierpool.store.submits,
tracking, cancels; tierpool.store.registry), which ``Client`` runs with the sync driver and ``AsyncClient`` with
the async one (tierpool.store.drivers).

Both are built the same way: ``Client(connection, pool)`` with a redis-py client of your own (it may decode
replies or not: the drivers read either), or ``Client.from_url(url, pool)``, which makes one as tierpool's own
commands do. ``pool`` (:data:`PoolSource`) is the AgentPool, the path of a pool file, or the pool's
``NAMESPACE/NAME`` (then the spec a worker or the operator published to that Redis is used)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any, TypeAlias, TypeVar, overload

from tierpool.client import cancels
from tierpool.client.handles import AsyncTaskHandle, TaskHandle
from tierpool.client.tracking import CancelReport, follow_plan, result_plan
from tierpool.model.durations import ms_floor
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import AgentPool, load_pool_file, pool_keys
from tierpool.model.spec import PoolSpec, RedisSpec
from tierpool.protocol.apps import TaskDef, typed_request
from tierpool.protocol.submission import TaskRequest, TaskResult
from tierpool.protocol.task_state import TaskEvent, marker_ttl_ms
from tierpool.store.connection import AsyncRedis, RedisSettings, SyncRedis, async_client, sync_client
from tierpool.store.drivers import run_async, run_sync, stream_async, stream_sync
from tierpool.store.plans import Plan
from tierpool.store.registry import load_spec_plan
from tierpool.store.replication import Wait, WaitGate
from tierpool.store.submits import submit_plan

PoolSource: TypeAlias = AgentPool | os.PathLike[str] | PoolKeys | str
"""Which pool a client submits to: an :class:`AgentPool` (parsed, e.g. by ``load_pool_file``); the path of a pool
file as an ``os.PathLike`` (``pathlib.Path("pool.yaml")``); or the pool's ``"NAMESPACE/NAME"`` as a ``str`` (or
``PoolKeys``), whose spec is then read from Redis, where every worker of the pool and the operator publish it
(``UnknownPool`` when none has yet). A ``str`` is always a name, never a path."""
FILE_SUFFIXES = (".yaml", ".yml", ".json")
InT = TypeVar("InT")
OutT = TypeVar("OutT")
Input: TypeAlias = InT | Mapping[str, Any]
"""A typed task's input: its model, or data the model validates (a dict)."""


def resolve_pool(pool: PoolSource, spec: PoolSpec | None = None) -> tuple[PoolKeys, PoolSpec | None]:
    """The pool's keys, and its spec when it is known without Redis (``spec`` wins for a name). ValueError for a
    ``str`` that names a file (pass a ``Path``). Reads a pool file; no Redis."""
    if isinstance(pool, AgentPool):
        return pool.keys, pool.spec
    if isinstance(pool, os.PathLike):
        parsed = load_pool_file(pool)
        return parsed.keys, parsed.spec
    if isinstance(pool, PoolKeys):
        return (pool if spec is None else pool_keys(pool.ref, spec)), spec
    if pool.endswith(FILE_SUFFIXES):
        raise ValueError(
            f"pool {pool!r} looks like a file: pass pathlib.Path({pool!r}) for a pool file, or the pool's "
            "'NAMESPACE/NAME' for the spec published in Redis"
        )
    return (PoolKeys.parse(pool) if spec is None else pool_keys(pool, spec)), spec


def settings_for(url: str, spec: PoolSpec | None) -> RedisSettings:
    """How ``from_url`` connects: the URL (with its password and ``rediss://``), in the pool's ``redis.mode``
    (cluster, or sentinel with its sentinels) when the spec is known, else to one server. No environment is read."""
    redis = spec.redis if spec is not None else RedisSpec()
    return RedisSettings.from_env({}, url=url, fallback_mode=redis.mode, fallback_sentinel=redis.sentinel)


class Client:
    """Synchronous producer for one pool.

    ``Client(connection, pool, spec=None)``: ``connection`` is a redis-py client (``redis.Redis``, or a
    ``RedisCluster``), with or without ``decode_responses``; ``pool`` a :data:`PoolSource`. For a pool named
    ``NAMESPACE/NAME`` the published spec is read here (``UnknownPool`` when there is none), unless ``spec``
    is given."""

    def __init__(self, connection: SyncRedis, pool: PoolSource, spec: PoolSpec | None = None) -> None:
        self.redis = connection
        self.keys, known = resolve_pool(pool, spec)
        self.spec = known or run_sync(connection, load_spec_plan(self.keys, producer=True))
        self.keys = pool_keys(self.keys.ref, self.spec)  # its consumer group and adopted streams
        self.wait = WaitGate(Wait.of(self.spec.redis))

    @classmethod
    def from_url(cls, url: str, pool: PoolSource, spec: PoolSpec | None = None) -> Client:
        """A client on a new connection to ``url`` (``redis://`` or ``rediss://``, a password in it honoured), in
        the pool's ``redis.mode`` when its spec is known without Redis. :meth:`close` closes the connection."""
        keys, known = resolve_pool(pool, spec)
        return cls(sync_client(settings_for(url, known)), keys, known)

    def close(self) -> None:
        """Close the Redis client (the one passed in too)."""
        self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @overload
    def submit(
        self, tier: TaskDef[InT, OutT], payload: Input[InT], task_id: str | None = ..., deadline: Any = ...,
        timeout: Any = ..., **later: Any,
    ) -> TaskHandle[OutT]: ...  # fmt: skip

    @overload
    def submit(
        self, tier: str, payload: Any, task_id: str | None = ..., deadline: Any = ..., timeout: Any = ..., **later: Any
    ) -> str: ...

    def submit(
        self,
        tier: str | TaskDef[Any, Any],
        payload: Any,
        task_id: str | None = None,
        deadline: Any = None,
        timeout: Any = None,
        **later: Any,
    ) -> str | TaskHandle[Any]:
        """Enqueue one task and return its task_id. A task_id already seen within the dedupe window is not re-added.
        ``timeout`` (seconds or a timedelta) limits each run of it, instead of the pool's ``tasks.timeout``.
        Scheduling: ``delay`` (seconds or a timedelta) or ``not_before`` (an aware datetime or ISO 8601
        text) make it visible only then; ``rate_limit`` and ``cost`` draw it from a pool rate limit.
        ``tenant``: on a tier with ``tenantConcurrency`` the task waits while its tenant has that many admitted.

        ``submit(resolve, Dispute(...))``, with an App's task instead of a tier: the input is checked against the
        task's model (InvalidInput, nothing written), the task's defaults fill what is not given (``tier`` too),
        and a :class:`TaskHandle` is returned (tierpool.protocol.apps)."""
        if isinstance(tier, TaskDef):
            request = typed_request(tier, payload, task_id, deadline=deadline, timeout=timeout, **later)
            return TaskHandle(self.submit_many([request])[0], self, tier)
        return self.submit_many([TaskRequest(tier, payload, task_id, deadline, timeout, **later)])[0]

    @overload
    def submit_many(self, requests: Iterable[TaskRequest]) -> list[str]: ...

    @overload
    def submit_many(
        self, requests: TaskDef[InT, OutT], inputs: Iterable[Input[InT]], **options: Any
    ) -> list[TaskHandle[OutT]]: ...

    def submit_many(
        self, requests: Iterable[TaskRequest] | TaskDef[Any, Any], inputs: Iterable[Any] = (), **options: Any
    ) -> list[str] | list[TaskHandle[Any]]:
        """Validate all, then enqueue in pipelined chunks. Returns the task_ids in order.

        ``submit_many(task, inputs, **options)``: one task of an App per input, all checked before any is written,
        with the options of :meth:`submit`; their handles, in order."""
        if isinstance(requests, TaskDef):
            typed = [typed_request(requests, inp, **options) for inp in inputs]
            ids = run_sync(self.redis, submit_plan(self.spec, self.keys, typed, self.wait))
            return [TaskHandle(task_id, self, requests) for task_id in ids]
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
    """Asynchronous producer for one pool, built as :class:`Client` is: ``AsyncClient(connection, pool,
    spec=None)`` with a ``redis.asyncio`` client (decoding or not), or :meth:`from_url`. A constructor cannot
    await, so for a pool named ``NAMESPACE/NAME`` the published spec is read on first use (``UnknownPool`` then);
    ``await client.load_spec()``, or :meth:`create`, reads it at once."""

    def __init__(self, connection: AsyncRedis, pool: PoolSource, spec: PoolSpec | None = None) -> None:
        self.redis = connection
        self.keys, known = resolve_pool(pool, spec)
        self._spec = known
        self.wait = WaitGate(Wait.of(known.redis) if known is not None else None)

    @classmethod
    def from_url(cls, url: str, pool: PoolSource, spec: PoolSpec | None = None) -> AsyncClient:
        """A client on a new connection to ``url`` (see :meth:`Client.from_url`); :meth:`aclose` closes it."""
        keys, known = resolve_pool(pool, spec)
        return cls(async_client(settings_for(url, known)), keys, known)

    @classmethod
    async def create(cls, connection: AsyncRedis, pool: PoolSource) -> AsyncClient:
        """A client whose spec is read now: ``UnknownPool`` here rather than on first use."""
        client = cls(connection, pool)
        await client.load_spec()
        return client

    @property
    def spec(self) -> PoolSpec:
        """The pool's spec; RuntimeError while a published one is not read yet (see :meth:`load_spec`)."""
        if self._spec is None:
            raise RuntimeError(f"the spec of pool {self.keys.ref} is not read yet: await load_spec() first")
        return self._spec

    async def load_spec(self) -> PoolSpec:
        """The pool's spec, read from Redis the first time when only the pool's name was given."""
        if self._spec is None:
            self._spec = await run_async(self.redis, load_spec_plan(self.keys, producer=True))
            self.keys = pool_keys(self.keys.ref, self._spec)  # its consumer group and adopted streams
            self.wait = WaitGate(Wait.of(self._spec.redis))
        return self._spec

    async def aclose(self) -> None:
        """Close the Redis client (the one passed in too)."""
        await self.redis.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    @overload
    async def submit(
        self, tier: TaskDef[InT, OutT], payload: Input[InT], task_id: str | None = ..., deadline: Any = ...,
        timeout: Any = ..., **later: Any,
    ) -> AsyncTaskHandle[OutT]: ...  # fmt: skip

    @overload
    async def submit(
        self, tier: str, payload: Any, task_id: str | None = ..., deadline: Any = ..., timeout: Any = ..., **later: Any
    ) -> str: ...

    async def submit(
        self,
        tier: str | TaskDef[Any, Any],
        payload: Any,
        task_id: str | None = None,
        deadline: Any = None,
        timeout: Any = None,
        **later: Any,
    ) -> str | AsyncTaskHandle[Any]:
        """See :meth:`Client.submit` (``delay``, ``not_before``, ``rate_limit``, ``cost``, ``tenant``; an App's task
        instead of a tier: an :class:`AsyncTaskHandle`)."""
        if isinstance(tier, TaskDef):
            request = typed_request(tier, payload, task_id, deadline=deadline, timeout=timeout, **later)
            return AsyncTaskHandle((await self.submit_many([request]))[0], self, tier)
        return (await self.submit_many([TaskRequest(tier, payload, task_id, deadline, timeout, **later)]))[0]

    @overload
    async def submit_many(self, requests: Iterable[TaskRequest]) -> list[str]: ...

    @overload
    async def submit_many(
        self, requests: TaskDef[InT, OutT], inputs: Iterable[Input[InT]], **options: Any
    ) -> list[AsyncTaskHandle[OutT]]: ...

    async def submit_many(
        self, requests: Iterable[TaskRequest] | TaskDef[Any, Any], inputs: Iterable[Any] = (), **options: Any
    ) -> list[str] | list[AsyncTaskHandle[Any]]:
        """See :meth:`Client.submit_many` (``submit_many(task, inputs)``: their AsyncTaskHandles)."""
        spec = await self.load_spec()
        if isinstance(requests, TaskDef):
            typed = [typed_request(requests, inp, **options) for inp in inputs]
            ids = await run_async(self.redis, submit_plan(spec, self.keys, typed, self.wait))
            return [AsyncTaskHandle(task_id, self, requests) for task_id in ids]
        return await run_async(self.redis, submit_plan(spec, self.keys, requests, self.wait))

    async def result(self, task_id: str) -> TaskResult | None:
        return await run_async(self.redis, result_plan(self.keys, task_id))

    async def wait_result(self, task_id: str, timeout: float) -> TaskResult:
        """Block until the task's result record exists (see :meth:`Client.wait_result`)."""
        ttl_ms = _ttl_ms(await self.load_spec())
        return await run_async(self.redis, follow_plan(self.keys, task_id, timeout, ttl_ms))

    async def follow(self, task_id: str, timeout: float) -> AsyncIterator[TaskEvent | TaskResult]:
        """The task's progress events as they come, then its final event and its result record (last)."""
        ttl_ms = _ttl_ms(await self.load_spec())
        async with aclosing(stream_async(self.redis, follow_plan(self.keys, task_id, timeout, ttl_ms))) as items:
            async for item in items:
                yield item

    async def cancel(self, task_id: str) -> CancelReport:
        """Cancel a task (see :meth:`Client.cancel`)."""
        return (await self.cancel_many([task_id]))[0]

    async def cancel_many(self, task_ids: Sequence[str]) -> list[CancelReport]:
        """Cancel many tasks in one round trip (see :meth:`Client.cancel_many`)."""
        plan = _cancel_plan(self.keys, await self.load_spec(), task_ids)
        return await run_async(self.redis, plan)

    async def uncancel(self, task_id: str) -> bool:
        """Take a cancel back (see :meth:`Client.uncancel`)."""
        return await run_async(self.redis, cancels.uncancel_plan(self.keys, task_id))


def _ttl_ms(spec: PoolSpec) -> int:
    return ms_floor(spec.tasks.result_ttl)


def _cancel_plan(keys: PoolKeys, spec: PoolSpec, task_ids: Sequence[str]) -> Plan[list[CancelReport]]:
    return cancels.cancel_plan(keys, spec.tier_names, task_ids, _marker_ttl_ms(spec), _ttl_ms(spec))


def _marker_ttl_ms(spec: PoolSpec) -> int:
    return marker_ttl_ms(spec.tasks.result_ttl, spec.tasks.dedupe_window)
