"""mark_busy_pods against a counting stand-in for the Kube object: the API calls a scale-in makes, and what a
failed read or write leaves on the pods."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from tierpool.model.resource import AgentPool, parse_pool
from tierpool_operator import scale_in
from tierpool_operator.config import OperatorConfig
from tierpool_operator.deletion_cost import ANNOTATION
from tierpool_operator.kube import ChildForbidden, Kube
from tierpool_operator.memo import OperatorContext, PoolMemo

A, B, C = "tierpool-agents-7d9f-aaaaa", "tierpool-agents-7d9f-bbbbb", "tierpool-agents-7d9f-ccccc"
BODY = {"metadata": {"name": "agents", "namespace": "team"}}


class CountingKube:
    """The two pod calls mark_busy_pods makes, counted, over pods kept in memory (name -> cost)."""

    def __init__(self, costs: dict[str, str | None], fail: dict[str, Exception] | None = None) -> None:
        self.costs, self.fail = costs, fail or {}
        self.lists = 0
        self.patches: list[tuple[str, str | None]] = []

    def worker_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.lists += 1
        if "list" in self.fail:
            raise self.fail["list"]
        return [
            {"metadata": {"name": n, "annotations": {} if c is None else {ANNOTATION: c}}}
            for n, c in self.costs.items()
        ]

    def annotate_pod(self, namespace: str, name: str, key: str, value: str | None) -> None:
        self.patches.append((name, value))
        if name in self.fail:
            raise self.fail[name]
        self.costs[name] = value


def pool() -> AgentPool:
    document = {"tiers": [{"name": "p0", "weight": 1}], "redis": {"url": "redis://r:6379/0"}}
    meta = {"name": "agents", "namespace": "team"}
    return parse_pool({"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": meta, "spec": document})


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    posted: list[str] = []
    monkeypatch.setattr(scale_in.kopf, "warn", lambda body, reason, message: posted.append(reason))
    return posted


def counts(found: dict[str, int] | Exception) -> Callable[..., Awaitable[dict[str, int]]]:
    async def read(*_: Any) -> dict[str, int]:
        if isinstance(found, Exception):
            raise found
        return found

    return read


def new_memo() -> PoolMemo:
    return PoolMemo(OperatorContext(OperatorConfig()))


async def mark(
    monkeypatch: pytest.MonkeyPatch, kube: CountingKube, found: dict[str, int] | Exception, memo: PoolMemo
) -> Any:
    monkeypatch.setattr(scale_in, "_in_flight", counts(found))
    memo.context.kube = cast(Kube, kube)
    return await scale_in.mark_busy_pods(pool(), BODY, memo, None, 1.0)  # type: ignore[arg-type]


async def test_one_list_and_one_patch_per_changed_pod(monkeypatch: pytest.MonkeyPatch, warnings: list[str]) -> None:
    kube = CountingKube({A: None, B: "2", C: "5"})
    memo = new_memo()
    read_at = await mark(monkeypatch, kube, {f"{A}-0001": 1, f"{B}-0002": 2}, memo)
    assert read_at is not None
    assert (kube.lists, sorted(kube.patches, key=str)) == (1, [(A, "1"), (C, None)])
    kube.patches.clear()
    await mark(monkeypatch, kube, {f"{A}-0001": 1, f"{B}-0002": 2}, memo)  # the same counts again
    assert (kube.lists, kube.patches) == (2, [])
    assert not warnings


@pytest.mark.parametrize("error", [RedisConnectionError("down"), ResponseError("NOPERM no permission"), TimeoutError()])
async def test_counts_not_read_remove_old_costs(
    monkeypatch: pytest.MonkeyPatch, warnings: list[str], error: Exception
) -> None:
    """A pod busy at the last scale-in and idle now must not be kept over one busy now by its old cost."""
    kube = CountingKube({A: "4", B: None, C: "1"})
    assert await mark(monkeypatch, kube, error, new_memo()) is None
    assert kube.costs == {A: None, B: None, C: None} and kube.lists == 1


async def test_a_failed_patch_does_not_stop_the_others(monkeypatch: pytest.MonkeyPatch, warnings: list[str]) -> None:
    kube = CountingKube({A: None, B: None, C: None}, fail={A: ApiException(status=500)})
    await mark(monkeypatch, kube, {f"{A}-0001": 1, f"{B}-0001": 2, f"{C}-0001": 3}, new_memo())
    assert kube.costs == {A: None, B: "2", C: "3"} and not warnings


@pytest.mark.parametrize(
    "error",
    [
        urllib3.exceptions.MaxRetryError(None, "/api/v1/pods"),  # type: ignore[arg-type]
        urllib3.exceptions.ProtocolError("Connection aborted."),
        ApiException(status=503),
    ],
)
async def test_client_errors_do_not_escape(
    monkeypatch: pytest.MonkeyPatch, warnings: list[str], error: Exception
) -> None:
    kube = CountingKube({A: None}, fail={"list": error})
    assert await mark(monkeypatch, kube, {f"{A}-0001": 1}, new_memo()) is None
    kube = CountingKube({A: None}, fail={A: error})
    assert await mark(monkeypatch, kube, {f"{A}-0001": 1}, new_memo()) is not None


async def test_one_event_per_refusal_until_a_scale_in_marks_pods(
    monkeypatch: pytest.MonkeyPatch, warnings: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    memo = new_memo()
    refused = CountingKube({A: None}, fail={A: ChildForbidden("pods", A, "team")})
    for _ in range(3):
        await mark(monkeypatch, refused, {f"{A}-0001": 1}, memo)
    assert warnings == ["DeletionCostForbidden"]
    assert "may not patch pods in namespace team" in caplog.text
    await mark(monkeypatch, CountingKube({A: None}), {f"{A}-0001": 1}, memo)  # granted again: marks
    await mark(
        monkeypatch, CountingKube({A: None}, fail={"list": ChildForbidden("pods", "", "team", "list")}), {}, memo
    )
    assert warnings == ["DeletionCostForbidden", "DeletionCostForbidden"]
    assert "may not list pods in namespace team" in caplog.text


async def test_busy_consumers_without_a_pod_are_logged_once(
    monkeypatch: pytest.MonkeyPatch, warnings: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    memo = new_memo()
    with caplog.at_level(logging.WARNING, "tierpool.operator"):
        for _ in range(2):
            await mark(monkeypatch, CountingKube({A: None}), {"my-worker": 2, f"{A}-0001": 1}, memo)
    assert caplog.text.count("busy consumers ['my-worker'] match no worker pod") == 1
