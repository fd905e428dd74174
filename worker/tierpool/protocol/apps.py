"""Apps: named, typed tasks on one pool (``worker.handler: "agents:app"``). Pure: no Redis, no event loop.

An :class:`App` is the pool's handler. Each ``@app.task`` registers a :class:`TaskDef`: an ``async def`` taking the
:class:`~tierpool.protocol.envelope.Task` and its input model, returning its output model, with per-task submit
defaults. The worker screens each entry with :meth:`App.screen` before it may start: the App routes it by its
envelope field ``task`` (:func:`route`) and validates its payload against the input model
(:meth:`TaskDef.parse_input`); an unknown name, and input the model refuses, are dead-lettered at once as
non-retryable, without a run. An entry with no ``task`` field runs the App's only task; when it has several, it is
dead-lettered too. Then the worker calls the App as its handler: it routes and validates again (the same checks
for :func:`tierpool.testing.run`), runs the function and dumps its output to JSON (:meth:`TaskDef.dump_output`).

The producer side builds its :class:`~tierpool.protocol.submission.TaskRequest` with :func:`typed_request`, which
refuses input the model refuses (:class:`InvalidInput`) before anything is written, and fills in the task's defaults
where the submit does not set them; a task that submits children (spawn) can build their requests the same way.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from functools import cached_property
from typing import Any, Generic, TypedDict, TypeVar, Unpack

from pydantic import TypeAdapter, ValidationError

from tierpool.model.durations import ms_floor, parse_duration
from tierpool.protocol.envelope import MAX_TASK_NAME_LENGTH, Task
from tierpool.protocol.errors import NonRetryable
from tierpool.protocol.submission import SubmitError, TaskRequest, TaskResult

InT = TypeVar("InT")
OutT = TypeVar("OutT")
TaskFunction = Callable[[Task, InT], Awaitable[OutT]]
Duration = float | str | timedelta
"""Seconds, a duration text (``"30s"``, ``"5m"``) or a timedelta."""


class InvalidInput(SubmitError):
    """Input a task's model refuses, at submit: nothing was written. ``errors``: pydantic's list, first one named."""

    def __init__(self, task: str, error: ValidationError) -> None:
        super().__init__(f"task {task!r}: invalid input: {validation_text(error)}")
        self.task, self.errors = task, error.errors(include_url=False)


class InvalidOutput(ValueError):
    """A task returned a value its output model refuses: an ordinary failed run (retried: a model's output varies)."""


class TaskFailed(Exception):
    """The task did not succeed (dead-lettered or cancelled): ``record`` is its result record."""

    def __init__(self, record: TaskResult) -> None:
        why = "; ".join(part for part in (record.reason, record.error) if part)
        super().__init__(f"task {record.task_id} {record.status}" + (f": {why}" if why else ""))
        self.record = record


def outcome(definition: TaskDef[Any, OutT] | None, record: TaskResult) -> OutT:
    """A result record's value: the output model rebuilt for a typed task, the JSON value for a plain one;
    TaskFailed for a task that did not succeed."""
    if not record.ok:
        raise TaskFailed(record)
    if definition is None:
        return record.result  # type: ignore[no-any-return]
    return definition.load_output(record.result)


def validation_text(error: ValidationError) -> str:
    """``loc: message`` of the first fault, and how many more there are."""
    faults = error.errors(include_url=False)
    first = faults[0] if faults else {"loc": (), "msg": str(error)}
    where = ".".join(str(part) for part in first["loc"]) or "input"
    more = f" (and {len(faults) - 1} more)" if len(faults) > 1 else ""
    return f"{where}: {first['msg']}{more}"


@dataclass(frozen=True)
class TaskDefaults:
    """What a submit of the task uses unless it says otherwise (the fields of TaskRequest that make sense per task)."""

    tier: str | None = None
    timeout: float | None = None
    """Seconds; also the run's limit on the worker for an entry that carries no ``timeout`` (a raw XADD)."""
    deadline: float | None = None
    """Seconds from the submit."""
    delay: float | None = None
    rate_limit: str | None = None
    """Also the limit the worker draws an entry from when it names none."""
    cost: int | None = None
    tenant: str | None = None


class DefaultOptions(TypedDict, total=False):
    """The submit defaults ``@app.task`` and :meth:`TaskDef.using` take: TaskDefaults' fields, durations as
    seconds, a duration text or a timedelta."""

    tier: str | None
    timeout: Duration | None
    deadline: Duration | None
    delay: Duration | None
    rate_limit: str | None
    cost: int | None
    tenant: str | None


DURATIONS = frozenset({"timeout", "deadline", "delay"})


def _seconds(value: Duration | None, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    try:
        return parse_duration(value)
    except ValueError as error:
        raise ValueError(f"{what}: {error}") from None


@dataclass(frozen=True)
class TaskDef(Generic[InT, OutT]):
    """One named task of an :class:`App` (what ``@app.task`` returns). Calling it calls the function."""

    name: str
    function: TaskFunction[InT, OutT]
    defaults: TaskDefaults = field(default_factory=TaskDefaults)

    def __call__(self, task: Task, inp: InT) -> Awaitable[OutT]:
        return self.function(task, inp)

    def using(self, **defaults: Unpack[DefaultOptions]) -> TaskDef[InT, OutT]:
        """The same task with other submit defaults (``tier``, ``timeout``, ...): ``client.submit(resolve.using(
        tier="p1"), inp)``."""
        return replace(self, defaults=_defaults({**_given(self.defaults), **defaults}))

    @cached_property
    def _types(self) -> tuple[Any, Any]:
        hints = typing.get_type_hints(self.function)
        parameters = list(inspect.signature(self.function).parameters.values())
        return hints.get(parameters[1].name, Any), hints.get("return", Any)

    @cached_property
    def input_adapter(self) -> TypeAdapter[InT]:
        return TypeAdapter(self._types[0])

    @cached_property
    def output_adapter(self) -> TypeAdapter[OutT]:
        return TypeAdapter(self._types[1])

    def resolve(self) -> None:
        """Resolve the annotations now (a worker does at start-up): NameError or a pydantic error when they are not
        types pydantic can validate."""
        _ = self.input_adapter, self.output_adapter

    def parse_input(self, payload: Any) -> InT:
        """The payload (decoded JSON) as the input model; NonRetryable naming the task and the fault otherwise."""
        try:
            return self.input_adapter.validate_python(payload)
        except ValidationError as error:
            raise NonRetryable(f"task {self.name!r}: invalid input: {validation_text(error)}") from None

    def encode_input(self, inp: Any) -> Any:
        """The input as the JSON-able payload to submit, checked as the worker will check it; InvalidInput if not."""
        try:
            return _as_json(self.input_adapter, inp)
        except ValidationError as error:
            raise InvalidInput(self.name, error) from None

    def dump_output(self, value: Any) -> Any:
        """The run's return value as JSON-able data, checked against the output model; InvalidOutput otherwise."""
        try:
            return _as_json(self.output_adapter, value)
        except ValidationError as error:
            raise InvalidOutput(f"task {self.name!r}: invalid output: {validation_text(error)}") from None

    def load_output(self, data: Any) -> OutT:
        """A result record's ``result`` rebuilt as the output model."""
        return self.output_adapter.validate_python(data)


def _as_json(adapter: TypeAdapter[Any], value: Any) -> Any:
    """``value`` (the model, or data it validates) as JSON-able data, validated again as it will be read: a model
    instance passes validation as it is, even one built with ``model_construct``."""
    data = adapter.dump_python(adapter.validate_python(value), mode="json", warnings=False)
    adapter.validate_python(data)
    return data


def _given(defaults: TaskDefaults) -> dict[str, Any]:
    return {f.name: getattr(defaults, f.name) for f in fields(defaults) if getattr(defaults, f.name) is not None}


def _defaults(options: Mapping[str, Any]) -> TaskDefaults:
    """TaskDefaults from DefaultOptions, durations in seconds; TypeError naming an option it does not have."""
    known = {f.name for f in fields(TaskDefaults)}
    if unknown := sorted(set(options) - known):
        raise TypeError(f"no task default {', '.join(unknown)}; the defaults are {', '.join(sorted(known))}")
    given: dict[str, Any] = {key: _seconds(v, key) if key in DURATIONS else v for key, v in options.items()}
    return TaskDefaults(**given)


class App:
    """Named, typed tasks served by one pool: name it as the pool's handler (``worker.handler: "agents:app"``)."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskDef[Any, Any]] = {}

    def task(
        self, name: str | None = None, **options: Unpack[DefaultOptions]
    ) -> Callable[[TaskFunction[InT, OutT]], TaskDef[InT, OutT]]:
        """Register ``async def f(task, inp: Model) -> Output`` as the task ``name`` (default: the function's name),
        with these submit defaults (DefaultOptions: ``tier``, ``timeout``, ``deadline``, ``delay``, ``rate_limit``,
        ``cost``, ``tenant``). ValueError for a name taken, or a duration that is not one."""
        defaults = _defaults(options)

        def register(function: TaskFunction[InT, OutT]) -> TaskDef[InT, OutT]:
            definition = TaskDef(name or function.__name__, _checked(function), defaults)
            if not 0 < len(definition.name) <= MAX_TASK_NAME_LENGTH or any(c.isspace() for c in definition.name):
                raise ValueError(
                    f"a task name has 1-{MAX_TASK_NAME_LENGTH} characters, no whitespace: {definition.name!r}"
                )
            if definition.name in self.tasks:
                raise ValueError(f"this app has a task named {definition.name!r} already")
            self.tasks[definition.name] = definition
            return definition

        return register

    def resolve(self) -> None:
        """Resolve every task's annotations (see :meth:`TaskDef.resolve`)."""
        for definition in self.tasks.values():
            definition.resolve()

    def route(self, name: str | None) -> TaskDef[Any, Any]:
        """The task an entry runs (see :func:`route`); NonRetryable with the reason when there is none."""
        found = route(self.tasks, name)
        if isinstance(found, str):
            raise NonRetryable(found)
        return found

    def screen(self, task: Task) -> str | None:
        """On the worker, before the task may start (before its rate limit is drawn): the dead-letter reason of a
        task the App cannot run (``non-retryable: ``, then an unknown name or input the model refuses), else None,
        with the task's per-task ``timeout`` and ``rate_limit`` filled in for an entry that carries none."""
        try:
            found = self.route(task.name)
            found.parse_input(task.payload)
        except NonRetryable as refusal:
            return f"non-retryable: {refusal}"
        except Exception:  # noqa: BLE001, S110 - a validator's own error (not a ValueError): the run fails with it
            pass
        if task.timeout_ms is None and found.defaults.timeout is not None:
            task.timeout_ms = max(1, ms_floor(found.defaults.timeout))
        if task.rate_limit is None:
            task.rate_limit = found.defaults.rate_limit
        return None

    async def __call__(self, task: Task) -> Any:
        """Run one task: route it, validate its input, run it, dump its output (the worker's handler call)."""
        definition = self.route(task.name)
        output = await definition.function(task, definition.parse_input(task.payload))
        return definition.dump_output(output)


def limits_of(handler: object) -> dict[str, str]:
    """The default rate limit of each task of an App that names one, by task; {} for any other handler."""
    if not isinstance(handler, App):
        return {}
    return {name: t.defaults.rate_limit for name, t in handler.tasks.items() if t.defaults.rate_limit is not None}


def _checked(function: Callable[..., Any]) -> Callable[..., Any]:
    if not inspect.iscoroutinefunction(function):
        raise TypeError(f"task {getattr(function, '__name__', function)!r} must be an async def function")
    if len(inspect.signature(function).parameters) != 2:
        raise TypeError(f"task {function.__name__!r} must take two arguments: (task, input)")
    return function


def route(tasks: Mapping[str, TaskDef[Any, Any]], name: str | None) -> TaskDef[Any, Any] | str:
    """The task an entry naming ``name`` runs, or the dead-letter reason: an unknown name, or no name on an App of
    more than one task (an App of exactly one runs it: a plain producer's entries keep working)."""
    if name is not None:
        found = tasks.get(name)
        return found if found is not None else f"unknown task {name!r}; this app has {_names(tasks)}"
    if len(tasks) == 1:
        return next(iter(tasks.values()))
    return f"the entry names no task (envelope field 'task'); this app has {_names(tasks)}"


def _names(tasks: Iterable[str]) -> str:
    return ", ".join(sorted(tasks)) or "no tasks"


def typed_request(definition: TaskDef[Any, Any], inp: Any, task_id: str | None = None, **options: Any) -> TaskRequest:
    """The TaskRequest of a typed submit: the input checked and encoded (InvalidInput), the task's defaults where
    ``options`` (TaskRequest's fields) leave a value None; SubmitError when no tier is known."""
    given = {key: value for key, value in options.items() if value is not None}
    defaults = definition.defaults
    tier = given.pop("tier", defaults.tier)
    if tier is None:
        raise SubmitError(f"task {definition.name!r} has no default tier: pass tier=, or set @app.task(tier=...)")
    deadline = given.pop("deadline", None if defaults.deadline is None else timedelta(seconds=defaults.deadline))
    later = {key: getattr(defaults, key) for key in ("timeout", "delay", "rate_limit", "cost", "tenant")}
    later.update(given)
    payload = definition.encode_input(inp)
    return TaskRequest(tier, payload, task_id, deadline, task=definition.name, **later)
