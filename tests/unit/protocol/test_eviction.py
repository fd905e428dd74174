"""The eviction policy check: refuse allkeys-*, warn on volatile-*, accept noeviction."""

from __future__ import annotations

import pytest

from tierpool.protocol.eviction import EvictionRisk, eviction_verdict


@pytest.mark.parametrize(
    ("policy", "allowed", "risk", "refuse"),
    [
        ("noeviction", False, EvictionRisk.NONE, False),
        ("allkeys-lru", False, EvictionRisk.ALL_KEYS, True),
        ("allkeys-lfu", False, EvictionRisk.ALL_KEYS, True),
        ("allkeys-random", False, EvictionRisk.ALL_KEYS, True),
        ("allkeys-lru", True, EvictionRisk.ALL_KEYS, False),
        ("volatile-lru", False, EvictionRisk.VOLATILE, False),
        ("volatile-ttl", False, EvictionRisk.VOLATILE, False),
        (None, False, EvictionRisk.UNKNOWN, False),
    ],
)
def test_eviction_verdict(policy: str | None, allowed: bool, risk: EvictionRisk, refuse: bool) -> None:
    verdict = eviction_verdict(policy, allowed)
    assert (verdict.risk, verdict.refuse) == (risk, refuse)
    if policy:
        assert policy in verdict.message


def test_a_refusal_names_the_override() -> None:
    assert "spec.redis.allowEviction" in eviction_verdict("allkeys-lru", False).message
