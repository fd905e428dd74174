"""Entries in the seed articles' formats, taken as they are (tierpool.protocol.adopted): table tests of the pure
rules the worker and helpers/adopted.lua share."""

from __future__ import annotations

import json

import pytest

from tierpool.protocol.adopted import (
    adopt_fields,
    created_at_text,
    derived_task_id,
    escalation_due,
    escalation_ms,
    payload_task_id,
    task_id_of,
)
from tierpool.protocol.envelope import decode

SWARM = json.dumps({"task_id": "task-swarm-101", "target_role": "R", "action": "a", "payload": {"f": "main.py"}})


@pytest.mark.parametrize(
    ("payload", "task_id"),
    [
        (SWARM, "task-swarm-101"),
        ('{"task_id": ""}', None),
        ('{"task_id": 101}', None),
        ('{"task_id": null}', None),
        (json.dumps({"task_id": "x" * 200}), "x" * 200),
        (json.dumps({"task_id": "x" * 201}), None),
        (json.dumps({"task_id": "é" * 100}), "é" * 100),  # 200 bytes
        (json.dumps({"task_id": "é" * 101}), None),  # 202 bytes: over, as the Lua rule counts bytes
        ('["task_id"]', None),
        ('"task_id"', None),
        ("{not json task_id", None),
        ('{"other": 1}', None),
        ('{"payload": {"task_id": "inner"}}', None),  # only the top level's
    ],
)
def test_a_payloads_own_task_id(payload: str, task_id: str | None) -> None:
    assert payload_task_id(payload) == task_id


@pytest.mark.parametrize(
    ("fields", "task_id"),
    [
        ({"task_id": "own", "payload": SWARM}, "own"),
        ({"payload": SWARM}, "task-swarm-101"),
        ({"payload": "{}"}, "agent:tasks:stream/1-0"),
        ({"created_at": "1"}, "agent:tasks:stream/1-0"),
    ],
)
def test_the_task_id_of_an_entry(fields: dict[str, str], task_id: str) -> None:
    assert task_id_of(fields, "agent:tasks:stream", "1-0") == task_id


def test_a_derived_task_id_is_stable_and_names_the_entry() -> None:
    assert derived_task_id("tasks:p2", "1722567000000-3") == "tasks:p2/1722567000000-3"
    assert derived_task_id("tasks:p2", "1722567000000-3") == derived_task_id("tasks:p2", "1722567000000-3")
    assert derived_task_id("tasks:p1", "1722567000000-3") != derived_task_id("tasks:p2", "1722567000000-3")
    assert len(derived_task_id("s" * 150, "18446744073709551615-18446744073709551615")) <= 200


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("1722567000.123456", "1722567000123"),  # time.time(): seconds
        ("1722567000.", "1722567000000"),
        ("1722567000", "1722567000"),  # whole: entry_rules.created_at_ms reads it (as seconds)
        ("1722567000123", "1722567000123"),
        ("1722567000123.7", "1722567000123"),  # ms with a fraction
        ("99999999999.5", "99999999999500"),  # below 1e11: seconds
        ("100000000000.5", "100000000000"),  # from 1e11: ms
        ("-1.5", "-1.5"),  # not a number the envelope takes: it says why
        ("1e9", "1e9"),
        ("soon", "soon"),
    ],
)
def test_created_at_with_a_fraction(value: str, text: str) -> None:
    assert created_at_text(value) == text


@pytest.mark.parametrize(
    ("own", "default", "after"),
    [
        (None, 600_000, 600_000),
        (None, None, None),
        ("60", 600_000, 60_000),
        ("60", None, 60_000),
        ("0", 600_000, 0),
        ("1.5", None, 1_500),
        ("1.005", None, 1_004),  # a float's floor, as Lua's math.floor(tonumber(v) * 1000)
        ("-5", 600_000, 600_000),  # not valid: the tier's
        ("5s", 600_000, 600_000),
        ("1e3", None, None),
        (" 5", None, None),
        ("", 7, 7),
        ("0x10", None, None),
    ],
)
def test_the_per_task_escalation_time(own: str | None, default: int | None, after: int | None) -> None:
    assert escalation_ms(own, default) == after


@pytest.mark.parametrize(
    ("entry_id", "own", "now", "default", "due"),
    [
        ("1000-0", None, 601_000, 600_000, True),
        ("1000-0", None, 600_999, 600_000, False),
        ("1000-0", "60", 61_000, 600_000, True),  # its own, shorter than the tier's
        ("1000-0", "60", 60_999, 600_000, False),
        ("1000-0", "900", 601_000, 600_000, False),  # its own, longer
        ("1000-0", None, 10**12, None, False),  # neither: never
        ("1000-0", "1", 2_000, None, True),
    ],
)
def test_when_an_entry_escalates(entry_id: str, own: str | None, now: int, default: int | None, due: bool) -> None:
    assert escalation_due(entry_id, own, now, default) is due


@pytest.mark.parametrize(
    ("entry_id", "own", "created_at", "now", "due"),
    [
        ("900000-0", "60", "500.5", 560_500, True),  # its own ttl counts from created_at (seconds), not the entry
        ("900000-0", "60", "500.5", 560_499, False),
        ("900000-0", "60", "500000000000", 500_000_060_000, True),  # whole ms
        ("900000-0", "60", "500000000000", 500_000_059_999, False),
        ("900000-0", "60", "500", 560_000, True),  # whole seconds
        ("900000-0", "60", "soon", 960_000, True),  # not a number: from the entry's time
        ("900000-0", "60", "soon", 959_999, False),
        ("900000-0", None, "500.5", 1_499_999, False),  # the tier's escalateAfter: from entering the stream
        ("900000-0", None, "500.5", 1_500_000, True),
    ],
)
def test_its_own_ttl_counts_from_created_at(
    entry_id: str, own: str | None, created_at: str, now: int, due: bool
) -> None:
    assert escalation_due(entry_id, own, now, 600_000, created_at) is due


def test_an_envelope_is_left_as_it_is() -> None:
    fields = {"task_id": "t", "tier": "p0", "payload": "{}", "created_at": "1722567000000"}
    assert adopt_fields(fields, "s", "1-0", "p0") is fields


def test_seed_004s_entry_becomes_its_task() -> None:
    fields = adopt_fields({"payload": SWARM}, "agent:tasks:stream", "1722567000000-0", "tasks")
    task = decode("1722567000000-0", fields, 1)
    assert (task.id, task.tier, task.created_at_ms) == ("task-swarm-101", "tasks", 1722567000000)
    assert task.payload == json.loads(SWARM)


def test_an_entry_without_payload_carries_its_data_in_its_fields() -> None:
    raw = {"task_type": "reconcile", "data": '{"a": 1}', "created_at": "1722567000.5", "priority_ttl_s": "420"}
    fields = adopt_fields(raw, "tasks:p2", "1722567000600-0", "p2")
    task = decode("1722567000600-0", fields, 1)
    assert task.id == "tasks:p2/1722567000600-0"
    assert task.payload == {"task_type": "reconcile", "data": '{"a": 1}'}  # the envelope's fields are not data
    assert task.created_at_ms == 1722567000500
    assert task.tier == "p2"


@pytest.mark.parametrize(
    "fields",
    [
        {"payload": "{}"},
        # an escalated copy: the escalator wrote task_id, tier and escalated_from, and there was no created_at
        {"payload": "{}", "task_id": "s/1-0", "tier": "p0", "escalated_from": "p1"},
    ],
)
def test_an_entry_without_created_at_counts_from_its_entry_id(fields: dict[str, str]) -> None:
    task = decode("1722567000600-0", adopt_fields(fields, "s", "1722567000600-0", "p0"), 1)
    assert task.created_at_ms == 1722567000600


def test_an_adopted_entry_with_a_bad_payload_is_still_refused() -> None:
    with pytest.raises(ValueError, match="payload is not JSON"):
        decode("1-0", adopt_fields({"payload": "not json"}, "s", "1-0", "p0"), 1)
