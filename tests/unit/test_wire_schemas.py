"""The JSON Schemas in schemas/ (tierpool.protocol.wire_schemas): each is what its generator makes from the types
that define it, a valid 2020-12 schema, and says of an envelope what the worker decides."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hack.docs_gen import ROOT, SCHEMA_FILES
from jsonschema import Draft202012Validator

from tierpool.protocol import records
from tierpool.protocol.envelope import Envelope, MalformedEntry, decode, encode
from tierpool.protocol.submission import TaskResult
from tierpool.protocol.wire_schemas import SCHEMAS, closed


def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((ROOT / "schemas" / name).read_text(encoding="utf-8")))


@pytest.mark.parametrize("relative", sorted(SCHEMA_FILES))
def test_the_committed_schema_matches_its_source(relative: str) -> None:
    committed = (ROOT / relative).read_text(encoding="utf-8")
    assert committed == SCHEMA_FILES[relative](), f"{relative} is stale: run `make docs-gen`"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_each_schema_is_a_valid_2020_12_schema(name: str) -> None:
    schema = validator(name).schema
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith("/schemas/" + name)


def test_every_schema_file_is_generated() -> None:
    assert sorted(path.name for path in (ROOT / "schemas").glob("*.schema.json")) == sorted(SCHEMAS)


BASE = encode("t1", "p0", '{"a":1}', 1_700_000_000_000)
ENVELOPES: list[tuple[dict[str, str], bool]] = [
    (BASE, True),
    (encode("t1", "p0", "{}", 1, "p1", 5, 1000, "openai", 3, "acme"), True),
    ({**BASE, "attempts": "2", "due": "1700000000001", "paid": "1700000000002", "extra": "kept"}, True),
    ({k: v for k, v in BASE.items() if k != "protocol"}, True),  # an older producer's
    ({k: v for k, v in BASE.items() if k != "task_id"}, False),
    ({k: v for k, v in BASE.items() if k != "payload"}, False),
    ({**BASE, "task_id": ""}, False),
    ({**BASE, "task_id": "x" * 201}, False),
    ({**BASE, "tier": ""}, False),
    ({**BASE, "created_at": "yesterday"}, False),
    ({**BASE, "created_at": "-5"}, False),
    ({**BASE, "created_at": "1.5"}, False),
    ({**BASE, "timeout": "0"}, False),
    ({**BASE, "cost": "0"}, False),
    ({**BASE, "deadline": "soon"}, False),
    ({**BASE, "protocol": "0"}, False),
    ({**BASE, "protocol": "ten"}, False),
    (encode("r.0.1", "p0", "{}", 1, parent="r.0", ancestors=["r"]), True),  # a grandchild
    ({**BASE, "parent": "r", "parked": "0"}, True),  # a parent put back by PARK
    ({**BASE, "parked": "-1"}, False),
]


@pytest.mark.parametrize(("fields", "valid"), ENVELOPES)
def test_the_envelope_schema_agrees_with_the_worker(fields: dict[str, str], valid: bool) -> None:
    assert validator("envelope.schema.json").is_valid(fields) is valid
    try:
        decode("1-0", fields, 1)
        decoded = True
    except MalformedEntry:
        decoded = False
    assert decoded is valid


def test_every_envelope_field_is_in_the_schema() -> None:
    properties = validator("envelope.schema.json").schema["properties"]
    assert list(properties) == list(Envelope.__annotations__)
    assert set(BASE) <= set(properties)


SUCCEEDED = {
    "task_id": "t1", "status": "succeeded", "result": {"ok": [1]}, "attempts": 1, "tier": "p0",
    "escalated_from": None, "worker": "w1", "queue_wait_ms": 3, "run_ms": 40, "created_at": 1, "finished_at": 2,
}  # fmt: skip
DEAD = {
    "task_id": "t1", "status": "dead_lettered", "tier": "p0", "error": "boom", "reason": "non-retryable: boom",
    "attempts": 1, "finished_at": 2,
}  # fmt: skip
CANCELLED = {"task_id": "t1", "status": "cancelled", "attempts": 0, "reason": "cancelled before it started",
             "finished_at": 2}  # fmt: skip
RECORDS: list[tuple[dict[str, Any], bool]] = [
    (SUCCEEDED, True),
    ({**SUCCEEDED, "result": None, "escalated_from": "p1"}, True),
    ({**SUCCEEDED, "traceback": "Traceback"}, False),  # a field of another status
    ({**SUCCEEDED, "reason": "x"}, False),
    ({k: v for k, v in SUCCEEDED.items() if k != "worker"}, False),
    ({**SUCCEEDED, "attempts": 0}, False),
    (DEAD, True),
    ({**DEAD, "traceback": "Traceback (most recent call last):\n"}, True),
    ({**DEAD, "worker": "w1"}, False),
    ({**DEAD, "result": 1}, False),
    ({k: v for k, v in DEAD.items() if k != "reason"}, False),
    (CANCELLED, True),
    ({**CANCELLED, "tier": None, "worker": "w1"}, True),
    ({**CANCELLED, "tier": "p0"}, True),
    ({**CANCELLED, "result": 1}, False),
    ({**CANCELLED, "error": "x"}, False),
    ({**CANCELLED, "status": "lost"}, False),
]


@pytest.mark.parametrize(("record", "valid"), RECORDS)
def test_the_result_schema_ties_fields_to_the_status(record: dict[str, Any], valid: bool) -> None:
    assert validator("result.schema.json").is_valid(record) is valid


def test_every_field_the_client_reads_is_in_some_record() -> None:
    shapes = (records.SucceededRecord, records.DeadLetteredRecord, records.CancelledRecord)
    written = {name for shape in shapes for name in shape.__annotations__}
    assert set(TaskResult.__dataclass_fields__) <= written


@pytest.mark.parametrize(
    ("fields", "valid"),
    [
        (
            {
                "task_id": "t",
                "reason": "r",
                "error": "",
                "deliveries": "1",
                "source_tier": "p0",
                "source_id": "1-0",
                "dead_lettered_at": "5",
            },
            True,
        ),
        ({"reason": "scheduled task is not an envelope", "scheduled": "[]", "dead_lettered_at": "5"}, True),
        (
            {
                "reason": "r",
                "error": "",
                "deliveries": "1",
                "source_tier": "p0",
                "source_id": "1",
                "dead_lettered_at": "5",
            },
            False,
        ),
        ({"reason": "r", "deliveries": "1", "source_tier": "p0", "source_id": "1-0", "dead_lettered_at": "5"}, False),
    ],
)
def test_the_dead_letter_schema(fields: dict[str, str], valid: bool) -> None:
    assert validator("dead-letter.schema.json").is_valid(fields) is valid


@pytest.mark.parametrize(
    ("fields", "valid"),
    [
        ({"type": "progress", "data": '{"pct":5}', "at": "5"}, True),
        ({"type": "outcome", "status": "cancelled", "at": "5"}, True),
        ({"type": "follow", "at": "5"}, True),
        ({"type": "outcome", "status": "lost", "at": "5"}, False),
        ({"type": "progress", "at": "5"}, False),
        ({"type": "other", "at": "5"}, False),
    ],
)
def test_the_event_schema(fields: dict[str, str], valid: bool) -> None:
    assert validator("event.schema.json").is_valid(fields) is valid


@pytest.mark.parametrize(
    ("member", "valid"),
    [
        (["p0", ["task_id", "t", "due", "5"]], True),
        (["p0", []], True),
        (["", ["task_id", "t"]], False),
        (["p0", ["task_id", 5]], False),
        (["p0", ["task_id", "t"], "x"], False),
        ({"tier": "p0"}, False),
    ],
)
def test_the_due_member_schema(member: Any, valid: bool) -> None:
    assert validator("due-member.schema.json").is_valid(member) is valid


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_closed_variant_forbids_what_the_published_schema_allows(name: str) -> None:
    """The published schemas stay open to fields a newer protocol adds; their closed variants (what the
    integration tests validate real writes against) refuse any field they do not name."""
    published, strict = validator(name).schema, closed(name)
    Draft202012Validator.check_schema(strict)
    assert 'additionalProperties":false' not in json.dumps(published).replace(" ", "")
    shapes = [strict] if "properties" in strict else strict.get("oneOf", [])
    assert all(shape["additionalProperties"] is False for shape in shapes) or name == "due-member.schema.json"


def test_a_closed_dead_letter_takes_the_dead_entrys_envelope_fields() -> None:
    letter = {
        **BASE, "reason": "bad", "error": "", "deliveries": "1", "source_tier": "p0", "source_id": "1-0",
        "dead_lettered_at": "1700000000000",
    }  # fmt: skip
    assert Draft202012Validator(closed("dead-letter.schema.json")).is_valid(letter)
    assert not Draft202012Validator(closed("dead-letter.schema.json")).is_valid({**letter, "stray": "x"})
    assert validator("dead-letter.schema.json").is_valid({**letter, "stray": "x"})
