"""Spawn and gather, the pure parts: child ids, priority inheritance, and what a gather returns or raises. No I/O.

A running task spawns children (``await task.spawn(search, SearchInput(...))``) and gathers them (``await
task.gather(*children)``). A gather whose children all have an outcome returns at once; otherwise it raises
:class:`Gathering`, a BaseException (so that ``except Exception`` in a handler does not swallow it), which the worker
turns into a park (tierpool.runtime.gathering): the parent gives its slot up and runs again from its start, once,
when every child has an outcome. A re-run spawns the same child ids (:func:`child_id`), which are submitted once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from tierpool.protocol.apps import TaskDef, TaskFailed, outcome
from tierpool.protocol.envelope import MAX_ANCESTORS
from tierpool.protocol.submission import TaskResult

OutT = TypeVar("OutT")


def child_id(parent: str, ordinal: int) -> str:
    """The id of the ``ordinal``-th child (from 0) a run of ``parent`` spawns: the same in every run."""
    return f"{parent}.{ordinal}"


def child_ancestors(parent: str | None, ancestors: Sequence[str]) -> tuple[str, ...]:
    """The ``ancestors`` of a child of a task whose own are ``parent`` and ``ancestors``: those, then its parent,
    the nearest 16 (tierpool.protocol.envelope.MAX_ANCESTORS)."""
    lineage = (*ancestors, parent) if parent is not None else tuple(ancestors)
    return lineage[-MAX_ANCESTORS:]


def lineage_of(fields: Mapping[str, Any]) -> tuple[str, ...]:
    """The tasks a cancel of which cancels an entry's task, from its raw fields: ``parent`` and ``ancestors``.
    Unreadable ``ancestors`` count as none (the entry's validation dead-letters it). Pure."""
    parent = fields.get("parent")
    if not isinstance(parent, str) or not parent:
        return ()
    try:
        above = json.loads(fields.get("ancestors") or "[]")
    except ValueError:
        above = []
    return (parent, *(a for a in above if isinstance(a, str) and a)) if isinstance(above, list) else (parent,)


def inherited_tier(tiers: Sequence[str], own: str, parent: str) -> str:
    """The tier a child runs in: its own or its parent's, whichever comes first (higher priority) in ``tiers``; a
    child never runs below its parent. A tier the pool does not have is returned as it is (the submit refuses it)."""
    if own not in tiers or parent not in tiers:
        return own
    return own if tiers.index(own) <= tiers.index(parent) else parent


def inherited_deadline(own: datetime | None, parent_ms: int | None) -> datetime | None:
    """The earlier of the child's own deadline and its parent's: a child is no use to a parent past its deadline."""
    if parent_ms is None:
        return own
    parents = datetime.fromtimestamp(parent_ms / 1000, tz=UTC)
    return parents if own is None or parents < own else own


@dataclass(frozen=True)
class Child(Generic[OutT]):
    """The handle ``task.spawn`` returns: the child's ``id`` and the typed task it runs (None for a plain one)."""

    id: str
    task: TaskDef[Any, OutT] | None = None


class ChildFailed(TaskFailed):
    """A gathered child that did not succeed (dead-lettered, cancelled, failed on every attempt, timed out)."""

    @property
    def child_id(self) -> str:
        return self.record.task_id

    @property
    def status(self) -> str:
        return self.record.status


class Gathering(BaseException):
    """Raised by ``task.gather`` while a child has no outcome yet: the worker parks the run (not an Exception, so
    that a handler's ``except Exception`` lets it through)."""

    def __init__(self, children: Sequence[str]) -> None:
        super().__init__(f"gathering {len(children)} child task(s)")
        self.children = list(children)


def gathered(
    children: Sequence[Child[Any]], records: Sequence[TaskResult | None], return_exceptions: bool
) -> list[Any]:
    """What ``gather`` returns for ``children`` given their result records (None: no outcome yet). Gathering when
    one has none; the first ChildFailed in order, unless ``return_exceptions``, which puts it in the child's place."""
    if any(record is None for record in records):
        raise Gathering([child.id for child in children])
    values: list[Any] = []
    for child, record in zip(children, records, strict=True):
        assert record is not None
        try:
            values.append(outcome(child.task, record))
        except TaskFailed:
            failed = ChildFailed(record)
            if not return_exceptions:
                raise failed from None
            values.append(failed)
    return values
