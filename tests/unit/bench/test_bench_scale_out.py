"""The pure helpers of bench/scale_out.py: which pool names land on which master, and the CPU split."""

from __future__ import annotations

import pytest
from bench.scale_out import (
    choose_pool_names,
    layout_shards,
    median_of,
    percentile,
    round_order,
    shard_by_ranges,
    shares,
)

from tests.integration.cluster_support import pool_slot, slot_ranges

THREE = shard_by_ranges(slot_ranges(3))


@pytest.mark.parametrize(
    ("layout", "pools", "expected"),
    [
        ("one shard", 4, [0, 0, 0, 0]),
        ("three shards", 4, [0, 1, 2, 0]),
        ("three shards", 6, [0, 1, 2, 0, 1, 2]),
        ("one shard", 0, []),
    ],
)
def test_layout_shards(layout: str, pools: int, expected: list[int]) -> None:
    assert layout_shards(layout, pools) == expected


def test_an_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown layout"):
        layout_shards("two shards", 3)


@pytest.mark.parametrize(
    ("slot", "shard"),
    [(0, 0), (5460, 0), (5461, 1), (10921, 1), (10922, 2), (16383, 2)],
)
def test_shard_by_ranges_follows_the_even_split(slot: int, shard: int) -> None:
    assert THREE(slot) == shard


def test_a_slot_outside_every_range_is_refused() -> None:
    with pytest.raises(LookupError):
        shard_by_ranges([(0, 9)])(10)


@pytest.mark.parametrize("shards", [[0] * 12, [0, 1, 2] * 4, [2, 2, 1], [1]])
def test_chosen_names_land_on_the_asked_shards(shards: list[int]) -> None:
    names = choose_pool_names("p", shards, THREE, namespace="bench")
    assert len(set(names)) == len(names) == len(shards)
    assert [THREE(pool_slot("bench", name)) for name in names] == shards
    assert all(name.startswith("p") for name in names)


def test_chosen_names_are_stable() -> None:
    assert choose_pool_names("one", [0, 0], THREE) == choose_pool_names("one", [0, 0], THREE)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([3.0, 0.0, 0.0], [1.0, 0.0, 0.0]),
        ([1.0, 1.0, 2.0], [0.25, 0.25, 0.5]),
        ([1.0, 1.0, 1.0], [0.333, 0.333, 0.333]),
        ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]),
    ],
)
def test_shares(values: list[float], expected: list[float]) -> None:
    assert shares(values) == expected


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, None),
        ([7.0], 95, 7.0),
        ([float(v) for v in range(1, 101)], 50, 50.0),
        ([float(v) for v in range(1, 101)], 95, 95.0),
        ([4.0, 1.0, 3.0, 2.0], 50, 2.0),
        ([4.0, 1.0, 3.0, 2.0], 100, 4.0),
    ],
)
def test_percentile(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == expected


def test_median_of_nested_rounds() -> None:
    rounds = [
        {"rate": 10, "latency": {"p95": None}, "shards": [{"cpu": 1.0}, {"cpu": 0.1}], "name": "a"},
        {"rate": 30, "latency": {"p95": 5.0}, "shards": [{"cpu": 3.0}, {"cpu": 0.3}], "name": "a"},
        {"rate": 20, "latency": {"p95": 7.0}, "shards": [{"cpu": 2.0}, {"cpu": 0.2}], "name": "a"},
    ]
    assert median_of(rounds) == {
        "rate": 20,
        "latency": {"p95": 6.0},
        "shards": [{"cpu": 2.0}, {"cpu": 0.2}],
        "name": "a",
    }


def test_rounds_alternate_abba() -> None:
    assert [round_order(r) for r in range(4)] == [
        ("one shard", "three shards"),
        ("three shards", "one shard"),
        ("one shard", "three shards"),
        ("three shards", "one shard"),
    ]
