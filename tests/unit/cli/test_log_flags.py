"""The global log flags reach every command, not only `tierpool worker`."""

from __future__ import annotations

import logging

import pytest

from tierpool.cli.main import main


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["crd"], logging.WARNING),  # a command logs warnings and errors unless told otherwise
        (["--log-level", "debug", "crd"], logging.DEBUG),
        (["crd", "--log-level", "ERROR"], logging.ERROR),  # after the command too
    ],
)
def test_a_command_logs_at_the_level_given(argv: list[str], level: int, capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        assert main(argv) == 0
        assert root.level == level
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
    assert "CustomResourceDefinition" in capsys.readouterr().out
