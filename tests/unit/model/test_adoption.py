"""Adopting existing streams in the spec: ``consumerGroup``, ``tiers[].stream`` and the cluster-slot rule."""

from __future__ import annotations

from typing import Any

import pytest
from redis.crc import key_slot as redis_key_slot

from tierpool.model.adoption import duplicate_stream_violations, hash_tag, key_slot, stream_slot_violations
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import SpecError, parse_pool
from tierpool.model.spec import sections_left_out, tier_defaults_left_out


@pytest.mark.parametrize(
    ("key", "tag"),
    [
        ("agent:tasks:stream", "agent:tasks:stream"),
        ("tierpool:{ns/a}:tier:p0", "ns/a"),
        ("{ns/a}:tasks:p0", "ns/a"),
        ("x{}y{ns/a}", "x{}y{ns/a}"),  # an empty first tag: the whole key
        ("x{a}{b}", "a"),
        ("x{a", "x{a"),
        ("x}{a}", "a"),
    ],
)
def test_hash_tag_is_what_redis_cluster_hashes(key: str, tag: str) -> None:
    assert hash_tag(key) == tag


@pytest.mark.parametrize(
    "key", ["agent:tasks:stream", "tasks:p0", "{default/swarm}:x", "tierpool:{ns/a}:tier:p0", "x{}y", "ü{é}", "123"]
)
def test_key_slot_agrees_with_redis_py(key: str) -> None:
    assert key_slot(key) == redis_key_slot(key.encode("utf-8"))


SLOT_CASES: list[tuple[str, bool, list[str | None], list[str]]] = [
    ("standalone takes any key", False, ["agent:tasks:stream", None], []),
    ("cluster, own streams", True, [None, None], []),
    ("cluster, the pool's tag", True, ["{ns/a}:tasks:p0", "tierpool:{ns/a}:tier:p1"], []),
    ("cluster, no tag", True, [None, "tasks:p1"], ["spec.tiers[1].stream"]),
    ("cluster, another pool's tag", True, ["{ns/b}:tasks:p0"], ["spec.tiers[0].stream"]),
    ("cluster, the tag second", True, ["{x}{ns/a}"], ["spec.tiers[0].stream"]),
]


@pytest.mark.parametrize(("case", "cluster", "streams", "paths"), SLOT_CASES, ids=[c[0] for c in SLOT_CASES])
def test_stream_slot_rule(case: str, cluster: bool, streams: list[str | None], paths: list[str]) -> None:
    found = stream_slot_violations("ns/a", cluster, streams)
    assert [path for path, _ in found] == paths
    for _, message in found:
        assert "{ns/a}" in message and "slot" in message


def test_duplicate_streams_are_refused() -> None:
    assert duplicate_stream_violations(["s", None, None, "s"]) == [("tiers[3].stream", "'s' is also tiers[0]'s stream")]
    assert duplicate_stream_violations([None, None, "a", "b"]) == []


def document(spec: dict[str, Any], name: str = "swarm") -> dict[str, Any]:
    return {"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": {"name": name}, "spec": spec}


SEED_004 = {"consumerGroup": "swarm_workers", "tiers": [{"name": "tasks", "weight": 1, "stream": "agent:tasks:stream"}]}


def test_seed_004s_stream_and_group_make_a_pool() -> None:
    pool = parse_pool(document(SEED_004))
    assert pool.keys.tier("tasks") == "agent:tasks:stream"
    assert pool.keys.group == "swarm_workers"
    assert pool.keys.dlq == "tierpool:{default/swarm}:dlq"  # the pool's own keys stay its own


def test_the_defaults_are_the_pools_own_streams_and_group() -> None:
    pool = parse_pool(document({"tiers": [{"name": "p0", "weight": 1}]}))
    assert pool.keys == PoolKeys("default", "swarm")
    assert pool.keys.tier("p0") == "tierpool:{default/swarm}:tier:p0"
    assert pool.keys.group == "workers"
    assert "consumer_group" in sections_left_out(pool.spec)  # older readers of the published spec still parse it
    assert tier_defaults_left_out(pool.spec)[0] >= {"stream"}


def test_an_adopting_spec_is_published_whole() -> None:
    spec = parse_pool(document(SEED_004)).spec
    assert "consumer_group" not in sections_left_out(spec)
    assert "stream" not in tier_defaults_left_out(spec).get(0, set())


BAD = [
    ("cluster, no tag", {"redis": {"mode": "cluster"}, **SEED_004}, "spec.tiers[0].stream", "pool's slot"),
    ("group with a space", {**SEED_004, "consumerGroup": "swarm workers"}, "spec.consumerGroup", "pattern"),
    (
        "stream too long",
        {"tiers": [{"name": "p0", "weight": 1, "stream": "s" * 151}]},
        "spec.tiers[0].stream",
        "at most 150",
    ),
    (
        "stream with a space",
        {"tiers": [{"name": "p0", "weight": 1, "stream": "a b"}]},
        "spec.tiers[0].stream",
        "pattern",
    ),
    (
        "two tiers, one stream",
        {"tiers": [{"name": "p0", "weight": 1, "stream": "s"}, {"name": "p1", "weight": 1, "stream": "s"}]},
        "spec.tiers[1].stream",
        "also tiers[0]",
    ),
]


@pytest.mark.parametrize(("case", "spec", "path", "fragment"), BAD, ids=[c[0] for c in BAD])
def test_bad_adoptions_name_the_field(case: str, spec: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_pool(document(spec))
    assert any(found == path and fragment in message for found, message in raised.value.violations), raised.value


def test_a_cluster_pool_takes_a_stream_with_its_hash_tag() -> None:
    spec = {"redis": {"mode": "cluster"}, "tiers": [{"name": "p0", "weight": 1, "stream": "{default/swarm}:tasks"}]}
    assert parse_pool(document(spec)).keys.tier("p0") == "{default/swarm}:tasks"
