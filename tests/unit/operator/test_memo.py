"""The operator's memo as kopf copies it: one context shared by every object, a memory of its own per object."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
from kopf._core.reactor.inventory import ResourceMemories

from tierpool_operator.config import OperatorConfig
from tierpool_operator.gate import Gate
from tierpool_operator.handover import gated
from tierpool_operator.kube import Kube
from tierpool_operator.memo import NotStarted, OperatorContext, PoolMemo


def pool_body(name: str, uid: str) -> Any:
    return {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"namespace": "ns", "name": name, "uid": uid},
    }


def test_a_copy_shares_the_context_and_starts_an_empty_memory() -> None:
    root = PoolMemo(OperatorContext(OperatorConfig()))
    a, b = copy.copy(root), copy.copy(root)
    assert a.context is root.context and b.context is root.context
    a.last_pass, a.draining, a.redis_backoff, a.report_due = 100.0, ["p1"], (2, 104.0), True
    assert (b.last_pass, b.draining, b.redis_backoff, b.report_due) == (None, None, None, False)
    assert (root.last_pass, root.draining) == (None, None)
    fresh = copy.copy(a)  # even a memory with state in it is never handed on
    assert fresh.context is a.context and (fresh.last_pass, fresh.draining) == (None, None)


def test_what_the_operator_sets_up_after_a_copy_is_seen_through_it() -> None:
    """The gate and the API client are set on the context, not on one memo: copies made earlier see them too."""
    root = PoolMemo(OperatorContext(OperatorConfig()))
    early = copy.copy(root)
    with pytest.raises(NotStarted):
        _ = early.context.kube
    kube, gate = cast(Kube, object()), Gate()
    root.context.kube, root.context.gate = kube, gate
    assert early.context.kube is kube and early.context.gate is gate


async def test_kopf_gives_each_pool_its_own_memory_and_one_context() -> None:
    """Through kopf's own per-object store (what it hands handlers and daemons as ``memo``)."""
    memories, root = ResourceMemories(), PoolMemo(OperatorContext(OperatorConfig()))

    async def recall(name: str, uid: str) -> PoolMemo:
        memo = await memories.recall_memo(pool_body(name, uid), memobase=cast(Any, root))
        assert isinstance(memo, PoolMemo)
        return memo

    a, b = await recall("a", "u1"), await recall("b", "u2")
    assert a is not b and a.context is root.context and b.context is root.context
    a.last_pass, a.history = 100.0, cast(Any, "a's history")
    assert (b.last_pass, b.history) == (None, None)
    again = await recall("a", "u1")
    assert again is a and again.last_pass == 100.0  # the next event of the same pool: the same memory
    await memories.forget(pool_body("a", "u1"))  # deleted, then created again under the same name
    recreated = await recall("a", "u3")
    assert recreated.last_pass is None and recreated.context is root.context


async def test_gated_handlers_run_through_the_contexts_gate() -> None:
    seen: list[int] = []

    @gated
    async def reconcile(memo: PoolMemo) -> None:
        gate = memo.context.gate
        seen.append(-1 if gate is None else gate.count("reconcile"))

    gate = Gate()
    await reconcile(memo=PoolMemo(OperatorContext(OperatorConfig(), gate=gate)))
    await reconcile(memo=PoolMemo(OperatorContext(OperatorConfig())))
    assert seen == [1, -1] and gate.count("reconcile") == 0
