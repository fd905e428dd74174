"""Tiers removed from the spec while their streams hold work: kept draining, last, until empty. Table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from tierpool.model.resource import parse_pool
from tierpool.scaling.observation import PoolObservation, TierObservation
from tierpool_operator import manifests, tiers


def pool(*names: str) -> Any:
    spec = {"tiers": [{"name": n, "weight": 10} for n in names]}
    document = {"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": {"name": "a", "namespace": "t"}}
    return parse_pool({**document, "spec": spec})


def seen(name: str, lag: int = 0, pending: int = 0) -> dict[str, Any]:
    return {"name": name, "lag": lag, "pending": pending}


@pytest.mark.parametrize(
    ("status", "spec", "expected"),
    [
        ({}, ["p0"], []),
        ({"tiers": [seen("p0", 3), seen("p1", 5)]}, ["p0", "p1"], []),
        ({"tiers": [seen("p0"), seen("p1", 5)]}, ["p0"], ["p1"]),  # removed with work
        ({"tiers": [seen("p0"), seen("p1", pending=2)]}, ["p0", "fast"], ["p1"]),  # renamed, in flight
        ({"tiers": [seen("p0"), seen("p1")]}, ["p0"], []),  # removed while empty: let go at once
        ({"drainingTiers": ["old"], "tiers": [seen("p0"), seen("old")]}, ["p0"], ["old"]),  # already draining
        ({"drainingTiers": ["old"], "tiers": [seen("old", 1)]}, ["p0", "old"], []),  # added back
    ],
)
def test_removed(status: dict[str, Any], spec: list[str], expected: list[str]) -> None:
    assert tiers.removed(status, spec) == expected


def test_draining_tiers_come_last_at_weight_one_and_reach_the_workers() -> None:
    effective = tiers.with_draining(pool("p0", "p1"), ["old"])
    assert [(t.name, t.weight) for t in effective.spec.tiers] == [("p0", 10), ("p1", 10), ("old", 1)]
    assert '"old"' in manifests.config_map(effective, "u")["data"][manifests.SPEC_KEY]
    assert tiers.with_draining(pool("p0"), []) == pool("p0")
    assert len(tiers.with_draining(pool(*(f"t{i}" for i in range(16))), ["old"]).spec.tiers) == 16  # no room


def tier(name: str, backlog: int = 0, pending: int = 0) -> TierObservation:
    return TierObservation(name, True, backlog + pending, backlog, True, pending, 0.0, 1, 0, 0)


def test_drained_and_the_condition() -> None:
    obs = PoolObservation("t/a", 0.0, (tier("p0", 4), tier("old", 2, 1), tier("gone")), 0)
    assert tiers.drained(obs, ["old", "gone"]) == ["gone"]
    held = tiers.tiers_condition(obs, ["old"], 0.0, 3)
    assert (held["type"], held["status"], held["reason"]) == ("TiersInSpec", "False", "DrainingRemovedTiers")
    assert "old: 2 waiting, 1 pending" in held["message"] and held["observedGeneration"] == 3
    assert tiers.tiers_condition(obs, ["gone"], 0.0, 3)["status"] == "True"


def adopting(*tiers_: tuple[str, str | None]) -> Any:
    spec = {"tiers": [{"name": n, "weight": 10, **({"stream": s} if s else {})} for n, s in tiers_]}
    document = {"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": {"name": "a", "namespace": "t"}}
    return parse_pool({**document, "spec": spec})


@pytest.mark.parametrize(
    ("spec", "status", "draining", "expected"),
    [
        # a removed tier that adopted a stream drains that stream, not the pool's own key for it
        ([("p0", None)], [{"tier": "p1", "stream": "tasks:p1"}], ["p1"], "tasks:p1"),
        (
            [("p0", "tasks:p0")],
            [{"tier": "p0", "stream": "tasks:p0"}, {"tier": "p1", "stream": "tasks:p1"}],
            ["p1"],
            "tasks:p1",
        ),
        ([("p0", None)], [], ["p1"], None),  # it adopted none: the pool's own stream
        ([("p0", None)], [{"tier": "other", "stream": "tasks:x"}], ["p1"], None),
        ([("fast", "tasks:p1")], [{"tier": "p1", "stream": "tasks:p1"}], ["p1"], None),  # renamed: fast reads it
        ([("p0", None)], [{"tier": "p1"}, "junk"], ["p1"], None),  # unreadable status: as before
    ],
)
def test_a_draining_tier_keeps_the_stream_it_adopted(
    spec: list[tuple[str, str | None]], status: list[Any], draining: list[str], expected: str | None
) -> None:
    streams = tiers.known_streams({"adoptedStreams": status})
    effective = tiers.with_draining(adopting(*spec), draining, streams)
    [extra] = effective.spec.tiers[len(spec) :]
    assert (extra.name, extra.weight, extra.stream) == (draining[0], 1, expected)
    want = expected if expected is not None else effective.keys.own_tier(draining[0])
    assert effective.keys.tier(draining[0]) == want
    # what status remembers: every adopted stream, the draining tier's included, so a restart keeps it
    assert tiers.known_streams(tiers.adopted_status(effective)) == effective.spec.adopted_streams
