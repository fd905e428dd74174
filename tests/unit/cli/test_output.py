"""What the CLI prints: error lines never wrapped, the DLQ table's ids whole, and the purge question."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tierpool.cli import support
from tierpool.cli.commands import dlq_table
from tierpool.store.dlq import DeadLetter

ENTRY_ID, TASK_ID = "1733098765432-17", "3f2a9c1e-8b7d-4e6f-a5b4-1c2d3e4f5a6b"


def test_an_error_line_is_not_wrapped_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    message = "the handler module could not be imported " * 8  # 336 characters, with spaces to wrap at
    assert support.fail(message) == 1
    err = capsys.readouterr().err
    assert err == f"error: {message}\n"


def _dead(error: str) -> DeadLetter:
    return DeadLetter(
        id=ENTRY_ID,
        task_id=TASK_ID,
        source_tier="p1",
        reason="exceeded maxDeliveries (5)",
        error=error,
        deliveries=5,
        fields={},
    )


@pytest.mark.parametrize("width", [40, 60, 80, 200])
def test_the_dlq_table_shows_whole_ids_at_any_width(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    out = io.StringIO()
    monkeypatch.setattr(support, "console", Console(file=out, width=width))
    support.print_whole(dlq_table("ns/pool", [_dead("RuntimeError: kaput " * 4)]))
    printed = out.getvalue()
    assert ENTRY_ID in printed and TASK_ID in printed and "…" not in printed


@pytest.mark.parametrize(
    ("answer", "yes"), [("y\n", True), ("YES\n", True), ("\n", False), ("n\n", False), ("", False)]
)
def test_confirm_takes_only_a_yes(answer: str, yes: bool, capsys: pytest.CaptureFixture[str]) -> None:
    assert support.confirm("delete all 3 dead letter(s)?", io.StringIO(answer)) is yes
    assert capsys.readouterr().err == "delete all 3 dead letter(s)? [y/N] "
