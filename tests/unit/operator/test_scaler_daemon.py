"""The scaler daemon: which Deployment copy a pass may trust (after events, reads, writes, deletions), and how long
the daemon sleeps between checks."""

from __future__ import annotations

from typing import Any, cast

import pytest

from tierpool_operator.deployments import DeploymentCache


def deployment(replicas: int, version: str, name: str = "tierpool-a") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": version}, "spec": {"replicas": replicas}}


def replicas(cache: DeploymentCache, name: str = "tierpool-a") -> int | None:
    found = cache.get("ns", name)
    return None if found is None else int(found["spec"]["replicas"])


Step = tuple[str, str | None, int, str]
"""(what, watch event type, replicas, resourceVersion)"""


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([], None),  # never seen: GET it
        ([("event", "ADDED", 1, "10")], 1),
        ([("event", None, 1, "10")], 1),  # the watch's listing
        ([("event", "ADDED", 1, "10"), ("event", "MODIFIED", 3, "11")], 3),
        ([("event", "ADDED", 1, "10"), ("event", "DELETED", 1, "12")], None),
        ([("read", None, 2, "10")], 2),
        # a /scale to 5 returned version 13: nothing older is trusted after it
        ([("event", "ADDED", 1, "10"), ("wrote", None, 5, "13")], None),
        ([("event", "ADDED", 1, "10"), ("wrote", None, 5, "13"), ("event", "MODIFIED", 1, "11")], None),
        ([("event", "ADDED", 1, "10"), ("wrote", None, 5, "13"), ("event", "MODIFIED", 5, "13")], 5),
        ([("wrote", None, 5, "13"), ("read", None, 5, "14")], 5),
        # a GET sent before the /scale that returns after it
        ([("wrote", None, 5, "13"), ("read", None, 3, "12")], None),
        # an event queued before the /scale, handled after the GET that followed it
        ([("wrote", None, 5, "13"), ("read", None, 5, "13"), ("event", "MODIFIED", 3, "10")], 5),
        ([("event", "MODIFIED", 4, "20"), ("event", "MODIFIED", 3, "19")], 4),  # out of order
        ([("event", "MODIFIED", 4, "20"), ("event", "DELETED", 4, "19")], 4),  # an old deletion (recreated since)
        ([("event", "ADDED", 1, "10"), ("forget", None, 0, "")], None),  # a 404, or a daemon resuming
        ([("event", "ADDED", 1, "10"), ("forget", None, 0, ""), ("event", "MODIFIED", 2, "11")], 2),
        ([("event", "MODIFIED", 4, "20"), ("event", "MODIFIED", 3, "x")], 3),  # not an integer: arrival order
        # a GET sent before a deletion that returns after it is not a live copy
        ([("event", "ADDED", 1, "10"), ("event", "DELETED", 1, "15"), ("read", None, 1, "12")], None),
        ([("event", "ADDED", 1, "10"), ("event", "DELETED", 1, "15"), ("event", "ADDED", 2, "16")], 2),  # recreated
        # a copy dropped by a 404 or a daemon's start leaves its version as the floor
        ([("event", "ADDED", 4, "20"), ("forget", None, 0, ""), ("event", "MODIFIED", 3, "18")], None),
        # the /scale's own event came before the /scale returned: it is kept, no GET needed
        ([("event", "ADDED", 1, "10"), ("event", "MODIFIED", 5, "13"), ("wrote", None, 5, "13")], 5),
        ([("event", "ADDED", 1, "10"), ("wrote", None, 5, "")], None),  # no version in the reply: GET it
    ],
)
def test_which_copy_a_scaling_pass_trusts(steps: list[Step], expected: int | None) -> None:
    cache = DeploymentCache()
    for step, kind, count, version in steps:
        if step == "event":
            cache.event(kind, deployment(count, version))
        elif step == "read":
            cache.read(deployment(count, version))
        elif step == "wrote":
            cache.wrote("ns", "tierpool-a", version)
        else:
            cache.forget("ns", "tierpool-a")
    assert replicas(cache) == expected


def test_the_watch_handler_learns_when_its_event_is_stale() -> None:
    cache = DeploymentCache()
    assert cache.event("ADDED", deployment(1, "10"))
    cache.wrote("ns", "tierpool-a", "13")
    assert not cache.event("MODIFIED", deployment(1, "11"))  # from before the /scale: the handler reads it fresh
    assert cache.event("MODIFIED", deployment(5, "13"))


def test_pools_do_not_share_entries() -> None:
    cache = DeploymentCache()
    cache.event("ADDED", deployment(1, "1", "tierpool-a"))
    cache.event("ADDED", deployment(2, "2", "tierpool-b"))
    cache.wrote("ns", "tierpool-a", "3")
    assert (replicas(cache, "tierpool-a"), replicas(cache, "tierpool-b"), len(cache)) == (None, 2, 1)


@pytest.mark.parametrize(
    ("last_pass", "interval", "now", "expected"),
    [
        (None, 5.0, 100.0, 2.0),  # no pass yet: check again soon
        (100.0, None, 100.0, 2.0),  # spec rejected: nothing is due
        (100.0, 5.0, 100.0, 2.0),  # just passed: at most TICK, to see spec changes
        (100.0, 5.0, 104.0, 1.0),  # due in a second
        (100.0, 5.0, 104.95, 0.1),  # due at once: never a busy loop
        (100.0, 5.0, 130.0, 0.1),  # late (a slow pass): go now
        (100.0, 1.0, 100.0, 1.0),  # short intervals are kept
    ],
)
def test_the_scaler_daemon_sleeps_until_its_next_pass(
    last_pass: float | None, interval: float | None, now: float, expected: float
) -> None:
    from tierpool_operator.scaler import next_check

    assert next_check(last_pass, interval, now) == pytest.approx(expected)


@pytest.mark.parametrize(("reconciling", "expected"), [(0, 60.0), (1, 300.0), (7, 300.0)])
def test_periodic_refreshes_wait_while_a_burst_is_reconciled(reconciling: int, expected: float) -> None:
    import asyncio
    import contextlib

    from tierpool_operator.config import OperatorConfig
    from tierpool_operator.gate import Gate
    from tierpool_operator.memo import OperatorContext, PoolMemo
    from tierpool_operator.scaler import _refresh

    async def check() -> float:
        gate = Gate()
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(reconciling):
                await stack.enter_async_context(gate.entry("reconcile"))
            await stack.enter_async_context(gate.entry("autoscale"))  # the pass itself never counts
            return _refresh(PoolMemo(OperatorContext(OperatorConfig(status_refresh=60.0), gate=gate)))

    assert asyncio.run(check()) == expected


@pytest.mark.parametrize(
    ("environ", "reconciling", "expected"),
    [
        ({}, 0, 300.0),  # children re-read every 5 minutes by default
        ({}, 1, 1500.0),  # five times that during a burst
        ({"TIERPOOL_CHILDREN_CHECK_SECONDS": "3"}, 0, 3.0),
    ],
)
def test_children_are_reread_on_their_own_period(environ: dict[str, str], reconciling: int, expected: float) -> None:
    from tierpool_operator.config import OperatorConfig
    from tierpool_operator.gate import Gate
    from tierpool_operator.memo import OperatorContext, PoolMemo
    from tierpool_operator.scaler import _refresh

    gate = Gate()
    gate.by_handler["reconcile"] = reconciling
    config = OperatorConfig.from_env(environ)
    assert _refresh(PoolMemo(OperatorContext(config, gate=gate)), config.children_check) == expected


class CountingStop:
    """kopf's DaemonStopped, for a test: counts the daemon's sleeps and stops it after ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.waits: list[float] = []
        self.seconds = seconds
        self.started = 0.0

    def __bool__(self) -> bool:
        import time

        return bool(self.started) and time.monotonic() - self.started >= self.seconds

    async def wait(self, timeout: float | None = None) -> None:
        import asyncio

        self.waits.append(timeout or 0.0)
        await asyncio.sleep(min(timeout or 0.0, 0.05))  # time compressed: 50 ms stand for each sleep


def test_a_pass_held_back_by_a_burst_does_not_poll() -> None:
    """A due pass that gives way to reconciles in flight must not make its daemon wake ten times a second."""
    import asyncio
    import logging
    import time

    import kopf

    from tierpool_operator.config import OperatorConfig
    from tierpool_operator.gate import Gate
    from tierpool_operator.memo import OperatorContext, PoolMemo
    from tierpool_operator.scaler import TICK, autoscale

    gate = Gate()
    gate.by_handler["reconcile"] = 1
    body = kopf.Body(
        cast(
            Any,
            {
                "apiVersion": "tierpool.io/v1alpha1",
                "kind": "AgentPool",
                "metadata": {"name": "a", "namespace": "ns", "generation": 1, "uid": "u"},
                "spec": {"tiers": [{"name": "p0", "weight": 1}], "redis": {"url": "redis://127.0.0.1:1/0"}},
                "status": {"observedGeneration": 1, "scaler": {"at": time.time() - 10}},  # due, and held
            },
        )
    )
    memo = PoolMemo(OperatorContext(OperatorConfig(), deployments=DeploymentCache(), gate=gate))
    stop = CountingStop(0.5)

    async def run() -> None:
        stop.started = time.monotonic()
        await cast(Any, autoscale)(
            body=body, meta=body.meta, status=body.status, memo=memo, stopped=stop, logger=logging.getLogger("t")
        )

    asyncio.run(run())
    assert stop.waits and all(wait == TICK for wait in stop.waits), stop.waits


class RecordingKube:
    """Stands in for the operator's Kube: records each status patch as the API server would merge it."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    def patch_pool_status(self, namespace: str, name: str, build: Any) -> None:
        self.patches.append(build({}))


def test_redis_backoff_grows_while_kopfs_copy_lags(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 1,000 pools kopf's copy of a pool lagged minutes behind (the API server had closed its watch as too slow).
    The scaler read its failure count and retry time from that copy, so during an outage every pass counted the
    first failure again: no growing back-off, a retry on every pass and a Warning Event each time."""
    import asyncio

    import kopf
    from prometheus_client import CollectorRegistry

    from tierpool_operator import scaler
    from tierpool_operator.config import OperatorConfig
    from tierpool_operator.kube import Kube
    from tierpool_operator.memo import OperatorContext, PoolMemo
    from tierpool_operator.metrics import OperatorMetrics

    warnings: list[str] = []
    monkeypatch.setattr(kopf, "warn", lambda body, reason, message: warnings.append(reason))
    kube = RecordingKube()
    context = OperatorContext(OperatorConfig(), kube=cast(Kube, kube), metrics=OperatorMetrics(CollectorRegistry()))
    memo = PoolMemo(context)
    body = kopf.Body(cast(Any, {"metadata": {"name": "a", "namespace": "ns", "generation": 1}, "status": {}}))
    status = body.status  # kopf's copy: it never shows the scaler's writes
    ready = {"type": "Ready", "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "t"}

    async def fail_three_times() -> list[float]:
        retry_at = []
        for now in (100.0, 103.0, 108.0):
            assert scaler.redis_retry_at(status, memo) <= now  # each pass is past the previous back-off
            await scaler._redis_unreachable(body, status, memo, context.config, TimeoutError(), now, ready)
            retry_at.append(scaler.redis_retry_at(status, memo) - now)
        return retry_at

    delays = asyncio.run(fail_three_times())
    assert [patch["redisFailures"] for patch in kube.patches] == [1, 2, 3]
    assert delays == [2.0, 4.0, 8.0]
    assert warnings == ["RedisUnreachable"]  # the first failure, then every tenth
