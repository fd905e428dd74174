"""Whole scaling passes against a stand-in API server whose status kopf's copy does not follow: at 1,000 pools the
API server closed kopf's watch as too slow and kopf's copy of each pool lagged minutes behind the scaler's writes.
What the API server holds must still be right: an outage reported, a recovery reported, a back-off kept."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
from prometheus_client import CollectorRegistry
from redis.exceptions import NoPermissionError

from tierpool.model.keys import PoolKeys
from tierpool.protocol.version import PROTOCOL
from tierpool.scaling.observation import PoolObservation, TierObservation
from tierpool.store.registry import parse_published
from tierpool_operator import scaler
from tierpool_operator.config import OperatorConfig
from tierpool_operator.deployments import DeploymentCache
from tierpool_operator.kube import Kube
from tierpool_operator.memo import OperatorContext, PoolMemo
from tierpool_operator.metrics import OperatorMetrics
from tierpool_operator.pool_writes import written_elsewhere

AT_REST = Path(__file__).resolve().parents[3] / "bench" / "results" / "agentpool_at_rest.json"
"""A pool as the API server held it at rest (saved by bench/control_plane.py): observed, reachable, one replica."""
DEPLOYMENT = {
    "metadata": {"generation": 1, "resourceVersion": "1"},
    "spec": {"replicas": 1},
    "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1},
}


class ApiServer:
    """Holds the pool's status and merges each status patch into it, as a JSON merge patch would."""

    def __init__(self, status: dict[str, Any]) -> None:
        self.status = copy.deepcopy(status)
        self.patches: list[dict[str, Any]] = []

    def patch_pool_status(self, namespace: str, name: str, build: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        fields = build(copy.deepcopy(self.status))
        self.patches.append(fields)
        for key, value in fields.items():
            if value is None:
                self.status.pop(key, None)
            else:
                self.status[key] = value

    def reachable(self) -> str:
        return next(c["status"] for c in self.status["conditions"] if c["type"] == "RedisReachable")


class Keys:
    """The client's writes: the operator's only one is the published spec."""

    def __init__(self) -> None:
        self.sets: list[tuple[str, str]] = []
        self.refusal: Exception | None = None

    async def set(self, key: str, value: str) -> None:
        if self.refusal is not None:
            raise self.refusal
        self.sets.append((key, value))


class Redis:
    """The pool's Redis as the scaler sees it: up or down; ``during`` runs inside an observation."""

    def __init__(self) -> None:
        self.up = True
        self.observations = 0
        self.during: Callable[[], None] = lambda: None
        self.refusal: Exception | None = None
        self.policy: str | None = "noeviction"
        self.dead_letters = 0
        self.oldest_pending = 0.0
        self.client = Keys()

    async def observe(self, pool: Any, memo: PoolMemo, timeout: float) -> PoolObservation:
        self.observations += 1
        self.during()
        if not self.up:
            raise TimeoutError("no reply")
        if self.refusal is not None:
            raise self.refusal
        if memo.redis is None:
            memo.redis = cast(Any, self.client)
        tier = TierObservation(
            "p0", True, 0, 0, True, 0, 0.0, 0, 0, None, oldest_pending_age_seconds=self.oldest_pending
        )
        at = cast(float, memo.last_pass)  # Redis' clock: the pass's own
        return PoolObservation("p0", at, (tier,), self.dead_letters, eviction_policy=self.policy)


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> tuple[kopf.Body, ApiServer, Redis, PoolMemo]:
    document = json.loads(AT_REST.read_text())
    body = kopf.Body(cast(Any, document))  # kopf's copy: frozen, it never sees the writes below
    server, redis = ApiServer(document["status"]), Redis()

    async def worker_deployment(*_: Any) -> dict[str, Any]:
        return DEPLOYMENT

    async def forget_redis(memo: PoolMemo) -> None:
        memo.redis = None

    monkeypatch.setattr(scaler, "_worker_deployment", worker_deployment)
    monkeypatch.setattr(scaler, "_observe", redis.observe)
    monkeypatch.setattr(scaler, "forget_redis", forget_redis)
    monkeypatch.setattr(kopf, "warn", lambda *_, **__: None)
    monkeypatch.setattr(kopf, "event", lambda *_, **__: None)
    context = OperatorContext(
        OperatorConfig(),
        kube=cast(Kube, server),
        metrics=OperatorMetrics(CollectorRegistry()),
        deployments=DeploymentCache(),
    )
    memo = PoolMemo(context)
    return body, server, redis, memo


def passes(body: kopf.Body, memo: PoolMemo, steps: list[tuple[float, Callable[[], None]]]) -> None:
    """A scaling pass at each offset (seconds after the copy's last saved pass), each after its own set-up."""
    saved_at = float(body.status["scaler"]["at"])

    async def run() -> None:
        for offset, before in steps:
            before()
            pool = scaler.parse_body(body)
            await scaler.scaling_pass(pool, body, body.metadata, body.status, memo, saved_at + offset)

    asyncio.run(run())


def set_up(redis: Redis, up: bool) -> Callable[[], None]:
    return lambda: setattr(redis, "up", up)


def catch_up(body: kopf.Body, server: ApiServer, redis: Redis, up: bool) -> Callable[[], None]:
    """kopf's copy catches up with the API server once, then lags again."""

    def step() -> None:
        body._replace_with(cast(Any, {**dict(body), "status": copy.deepcopy(server.status)}))
        redis.up = up

    return step


def test_a_recovery_is_written_though_kopfs_copy_is_from_before_the_outage(setup: Any) -> None:
    """The recovery pass judged its report against kopf's copy, which still showed the pool reachable: nothing to
    change, so nothing was written, and the API server said Unreachable until the next refresh (60 s)."""
    body, server, redis, memo = setup
    steps = [(5.0, set_up(redis, True)), (10.0, catch_up(body, server, redis, False)), (15.0, set_up(redis, True))]
    passes(body, memo, steps)
    assert server.reachable() == "True"
    assert server.status["redisFailures"] == 0 and "redisRetryAt" not in server.status


def test_a_pass_inside_the_backoff_does_not_try_redis(setup: Any) -> None:
    """kopf's copy shows no retry time; the scaler's own last write does (2 s after the first failure)."""
    body, server, redis, memo = setup
    passes(body, memo, [(5.0, set_up(redis, False)), (6.0, set_up(redis, True)), (7.5, set_up(redis, True))])
    assert redis.observations == 2  # the pass at 6.0 waited: its back-off ran to 7.0
    assert server.reachable() == "True"


def with_redis_url(body: kopf.Body, redis: Redis, url: str) -> Callable[[], None]:
    """The user fixes spec.redis, and the new URL answers (kopf's copy shows the new spec; its status still lags)."""

    def step() -> None:
        spec = {**dict(body)["spec"], "redis": {"url": url}}
        body._replace_with(cast(Any, {**dict(body), "spec": spec}))
        redis.up = True

    return step


def test_a_changed_spec_redis_is_tried_at_once_not_after_the_backoff(setup: Any) -> None:
    """Three failures put the next attempt 8 s away; the fixed URL is tried on the very next pass, with a client
    of its own (the one built from the old URL is dropped)."""
    body, server, redis, memo = setup
    passes(body, memo, [(5.0, set_up(redis, False)), (7.5, set_up(redis, False)), (12.0, set_up(redis, False))])
    assert server.status["redisFailures"] == 3 and redis.observations == 3
    old_client: Any = "a client of the old URL"
    memo.redis = old_client
    passes(body, memo, [(12.5, with_redis_url(body, redis, "redis://fixed:6379/0"))])
    assert redis.observations == 4 and server.reachable() == "True" and server.status["redisFailures"] == 0
    assert memo.redis != "a client of the old URL"


def test_a_restarted_operator_keeps_the_backoff_from_status(setup: Any) -> None:
    """A new daemon (the operator restarted while Redis is down) has no memory of its own: it reads the back-off
    from status, and does not retry every pool at once."""
    body, server, redis, memo = setup
    saved_at = float(body.status["scaler"]["at"])
    status = {**dict(body)["status"], "redisFailures": 6, "redisRetryAt": saved_at + 60}
    body._replace_with(cast(Any, {**dict(body), "status": status}))
    passes(body, memo, [(5.0, set_up(redis, True)), (30.0, set_up(redis, True))])
    assert redis.observations == 0
    passes(body, memo, [(61.0, set_up(redis, True))])
    assert redis.observations == 1 and server.reachable() == "True"


def test_a_forced_report_is_written_once(setup: Any) -> None:
    """After a write elsewhere the next report is written in full, and the one after only if something changed."""
    body, server, redis, memo = setup
    passes(body, memo, [(5.0, set_up(redis, True))])
    written = len(server.patches)
    written_elsewhere(memo)
    passes(body, memo, [(10.0, set_up(redis, True)), (15.0, set_up(redis, True)), (20.0, set_up(redis, True))])
    assert len(server.patches) == written + 1


def test_a_report_whose_write_failed_stays_due(setup: Any) -> None:
    """kopf's copy shows what the report would write (it caught up before another writer's write): only the
    forced report puts the pool right, so a failed write must leave it due."""
    body, server, redis, memo = setup
    passes(body, memo, [(5.0, set_up(redis, True)), (7.0, catch_up(body, server, redis, True))])
    written_elsewhere(memo)
    real = server.patch_pool_status

    def unavailable(*_: Any) -> None:
        raise OSError("API server unavailable")

    server.patch_pool_status = unavailable  # type: ignore[method-assign]
    with pytest.raises(OSError):
        passes(body, memo, [(10.0, set_up(redis, True))])
    server.patch_pool_status = real  # type: ignore[method-assign]
    written = len(server.patches)
    passes(body, memo, [(15.0, set_up(redis, True))])
    assert len(server.patches) == written + 1


def test_a_resumed_daemon_forgets_what_it_wrote() -> None:
    """Paused (another replica acting), then resumed: what this daemon wrote before the pause may have been
    overwritten since, so its back-off, last report and last Ready are read from status again."""
    body = kopf.Body(cast(Any, json.loads(AT_REST.read_text())))
    memo = PoolMemo(
        OperatorContext(OperatorConfig(), deployments=DeploymentCache()),
        redis_backoff=(3, 9e9),
        status_written=({}, 1.0),
        ready_written={},
        in_step=("1", 1, ["p0"]),
    )
    scaler._starting(body, memo)
    assert (memo.redis_backoff, memo.status_written, memo.ready_written, memo.in_step) == (None, None, None, None)


def test_passes_inside_the_backoff_write_a_changed_ready_once(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a back-off a pass only keeps Ready current. Judged against kopf's copy (here: RolloutPending, while
    the Deployment is ready), every such pass wrote the same Ready again."""
    body, server, redis, memo = setup
    passes(body, memo, [(5.0, set_up(redis, False)), (5.5, set_up(redis, False))])
    assert [p for p in server.patches if set(p) == {"conditions"}] == []  # the outage's write carried Ready

    async def rolling_out(*_: Any) -> dict[str, Any]:
        return {**DEPLOYMENT, "status": {**DEPLOYMENT["status"], "readyReplicas": 0}}

    monkeypatch.setattr(scaler, "_worker_deployment", rolling_out)
    passes(body, memo, [(6.0, set_up(redis, False)), (6.5, set_up(redis, False))])
    assert len([p for p in server.patches if set(p) == {"conditions"}]) == 1
    assert next(c["reason"] for c in server.status["conditions"] if c["type"] == "Ready") == "WorkersNotReady"


def test_a_ready_written_by_a_reconcile_inside_the_backoff_is_corrected(setup: Any) -> None:
    """A reconcile wrote Ready (RolloutPending) during the back-off; the Deployment is ready again. kopf's copy,
    lagging, still shows WorkersReady, so judged against it the pass wrote nothing."""
    body, server, redis, memo = setup
    saved_at = float(body.status["scaler"]["at"])
    ready = {"type": "Ready", "status": "True", "reason": "WorkersReady", "message": "1/1 replica(s) ready and current"}
    ready["observedGeneration"] = 1
    conditions = [
        c if c["type"] != "Ready" else {**ready, "lastTransitionTime": "t"} for c in body.status["conditions"]
    ]
    body._replace_with(cast(Any, {**dict(body), "status": {**dict(body)["status"], "conditions": conditions}}))
    passes(body, memo, [(5.0, set_up(redis, False))])
    pending = {
        "type": "Ready",
        "status": "False",
        "reason": "RolloutPending",
        "message": "m",
        "lastTransitionTime": "t",
    }
    server.patch_pool_status("ns", "p0", lambda current: {"conditions": [pending]})  # the reconcile's write
    written_elsewhere(memo, [pending])
    passes(body, memo, [(5.5, set_up(redis, False))])
    assert saved_at + 5.5 < scaler.redis_retry_at(body.status, memo)  # still inside the back-off
    assert next(c["reason"] for c in server.status["conditions"] if c["type"] == "Ready") == "WorkersReady"


def condition_of(server: ApiServer, kind: str) -> dict[str, Any]:
    return next(c for c in server.status["conditions"] if c["type"] == kind)


def test_a_refused_observation_makes_redis_reachable_false_with_the_reason(setup: Any) -> None:
    """A permission error once read as "no stream" (a backlog of 0); now it is a failed observation, reported."""
    body, server, redis, memo = setup
    redis.refusal = NoPermissionError("this user has no permissions to run the 'xinfo|stream' command")
    passes(body, memo, [(5.0, lambda: None)])
    reachable = condition_of(server, "RedisReachable")
    assert (reachable["status"], reachable["reason"]) == ("False", "Refused")
    assert "xinfo|stream" in reachable["message"] and server.status["redisFailures"] == 1


def test_a_secret_outside_the_allowlist_makes_redis_reachable_false_naming_the_field(setup: Any) -> None:
    from tierpool_operator.redis_access import SecretNotAllowed

    body, server, redis, memo = setup
    redis.refusal = SecretNotAllowed("spec.redis.passwordSecretRef: Secret 'x' is not in ... allowedSecretNames (a)")
    passes(body, memo, [(5.0, lambda: None)])
    reachable = condition_of(server, "RedisReachable")
    assert reachable["status"] == "False" and "SecretNotAllowed: spec.redis.passwordSecretRef:" in reachable["message"]


def test_the_spec_is_published_for_producers_once_and_again_after_the_children_check(setup: Any) -> None:
    """A pool at zero replicas has no worker to publish its spec, so ``submit --pool`` would fail for ever."""
    body, _, redis, memo = setup
    every = memo.context.config.children_check
    passes(body, memo, [(5.0, lambda: None), (10.0, lambda: None), (15.0 + every, lambda: None)])
    assert [key for key, _ in redis.client.sets] == ["tierpool:{scale-1000/p0}:spec"] * 2
    assert json.loads(redis.client.sets[0][1])["protocol"] == PROTOCOL
    assert parse_published(PoolKeys("scale-1000", "p0"), redis.client.sets[0][1]).tier_names == ["p0"]


def test_a_refused_publication_is_logged_once_and_the_pass_goes_on(
    setup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    body, server, redis, memo = setup
    redis.client.refusal = NoPermissionError("no permissions to access the 'tierpool:{scale-1000/p0}:spec' key")
    passes(body, memo, [(5.0, lambda: None), (10.0, lambda: None)])
    warnings = [r for r in caplog.records if "cannot publish the spec" in r.message]
    assert len(warnings) == 1 and server.reachable() == "True"


@pytest.mark.parametrize(
    ("policy", "allow", "status", "reason"),
    [
        ("noeviction", False, "True", "NoEviction"),
        ("allkeys-lru", False, "False", "AllKeysEviction"),
        ("allkeys-lru", True, "False", "AllKeysEviction"),
        ("volatile-ttl", False, "False", "VolatileEviction"),
        (None, False, "False", "Unknown"),
    ],
)
def test_the_eviction_policy_becomes_a_condition(
    setup: Any, policy: str | None, allow: bool, status: str, reason: str
) -> None:
    body, server, redis, memo = setup
    redis.policy = policy
    if allow:
        spec = {**body["spec"], "redis": {**body["spec"].get("redis", {}), "allowEviction": True}}
        body._replace_with(cast(Any, {**dict(body), "spec": spec}))
    passes(body, memo, [(5.0, lambda: None)])
    found = condition_of(server, "RedisEvictionSafe")
    assert (found["status"], found["reason"]) == (status, reason)
    assert (policy or "could not be read") in found["message"]


def test_a_pass_exports_the_dead_letters_and_the_oldest_pending_age(setup: Any) -> None:
    """Both come from the observation the scaler makes anyway (XLEN of the DLQ, XPENDING's summary per tier)."""
    body, _, redis, memo = setup
    registry = CollectorRegistry()
    memo.context.metrics = OperatorMetrics(registry)
    redis.dead_letters, redis.oldest_pending = 7, 4200.5
    passes(body, memo, [(5.0, set_up(redis, True))])
    pool = {"namespace": body.metadata.namespace, "pool": body.metadata.name}
    assert registry.get_sample_value("tierpool_pool_dead_letters", pool) == 7
    tier = {**pool, "tier": "p0"}
    assert registry.get_sample_value("tierpool_pool_oldest_pending_age_seconds", tier) == 4200.5
