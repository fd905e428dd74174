"""The scaling decision, table-driven. Per-replica capacity in these tables: concurrency 10 / taskSeconds 1s = 10/s."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from tierpool.model.spec import PoolSpec
from tierpool.scaling.decision import Decision, History, decide, one_batch
from tierpool.scaling.observation import PoolObservation, TierObservation

NOW = 10_000.0
FLAT = {"p0": (100, 100), "p1": (0, 0), "p2": (0, 0)}
"""Counters a pass ago, for the throughput cases."""


def make_spec(replicas: dict[str, int] | None = None, grace: int = 60, **scaling: Any) -> PoolSpec:
    return PoolSpec.model_validate(
        {
            "tiers": [
                {"name": "p0", "weight": 70, "sla": "30s"},
                {"name": "p1", "weight": 25, "sla": "5m"},
                {"name": "p2", "weight": 5},
            ],
            "worker": {"concurrency": 10, "terminationGracePeriodSeconds": grace},
            "replicas": replicas or {"min": 1, "max": 20},
            "scaling": {"taskSeconds": "1s", "scaleDownStabilization": "60s", "cooldown": "300s", **scaling},
        }
    )


def limited_spec(replicas: dict[str, int] | None = None) -> PoolSpec:
    """make_spec with a pool rate limit (protocol 5)."""
    document = make_spec(replicas).model_dump(by_alias=True)
    document["rateLimits"] = [{"name": "provider", "perMinute": 60}]
    return PoolSpec.model_validate(document)


def reserved_spec(p0: int, p1: int = 0) -> PoolSpec:
    """make_spec with p0 (and p1) reserving slots of every replica for themselves."""
    document = make_spec().model_dump(by_alias=True)
    document["tiers"][0]["reservedSlots"], document["tiers"][1]["reservedSlots"] = p0, p1
    return PoolSpec.model_validate(document)


def tier(name: str, backlog: int = 0, pending: int = 0, age: float = 0.0, **kw: Any) -> TierObservation:
    return TierObservation(
        name=name,
        exists=kw.get("exists", True),
        length=backlog + pending,
        backlog=backlog,
        lag_exact=kw.get("lag_exact", True),
        pending=pending,
        oldest_age_seconds=age,
        consumers=1,
        entries_added=kw.get("added", 0),
        entries_read=kw.get("read", 0),
        active=kw.get("active"),
        reclaimable=kw.get("reclaimable", 0),
        reentered=kw.get("reentered", 0),
    )


def observe(
    p0: dict[str, Any] | None = None,
    p1: dict[str, Any] | None = None,
    p2: dict[str, Any] | None = None,
    at: float = NOW,
) -> PoolObservation:
    tiers = tuple(tier(name, **(given or {})) for name, given in (("p0", p0), ("p1", p1), ("p2", p2)))
    return PoolObservation("ns/pool", at, tiers, 0)


@dataclass
class Case:
    name: str
    obs: PoolObservation
    current: int
    desired: int
    spec: PoolSpec = field(default_factory=make_spec)
    history: History = field(default_factory=History)
    reason: str = ""


CASES = [
    Case("idle stays at min", observe(), 1, 1),
    Case("small p0 backlog fits one replica", observe(p0={"backlog": 150}), 1, 1),
    Case("p0 burst scales up at once", observe(p0={"backlog": 600}), 1, 4, reason="tier p0"),
    Case("ageing head of line needs more", observe(p0={"backlog": 600, "age": 10}), 1, 12),
    Case("head of line past the budget clamps to max", observe(p0={"backlog": 600, "age": 20}), 1, 20),
    Case("p1 drains within half its 5m SLA", observe(p1={"backlog": 3000}), 1, 2),
    Case("no-SLA tier uses a 10 minute budget", observe(p2={"backlog": 6000}), 1, 2),
    Case(
        "tiers share the pool by deadline: the most demanding horizon (4,650 within 300 s), not the sum (30/s)",
        observe(p0={"backlog": 150}, p1={"backlog": 1500}, p2={"backlog": 3000}),
        1,
        2,
        reason="4650 due within 300s",
    ),
    Case(
        "an urgent small tier and a large lenient one: the urgent horizon drives",
        observe(p0={"backlog": 600, "age": 10}, p2={"backlog": 3000}),
        1,
        12,  # 600 within 5 s = 120/s; 3,600 within 300 s = 12/s is less demanding (the sum would ask for 13)
        reason="600 due within 5s",
    ),
    Case(
        "in-flight tasks that may outlast the grace period keep their workers",
        observe(p0={"pending": 95}),
        10,
        10,
        spec=make_spec(taskSeconds="60s"),
        reason="in flight",
    ),
    Case(
        "4 long tasks on 4 workers keep all 4 (running tasks do not move; 4 of 10 slots would pack into 1)",
        replace(observe(p0={"pending": 4, "active": 4}), busy_workers=4),
        4,
        4,
        spec=make_spec(taskSeconds="600s"),
        reason="4 tasks in flight on 4 worker(s) need 4 replica(s)",
    ),
    Case(
        "lag keeps every worker holding a task too",
        replace(observe(p0={"pending": 4, "active": 4}), busy_workers=4),
        4,
        4,
        spec=make_spec(policy="lag"),
    ),
    Case(
        "workers still finishing after a scale-in do not bring the count back up",
        replace(observe(p0={"pending": 4, "active": 4}), busy_workers=4),
        2,
        2,
        spec=make_spec(taskSeconds="600s"),
    ),
    Case("in-flight long tasks scale up too", observe(p0={"pending": 95}), 2, 10, spec=make_spec(taskSeconds="60s")),
    Case(
        "long tasks running on live workers scale up",
        observe(p0={"pending": 95, "active": 95}),
        2,
        10,
        spec=make_spec(taskSeconds="60s"),
    ),
    Case(
        "short tasks finish inside a drain: a busy pool scales in to what the SLA needs",
        observe(p0={"pending": 95, "active": 95}),
        10,
        9,
        reason="sla policy",
    ),
    Case(
        "a grace period shorter than twice the task time brings the floor back",
        observe(p0={"pending": 95, "active": 95}),
        10,
        10,
        spec=make_spec(grace=8, taskSeconds="5s"),
        reason="outlast the grace period",
    ),
    Case(
        "reserved slots: p2 gets 8 of 10 slots a replica, so its backlog needs 10/8 the replicas",
        observe(p2={"backlog": 6000}),
        1,
        3,  # 20/s over 8 usable slots of 10 = 2.5 replicas; 2 without the reservation
        spec=reserved_spec(2),
        reason="8 of 10 slots per replica open to tier p1 and below",
    ),
    Case(
        "reserved slots: the reserving tier itself can use every slot",
        observe(p0={"backlog": 600}),
        1,
        4,
        spec=reserved_spec(2),
    ),
    Case(
        "reserved slots: each tier's backlog counts against the slots open to it",
        observe(p1={"backlog": 3000}, p2={"backlog": 12000}),
        1,
        8,  # p1 and p2 need 60/s on 8 of 10 slots: 7.5 replicas; p2 alone 40/s on 5 of 10: 8 (6 unreserved)
        spec=reserved_spec(2, 3),
        reason="5 of 10 slots per replica open to tier p2 and below",
    ),
    Case(
        "tasks waiting out a retry backoff are not busy (a provider outage)",
        observe(p0={"pending": 400, "active": 0}),
        1,
        1,
        reason="sla policy",
    ),
    Case(
        "backoff and dead consumers' tasks do not hold the pool at max",
        observe(p0={"pending": 400, "active": 30}),
        20,
        19,  # a step down: 30 running need 3
    ),
    Case(
        "retries due again after an outage wait like backlog (600 due, 30 s SLA: 4 replicas)",
        observe(p0={"pending": 600, "active": 0, "reclaimable": 600}),
        1,
        4,
        reason="600 waiting, 600 of them due again",
    ),
    Case(
        "lag policy counts retries due again as waiting",
        observe(p0={"pending": 100, "active": 0, "reclaimable": 100}),
        1,
        5,
        spec=make_spec(policy="lag", targetPerReplica=20),
        reason="waiting 100",
    ),
    Case(
        "tasks in backoff still keep one worker to retry them",
        observe(p0={"pending": 40, "active": 0}),
        1,
        1,
        spec=make_spec({"min": 0, "max": 20}),
        history=History(last_active=NOW - 400),
    ),
    Case("max clamp", observe(p0={"backlog": 100_000}), 3, 20),
    Case("min clamp", observe(), 3, 3, spec=make_spec({"min": 3, "max": 20})),
    Case(
        "wake from zero on the first task",
        observe(p2={"backlog": 1}),
        0,
        1,
        spec=make_spec({"min": 0, "max": 20}),
        reason="waking from zero",
    ),
    Case(
        "wake from zero straight to the need", observe(p0={"backlog": 600}), 0, 4, spec=make_spec({"min": 0, "max": 20})
    ),
    Case(
        "idle inside the cooldown keeps one",
        observe(),
        2,
        1,
        spec=make_spec({"min": 0, "max": 20}),
        history=History(last_active=NOW - 10),
        reason="cooldown",
    ),
    Case(
        "idle past the cooldown goes to zero",
        observe(),
        1,
        0,
        spec=make_spec({"min": 0, "max": 20}),
        history=History(last_active=NOW - 400),
        reason="scaling to zero",
    ),
    Case(
        "zero is a step at a time",
        observe(),
        3,
        2,
        spec=make_spec({"min": 0, "max": 20}),
        history=History(last_active=NOW - 400),
    ),
    Case(
        "never zero while pending",
        observe(p1={"pending": 1}),
        1,
        1,
        spec=make_spec({"min": 0, "max": 20}),
        history=History(last_active=NOW - 400),
    ),
    Case(
        "never zero while lagging",
        observe(p2={"backlog": 1}),
        1,
        1,
        spec=make_spec({"min": 0, "max": 20}),
        history=History(last_active=NOW - 400),
    ),
    Case(
        "stays at zero when idle",
        observe(),
        0,
        0,
        spec=make_spec({"min": 0, "max": 20}),
        history=History(last_active=NOW - 400),
    ),
    Case(
        "scale-down waits for the window",
        observe(),
        5,
        5,
        history=History(recommendations=((NOW - 10, 5),)),
        reason="stabilized",
    ),
    Case("scale-down after the window, one step", observe(), 5, 4, history=History(recommendations=((NOW - 70, 5),))),
    Case(
        "scale-down step of two",
        observe(),
        5,
        3,
        spec=make_spec(scaleDownStep=2),
        history=History(recommendations=((NOW - 70, 5),)),
    ),
    Case("scale-up step limit", observe(p0={"backlog": 600}), 1, 3, spec=make_spec(scaleUpStep=2)),
    Case(
        "scale-up window takes the lowest",
        observe(p0={"backlog": 600}),
        1,
        2,
        spec=make_spec(scaleUpStabilization="30s"),
        history=History(recommendations=((NOW - 10, 2),)),
    ),
    Case("NULL lag falls back to the counted backlog", observe(p0={"backlog": 300, "lag_exact": False}), 1, 2),
    Case("missing group counts as empty", observe(p0={"exists": False}), 1, 1, reason="no consumer group yet for p0"),
    Case(
        "missing streams never run away",
        observe(p0={"exists": False}, p1={"exists": False}, p2={"exists": False}),
        4,
        4,
        history=History(recommendations=((NOW - 5, 4),)),
        reason="counted from the stream",
    ),
    Case(
        "lag policy divides backlog by target",
        observe(p0={"backlog": 95}),
        1,
        5,
        spec=make_spec(policy="lag", targetPerReplica=20),
        reason="lag policy",
    ),
    Case("lag policy keeps in-flight workers", observe(p0={"pending": 30}), 3, 3, spec=make_spec(policy="lag")),
    Case(
        "lag policy wakes from zero",
        observe(p1={"backlog": 1}),
        0,
        1,
        spec=make_spec({"min": 0, "max": 5}, policy="lag"),
    ),
    Case(
        "lag policy ignores SLA urgency",
        observe(p0={"backlog": 20, "age": 29}),
        1,
        1,
        spec=make_spec(policy="lag", targetPerReplica=20),
    ),
    Case(
        "external leaves replicas alone",
        observe(p0={"backlog": 10_000}),
        7,
        7,
        spec=make_spec(policy="external"),
        reason="external",
    ),
    Case(
        "measured per-replica rate wins over taskSeconds",
        observe(p0={"backlog": 150}),
        1,
        2,
        history=History(per_replica_rate=5.0),
    ),
    Case(
        "arrival rate keeps up with producers",
        observe(p0={"added": 300}),
        1,
        3,
        history=History(at=NOW - 10, counters={"p0": (0, 0)}, arrival_rate=30.0),
    ),
    Case(
        "counter reset (stream recreated) is not a negative rate",
        observe(p0={"added": 5, "read": 5}),
        2,
        2,
        history=History(
            at=NOW - 10, counters={"p0": (900, 900)}, recommendations=((NOW - 5, 2),), arrivals=(30.0, 30.0)
        ),
    ),
    Case(
        "a per-replica rate learned on a stalled provider recovers",
        observe(p0={"backlog": 500}),
        1,
        4,  # as with the configured 10/s (3.3 replicas); the stale 0.1/s would ask for 333
        history=History(at=NOW - 600, per_replica_rate=0.1),
    ),
    Case(
        "no scale-up while throughput stayed flat after the last one",
        observe(p0={"backlog": 6000, "added": 6100, "read": 110}),
        8,
        8,
        history=History(
            at=NOW - 2, counters=FLAT, delivery_rate=5.0, plateau=(4, 5.0), last_scale=NOW - 60, last_active=NOW
        ),
        reason="throughput stayed flat at 5.00/s while replicas rose 4 -> 8",
    ),
    Case(
        "a scale-up that raised throughput is followed by more",
        observe(p0={"backlog": 6000, "added": 6100, "read": 140}),
        8,
        20,
        history=History(
            at=NOW - 2, counters=FLAT, delivery_rate=20.0, plateau=(4, 5.0), last_scale=NOW - 60, last_active=NOW
        ),
    ),
    Case(
        "a scale-up is judged only once it has settled",
        observe(p0={"backlog": 6000, "added": 6100, "read": 110}),
        8,
        20,
        history=History(
            at=NOW - 2, counters=FLAT, delivery_rate=5.0, plateau=(4, 5.0), last_scale=NOW - 5, last_active=NOW
        ),
    ),
    # protocol 5: tasks waiting for a rate limit, and scheduled tasks
    Case("the same backlog without throttling scales up", observe(p0={"backlog": 600}), 2, 4),
    Case(
        "throttled backlog does not scale up",
        replace(observe(p0={"backlog": 600}), throttled=500),
        2,
        2,
        reason="holding at 2 (recommendation 4): 500 task(s) throttled by rate limits",
    ),
    Case(
        "tasks coming back from a rate limit are not arrivals to scale for",
        replace(observe(p0={"added": 300}), throttled=40),
        1,
        1,
        history=History(at=NOW - 10, counters={"p0": (0, 0)}, arrival_rate=30.0),
        reason="throttled by rate limits",
    ),
    Case(
        "a pool with rate limits confirms a scale-up on a second pass (a burst is not throttled yet)",
        observe(p0={"backlog": 600}),
        2,
        2,
        spec=limited_spec(),
        reason="holding at 2 (recommendation 4): the pool has rate limits, so a scale-up waits for a second pass",
    ),
    Case(
        "a pool with rate limits scales up on a need seen twice",
        observe(p0={"backlog": 600}),
        2,
        4,
        spec=limited_spec(),
        history=History(recommendations=((NOW - 5, 2),), wanted=4),  # held at 2 a pass ago
    ),
    Case(
        "tasks throttled a pass ago still hold a scale-up (the set empties between draws)",
        observe(p0={"backlog": 600}),
        2,
        2,
        spec=limited_spec(),
        history=History(recommendations=((NOW - 5, 2),), wanted=4, throttled_at=NOW - 5),
        reason="tasks were throttled by rate limits 5s ago",
    ),
    Case(
        "a throttle older than the settle time no longer holds",
        observe(p0={"backlog": 600}),
        2,
        4,
        spec=limited_spec(),
        history=History(recommendations=((NOW - 5, 2),), wanted=4, throttled_at=NOW - 120),
    ),
    Case(
        "a pool with rate limits still wakes from zero at once",
        observe(p0={"backlog": 600}),
        0,
        4,
        spec=limited_spec({"min": 0, "max": 20}),
        reason="waking from zero",
    ),
    Case(
        "3,000 arrivals in 10 s need 9 replicas",
        observe(p0={"added": 3000}),
        1,
        9,
        history=History(at=NOW - 10, counters={"p0": (0, 0)}),
    ),
    Case(
        "tasks coming back from a throttle or a long retry are not arrivals",
        observe(p0={"added": 3000, "reentered": 2990}),
        1,
        1,
        history=History(at=NOW - 10, counters={"p0": (0, 0)}),
        reason="0.03 replica(s) needed",
    ),
    Case(
        "throttled tasks still wake a pool from zero",
        replace(observe(p0={"backlog": 600}), throttled=500, due_now=1),
        0,
        4,
        spec=make_spec({"min": 0, "max": 20}),
        reason="waking from zero",
    ),
    Case(
        "a due scheduled task wakes a pool at zero: only a worker moves it",
        replace(observe(), scheduled=3, due_now=3),
        0,
        1,
        spec=make_spec({"min": 0, "max": 20}),
        history=History(last_active=NOW - 400),
    ),
    Case(
        "tasks scheduled for later let an idle pool go to zero",
        replace(observe(), scheduled=100),
        1,
        0,
        spec=make_spec({"min": 0, "max": 20}),
        history=History(last_active=NOW - 400),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_decision_table(case: Case) -> None:
    decision = decide(case.spec, case.obs, case.history, case.current, NOW)
    assert decision.desired == case.desired, decision.reason
    assert case.reason in decision.reason


def run(spec: PoolSpec, observations: list[PoolObservation], start: int) -> list[Decision]:
    history, current, decisions = History(), start, []
    for index, obs in enumerate(observations):
        decision = decide(spec, obs, history, current, NOW + index * 5)
        history, current = decision.history, decision.desired
        decisions.append(decision)
    return decisions


def periodic_batches(passes: int, batch: int = 600) -> list[PoolObservation]:
    """A producer that submits ``batch`` tasks every other pass (5 s apart), drained before the next."""
    timeline = []
    for index in range(passes):
        backlog, added = (batch if index % 2 == 0 else 0), batch * (index // 2 + 1)
        timeline.append(observe(p0={"backlog": backlog, "added": added, "read": added - backlog}, at=NOW + index * 5))
    return timeline


def test_periodic_batches_do_not_flap_replicas() -> None:
    """Backlog comes and goes every other pass while tasks keep arriving: the down window holds."""
    replicas = [d.desired for d in run(make_spec(), periodic_batches(16), 1)]
    assert all(b >= a for a, b in itertools.pairwise(replicas)), replicas


@pytest.mark.parametrize("period", [6, 8, 11])
def test_batches_within_the_window_never_flap_at_the_defaults(period: int) -> None:
    """Batches every ``period`` passes (5 s apart, a 60 s window: 12 passes), each drained within a pass: batches
    that recur within twice the window are never taken for one-offs, so the pool never scales in between them."""
    timeline, added = [], 0
    for index in range(60):
        batch = 600 if index % period == 0 else 0
        added += batch
        timeline.append(observe(p0={"backlog": batch, "added": added, "read": added - batch}, at=NOW + index * 5))
    replicas = [d.desired for d in run(make_spec(), timeline, 1)]
    assert all(b >= a for a, b in itertools.pairwise(replicas[2 * period :])), replicas  # once two are seen
    assert replicas[-6:] == [replicas[-1]] * 6


def test_lag_holds_every_recommendation_for_the_window() -> None:
    spec = make_spec(policy="lag", targetPerReplica=100)
    timeline = [observe(p0={"backlog": 600, "added": 600}, at=NOW)]
    timeline += [observe(p0={"added": 600, "read": 600}, at=NOW + i * 5) for i in range(1, 16)]
    replicas = [d.desired for d in run(spec, timeline, 1)]
    assert replicas[:12] == [6] * 12  # the 60 s window
    assert replicas[12:15] == [6, 5, 4]


def test_a_burst_with_nothing_arriving_after_scales_in_once_drained() -> None:
    """A one-off burst: the sla policy's drain part is spent once the backlog is gone and nothing refills it, so
    the pool comes down to what it needs at once, not a step a pass after the 60 s window (the cost it saves on
    a burst: idle workers, which drain at once)."""
    spec = make_spec()
    quiet = [observe(at=NOW + i * 5) for i in range(26)]
    timeline = [*quiet, observe(p0={"backlog": 900, "added": 900}, at=NOW + 130)]
    timeline += [observe(p0={"added": 900, "read": 900}, at=NOW + i * 5) for i in range(27, 50)]
    decisions = run(spec, timeline, 1)
    replicas = [d.desired for d in decisions]
    assert replicas[26:30] == [6, 1, 1, 1]
    assert "the down window no longer holds" in decisions[27].reason


def test_a_drained_burst_stops_idle_workers_at_once_and_busy_ones_a_step_a_pass() -> None:
    """Drained, but four of six workers still run the burst's last tasks: the two idle ones and one busy one go
    at once (the step), the rest a step a pass, so a scale-in never stops every busy worker together (tasks that
    outlast the drain would run again)."""
    assert drained_burst([(4, 4), (3, 3), (2, 2), (0, 0)]) == [6, 3, 2, 1, 1]  # one task on each busy worker


def test_a_drained_burst_without_a_count_of_busy_workers_assumes_one_per_task() -> None:
    """Workers not counted (``busy_workers`` None): four running tasks may hold four workers, not the one replica
    their slots would pack into."""
    assert drained_burst([(4, None), (3, None), (2, None), (0, None)]) == [6, 3, 2, 1, 1]


def drained_burst(running: list[tuple[int, int | None]]) -> list[int]:
    """Replicas from the burst's pass on, with (running tasks, busy workers) in each pass after it is drained."""
    spec = make_spec()
    quiet = [observe(at=NOW + i * 5) for i in range(26)]
    timeline = [*quiet, observe(p0={"backlog": 900, "added": 900}, at=NOW + 130)]
    timeline += [
        replace(observe(p0={"added": 900, "read": 900, "pending": pending}, at=NOW + (27 + i) * 5), busy_workers=busy)
        for i, (pending, busy) in enumerate(running)
    ]
    return [d.desired for d in run(spec, timeline, 1)][26:]


@pytest.mark.parametrize(
    ("busy", "one"),
    [
        ([], True),
        ([False] * 5, True),
        ([False, True, False, False], True),  # one batch, seen by one pass
        ([False, True, True, False], True),  # one batch, submitted while a pass read the streams
        ([True, True, True, False], False),  # three passes in a row: a stream, not a batch
        ([True, False, True, False], False),  # two batches
        ([True, False, False, False, True, True], False),
    ],
)
def test_one_batch(busy: list[bool], one: bool) -> None:
    assert one_batch(busy) is one


def test_a_burst_split_over_two_passes_is_one_batch() -> None:
    """The burst's tasks arrive while a pass reads the streams: that pass and the next both see arrivals. Still
    one batch: the pool scales in once it is drained."""
    spec = make_spec()
    quiet = [observe(at=NOW + i * 5) for i in range(26)]
    split = [
        observe(p0={"backlog": 300, "added": 300}, at=NOW + 130),
        observe(p0={"backlog": 700, "added": 900, "read": 200}, at=NOW + 135),
    ]
    after = [observe(p0={"added": 900, "read": 900}, at=NOW + 135 + i * 5) for i in range(1, 6)]
    replicas = [d.desired for d in run(spec, quiet + split + after, 1)]
    assert replicas[27] > 1 and replicas[28:] == [1] * 5


def test_a_stream_of_three_passes_keeps_the_window() -> None:
    """Arrivals over three passes in a row are a stream that paused, not a batch: the window holds as for lag."""
    spec = make_spec()
    quiet = [observe(at=NOW + i * 5) for i in range(26)]
    stream = [
        observe(p0={"backlog": 300, "added": 300 * i, "read": 300 * (i - 1)}, at=NOW + 125 + i * 5) for i in (1, 2, 3)
    ]
    after = [observe(p0={"added": 900, "read": 900}, at=NOW + 140 + i * 5) for i in range(1, 4)]
    replicas = [d.desired for d in run(spec, quiet + stream + after, 1)]
    peak = max(replicas)
    assert peak > 1 and replicas[-3:] == [peak] * 3


def test_a_rate_limited_pool_that_never_throttles_scales_up_on_the_second_pass() -> None:
    """The confirmation compares with the last pass's recommendation before the hold, not the held count it
    recorded: otherwise each held pass would confirm only another hold, and the pool would never scale up."""
    timeline = [observe(p0={"backlog": 600}, at=NOW + i * 5) for i in range(3)]
    decisions = run(limited_spec(), timeline, 1)
    assert [d.desired for d in decisions] == [1, 4, 4], [d.reason for d in decisions]
    assert "waits for a second pass" in decisions[0].reason


def test_a_burst_still_draining_keeps_the_window() -> None:
    """Nothing arrives after the burst, but tasks still wait: the window holds until the backlog is gone (a drain
    that ran slower than planned would otherwise scale in under it, then back up through a cold start)."""
    spec = make_spec()
    quiet = [observe(at=NOW + i * 5) for i in range(26)]
    burst = [observe(p0={"backlog": 900, "added": 900}, at=NOW + 130)]
    draining = [observe(p0={"backlog": 100, "added": 900, "read": 800}, at=NOW + 130 + i * 5) for i in range(1, 6)]
    drained = [observe(p0={"added": 900, "read": 900}, at=NOW + 155 + i * 5) for i in range(1, 4)]
    replicas = [d.desired for d in run(spec, quiet + burst + draining + drained, 1)]
    assert replicas[26:32] == [6] * 6
    assert replicas[32:35] == [1, 1, 1]  # drained: now the burst is spent


def test_a_burst_while_tasks_keep_arriving_holds_the_window() -> None:
    """The same burst over a steady 20/s (two replicas' worth): the backlog may come back, so the down window
    holds as for lag. (A trickle that half a replica absorbs counts as nothing arriving.)"""
    spec = make_spec()
    steady = [observe(p0={"added": 100 * i, "read": 100 * i}, at=NOW + i * 5) for i in range(4)]
    burst = [observe(p0={"backlog": 900, "added": 1300, "read": 400}, at=NOW + 20)]
    after = [observe(p0={"added": 1300 + 100 * i, "read": 1300 + 100 * i}, at=NOW + 20 + i * 5) for i in range(1, 26)]
    replicas = [d.desired for d in run(spec, steady + burst + after, 1)]
    assert replicas[:4] == [1, 1, 2, 2]
    peak = replicas[4]
    assert peak > 6
    assert replicas[4:17] == [peak] * 13  # the burst's pass and the 60 s down window after it
    assert replicas[17] == peak - 1
    assert replicas[-1] == 2  # down to what 20/s needs, a step a pass
    assert all(b >= a - 1 for a, b in itertools.pairwise(replicas))


def test_a_dump_of_tasks_is_backlog_not_a_rate_of_arrivals() -> None:
    """Steady 20/s, then 3,000 tasks in one pass: the median forecast stays near 20/s, so the pool is sized by the
    backlog's drain budget (3,000 over 15 s at 10/s a replica: 20) plus 2 for arrivals, not by 300 arrivals/s."""
    spec = make_spec({"min": 1, "max": 100})
    history, added, current = History(), 0, 2
    for step in range(10):
        added += 40
        decision = decide(spec, observe(p0={"added": added, "read": added}, at=NOW + 2 * step), history, current, NOW)
        history, current = decision.history, decision.desired
    added += 3000
    burst = decide(
        spec, observe(p0={"backlog": 3000, "added": added, "read": added - 3000}, at=NOW + 20), history, 2, NOW + 20
    )
    assert burst.history.arrival_rate > 400  # the smoothed rate jumps (reported, not used for sizing)
    assert burst.desired == 22, burst.reason


def test_history_survives_a_restart_through_json() -> None:
    spec = make_spec()
    timeline = periodic_batches(8)
    decisions = run(spec, timeline[:7], 1)
    last = decisions[-1]
    restored = History.from_json(last.history.to_json())
    assert restored == last.history
    held = History(plateau=(3, 2.5), delivery_rate=2.5, arrivals=(1.5, 2.25), throttled_at=NOW - 3)
    assert History.from_json(held.to_json()) == held
    after = decide(spec, timeline[7], restored, last.desired, NOW + 35)
    unbroken = decide(spec, timeline[7], last.history, last.desired, NOW + 35)
    assert after == unbroken
    assert after.desired == last.desired  # the down window came through the "restart"


SLOW = {"taskSeconds": "60s", "scaleUpStep": 1}
"""60 s tasks: one replica (concurrency 10) delivers 10/60 = 0.17/s."""


def test_an_unsaturated_scale_up_does_not_arm_the_flat_throughput_hold() -> None:
    """The reviewer's probe: a 2 -> 3 scale-up of an unsaturated pool at 1.0/s, then 600 waiting 60 s tasks with
    3 saturated replicas delivering 0.5/s (all they can): more replicas would help, so the pool must scale up."""
    spec = make_spec(**SLOW)
    history = History(at=NOW - 2, counters=FLAT, delivery_rate=1.0, last_active=NOW)
    unsaturated = observe(p0={"backlog": 100, "pending": 5, "added": 100, "read": 100})
    first = decide(spec, unsaturated, history, 2, NOW)
    assert first.desired == 3 and first.history.plateau is None
    later = NOW + 120  # past the settle time (60 s task + start-up)
    saturated = observe(p0={"backlog": 600, "pending": 30, "added": 700, "read": 160}, at=later)
    second = decide(spec, saturated, first.history, 3, later)
    assert second.desired == 4, second.reason
    assert "holding" not in second.reason


PLATEAU = {"at": NOW - 2, "counters": FLAT, "delivery_rate": 0.5, "plateau": (2, 0.5), "last_active": NOW}
WAITING = observe(p0={"backlog": 600, "pending": 30, "added": 600, "read": 101})


@pytest.mark.parametrize(
    ("case", "scaling", "history", "desired"),
    [
        ("flat after a settled, saturated scale-up: held", SLOW, {"last_scale": NOW - 120}, 3),
        ("settle time covers a 60 s task and start-up", SLOW, {"last_scale": NOW - 60}, 4),
        ("the hold expires", SLOW, {"last_scale": NOW - 120, "plateau_at": NOW - 600}, 4),
        ("the lag policy (KEDA baseline) never holds", {**SLOW, "policy": "lag"}, {"last_scale": NOW - 120}, 4),
    ],
)
def test_flat_throughput_hold(case: str, scaling: dict[str, Any], history: dict[str, Any], desired: int) -> None:
    decision = decide(make_spec(**scaling), WAITING, History(**{**PLATEAU, **history}), 3, NOW)
    assert decision.desired == desired, decision.reason


def test_a_saturated_scale_up_arms_the_hold_and_an_expired_one_is_dropped() -> None:
    spec = make_spec(**SLOW)
    armed = decide(spec, WAITING, History(at=NOW - 2, counters=FLAT, delivery_rate=0.5, last_active=NOW), 3, NOW)
    assert armed.desired == 4 and armed.history.plateau is not None and armed.history.plateau[0] == 3
    assert armed.history.plateau_at == NOW
    stale = History(**{**PLATEAU, "last_scale": NOW - 1000, "plateau_at": NOW - 1000})
    assert decide(spec, observe(p0={"backlog": 5}), stale, 3, NOW).history.plateau is None


def test_saturated_workers_measure_their_rate() -> None:
    spec = make_spec()
    history = History(at=NOW - 10, counters={"p0": (0, 0)})
    obs = observe(p0={"pending": 40, "backlog": 500, "added": 1000, "read": 200})
    decision = decide(spec, obs, history, 4, NOW)
    assert decision.history.per_replica_rate == pytest.approx(200 / 10 / 4)


@pytest.mark.parametrize(("desired", "current", "direction"), [(3, 1, "up"), (1, 3, "down"), (2, 2, "none")])
def test_direction(desired: int, current: int, direction: str) -> None:
    assert Decision(desired, desired, "", History()).direction(current) == direction
