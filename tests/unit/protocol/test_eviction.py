"""The eviction policy check: refuse allkeys-*, warn on volatile-*, accept noeviction."""

from __future__ import annotations

import logging

import pytest

from tierpool.protocol.eviction import (
    EvictionAction,
    EvictionRisk,
    EvictionVerdict,
    eviction_change,
    eviction_verdict,
)


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


SAFE = eviction_verdict("noeviction", False)
ALLKEYS = eviction_verdict("allkeys-lru", False)
VOLATILE = eviction_verdict("volatile-lru", False)
UNREADABLE = eviction_verdict(None, False)
ACCEPTED = eviction_verdict("allkeys-lru", True)


@pytest.mark.parametrize(
    ("previous", "current", "action", "level", "says"),
    [
        (None, SAFE, EvictionAction.NONE, None, ""),
        (
            None,
            ALLKEYS,
            EvictionAction.PAUSE,
            logging.ERROR,
            "not serving: the server's maxmemory-policy is allkeys-lru",
        ),
        (None, VOLATILE, EvictionAction.NONE, logging.WARNING, "volatile-lru"),
        (None, UNREADABLE, EvictionAction.NONE, logging.WARNING, "could not be read"),
        (None, ACCEPTED, EvictionAction.NONE, logging.WARNING, "accepted: spec.redis.allowEviction"),
        (SAFE, SAFE, EvictionAction.NONE, None, ""),
        (SAFE, ALLKEYS, EvictionAction.PAUSE, logging.ERROR, "allkeys-lru"),
        (ALLKEYS, ALLKEYS, EvictionAction.NONE, None, ""),
        (ALLKEYS, eviction_verdict("allkeys-lfu", False), EvictionAction.NONE, logging.ERROR, "allkeys-lfu"),
        (
            ALLKEYS,
            SAFE,
            EvictionAction.RESUME,
            logging.INFO,
            "serving again: the server's maxmemory-policy is noeviction",
        ),
        (
            ALLKEYS,
            VOLATILE,
            EvictionAction.RESUME,
            logging.WARNING,
            "serving again: the server's maxmemory-policy is volatile-lru",
        ),
        (ALLKEYS, UNREADABLE, EvictionAction.RESUME, logging.WARNING, "could not be read"),
        (SAFE, VOLATILE, EvictionAction.NONE, logging.WARNING, "volatile-lru"),
        (VOLATILE, VOLATILE, EvictionAction.NONE, None, ""),
        (VOLATILE, eviction_verdict("volatile-ttl", False), EvictionAction.NONE, logging.WARNING, "volatile-ttl"),
        (VOLATILE, SAFE, EvictionAction.NONE, logging.INFO, "noeviction"),
        (UNREADABLE, UNREADABLE, EvictionAction.NONE, None, ""),
        (VOLATILE, ALLKEYS, EvictionAction.PAUSE, logging.ERROR, "allkeys-lru"),
        (SAFE, ACCEPTED, EvictionAction.NONE, logging.WARNING, "accepted"),
    ],
)
def test_eviction_change(
    previous: EvictionVerdict | None, current: EvictionVerdict, action: EvictionAction, level: int | None, says: str
) -> None:
    change = eviction_change(previous, current, 30.0)
    assert (change.action, change.level) == (action, level)
    assert says in change.line
    assert bool(change.line) == (level is not None)


def test_a_pause_says_how_to_fix_it_and_how_often_it_checks() -> None:
    line = eviction_change(SAFE, ALLKEYS, 0.2).line
    assert "set maxmemory-policy noeviction" in line
    assert "spec.redis.allowEviction: true" in line
    assert line.endswith("checking again every 0.2 s")
