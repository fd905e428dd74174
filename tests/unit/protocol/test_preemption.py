"""The preemption decision (tierpool.protocol.preemption): who may be stopped, and for which tiers."""

from __future__ import annotations

import pytest

from tierpool.protocol.preemption import Rules, Run, eligible, eligible_in, served_tiers, victim

# three tiers: p0 never preemptible, p1 and p2 preemptible after 1 s, at most 2 preemptions a task
RULES = Rules(preemptible=(False, True, True), min_run=(0.0, 1.0, 1.0), max_preemptions=(0, 2, 2))
NOW = 100.0


def run(
    tier: int,
    entry: str,
    started: float,
    checkpointed: float | None = None,
    preemptions: int = 0,
    stoppable: bool = True,
) -> Run:
    return Run((tier, entry), started, checkpointed, preemptions, stoppable)


ELIGIBLE = [
    ("a p2 run past its minimum", run(2, "a", 90.0), True),
    ("too young", run(2, "a", 99.5), False),
    ("exactly the minimum", run(2, "a", 99.0), True),
    ("a tier that is not preemptible", run(0, "a", 50.0), False),
    ("a sync handler", run(2, "a", 50.0, stoppable=False), False),
    ("preempted as often as allowed", run(2, "a", 50.0, preemptions=2), False),
    ("preempted once", run(2, "a", 50.0, preemptions=1), True),
    ("a tier the rules do not know", run(5, "a", 50.0), False),
]


@pytest.mark.parametrize(("case", "candidate", "expected"), ELIGIBLE, ids=[c[0] for c in ELIGIBLE])
def test_eligible(case: str, candidate: Run, expected: bool) -> None:
    assert eligible(candidate, RULES, NOW) is expected


VICTIMS: list[tuple[str, list[Run], int, str | None]] = [
    ("nothing running", [], 0, None),
    ("the lowest tier first", [run(1, "p1", 50.0), run(2, "p2", 50.0)], 0, "p2"),
    ("only lower tiers: a p1 task never stops p1 work", [run(1, "p1", 50.0)], 1, None),
    ("a p1 task may stop p2 work", [run(1, "p1", 50.0), run(2, "p2", 50.0)], 1, "p2"),
    ("the most recent checkpoint loses least", [run(2, "old", 10.0, 99.0), run(2, "new", 90.0)], 0, "old"),
    ("without checkpoints, the shortest run", [run(2, "long", 10.0), run(2, "short", 95.0)], 0, "short"),
    ("an ineligible lowest tier falls back to the next", [run(2, "young", 99.9), run(1, "p1", 50.0)], 0, "p1"),
    ("a tie goes to the most recent start", [run(2, "x", 90.0, 98.0), run(2, "y", 91.0, 98.0)], 0, "y"),
    ("only top-tier work running", [run(0, "p0", 10.0)], 0, None),
]


@pytest.mark.parametrize(("case", "runs", "tier", "expected"), VICTIMS, ids=[c[0] for c in VICTIMS])
def test_victim(case: str, runs: list[Run], tier: int, expected: str | None) -> None:
    chosen = victim(runs, RULES, tier, NOW)
    assert (chosen.key[1] if chosen else None) == expected


def test_no_victim_while_draining() -> None:
    assert victim([run(2, "a", 10.0)], RULES, 0, NOW, draining=True) is None


SERVED = [
    ("nothing eligible", [run(2, "a", 99.9)], False, 0),
    ("a p2 victim serves p0 and p1", [run(2, "a", 10.0)], False, 2),
    ("a p1 victim serves p0", [run(1, "a", 10.0), run(2, "b", 99.9)], False, 1),
    ("draining", [run(2, "a", 10.0)], True, 0),
]


@pytest.mark.parametrize(("case", "runs", "draining", "expected"), SERVED, ids=[c[0] for c in SERVED])
def test_served_tiers(case: str, runs: list[Run], draining: bool, expected: int) -> None:
    assert served_tiers(runs, RULES, NOW, draining) == expected


def test_no_preemptible_tier_serves_nothing() -> None:
    rules = Rules((False, False), (0.0, 0.0), (0, 0))
    assert not rules.any and served_tiers([run(1, "a", 0.0)], rules, NOW, False) == 0


def test_work_at_risk_counts_from_the_last_checkpoint() -> None:
    assert run(2, "a", 10.0, 97.5).work_at_risk(NOW) == 2.5
    assert run(2, "a", 10.0).work_at_risk(NOW) == 90.0


ELIGIBLE_IN = [
    ("nothing running", [], None),
    ("already eligible: nothing to wait for", [run(2, "a", 90.0)], None),
    ("a run 0.25 s old becomes eligible in 0.75 s", [run(2, "a", 99.75)], 0.75),
    ("the soonest of two", [run(2, "a", 99.75), run(1, "b", 99.5)], 0.5),
    ("a sync handler never does", [run(2, "a", 99.75, stoppable=False)], None),
    ("nor a run of a tier that is not preemptible", [run(0, "a", 99.75)], None),
    ("nor one preempted as often as allowed", [run(2, "a", 99.75, preemptions=2)], None),
]


@pytest.mark.parametrize(("case", "runs", "expected"), ELIGIBLE_IN, ids=[c[0] for c in ELIGIBLE_IN])
def test_eligible_in(case: str, runs: list[Run], expected: float | None) -> None:
    found = eligible_in(runs, RULES, NOW)
    assert found == pytest.approx(expected) if expected is not None else found is None
