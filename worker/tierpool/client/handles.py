"""Handles on submitted tasks: what a typed submit (``client.submit(resolve, Dispute(...))``) returns.

A :class:`TaskHandle` holds the task's id, the client that submitted it and the :class:`TaskDef` it runs (None for
a plain ``submit(tier, payload)``): :meth:`TaskHandle.result` waits for the result record and rebuilds the output
model from it (tierpool.protocol.apps.outcome). :class:`AsyncTaskHandle` is its twin for ``AsyncClient``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from tierpool.client.tracking import CancelReport
from tierpool.protocol.apps import TaskDef, outcome
from tierpool.protocol.submission import TaskResult
from tierpool.protocol.task_state import TaskEvent

OutT = TypeVar("OutT")


class SyncTracker(Protocol):
    """The part of ``Client`` a handle uses."""

    def wait_result(self, task_id: str, timeout: float) -> TaskResult: ...

    def follow(self, task_id: str, timeout: float) -> Iterator[TaskEvent | TaskResult]: ...

    def cancel(self, task_id: str) -> CancelReport: ...


class AsyncTracker(Protocol):
    """The part of ``AsyncClient`` a handle uses."""

    async def wait_result(self, task_id: str, timeout: float) -> TaskResult: ...

    def follow(self, task_id: str, timeout: float) -> AsyncIterator[TaskEvent | TaskResult]: ...

    async def cancel(self, task_id: str) -> CancelReport: ...


@dataclass(frozen=True)
class TaskHandle(Generic[OutT]):
    """A submitted task: ``id``, and its result, events and cancel through the client that submitted it."""

    id: str
    client: SyncTracker
    task: TaskDef[Any, OutT] | None = None
    """The typed task it runs; None: a plain handler's task (its result is the JSON value)."""

    def record(self, timeout: float) -> TaskResult:
        """Wait up to ``timeout`` seconds for the result record, whatever its status (TimeoutError after)."""
        return self.client.wait_result(self.id, timeout)

    def result(self, timeout: float) -> OutT:
        """Wait up to ``timeout`` seconds for the task's output: the output model rebuilt (the JSON value for a
        plain task). TaskFailed when it was dead-lettered or cancelled, TimeoutError when it has not finished."""
        return outcome(self.task, self.record(timeout))

    def cancel(self) -> CancelReport:
        """Cancel the task (see ``Client.cancel``)."""
        return self.client.cancel(self.id)

    def follow(self, timeout: float) -> Iterator[TaskEvent | TaskResult]:
        """Its progress events as they come, then its final event and its result record (see ``Client.follow``)."""
        return self.client.follow(self.id, timeout)


@dataclass(frozen=True)
class AsyncTaskHandle(Generic[OutT]):
    """:class:`TaskHandle` for ``AsyncClient``: the same, with ``await`` (``follow`` is an async iterator)."""

    id: str
    client: AsyncTracker
    task: TaskDef[Any, OutT] | None = None

    async def record(self, timeout: float) -> TaskResult:
        return await self.client.wait_result(self.id, timeout)

    async def result(self, timeout: float) -> OutT:
        """See :meth:`TaskHandle.result`."""
        return outcome(self.task, await self.record(timeout))

    async def cancel(self) -> CancelReport:
        return await self.client.cancel(self.id)

    def follow(self, timeout: float) -> AsyncIterator[TaskEvent | TaskResult]:
        return self.client.follow(self.id, timeout)
