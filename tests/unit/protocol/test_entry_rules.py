"""The rules a worker enforces on every entry, whatever wrote it (tierpool.protocol.entry_rules): the size limit,
``created_at``, the stream's tier, which tasks the tenant gate must admit; pure tables."""

from __future__ import annotations

from typing import Any

import pytest

from tierpool.protocol import entry_rules
from tierpool.protocol.entry_rules import CreatedAt

LIMIT = 1000
ALLOWED = LIMIT + entry_rules.ENTRY_ALLOWANCE_BYTES
NOW = 1_760_000_000_000  # 2025-10-09, in ms
EARLIEST = entry_rules.EARLIEST_CREATED_AT_MS


def fields(payload: Any = "{}", **extra: Any) -> dict[Any, Any]:
    return {"task_id": "t", "tier": "p0", "payload": payload, "created_at": "1", **extra}


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (fields(), None),
        (fields("x" * LIMIT), None),
        (fields("x" * (LIMIT + 1)), f"payload is {LIMIT + 1} bytes, over tasks.maxPayloadBytes ({LIMIT})"),
        (fields("é" * 500), None),  # 1000 bytes in 500 characters
        (fields("é" * 501), f"payload is 1002 bytes, over tasks.maxPayloadBytes ({LIMIT})"),
        (fields("€" * 300), None),  # 900 bytes: counted, not guessed from 4 bytes a character
        (fields(b"x" * (LIMIT + 1)), f"payload is {LIMIT + 1} bytes, over tasks.maxPayloadBytes ({LIMIT})"),
        ({b"payload": b"x" * (LIMIT + 1)}, f"payload is {LIMIT + 1} bytes, over tasks.maxPayloadBytes ({LIMIT})"),
        (fields("\udcff" * (LIMIT + 1)), f"payload is {LIMIT + 1} bytes, over tasks.maxPayloadBytes ({LIMIT})"),
        (fields("\ud800" * 400), f"payload is 1200 bytes, over tasks.maxPayloadBytes ({LIMIT})"),
        ({"task_id": "t"}, None),  # no payload: the envelope's check names it
        (fields(junk="j" * (ALLOWED - 100)), None),
        (
            fields(junk="j" * ALLOWED),
            f"entry is {ALLOWED + 38} bytes, over tasks.maxPayloadBytes ({LIMIT}) plus 65536 for its other fields",
        ),
        (
            fields(**{"k" * ALLOWED: ""}),
            f"entry is {ALLOWED + 34} bytes, over tasks.maxPayloadBytes ({LIMIT}) plus 65536 for its other fields",
        ),
    ],
    ids=lambda value: str(value)[:40] if isinstance(value, str) else None,
)
def test_size_refusal(entry: dict[Any, Any], reason: str | None) -> None:
    assert entry_rules.size_refusal(entry, LIMIT) == reason


def test_the_size_of_a_big_ascii_entry_is_read_without_encoding_it() -> None:
    big = "x" * (50 * 1024 * 1024)
    assert entry_rules.size_refusal(fields(big), 262_144) == (
        f"payload is {len(big)} bytes, over tasks.maxPayloadBytes (262144)"
    )


@pytest.mark.parametrize(
    ("value", "expected", "noted"),
    [
        (NOW, NOW, False),
        (NOW - 3_600_000, NOW - 3_600_000, False),  # an hour in the queue is an hour
        (NOW // 1000, NOW // 1000 * 1000, True),  # seconds
        (NOW // 1000 - 30, NOW - 30_000, True),
        (entry_rules.SECONDS_BELOW - 1, NOW, True),  # seconds, but the year 5138: in the future
        (entry_rules.SECONDS_BELOW, NOW, True),  # ms, 1973: before any task
        (entry_rules.EARLIEST_CREATED_AT_MS, entry_rules.EARLIEST_CREATED_AT_MS, False),
        (entry_rules.EARLIEST_CREATED_AT_MS - 1, NOW, True),
        (0, NOW, True),
        (1, NOW, True),
        (NOW + entry_rules.CLOCK_SKEW_MS, NOW + entry_rules.CLOCK_SKEW_MS, False),  # a producer's clock a bit fast
        (NOW + entry_rules.CLOCK_SKEW_MS + 1, NOW, True),
        (10**18, NOW, True),
    ],
)
def test_created_at_ms(value: int, expected: int, noted: bool) -> None:
    read = entry_rules.created_at_ms(value, NOW)
    assert read.ms == expected and (read.note is not None) is noted, read
    assert entry_rules.EARLIEST_CREATED_AT_MS <= read.ms <= NOW + entry_rules.CLOCK_SKEW_MS  # never 1970 (1.8e12 ms)


def test_created_at_notes_say_what_was_read() -> None:
    assert entry_rules.created_at_ms(1_760_000_000, NOW) == CreatedAt(
        1_760_000_000_000, "created_at 1760000000 is in seconds: read as 1760000000000 ms"
    )
    assert entry_rules.created_at_ms(1, NOW).note == "created_at 1 (read as 1000 ms) is before 2017: counted from now"
    future = entry_rules.created_at_ms(NOW // 1000 + 120, NOW).note
    assert future == "created_at 1760000120 (seconds) is 120000 ms in the future: counted from now"


@pytest.mark.parametrize(
    ("envelope_tier", "stream_tier", "note"),
    [
        ("p1", "p1", None),
        ("p0", "p2", "its tier field says 'p0'; it runs, and is recorded, as 'p2', its stream's tier"),
        ("nope", "p0", "its tier field says 'nope'; it runs, and is recorded, as 'p0', its stream's tier"),
    ],
)
def test_tier_note(envelope_tier: str, stream_tier: str, note: str | None) -> None:
    assert entry_rules.tier_note(envelope_tier, stream_tier) == note


@pytest.mark.parametrize(
    ("tenant", "limit", "gated"), [("acme", 1, True), ("acme", None, False), (None, 1, False), (None, None, False)]
)
def test_gated(tenant: str | None, limit: int | None, gated: bool) -> None:
    assert entry_rules.gated(tenant, limit) is gated


@pytest.mark.parametrize(
    ("tenant", "refused"), [("acme", False), ("nul\0inside", True), ("has space", True), ("", True)]
)
def test_tenant_refusal(tenant: str, refused: bool) -> None:
    reason = entry_rules.tenant_refusal(tenant)
    assert (reason is not None) is refused
    assert reason is None or reason.startswith("bad envelope: tenant: tenant must be 1-128 characters")


@pytest.mark.parametrize(
    ("entry", "task_id"),
    [
        (fields(), "t"),
        ({"payload": "x"}, ""),
        (fields(task_id="x" * entry_rules.DEAD_LETTER_CUT_BYTES), "x" * entry_rules.DEAD_LETTER_CUT_BYTES),
        (fields(task_id="x" * (entry_rules.DEAD_LETTER_CUT_BYTES + 1)), ""),
    ],
)
def test_dead_letter_task_id(entry: dict[str, Any], task_id: str) -> None:
    assert entry_rules.dead_letter_task_id(entry) == task_id


def test_the_dead_letter_cut_is_bounded() -> None:
    size, most = entry_rules.DEAD_LETTER_CUT
    assert (size, most) == (entry_rules.DEAD_LETTER_CUT_BYTES, entry_rules.DEAD_LETTER_MOST_FIELDS)
    assert 2 * size * most <= 64 * 1024  # kept fields, before the ``truncated`` note


@pytest.mark.parametrize("payload", ["{}", "x" * 200, "é" * 200, "x" * 250, "€" * 400, "x" * 2000])
def test_a_glance_at_the_size_never_lets_an_oversized_entry_through(payload: str) -> None:
    entry = fields(payload)
    glance = entry_rules.within_size_at_a_glance(entry, LIMIT)
    assert glance is (4 * (sum(map(len, entry)) + sum(map(len, entry.values()))) <= LIMIT)
    assert not glance or entry_rules.size_refusal(entry, LIMIT) is None


@pytest.mark.parametrize(
    "value",
    [
        0,
        1,
        NOW // 1000,
        EARLIEST - 1,
        EARLIEST,
        NOW,
        NOW + entry_rules.CLOCK_SKEW_MS,
        NOW + entry_rules.CLOCK_SKEW_MS + 1,
    ],
)
def test_created_at_stands_exactly_when_it_is_read_unchanged(value: int) -> None:
    assert entry_rules.created_at_stands(value, NOW) is (entry_rules.created_at_ms(value, NOW) == CreatedAt(value))
