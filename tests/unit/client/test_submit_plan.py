"""Submitting (tierpool.store.submits.submit_plan) driven by hand with scripted replies: what each pipeline holds,
what goes again after NOSCRIPT, where the WAIT goes, and which errors end a submit."""

from __future__ import annotations

from datetime import timedelta

import pytest
from redis.exceptions import NoScriptError, ResponseError

from tierpool.model.keys import PoolKeys
from tierpool.model.resource import parse_pool
from tierpool.protocol.submission import SubmitError, TaskRequest
from tierpool.store.plans import Batch
from tierpool.store.replication import Wait, WaitGate
from tierpool.store.submits import BATCH_CHUNK, submit_plan

from .conversation import Exchange, converse, named

POOL = parse_pool(
    {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": "agents", "namespace": "team"},
        "spec": {"tiers": [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "tenantConcurrency": 2}]},
    }
)
KEYS = PoolKeys.parse(POOL.ref)
PLAIN, DELAYED = TaskRequest("p0", {}), TaskRequest("p0", {}, task_id="c", delay=30)
A, B = TaskRequest("p0", {}, task_id="a"), TaskRequest("p0", {}, task_id="b")
GATED = TaskRequest("p1", {}, task_id="g", tenant="acme")


def refused() -> NoScriptError:
    return NoScriptError("No matching script")


def no_wait() -> WaitGate:
    return WaitGate(None)


def one_replica() -> WaitGate:
    return WaitGate(Wait(1, 100), clock=lambda: 0.0)


SUBMITS: dict[str, tuple[list[TaskRequest], WaitGate, list[Exchange]]] = {
    "one pipeline: each script by EVALSHA": (
        [PLAIN, A, DELAYED, GATED],
        no_wait(),
        [("EVALSHA submit + EVALSHA once + EVALSHA schedule + EVALSHA gated", ["1-0", 1, 1, [1, "1-0"]])],
    ),
    "NOSCRIPT: the script is loaded and only the refused call goes again": (
        [PLAIN, A, DELAYED],
        no_wait(),
        [
            ("EVALSHA submit + EVALSHA once + EVALSHA schedule", ["1-0", refused(), 1]),
            ("script_load once", "sha"),
            ("EVALSHA once", [1]),
        ],
    ),
    "each missing script is loaded once, in the order of the calls": (
        [DELAYED, A, B],
        no_wait(),
        [
            ("EVALSHA schedule + EVALSHA once + EVALSHA once", [refused(), refused(), refused()]),
            ("script_load schedule", "sha"),
            ("script_load once", "sha"),
            ("EVALSHA schedule + EVALSHA once + EVALSHA once", [1, 1, 0]),
        ],
    ),
    "WAIT is the pipeline's last command": (
        [A],
        one_replica(),
        [("EVALSHA once + WAIT", [1, 1])],
    ),
    "a WAIT that fell short is not sent again for a while": (
        [A],
        one_replica(),
        [("EVALSHA once + WAIT", [refused(), 0]), ("script_load once", "sha"), ("EVALSHA once", [1])],
    ),
}


@pytest.mark.parametrize(("requests", "gate", "exchanges"), SUBMITS.values(), ids=SUBMITS.keys())
def test_submit(requests: list[TaskRequest], gate: WaitGate, exchanges: list[Exchange]) -> None:
    ids = converse(submit_plan(POOL.spec, KEYS, requests, gate), exchanges, named)
    assert len(ids) == len(requests)
    assert [i for i, r in zip(ids, requests, strict=True) if r.task_id] == [r.task_id for r in requests if r.task_id]


FAILED: dict[str, tuple[list[TaskRequest], list[Exchange], type[Exception], str]] = {
    "a request that is not valid: nothing is sent": ([A, TaskRequest("p9", {})], [], SubmitError, "unknown tier"),
    "another error reply ends the submit": (
        [PLAIN, A],
        [("EVALSHA submit + EVALSHA once", ["1-0", ResponseError("OOM command not allowed")])],
        ResponseError,
        "OOM",
    ),
    "still NOSCRIPT after loading the script SCRIPT_ATTEMPTS times": (
        [A],
        [("EVALSHA once", [refused()]), ("script_load once", "sha")] * 3,
        NoScriptError,
        "1 submit",
    ),
}


@pytest.mark.parametrize(("requests", "exchanges", "error", "match"), FAILED.values(), ids=FAILED.keys())
def test_submit_fails(
    requests: list[TaskRequest], exchanges: list[Exchange], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        converse(submit_plan(POOL.spec, KEYS, requests, no_wait()), exchanges, named)


def test_a_large_submit_goes_in_chunks() -> None:
    plan = submit_plan(POOL.spec, KEYS, [PLAIN] * (BATCH_CHUNK + 1), no_wait())
    exchanges = [(BATCH_CHUNK, ["1-0"] * BATCH_CHUNK), (1, ["1-0"])]
    ids = converse(plan, exchanges, lambda step: len(step) if isinstance(step, Batch) else step)
    assert len(set(ids)) == BATCH_CHUNK + 1


def test_each_request_is_checked_on_the_injected_clock() -> None:
    """``deadline`` as a timedelta counts from the plan's clock."""
    plan = submit_plan(POOL.spec, KEYS, [TaskRequest("p0", {}, deadline=timedelta(seconds=2))], no_wait(), lambda: 10.0)
    batch = plan.send(None)
    assert isinstance(batch, Batch)
    [submit] = batch
    fields = dict(zip(submit.args[5::2], submit.args[6::2], strict=True))  # EVALSHA, sha, 2, stream, where, fields
    assert fields["deadline"] == "12000"
