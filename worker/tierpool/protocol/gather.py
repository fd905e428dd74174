"""Spawn and gather, the pure parts: child ids, priority inheritance, and what a gather returns or raises. No I/O.

A running task spawns children (``await task.spawn(search, SearchInput(...))``) and gathers them (``await
task.gather(*children)``). A gather whose children all have an outcome returns at once; otherwise it raises
:class:`Gathering`, a BaseException (so that ``except Exception`` in a handler does not swallow it), which the worker
turns into a park (tierpool.runtime.gathering): the parent gives its slot up and runs again from its start, once,
when every child has an outcome. A re-run spawns the same child ids (:func:`child_id`), which are submitted once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from pydantic_core import from_json

from tierpool.protocol.apps import TaskDef, TaskFailed, outcome
from tierpool.protocol.envelope import MAX_ANCESTORS, MAX_TASK_ID_LENGTH
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


ANCESTORS_TEXT_LIMIT = MAX_ANCESTORS * (6 * MAX_TASK_ID_LENGTH + 3) + 2
"""The longest ``ancestors`` text a valid entry can have (16 ids of 200 characters, each escaped at worst)."""


def lineage_of(fields: Mapping[str, Any]) -> tuple[str, ...]:
    """The tasks a cancel of which cancels an entry's task, from its raw fields, before they are validated: its
    ``parent``, then its ``ancestors``, the nearest 16 at most. ``ancestors`` that cannot be valid (too long, not a
    JSON array, nested too deep) count as none: the entry's validation dead-letters it. Pure."""
    parent, text = fields.get("parent"), fields.get("ancestors") or "[]"
    if not isinstance(parent, str) or not parent or len(parent) > MAX_TASK_ID_LENGTH:
        return ()
    if not isinstance(text, str) or len(text) > ANCESTORS_TEXT_LIMIT:
        return (parent,)
    try:
        above = from_json(text)  # pydantic-core's parser: bounded depth, a ValueError past it
    except ValueError:
        return (parent,)
    if not isinstance(above, list):
        return (parent,)
    ids = [a for a in above if isinstance(a, str) and 0 < len(a) <= MAX_TASK_ID_LENGTH]
    return (parent, *ids[-MAX_ANCESTORS:])


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
