"""The scaler daemon: which Deployment copy a pass may trust (after events, reads, writes, deletions), and how long
the daemon sleeps between checks."""

from __future__ import annotations

from typing import Any

import pytest

from tierpool_operator.deployments import DeploymentCache


def deployment(replicas: int, version: str, name: str = "tierpool-a") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": version}, "spec": {"replicas": replicas}}


def replicas(cache: DeploymentCache, name: str = "tierpool-a") -> int | None:
    found = cache.get("ns", name)
    return None if found is None else int(found["spec"]["replicas"])


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([], None),  # never seen: GET it
        ([("event", "ADDED", 1)], 1),
        ([("event", None, 1)], 1),  # the watch's initial listing
        ([("event", "ADDED", 1), ("event", "MODIFIED", 3)], 3),
        ([("event", "ADDED", 1), ("event", "DELETED", 1)], None),
        ([("read", None, 2)], 2),
        # after a /scale, an event may predate it: nothing is trusted until a read returns the object after it
        ([("event", "ADDED", 1), ("wrote", None, 0)], None),
        ([("event", "ADDED", 1), ("wrote", None, 0), ("event", "MODIFIED", 1)], None),
        ([("event", "ADDED", 1), ("wrote", None, 0), ("read", None, 4)], 4),
        ([("event", "ADDED", 1), ("wrote", None, 0), ("read", None, 4), ("event", "MODIFIED", 5)], 5),
        ([("wrote", None, 0), ("forget", None, 0), ("event", "ADDED", 2)], 2),  # a 404 after the write
        ([("event", "ADDED", 1), ("forget", None, 0)], None),
    ],
)
def test_which_copy_a_scaling_pass_trusts(steps: list[tuple[str, str | None, int]], expected: int | None) -> None:
    cache = DeploymentCache()
    for index, (step, kind, count) in enumerate(steps):
        if step == "event":
            cache.event(kind, deployment(count, str(index)))
        elif step == "read":
            cache.read(deployment(count, str(index)))
        elif step == "wrote":
            cache.wrote("ns", "tierpool-a")
        else:
            cache.forget("ns", "tierpool-a")
    assert replicas(cache) == expected


def test_pools_do_not_share_entries() -> None:
    cache = DeploymentCache()
    cache.event("ADDED", deployment(1, "1", "tierpool-a"))
    cache.event("ADDED", deployment(2, "2", "tierpool-b"))
    cache.wrote("ns", "tierpool-a")
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
