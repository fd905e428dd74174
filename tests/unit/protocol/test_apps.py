"""Apps (tierpool.protocol.apps): routing by task name, input and output validation, submit defaults. Pure."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel, field_validator

from tierpool.model.keys import PoolKeys
from tierpool.model.spec import PoolSpec
from tierpool.protocol.apps import (
    App,
    InvalidInput,
    InvalidOutput,
    TaskDef,
    TaskFailed,
    limits_of,
    outcome,
    route,
    typed_request,
)
from tierpool.protocol.envelope import Task, decode, encode
from tierpool.protocol.errors import NonRetryable
from tierpool.protocol.submission import SubmitError, TaskRequest, TaskResult, prepare


class Dispute(BaseModel):
    ticket: int


class Verdict(BaseModel):
    refund: bool


app = App()


@app.task(tier="p0", timeout="30s", rate_limit="llm", cost=3)
async def resolve(task: Task, inp: Dispute) -> Verdict:
    return Verdict(refund=inp.ticket % 2 == 0)


@app.task(name="echo")
async def echo_numbers(task: Task, inp: list[int]) -> dict[str, Any]:
    return {"n": inp}


solo = App()


@solo.task(tier="p1")
async def only(task: Task, inp: Dispute) -> Verdict:
    return Verdict(refund=True)


def _task(payload: Any, name: str | None = None, **fields: Any) -> Task:
    return Task("t1", "p0", payload, 1, 0, "1-0", name=name, **fields)


ROUTES = [
    (app, "resolve", "resolve"),
    (app, "echo", "echo"),
    (app, "nope", "unknown task 'nope'; this app has echo, resolve"),
    (app, None, "the entry names no task (envelope field 'task'); this app has echo, resolve"),
    (solo, None, "only"),
    (solo, "only", "only"),
    (solo, "other", "unknown task 'other'; this app has only"),
    (App(), None, "the entry names no task (envelope field 'task'); this app has no tasks"),
]


@pytest.mark.parametrize(("an_app", "name", "expected"), ROUTES)
def test_route_finds_the_task_or_says_why_not(an_app: App, name: str | None, expected: str) -> None:
    found = route(an_app.tasks, name)
    assert (found.name if isinstance(found, TaskDef) else found) == expected


INPUTS = [
    ({"ticket": 7}, None),
    ({"ticket": "7"}, None),  # lax, as pydantic validates JSON data
    ({"ticket": "seven"}, "task 'resolve': invalid input: ticket: Input should be a valid integer"),
    ({}, "task 'resolve': invalid input: ticket: Field required"),
    ([1], "task 'resolve': invalid input: input: Input should be a valid dictionary"),
]


@pytest.mark.parametrize(("payload", "refusal"), INPUTS)
def test_the_worker_refuses_input_the_model_refuses_as_non_retryable(payload: Any, refusal: str | None) -> None:
    if refusal is None:
        assert resolve.parse_input(payload) == Dispute(ticket=7)
    else:
        with pytest.raises(NonRetryable) as raised:
            resolve.parse_input(payload)
        assert str(raised.value).startswith(refusal)


@pytest.mark.parametrize(("payload", "refusal"), INPUTS)
def test_the_sdk_refuses_the_same_input_at_submit(payload: Any, refusal: str | None) -> None:
    if refusal is None:
        assert resolve.encode_input(payload) == {"ticket": 7}
    else:
        with pytest.raises(InvalidInput) as raised:
            resolve.encode_input(payload)
        assert str(raised.value).startswith(refusal) and raised.value.errors
        assert isinstance(raised.value, SubmitError)


def test_a_model_built_without_validation_is_still_checked_at_submit() -> None:
    with pytest.raises(InvalidInput, match="ticket"):
        resolve.encode_input(Dispute.model_construct(ticket="x"))  # type: ignore[arg-type]


def test_an_app_runs_the_task_its_entry_names_and_dumps_the_output_to_json() -> None:
    assert asyncio.run(app(_task({"ticket": 2}, "resolve"))) == {"refund": True}
    assert asyncio.run(app(_task([1, 2], "echo"))) == {"n": [1, 2]}
    assert asyncio.run(solo(_task({"ticket": 1}))) == {"refund": True}


@pytest.mark.parametrize(("payload", "name"), [({"ticket": 1}, "nope"), ({"ticket": 1}, None), ({}, "resolve")])
def test_an_app_raises_non_retryable_for_what_it_cannot_run(payload: Any, name: str | None) -> None:
    with pytest.raises(NonRetryable):
        asyncio.run(app(_task(payload, name)))


def test_output_the_model_refuses_is_an_ordinary_failure() -> None:
    bad = App()

    @bad.task()
    async def lies(task: Task, inp: int) -> Verdict:
        return {"refund": "maybe"}  # type: ignore[return-value]

    with pytest.raises(InvalidOutput, match="task 'lies': invalid output: refund"):
        asyncio.run(bad(_task(1)))


def test_registration_refuses_sync_functions_wrong_arity_and_duplicates() -> None:
    another = App()
    with pytest.raises(TypeError, match="async def"):
        another.task()(lambda task, inp: None)

    async def one(task: Task) -> None: ...

    with pytest.raises(TypeError, match="two arguments"):
        another.task()(one)  # type: ignore[arg-type]
    another.task(name="x")(resolve.function)
    with pytest.raises(ValueError, match="already"):
        another.task(name="x")(resolve.function)
    with pytest.raises(TypeError, match="no task default tiers; the defaults are cost, deadline"):
        another.task(tiers="p0")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="no task default retries"):
        resolve.using(retries=3)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="not a duration"):
        another.task(timeout="soon")
    with pytest.raises(ValueError, match="no whitespace"):
        another.task(name="two words")(resolve.function)


def test_a_typed_request_takes_the_tasks_defaults_unless_given() -> None:
    request = typed_request(resolve, Dispute(ticket=1))
    assert request == TaskRequest("p0", {"ticket": 1}, None, None, 30.0, rate_limit="llm", cost=3, task="resolve")
    overridden = typed_request(resolve.using(tier="p1"), {"ticket": 1}, "id-1", timeout=5, cost=None, tenant="acme")
    assert (overridden.tier, overridden.timeout, overridden.cost, overridden.tenant) == ("p1", 5, 3, "acme")
    assert overridden.task_id == "id-1" and resolve.defaults.tier == "p0"
    with_deadline = typed_request(resolve.using(deadline="1m"), {"ticket": 1})
    assert with_deadline.deadline == timedelta(minutes=1)


def test_a_typed_request_needs_a_tier() -> None:
    with pytest.raises(SubmitError, match="has no default tier"):
        typed_request(echo_numbers, [1])
    assert typed_request(echo_numbers, [1], tier="p2").tier == "p2"


def test_the_task_name_travels_in_the_envelope_field_task() -> None:
    spec = PoolSpec.model_validate({"tiers": [{"name": "p0", "weight": 1}], "rateLimits": []})
    submission = prepare(spec, PoolKeys("ns", "p"), TaskRequest("p0", {}, task="resolve"), 1000)
    assert submission.fields["task"] == "resolve"
    assert decode("1-0", submission.fields, 1).name == "resolve"
    assert decode("1-0", encode("t", "p0", "{}", 1), 1).name is None
    for bad in ("", "two words", "x" * 201):
        with pytest.raises(SubmitError, match=r"^task must be 1-200 characters with no whitespace$"):
            prepare(spec, PoolKeys("ns", "p"), TaskRequest("p0", {}, task=bad), 1000)
    with pytest.raises(SubmitError, match=r"^task must be UTF-8 text"):
        prepare(spec, PoolKeys("ns", "p"), TaskRequest("p0", {}, task="a\udcff"), 1000)


def test_the_worker_fills_in_a_tasks_timeout_and_rate_limit_when_the_entry_has_none() -> None:
    task = _task({"ticket": 1}, "resolve")
    assert app.screen(task) is None
    assert (task.timeout_ms, task.rate_limit) == (30_000, "llm")
    given = _task({"ticket": 1}, "resolve", timeout_ms=5, rate_limit="other")
    assert app.screen(given) is None
    assert (given.timeout_ms, given.rate_limit) == (5, "other")


SCREENS = [
    ({"ticket": 1}, "resolve", None),
    ({"ticket": 1}, "nope", "non-retryable: unknown task 'nope'; this app has echo, resolve"),
    ({"ticket": 1}, None, "non-retryable: the entry names no task (envelope field 'task'); this app has echo, resolve"),
    (
        {"ticket": "x"},
        "resolve",
        "non-retryable: task 'resolve': invalid input: ticket: Input should be a valid integer",
    ),
]


@pytest.mark.parametrize(("payload", "name", "reason"), SCREENS)
def test_the_worker_screens_out_what_the_app_cannot_run(payload: Any, name: str | None, reason: str | None) -> None:
    task = _task(payload, name)
    refused = app.screen(task)
    assert refused == reason if reason is None else (refused or "").startswith(reason)
    assert task.timeout_ms == (30_000 if reason is None else None)  # nothing filled in for a refused task


RECORDS = [
    (TaskResult("t", "succeeded", {"refund": True}), resolve, Verdict(refund=True)),
    (TaskResult("t", "succeeded", {"refund": True}), None, {"refund": True}),
]


@pytest.mark.parametrize(("record", "definition", "value"), RECORDS)
def test_a_result_record_is_rebuilt_into_the_output_model(
    record: TaskResult, definition: TaskDef[Any, Any] | None, value: Any
) -> None:
    assert outcome(definition, record) == value


def test_a_task_that_did_not_succeed_raises_task_failed() -> None:
    record = TaskResult("t", "dead_lettered", error="NonRetryable: x", reason="non-retryable: x")
    with pytest.raises(TaskFailed, match="task t dead_lettered: non-retryable: x; NonRetryable: x") as raised:
        outcome(resolve, record)
    assert raised.value.record is record


def test_an_output_model_built_without_validation_is_still_checked() -> None:
    with pytest.raises(InvalidOutput, match="refund"):
        resolve.dump_output(Verdict.model_construct(refund="maybe"))  # type: ignore[arg-type]


def test_limits_of_lists_each_tasks_default_rate_limit() -> None:
    assert limits_of(app) == {"resolve": "llm"}
    assert limits_of(solo) == {} and limits_of(lambda task: None) == {}


class Touchy(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def no_sevens(cls, value: int) -> int:
        if value == 7:
            raise KeyError("seven")  # not a ValueError: pydantic lets it through
        return value


def test_a_validator_that_raises_its_own_error_is_left_to_the_run() -> None:
    touchy = App()

    @touchy.task(timeout=1)
    async def check(task: Task, inp: Touchy) -> int:
        return inp.n

    task = _task({"n": 7})
    assert touchy.screen(task) is None and task.timeout_ms == 1000  # not a refusal: the run fails, and is retried
    with pytest.raises(KeyError):
        asyncio.run(touchy(task))
