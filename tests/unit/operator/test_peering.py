"""Peering and handover: priorities, the peering objects, and the gate a stopping replica closes."""

from __future__ import annotations

import asyncio

import pytest

from tierpool_operator.config import PRIORITY_CEILING, OperatorConfig, oldest_first_priority, peering_priority
from tierpool_operator.gate import Gate, defer_pass
from tierpool_operator.peering import peering_objects


@pytest.mark.parametrize(
    ("explicit", "started_at", "expected"),
    [
        ("", 1_800_000_000.0, PRIORITY_CEILING - 1_800_000_000_000_000),
        ("  ", 1_800_000_000.5, PRIORITY_CEILING - 1_800_000_000_500_000),
        ("7", 1_800_000_000.0, 7),
        (str(PRIORITY_CEILING + 1), 1_800_000_000.0, PRIORITY_CEILING + 1),  # a developer's operator outranks all
    ],
)
def test_peering_priority(explicit: str, started_at: float, expected: int) -> None:
    assert peering_priority(explicit, started_at) == expected


@pytest.mark.parametrize(("older", "newer"), [(1_800_000_000.0, 1_800_000_000.000001), (0.0, 4_102_444_800.0)])
def test_the_oldest_replica_has_the_highest_priority(older: float, newer: float) -> None:
    assert oldest_first_priority(older) > oldest_first_priority(newer) > 0  # and never kopf's default tie at 0


@pytest.mark.parametrize(
    ("environ", "standalone", "lifetime", "drain"),
    [
        ({}, True, 30, 20.0),
        ({"TIERPOOL_PEERING": "true", "TIERPOOL_PEERING_LIFETIME_SECONDS": "8"}, False, 8, 20.0),
        ({"TIERPOOL_PEERING": "1", "TIERPOOL_DRAIN_TIMEOUT_SECONDS": "5"}, False, 30, 5.0),
    ],
)
def test_peering_settings_from_the_environment(
    environ: dict[str, str], standalone: bool, lifetime: int, drain: float
) -> None:
    cfg = OperatorConfig.from_env(environ)
    assert (cfg.standalone, cfg.peering_lifetime, cfg.drain_timeout) == (standalone, lifetime, drain)
    assert OperatorConfig.from_env({"TIERPOOL_PEERING_PRIORITY": "3"}).peering_priority == 3


@pytest.mark.parametrize(
    ("namespaces", "expected"),
    [
        ((), [("clusterkopfpeerings", None, "ClusterKopfPeering")]),
        (("a",), [("kopfpeerings", "a", "KopfPeering")]),
        (("a", "b"), [("kopfpeerings", "a", "KopfPeering"), ("kopfpeerings", "b", "KopfPeering")]),
    ],
)
def test_peering_objects_follow_the_watch_scope(
    namespaces: tuple[str, ...], expected: list[tuple[str, str | None, str]]
) -> None:
    found = peering_objects("tp-tierpool", namespaces)
    assert [(o.plural, o.namespace, o.body["kind"]) for o in found] == expected
    assert all(o.body["metadata"]["name"] == "tp-tierpool" for o in found)
    assert all(o.body["apiVersion"] == "kopf.dev/v1" for o in found)


def test_a_stopping_gate_waits_for_runs_in_flight_and_admits_no_more() -> None:
    async def scenario() -> list[str]:
        gate, stop, seen = Gate(), asyncio.Event(), []
        release = asyncio.Event()

        async def run(name: str) -> None:
            async with gate.entry():
                seen.append(f"{name} started")
                await release.wait()
                seen.append(f"{name} ended")

        first = asyncio.create_task(run("first"))
        await asyncio.sleep(0)
        handing_over = asyncio.create_task(gate.hand_over(stop, timeout=5))
        await asyncio.sleep(0)
        late = asyncio.create_task(run("late"))  # starts after the signal: held for ever
        await asyncio.sleep(0.01)
        assert not stop.is_set()  # the first run is still in flight
        release.set()
        await handing_over
        assert stop.is_set()
        await first
        await asyncio.sleep(0.01)
        assert not late.done()
        late.cancel()
        return seen

    assert asyncio.run(scenario()) == ["first started", "first ended"]


def test_a_gate_stops_after_the_timeout_when_a_run_hangs() -> None:
    async def scenario() -> bool:
        gate, stop = Gate(), asyncio.Event()

        async def hang() -> None:
            async with gate.entry():
                await asyncio.Event().wait()

        task = asyncio.create_task(hang())
        await asyncio.sleep(0)
        await gate.hand_over(stop, timeout=0.05)
        task.cancel()
        return stop.is_set()

    assert asyncio.run(scenario())


@pytest.mark.parametrize(
    ("reconciling", "since_last_pass", "deferred"),
    [
        (0, 0.0, False),  # nothing to give way to
        (0, 100.0, False),
        (3, 5.0, True),  # a burst is being reconciled: it goes first
        (3, 29.9, True),
        (3, 30.0, False),  # but never longer than max_defer
        (1, 300.0, False),
    ],
)
def test_a_scaling_pass_gives_way_to_reconciles_for_a_while(
    reconciling: int, since_last_pass: float, deferred: bool
) -> None:
    assert defer_pass(reconciling, since_last_pass, max_defer=30.0) is deferred


def test_the_gate_counts_runs_by_handler() -> None:
    async def scenario() -> tuple[int, int, int]:
        gate = Gate()
        async with gate.entry("reconcile"), gate.entry("autoscale"):
            inside = (gate.count("reconcile"), gate.count("autoscale"))
        return (*inside, gate.count("reconcile"))

    assert asyncio.run(scenario()) == (1, 1, 0)
