"""The producer's batched writes (tierpool.store.submits): which script each submit uses, and which calls go again after
the server answered NOSCRIPT (a fresh server, or a cluster shard redis-py's cluster pipelines did not load)."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import NoScriptError, ResponseError

from tierpool.model.keys import PoolKeys
from tierpool.model.resource import parse_pool
from tierpool.protocol.submission import TaskRequest
from tierpool.store.submits import SubmitCall, _prepare_all, _script_missing, _submit_calls

POOL = parse_pool(
    {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": "agents", "namespace": "team"},
        "spec": {"tiers": [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "tenantConcurrency": 2}]},
    }
)
KEYS = PoolKeys.parse(POOL.ref)


@pytest.mark.parametrize(
    ("request_", "script"),
    [
        (TaskRequest("p0", {}), "SUBMIT"),
        (TaskRequest("p0", {}, task_id="chosen"), "SUBMIT_ONCE"),
        (TaskRequest("p0", {}, delay=30), "SCHEDULE"),
        (TaskRequest("p1", {}, tenant="acme"), "SUBMIT_GATED"),
    ],
    ids=["plain: submit script", "chosen id: dedupe script", "delayed: schedule script", "tenant: gate script"],
)
def test_each_submit_becomes_one_call_on_the_pools_keys(request_: TaskRequest, script: str | None) -> None:
    [call] = _submit_calls(KEYS, 1000, _prepare_all(POOL.spec, KEYS, [request_]))
    name, keys, _ = call
    assert name == script
    assert keys and all(key.startswith(KEYS.prefix) for key in keys)  # one hash tag: one slot


A: SubmitCall = (None, ["a"], [])
B: SubmitCall = ("SUBMIT_ONCE", ["b"], [])
C: SubmitCall = ("SCHEDULE", ["c"], [])


@pytest.mark.parametrize(
    ("replies", "again"),
    [
        (["1-0", 1, 1], []),
        (["1-0", NoScriptError("NOSCRIPT"), 1], [B]),
        (["1-0", NoScriptError("NOSCRIPT"), NoScriptError("NOSCRIPT")], [B, C]),
    ],
)
def test_only_the_calls_refused_with_noscript_go_again(replies: list[Any], again: list[SubmitCall]) -> None:
    assert _script_missing([A, B, C], replies) == again


def test_any_other_error_is_raised() -> None:
    with pytest.raises(ResponseError, match="OOM"):
        _script_missing([A, B, C], ["1-0", NoScriptError("NOSCRIPT"), ResponseError("OOM command not allowed")])
