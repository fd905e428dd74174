"""The opt-in WAIT (spec.redis.waitReplicas): when it is asked for, how it is read, and that it is queued last."""

from typing import Any

import pytest

from tierpool.model.spec import RedisSpec
from tierpool.store.replication import PAUSE, Wait, WaitGate, queue_wait, reached, split_wait


@pytest.mark.parametrize(
    ("redis", "wait"),
    [
        (RedisSpec(), None),
        (RedisSpec(wait_replicas=1), Wait(1, 500)),
        (RedisSpec(wait_replicas=2, wait_timeout=0.0001), Wait(2, 1)),
        (RedisSpec(wait_replicas=1, wait_timeout=3), Wait(1, 3000)),
    ],
)
def test_the_spec_decides_the_wait(redis: RedisSpec, wait: Wait | None) -> None:
    assert Wait.of(redis) == wait


@pytest.mark.parametrize(
    ("reply", "enough"),
    [(0, False), (1, True), (2, True), (True, False), (Exception("READONLY"), False), (None, False)],
)
def test_what_counts_as_replicated(reply: Any, enough: bool) -> None:
    assert reached(reply, Wait(1, 100)) is enough


class Pipe:
    def __init__(self) -> None:
        self.commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any) -> None:
        self.commands.append(args)


def test_the_wait_goes_last_and_its_reply_is_taken_off() -> None:
    pipe = Pipe()
    pipe.execute_command("XADD", "s", "*", "f", "v")
    queue_wait(pipe, Wait(1, 250))
    assert pipe.commands[-1] == ("WAIT", 1, 250)
    assert split_wait(["1-0", 1], Wait(1, 250), "submits") == ["1-0"]


def test_no_wait_queues_and_takes_off_nothing(caplog: pytest.LogCaptureFixture) -> None:
    pipe = Pipe()
    queue_wait(pipe, None)
    assert pipe.commands == []
    assert split_wait(["1-0", 1], None, "submits") == ["1-0", 1]
    assert not caplog.records


def test_a_short_wait_is_logged_and_the_writes_kept(caplog: pytest.LogCaptureFixture) -> None:
    assert split_wait(["1-0", 0], Wait(1, 250), "2 submits") == ["1-0"]
    assert "2 submits reached 0 of 1 replica(s) within 250 ms" in caplog.text


@pytest.mark.parametrize(
    ("reply", "later", "waits"),
    [
        (1, 0.0, True),  # enough replicas: WAIT stays on
        (0, 0.0, False),  # short: off at once
        (0, PAUSE - 0.1, False),
        (0, PAUSE, True),  # and back on after the pause
    ],
)
def test_a_short_wait_turns_wait_off_for_a_pause(reply: int, later: float, waits: bool) -> None:
    now = [100.0]
    gate = WaitGate(Wait(1, 500), clock=lambda: now[0])
    pipe = Pipe()
    wait = gate.queue(pipe)
    assert gate.split(["ok", reply], wait, "submits") == ["ok"]
    now[0] += later
    assert (gate.current() is not None) is waits


def test_a_gate_without_wait_queues_nothing() -> None:
    gate, pipe = WaitGate(None), Pipe()
    assert gate.queue(pipe) is None and pipe.commands == []
    assert gate.split(["ok"], None, "submits") == ["ok"]
