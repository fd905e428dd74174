"""The task envelope stored in each stream entry, and the Task handed to handlers. Pure."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from operator import methodcaller
from typing import Annotated, Any, Literal, NotRequired, Protocol, TypeVar, overload

from pydantic import ConfigDict, Field, Json, TypeAdapter, ValidationError, with_config
from pydantic_core import from_json
from typing_extensions import TypedDict  # pydantic needs this one, not typing.TypedDict, on Python 3.11

from tierpool.protocol import compat, utf8
from tierpool.protocol.version import PROTOCOL

InT = TypeVar("InT")
OutT = TypeVar("OutT")
OutT_co = TypeVar("OutT_co", covariant=True)

MAX_TASK_ID_LENGTH = 200
MAX_TASK_NAME_LENGTH = 200
MAX_ANCESTORS = 16
"""The most ancestors an entry names (the nearest): a cancel reaches this many generations below the parent."""

TaskIdText = Annotated[str, Field(min_length=1, max_length=MAX_TASK_ID_LENGTH)]


@with_config(ConfigDict(extra="ignore"))
class Envelope(TypedDict):
    """The fields of a stream entry. Every value is stored as a string.

    A TypedDict, not a model: validating a whole read as ``list[Envelope]`` costs about a quarter of validating
    its entries one model at a time."""

    task_id: Annotated[str, Field(min_length=1, max_length=MAX_TASK_ID_LENGTH)]
    """The task's id: its result record, cancel marker and dedupe key are named by it."""
    tier: Annotated[str, Field(min_length=1)]
    """The tier it was submitted to; the stream it is read from decides the tier it runs in."""
    payload: str
    """The handler's input, JSON text."""
    created_at: Annotated[int, Field(ge=0)]
    """When it was first submitted, ms since the epoch (kept across escalations and moves); below 1e11: seconds."""
    escalated_from: NotRequired[str | None]
    """The tier an escalation moved it up from."""
    traceparent: NotRequired[str | None]
    """The producer's W3C trace context (tierpool.protocol.trace_context); absent: an untraced task."""
    tracestate: NotRequired[str | None]
    """The W3C ``tracestate`` that goes with ``traceparent``."""
    deadline: NotRequired[Annotated[int, Field(ge=0)] | None]
    """ms since the epoch: a task not started by then is dead-lettered, never run."""
    timeout: NotRequired[Annotated[int, Field(ge=1)] | None]
    """Time limit of one run in ms; absent in older entries: the pool's ``tasks.timeout``."""
    attempts: NotRequired[Annotated[int, Field(ge=0)] | None]
    """Deliveries counted before this stream entry (a task moved through the due-time index carries
    them, so maxDeliveries holds across the move); absent: 0."""
    due: NotRequired[Annotated[int, Field(ge=0)] | None]
    """When the task was scheduled to become visible (ms since the epoch, Redis' clock)."""
    paid: NotRequired[Annotated[int, Field(ge=0)] | None]
    """Set on a task that waited for its rate limit: its bucket was charged for this time."""
    rate_limit: NotRequired[str | None]
    """The pool rate limit this task draws from; absent: the handler's, if any."""
    cost: NotRequired[Annotated[int, Field(ge=1)] | None]
    """Tokens the task draws from its rate limit's ``tokensPerMinute`` bucket; absent: 1."""
    tenant: NotRequired[str | None]
    """Who the task is for: ``tenantConcurrency`` limits each tenant's admitted tasks of a tier."""
    task: NotRequired[Annotated[str, Field(min_length=1, max_length=MAX_TASK_NAME_LENGTH)] | None]
    """The name of the App task it runs (tierpool.protocol.apps); absent: the pool's only task, or a plain handler."""
    parent: NotRequired[Annotated[str, Field(min_length=1, max_length=MAX_TASK_ID_LENGTH)] | None]
    """The task id of the task that spawned it (``task.spawn``): its outcome may resume that parent's gather."""
    ancestors: NotRequired[Json[Annotated[list[TaskIdText], Field(max_length=MAX_ANCESTORS)]] | None]
    """JSON array of the task ids above its parent (the parent's parent last, at most 16), as text: a cancel of any of
    them cancels it, as a cancel of its parent does. The worker checks the array (its ``contentSchema`` here is a
    description, which JSON Schema does not check) and dead-letters an entry whose text is not such an array."""
    parked: NotRequired[Annotated[int, Field(ge=0)] | None]
    """The entry's ``attempts`` when its run last parked in a gather (the PARK script writes it): taken with the same
    ``attempts`` on its first delivery, the entry resumes that gather."""
    protocol: NotRequired[Annotated[int, Field(ge=1)] | None]
    """The protocol of the producer that wrote the entry (tierpool.protocol.version); absent: an older producer
    (protocol 9 or before). A worker dead-letters an entry of a newer protocol than its own, never run."""


class TaskContext(Protocol):
    """What a running task's progress and checkpoint calls go through (the worker's tierpool.runtime.task_control)."""

    async def progress(self, task: Task, data: Any) -> None: ...

    async def checkpoint(self, task: Task, state: Any) -> None: ...

    async def spawn(self, task: Task, target: Any, inp: Any, options: dict[str, Any]) -> Any: ...

    async def gather(self, task: Task, handles: Sequence[Any], return_exceptions: bool) -> list[Any]: ...

    def blocking(self, task: Task, kind: str, value: Any) -> None: ...


class Spawned(Protocol[OutT_co]):
    """What ``task.spawn`` returns (tierpool.protocol.gather.Child): the child's id, and its task, which types what
    ``task.gather`` returns for it."""

    @property
    def id(self) -> str: ...

    @property
    def task(self) -> Callable[[Any, Any], Awaitable[OutT_co]] | None: ...


_ONE: TypeAdapter[Envelope] = TypeAdapter(Envelope)
_MANY: TypeAdapter[list[Envelope]] = TypeAdapter(list[Envelope])
_VALUES = methodcaller("values")


@dataclass(slots=True)
class Task:
    """What a handler receives. Handlers must be idempotent by ``id``: a task can run more than once.

    Changing its fields changes nothing stored. It is not frozen because a frozen dataclass costs five times as
    much to build, on every task."""

    id: str
    tier: str
    payload: Any
    attempt: int
    created_at_ms: int
    stream_id: str
    escalated_from: str | None = None
    deadline_ms: int | None = None
    timeout_ms: int | None = None
    """This task's own time limit per run, from submit (the pool's ``tasks.timeout`` applies when None)."""
    tenant: str | None = None
    """The tenant given at submit, or None."""
    checkpoint_state: Any = None
    """The state of the task's last :meth:`checkpoint` (from an earlier run, or this one), or None."""
    context: TaskContext | None = None
    """Set by the worker that runs the task."""
    traceparent: str | None = None
    """The producer's W3C trace context, when it was traced: the run's span is its child (tierpool.runtime.spans)."""
    tracestate: str | None = None

    prior_attempts: int = 0
    """Deliveries counted before its current stream entry (it came back through the due-time index)."""
    due_ms: int | None = None
    """When it was scheduled to become visible, for a delayed or rescheduled task."""
    paid_ms: int | None = None
    """Its rate limit bucket was charged already, for this time."""
    rate_limit: str | None = None
    """The rate limit named at submit."""
    cost: int = 1
    """Tokens it draws from the rate limit's token bucket."""
    name: str | None = None
    """The App task it runs (envelope field ``task``), or None: a plain handler's task."""
    parent: str | None = None
    """The task that spawned it (envelope field ``parent``), or None."""
    ancestors: tuple[str, ...] = ()
    """The tasks above its parent, the parent's parent last (envelope field ``ancestors``)."""
    parked_attempts: int | None = None
    """The ``attempts`` its entry had when a run of it parked in a gather (envelope field ``parked``), or None."""
    children: list[str] = field(default_factory=list)
    """The ids of the children this run spawned, in order (the result record lists them)."""

    @property
    def lineage(self) -> tuple[str, ...]:
        """The tasks a cancel of which cancels this one: its parent and the tasks above it, nearest first."""
        return () if self.parent is None else (self.parent, *reversed(self.ancestors))

    @property
    def resumes_gather(self) -> bool:
        """Whether this run is the one that resumes a gather: its entry was put back by one (PARK, GATHERED), and
        has been neither retried (``attempts`` changed) nor redelivered since."""
        return self.parked_attempts == self.prior_attempts and self.entry_deliveries == 1

    @property
    def entry_deliveries(self) -> int:
        """Deliveries of its current stream entry."""
        return self.attempt - self.prior_attempts

    async def progress(self, data: Any) -> None:
        """Append a progress event (JSON-able, at most 64 KiB) to the task's event stream (``tierpool watch``)."""
        await self._context().progress(self, data)

    async def checkpoint(self, state: Any) -> None:
        """Save a small JSON-able state (at most 64 KiB) with the task, only while this worker owns its entry
        (``tierpool.protocol.errors.TaskLost`` otherwise). A later run (after a crash, a reclaim or a retry) starts with
        it as :attr:`checkpoint_state`."""
        await self._context().checkpoint(self, state)

    @overload
    async def spawn(
        self, task: Callable[[Task, InT], Awaitable[OutT]], inp: InT | Mapping[str, Any], **options: Any
    ) -> Spawned[OutT]: ...
    @overload
    async def spawn(self, task: str, inp: Any, **options: Any) -> Spawned[Any]: ...

    async def spawn(self, task: Any, inp: Any, **options: Any) -> Spawned[Any]:
        """Submit a child task (an App's TaskDef, or a task name of the worker's App) and return its handle. Its
        id is ``<this id>.<n>``, n the spawn's ordinal in this run, so a re-run spawns the same children (submitted
        once); it runs in its own default tier or this task's, whichever is higher, and inherits this task's
        deadline, tenant and trace context (tierpool.protocol.gather)."""
        child: Spawned[Any] = await self._context().spawn(self, task, inp, options)
        return child

    @overload
    async def gather(self, *handles: Spawned[OutT], return_exceptions: Literal[False] = False) -> list[OutT]: ...
    @overload
    async def gather(self, *handles: Spawned[OutT], return_exceptions: bool) -> list[OutT | BaseException]: ...

    async def gather(self, *handles: Spawned[Any], return_exceptions: bool = False) -> list[Any]:
        """The children's outputs, in order, once each has an outcome; without holding this run's slot meanwhile:
        the run ends here (``Gathering``), is parked, and runs again from its start once every child has an outcome.
        A child that did not succeed raises ``ChildFailed`` (the first in order), or is returned as that exception
        with ``return_exceptions=True``."""
        return await self._context().gather(self, handles, return_exceptions)

    def progress_sync(self, data: Any) -> None:
        """:meth:`progress` for a plain (sync) handler, from its thread."""
        self._context().blocking(self, "progress", data)

    def checkpoint_sync(self, state: Any) -> None:
        """:meth:`checkpoint` for a plain (sync) handler, from its thread."""
        self._context().blocking(self, "checkpoint", state)

    def _context(self) -> TaskContext:
        if self.context is None:
            raise RuntimeError("progress and checkpoints need a task run by a tierpool worker")
        return self.context

    @property
    def created_at(self) -> datetime:
        return datetime.fromtimestamp(self.created_at_ms / 1000, tz=UTC)

    @property
    def deadline(self) -> datetime | None:
        return None if self.deadline_ms is None else datetime.fromtimestamp(self.deadline_ms / 1000, tz=UTC)


class MalformedEntry(ValueError):
    """A stream entry that cannot become a Task; the reason goes to the dead-letter stream."""


def encode(
    task_id: str,
    tier: str,
    payload_json: str,
    created_at_ms: int,
    escalated_from: str | None = None,
    deadline_ms: int | None = None,
    timeout_ms: int | None = None,
    rate_limit: str | None = None,
    cost: int | None = None,
    tenant: str | None = None,
    task: str | None = None,
    parent: str | None = None,
    ancestors: Sequence[str] = (),
) -> dict[str, str]:
    """Envelope fields for XADD, the writer's ``protocol`` last (docs/protocol.md)."""
    fields = {"task_id": task_id, "tier": tier, "payload": payload_json, "created_at": str(created_at_ms)}
    if escalated_from is not None:
        fields["escalated_from"] = escalated_from
    if deadline_ms is not None:
        fields["deadline"] = str(deadline_ms)
    if timeout_ms is not None:
        fields["timeout"] = str(timeout_ms)
    if rate_limit is not None:
        fields["rate_limit"] = rate_limit
    if cost is not None:
        fields["cost"] = str(cost)
    if tenant is not None:
        fields["tenant"] = tenant
    if task is not None:
        fields["task"] = task
    if parent is not None:
        fields["parent"] = parent
    if ancestors:
        fields["ancestors"] = json.dumps(list(ancestors[-MAX_ANCESTORS:]), ensure_ascii=False)
    fields["protocol"] = str(PROTOCOL)
    return fields


def text_fields(raw: Mapping[Any, Any]) -> dict[str, str]:
    """Decode a redis-py entry dict with bytes keys and values into text, as tierpool's clients decode (bad bytes
    kept as lone surrogates, see tierpool.protocol.utf8)."""
    return {utf8.as_text(key): utf8.as_text(value) for key, value in raw.items()}


def not_utf8_reason(raw: Mapping[Any, Any]) -> str | None:
    """The dead-letter reason of an entry with a field name or value that is not UTF-8, naming each; None when
    it has none. Such an entry is refused whole, as it is: running it on a repaired guess of its text would
    hand the handler something the producer never wrote."""
    found = utf8.problems(raw)
    return _reason(found, None) if found else None


def _all_utf8(raws: Sequence[Mapping[Any, Any]]) -> bool:
    """Whether every field name and value of a read is UTF-8 text (validation alone would not say: it ignores
    undeclared fields, and lets an unconstrained ``str`` through as it is). Iterated in C, O(1) a string while
    all is ASCII; False for fields that are not all text (bytes)."""
    try:
        return all(map(str.isascii, _strings(raws))) or all(map(utf8.is_utf8, _strings(raws)))
    except TypeError:
        return False


def _strings(raws: Sequence[Mapping[Any, Any]]) -> Iterator[Any]:
    return chain(chain.from_iterable(raws), chain.from_iterable(map(_VALUES, raws)))


def _validate(raw: Mapping[Any, Any]) -> Envelope:
    try:
        return _ONE.validate_python(raw)
    except ValidationError:
        if all(isinstance(key, str) for key in raw):
            raise
    return _ONE.validate_python(text_fields(raw))  # read by a client that does not decode responses


def _task(envelope: Envelope, stream_id: str, attempt: int) -> Task:
    if (protocol := envelope.get("protocol")) is not None and protocol > PROTOCOL:
        raise MalformedEntry(compat.newer_entry_reason(protocol))
    try:
        payload = from_json(envelope["payload"])  # pydantic-core's parser: several times faster than json.loads
    except ValueError as error:
        raise MalformedEntry(f"bad envelope: payload is not JSON ({error})") from None
    prior = envelope.get("attempts") or 0
    return Task(
        envelope["task_id"],
        envelope["tier"],
        payload,
        attempt + prior,
        envelope["created_at"],
        stream_id,
        envelope.get("escalated_from"),
        envelope.get("deadline"),
        envelope.get("timeout"),
        traceparent=envelope.get("traceparent"),
        tracestate=envelope.get("tracestate"),
        prior_attempts=prior,
        due_ms=envelope.get("due"),
        paid_ms=envelope.get("paid"),
        rate_limit=envelope.get("rate_limit"),
        cost=envelope.get("cost") or 1,
        tenant=envelope.get("tenant"),
        name=envelope.get("task"),
        parent=envelope.get("parent"),
        ancestors=tuple(envelope.get("ancestors") or ()),
        parked_attempts=envelope.get("parked"),
    )


def decode(stream_id: str, raw: Mapping[Any, Any], attempt: int) -> Task:
    """A Task from a stream entry's fields; MalformedEntry with the reason when it is not a valid envelope. An
    entry of a newer protocol is refused first, whatever else it holds: this worker could misread any of it."""
    if newer := compat.newer_entry_reason(raw.get("protocol", raw.get(b"protocol"))):
        raise MalformedEntry(newer)
    not_utf8 = utf8.problems(raw)
    try:
        envelope = _validate(raw)
    except ValidationError as error:
        raise MalformedEntry(_reason(not_utf8, error)) from None
    if not_utf8:
        raise MalformedEntry(_reason(not_utf8, None))
    return _task(envelope, stream_id, attempt)


def _reason(not_utf8: list[str], error: ValidationError | None) -> str:
    """``bad envelope: not UTF-8: …`` first when bytes are bad, then the first other fault validation found
    (its ``string_unicode`` errors are those same bytes)."""
    parts = [f"not UTF-8: {', '.join(not_utf8)}"] if not_utf8 else []
    faults = error.errors(include_url=False) if error is not None else []
    others = [fault for fault in faults if fault["type"] != "string_unicode"] or ([] if not_utf8 else faults)
    if others:
        where = ".".join(str(part) for part in others[0]["loc"]) or "entry"
        parts.append(f"{where}: {others[0]['msg']}")
    return "bad envelope: " + "; ".join(parts)


def _decode_or_error(stream_id: str, raw: Mapping[Any, Any], attempt: int) -> Task | MalformedEntry:
    try:
        return decode(stream_id, raw, attempt)
    except MalformedEntry as error:
        return error


def decode_many(entries: Sequence[tuple[str, Mapping[Any, Any], int]]) -> list[Task | MalformedEntry]:
    """Tasks for a whole read of (stream id, fields, attempt), in order, with a MalformedEntry in the place of
    each entry that is not a valid envelope. One validation pass covers the read; only a read with a bad entry
    is validated again entry by entry, to name each one's fault: one whose bytes are not UTF-8 among them."""
    raws = [raw for _, raw, _ in entries]
    try:
        if not _all_utf8(raws):
            return [_decode_or_error(*entry) for entry in entries]
        envelopes = _MANY.validate_python(raws)
    except ValidationError:
        return [_decode_or_error(*entry) for entry in entries]
    tasks: list[Task | MalformedEntry] = []
    for envelope, (stream_id, _, attempt) in zip(envelopes, entries, strict=True):
        try:
            tasks.append(_task(envelope, stream_id, attempt))
        except MalformedEntry as error:
            tasks.append(error)
    return tasks
