import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tierpool.model.keys import PoolKeys
from tierpool.model.spec import PoolSpec
from tierpool.protocol.envelope import MalformedEntry, Task, decode, decode_many, encode
from tierpool.protocol.submission import SubmitError, TaskRequest, TaskResult, prepare

SPEC = PoolSpec.model_validate(
    {"tiers": [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1}], "tasks": {"maxPayloadBytes": 100}}
)
KEYS = PoolKeys("ns", "pool")


def test_encode_decode_round_trip() -> None:
    fields = encode("t1", "p1", '{"a": 1}', 1000, escalated_from="p2", deadline_ms=5000)
    task = decode("1-0", fields, attempt=2)
    assert (task.id, task.tier, task.payload, task.attempt) == ("t1", "p1", {"a": 1}, 2)
    assert task.escalated_from == "p2" and task.deadline_ms == 5000
    assert task.created_at == datetime.fromtimestamp(1, tz=UTC)


MALFORMED = [
    ({"tier": "p0", "payload": "{}", "created_at": "1"}, "task_id"),
    ({"task_id": "x", "tier": "p0", "payload": "{nope", "created_at": "1"}, "payload is not JSON"),
    ({"task_id": "x", "tier": "p0", "payload": "{}", "created_at": "yesterday"}, "created_at"),
    ({"task_id": "", "tier": "p0", "payload": "{}", "created_at": "1"}, "task_id"),
    ({"task_id": "x", "payload": "{}", "created_at": "1"}, "tier"),
    ({}, "task_id"),
    ({b"task_id": b"\xff", "tier": "p0", "payload": "{}", "created_at": "-5"}, "created_at"),
]


@pytest.mark.parametrize(("fields", "reason"), MALFORMED)
def test_malformed_entries_say_why(fields: dict[Any, Any], reason: str) -> None:
    with pytest.raises(MalformedEntry, match=reason):
        decode("1-0", fields, attempt=1)


def test_decode_many_keeps_order_and_names_each_bad_entry() -> None:
    good = encode("t1", "p0", "[1]", 5)
    read = [("1-0", good, 1), *((f"{i}-1", fields, 2) for i, (fields, _) in enumerate(MALFORMED)), ("9-0", good, 3)]
    decoded = decode_many(read)
    assert len(decoded) == len(read)
    first, last = decoded[0], decoded[-1]
    assert isinstance(first, Task) and (first.id, first.payload, first.stream_id, first.attempt) == (
        "t1",
        [1],
        "1-0",
        1,
    )
    assert isinstance(last, Task) and (last.stream_id, last.attempt) == ("9-0", 3)
    for outcome, (_, reason) in zip(decoded[1:-1], MALFORMED, strict=True):
        assert isinstance(outcome, MalformedEntry) and reason in str(outcome)


def test_decode_many_of_a_valid_read_matches_decode() -> None:
    read = [
        (f"{i}-0", encode(f"t{i}", "p1", f'{{"n": {i}}}', i, escalated_from="p2", deadline_ms=i), i) for i in range(5)
    ]
    assert decode_many(read) == [decode(*entry) for entry in read]
    bad_payload = [("1-0", encode("t", "p0", "{nope", 1), 1)]  # valid envelope, payload not JSON
    (outcome,) = decode_many(bad_payload)
    assert isinstance(outcome, MalformedEntry) and "payload is not JSON" in str(outcome)


def test_prepare_valid() -> None:
    sub = prepare(SPEC, KEYS, TaskRequest("p1", {"x": 1}), now_ms=42)
    assert sub.stream == "tierpool:{ns/pool}:tier:p1"
    assert sub.fields["created_at"] == "42" and sub.fields["payload"] == '{"x":1}'
    assert sub.dedupe_key is None and len(sub.task_id) == 32


def test_prepare_chosen_id_is_deduplicated_and_deadline_relative() -> None:
    sub = prepare(SPEC, KEYS, TaskRequest("p0", 1, task_id="abc", deadline=timedelta(seconds=2)), now_ms=1000)
    assert sub.dedupe_key == "tierpool:{ns/pool}:dedupe:abc"
    assert sub.fields["deadline"] == "3000"


@pytest.mark.parametrize(
    ("timeout", "field"), [(None, None), (2.5, "2500"), (timedelta(minutes=10), "600000"), (0.001, "1")]
)
def test_prepare_carries_a_timeout_in_ms(timeout: float | timedelta | None, field: str | None) -> None:
    sub = prepare(SPEC, KEYS, TaskRequest("p0", {}, timeout=timeout), now_ms=0)
    assert sub.fields.get("timeout") == field
    assert decode("1-0", sub.fields, attempt=1).timeout_ms == (None if field is None else int(field))


def test_entries_without_a_timeout_stay_readable_and_bad_ones_are_named() -> None:
    old = {"task_id": "x", "tier": "p0", "payload": "{}", "created_at": "1"}  # protocol 2 entry
    assert decode("1-0", old, attempt=1).timeout_ms is None
    with pytest.raises(MalformedEntry, match="timeout"):
        decode("1-0", {**old, "timeout": "0"}, attempt=1)
    with pytest.raises(MalformedEntry, match="timeout"):
        decode("1-0", {**old, "timeout": "soon"}, attempt=1)


BAD_REQUESTS = [
    (TaskRequest("p9", {}), "unknown tier 'p9'; this pool has p0, p1"),
    (TaskRequest("p0", {"x": "y" * 200}), "accepts at most 100"),
    (TaskRequest("p0", {"x": {1, 2}}), "not JSON-serialisable"),
    (TaskRequest("p0", float("nan")), "not JSON-serialisable"),
    (TaskRequest("p0", {}, task_id=""), "task_id must be"),
    (TaskRequest("p0", {}, task_id="a b"), "task_id must be"),
    (TaskRequest("p0", {}, task_id="x" * 201), "task_id must be"),
    (TaskRequest("p0", {}, task_id="bad-\udcff"), "task_id must be UTF-8 text"),  # argv's escaped byte
    (TaskRequest("p0", {}, deadline=datetime(2030, 1, 1)), "timezone-aware"),
    (TaskRequest("p0", {}, timeout=0), "timeout must be"),
    (TaskRequest("p0", {}, timeout=-1), "timeout must be"),
    (TaskRequest("p0", {}, timeout=float("nan")), "timeout must be"),
    (TaskRequest("p0", {}, timeout=float("inf")), "timeout must be"),
    (TaskRequest("p0", {}, delay=-1), "delay must be between"),
    (TaskRequest("p0", {}, delay=float("nan")), "delay must be between"),
    (TaskRequest("p0", {}, not_before="tomorrow"), "not an ISO 8601 time"),
    (TaskRequest("p0", {}, not_before="2030-01-01T09:00:00"), "time zone"),
    (TaskRequest("p0", {}, rate_limit="nope"), "unknown rate limit 'nope'; this pool has none"),
    (TaskRequest("p0", {}, cost=0), "cost must be at least 1"),
    (TaskRequest("p0", {}, cost=1.5), "whole number"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("request_", "message"), BAD_REQUESTS)
def test_prepare_refuses(request_: TaskRequest, message: str) -> None:
    with pytest.raises(SubmitError, match=message.replace("(", r"\(")):
        prepare(SPEC, KEYS, request_, now_ms=0)


def test_prepare_schedules_delays_and_carries_rate_limits() -> None:
    spec = PoolSpec.model_validate(
        {"tiers": [{"name": "p0", "weight": 1}], "rateLimits": [{"name": "ai", "perMinute": 60}]}
    )
    sub = prepare(spec, KEYS, TaskRequest("p0", {}, delay=timedelta(seconds=1.5), rate_limit="ai", cost=7), now_ms=0)
    assert sub.scheduled and sub.delay_ms == 1500 and sub.not_before_ms == 0
    assert sub.fields["rate_limit"] == "ai" and sub.fields["cost"] == "7"
    pinned = prepare(spec, KEYS, TaskRequest("p0", {}, not_before="2030-01-01T00:00:00Z"), now_ms=0)
    assert pinned.not_before_ms == 1_893_456_000_000 and pinned.scheduled
    assert not prepare(spec, KEYS, TaskRequest("p0", {}), now_ms=0).scheduled


def test_carried_attempts_count_in_the_task() -> None:
    fields = {**encode("t", "p0", "{}", 1, rate_limit="ai", cost=3), "attempts": "2", "due": "5", "paid": "5"}
    task = decode("1-0", fields, attempt=1)
    assert (task.attempt, task.prior_attempts, task.entry_deliveries) == (3, 2, 1)
    assert (task.due_ms, task.paid_ms, task.rate_limit, task.cost) == (5, 5, "ai", 3)
    assert decode("1-0", encode("t", "p0", "{}", 1), attempt=2).cost == 1


def test_keys_share_one_hash_tag() -> None:
    keys = PoolKeys.parse("team-a/agents")
    names = [keys.tier("p0"), keys.dlq, keys.result("t"), keys.escalator_lease, keys.errors, keys.dedupe("t")]
    names += [keys.due, keys.throttled, keys.rate_bucket("ai")]
    names += [keys.tenants("p0"), keys.admitted("p0"), keys.held("p0"), keys.held_seq("p0")]
    assert all("{team-a/agents}" in name for name in names)
    assert PoolKeys.parse("solo").ref == "default/solo"
    with pytest.raises(ValueError):
        PoolKeys.parse("ns/")


def test_result_record_parsing_ignores_unknown_fields() -> None:
    found = TaskResult.from_json('{"task_id": "a", "status": "succeeded", "result": 3, "future_field": 1}')
    assert found.ok and found.result == 3


def test_a_tenant_task_on_a_limited_tier_can_be_delayed_and_stays_gated() -> None:
    spec = PoolSpec.model_validate({"tiers": [{"name": "p0", "weight": 1, "tenantConcurrency": 2}]})
    keys = PoolKeys("ns", "pool")
    delayed = prepare(spec, keys, TaskRequest("p0", {}, tenant="acme", delay=5), 1_000)
    assert delayed.scheduled and delayed.gate is not None  # SCHEDULE always indexes it; MOVE_DUE gates it
    assert prepare(spec, keys, TaskRequest("p0", {}, delay=5), 1_000).scheduled  # no tenant: not gated
    assert prepare(spec, keys, TaskRequest("p0", {}, tenant="acme"), 1_000).gate is not None


def test_a_result_record_carries_its_traceback_and_older_ones_parse_without() -> None:
    trace = 'Traceback (most recent call last):\n  File "h.py", line 1, in handle\nRuntimeError: kaput\n'
    record = {"task_id": "a", "status": "dead_lettered", "error": "RuntimeError: kaput", "traceback": trace}
    assert TaskResult.from_json(json.dumps(record)).traceback == trace
    older = TaskResult.from_json('{"task_id": "a", "status": "dead_lettered", "error": "RuntimeError: kaput"}')
    assert older.traceback is None and older.error == "RuntimeError: kaput"
