"""Finding a task's member in the due-time index (pure parts)."""

from __future__ import annotations

import json

import pytest

from tierpool.protocol.members import glob_escape, member_task_id


@pytest.mark.parametrize(
    ("member", "task_id"),
    [
        (json.dumps(["p0", ["task_id", "abc", "tier", "p0"]]), "abc"),
        (json.dumps(["p0", ["tier", "p0", "task_id", "x*y"]]), "x*y"),
        (json.dumps(["p0", ["tier", "p0"]]), None),
        ("not json", None),
        (json.dumps({"task_id": "abc"}), None),
    ],
)
def test_member_task_id(member: str, task_id: str | None) -> None:
    assert member_task_id(member) == task_id


def test_glob_escape_makes_pattern_characters_literal() -> None:
    assert glob_escape("a*b?c[d]e\\f") == "a\\*b\\?c\\[d\\]e\\\\f"
    assert glob_escape("plain-id_1") == "plain-id_1"
