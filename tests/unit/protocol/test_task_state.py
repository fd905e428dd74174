"""Protocol 4's pure parts: what a cancel found, event parsing, checkpoint limits, exit codes, key names."""

from typing import Any

import pytest

from tierpool.model.keys import RETRY_CONSUMER, PoolKeys
from tierpool.protocol.envelope import Task
from tierpool.protocol.task_state import (
    CancelState,
    CheckpointTooLarge,
    EntryState,
    TaskEvent,
    classify,
    encode_limited,
    is_delivered,
    marker_ttl_ms,
    parse_event,
)

W, R, U, F = CancelState.WAITING, CancelState.RUNNING, CancelState.UNKNOWN, CancelState.FINISHED
RUNNING = EntryState("worker-1", True)
RETRYING = EntryState(RETRY_CONSUMER, True)
UNDELIVERED = EntryState(None, False)
ACKED = EntryState(None, True)


@pytest.mark.parametrize(
    ("found", "has_result", "state"),
    [
        ([], False, U),
        ([], True, F),
        ([UNDELIVERED], False, W),
        ([RETRYING], False, W),  # waiting out a retry backoff (or a RetryAfter) is waiting
        ([RUNNING], False, R),
        ([RUNNING], True, R),  # finished, its outcome not yet acked: the outcome script decides
        ([ACKED], False, F),  # acked, its result expired
        ([ACKED], True, F),
        ([ACKED, UNDELIVERED], False, W),  # escalated: acked below, waiting one tier up
        ([ACKED, RUNNING], False, R),
        ([UNDELIVERED, RUNNING], False, R),
    ],
)
def test_classify(found: list[EntryState], has_result: bool, state: CancelState) -> None:
    assert classify(found, has_result) is state


@pytest.mark.parametrize(
    ("entry_id", "last", "delivered"),
    [
        ("5-0", "5-0", True),
        ("5-1", "5-0", False),
        ("4-9", "5-0", True),
        ("10-0", "9-5", False),  # numeric, not text, order
        ("1-0", "0-0", False),
    ],
)
def test_is_delivered(entry_id: str, last: str, delivered: bool) -> None:
    assert is_delivered(entry_id, last) is delivered


@pytest.mark.parametrize(
    ("result_ttl", "dedupe", "ttl_ms"),
    [(3600.0, 3600.0, 86_400_000), (172_800.0, 60.0, 172_800_000), (60.0, 200_000.0, 200_000_000)],
)
def test_marker_ttl_is_at_least_a_day(result_ttl: float, dedupe: float, ttl_ms: int) -> None:
    assert marker_ttl_ms(result_ttl, dedupe) == ttl_ms


@pytest.mark.parametrize(
    ("value", "limit", "expected", "error"),
    [
        ({"a": 1}, 100, '{"a":1}', None),
        ("x" * 98, 100, '"' + "x" * 98 + '"', None),  # exactly 100 bytes
        ("x" * 99, 100, None, CheckpointTooLarge),
        ("é" * 40, 100, None, None),  # 80 bytes of UTF-8 plus quotes
        ("é" * 50, 100, None, CheckpointTooLarge),  # counted in bytes, not characters
        ({1, 2}, 100, None, ValueError),
        (float("nan"), 100, None, ValueError),
    ],
)
def test_encode_limited(value: Any, limit: int, expected: str | None, error: type[Exception] | None) -> None:
    if error is not None:
        with pytest.raises(error):
            encode_limited(value, limit, "checkpoint")
        return
    text = encode_limited(value, limit, "checkpoint")
    assert expected is None or text == expected


def test_a_too_large_checkpoint_says_its_size_and_the_limit() -> None:
    with pytest.raises(CheckpointTooLarge, match=r"checkpoint is 102 bytes as JSON; at most 100 are allowed"):
        encode_limited("x" * 100, 100, "checkpoint")


@pytest.mark.parametrize(
    ("fields", "event"),
    [
        ({"type": "progress", "data": '{"step": 1}', "at": "17"}, TaskEvent("1-0", "progress", 17, {"step": 1})),
        ({"type": "progress", "data": "not json"}, TaskEvent("1-0", "progress", None, "not json")),
        ({"type": "outcome", "status": "cancelled", "at": "5"}, TaskEvent("1-0", "outcome", 5, None, "cancelled")),
        ({"type": "follow", "at": "x"}, TaskEvent("1-0", "follow")),
        # digits that are not ASCII are no time (str.isdigit takes them; int() refused "²" and raised)
        ({"type": "follow", "at": "\u00b2"}, TaskEvent("1-0", "follow")),
        ({"type": "follow", "at": "\u0661\u0662"}, TaskEvent("1-0", "follow")),
    ],
)
def test_parse_event(fields: dict[str, str], event: TaskEvent) -> None:
    assert parse_event("1-0", fields) == event
    assert event.final is (event.type == "outcome")


def test_event_json_shows_data_or_status() -> None:
    assert TaskEvent("1-0", "progress", 3, {"a": 1}).to_json() == {
        "id": "1-0",
        "type": "progress",
        "at": 3,
        "data": {"a": 1},
    }
    assert TaskEvent("2-0", "outcome", 4, None, "succeeded").to_json()["status"] == "succeeded"


def test_new_keys_carry_the_pool_hash_tag() -> None:
    keys = PoolKeys("ns", "pool")
    for key in (keys.cancel("t"), keys.events("t"), keys.checkpoint("t")):
        assert key.startswith("tierpool:{ns/pool}:") and key.endswith(":t")


async def test_a_task_outside_a_worker_has_no_progress_or_checkpoint() -> None:
    task = Task("t", "p0", {}, 1, 0, "1-0")
    assert task.checkpoint_state is None
    with pytest.raises(RuntimeError, match="run by a tierpool worker"):
        await task.progress({"a": 1})
    with pytest.raises(RuntimeError, match="run by a tierpool worker"):
        task.checkpoint_sync({"a": 1})
