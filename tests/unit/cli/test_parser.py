"""The argument parser: one duration type for every time flag, usage errors exit 2, ``--log-level`` choices, and
the global flags accepted before or after the command."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tierpool.cli import main as cli
from tierpool.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[3]
POOL = str(ROOT / "examples" / "minimal.yaml")

# every flag that takes a time: the command line up to it, the flag, and where its value lands
TIME_FLAGS = [
    (["worker"], "--grace", "grace"),
    (["submit", "-t", "p0"], "--deadline", "deadline"),
    (["submit", "-t", "p0"], "--timeout", "timeout"),
    (["submit", "-t", "p0"], "--delay", "delay"),
    (["submit", "-t", "p0"], "--wait", "wait"),
    (["result", "ID"], "--wait", "wait"),
    (["watch", "ID"], "--timeout", "timeout"),
    (["local", "pool.yaml"], "--duration", "duration"),
]
SPELLINGS = [("30", 30.0), ("2.5", 2.5), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("250ms", 0.25), ("1m30s", 90.0)]
TIME_WORDS = ("grace", "deadline", "timeout", "delay", "wait", "duration", "interval", "ttl", "seconds")


def _options(parser: argparse.ArgumentParser, path: str = "tierpool") -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _options(sub, f"{path} {name}")
        elif action.option_strings:
            found.append((path, action))
    return found


@pytest.mark.parametrize(("before", "flag", "dest"), TIME_FLAGS)
@pytest.mark.parametrize(("text", "seconds"), SPELLINGS)
def test_every_time_flag_takes_every_duration_spelling(
    before: list[str], flag: str, dest: str, text: str, seconds: float
) -> None:
    args = build_parser().parse_args([*before, flag, text])
    assert getattr(args, dest) == seconds


@pytest.mark.parametrize(("before", "flag", "dest"), TIME_FLAGS)
@pytest.mark.parametrize("bad", ["soon", "5d", "-1s", "1.s"])
def test_a_bad_duration_is_a_usage_error(
    before: list[str], flag: str, dest: str, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args([*before, flag, bad])
    assert stopped.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_the_table_names_every_time_flag_and_each_uses_the_duration_type() -> None:
    """A new time flag must use ``duration`` and join TIME_FLAGS."""
    timed = {
        (path, action.option_strings[0]) for path, action in _options(build_parser()) if action.type is cli.duration
    }
    worded = {
        (path, action.option_strings[0])
        for path, action in _options(build_parser())
        if any(word in action.dest for word in TIME_WORDS)
    }
    listed = {("tierpool " + before[0], flag) for before, flag, _ in TIME_FLAGS}
    assert timed == listed and worded <= timed


def test_duration_defaults_are_seconds() -> None:
    assert build_parser().parse_args(["watch", "ID"]).timeout == 3600.0
    assert build_parser().parse_args(["result", "ID"]).wait == 0.0
    assert build_parser().parse_args(["local", "pool.yaml"]).duration == 60.0


def test_submit_without_a_tier_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["submit", "-f", POOL, "--payload", "{}"])
    assert stopped.value.code == 2
    assert "--tier" in capsys.readouterr().err


def test_a_command_without_its_pool_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TIERPOOL_POOL_SPEC", raising=False)
    assert main(["status"]) == 2
    assert "say which pool" in capsys.readouterr().err


@pytest.mark.parametrize("level", ["LOUD", "verbose", "50"])
def test_log_level_takes_only_its_choices(level: str, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--log-level", level, "crd"], ["crd", "--log-level", level]):
        with pytest.raises(SystemExit) as stopped:
            build_parser().parse_args(argv)
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert "invalid choice" in err and "Traceback" not in err


@pytest.mark.parametrize("level", ["debug", "Info", "WARNING", "error"])
def test_log_level_in_any_case(level: str) -> None:
    assert build_parser().parse_args(["--log-level", level, "crd"]).log_level == level.upper()


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-level", "debug", "--log-format", "json", "worker", "-f", "x.yaml"],
        ["worker", "-f", "x.yaml", "--log-level", "debug", "--log-format", "json"],
        ["--log-format", "json", "worker", "--log-level", "debug", "-f", "x.yaml"],
        ["dlq", "--log-level", "debug", "list", "--log-format", "json"],
        ["--log-level", "debug", "dlq", "purge", "--log-format", "json", "--yes"],
    ],
)
def test_global_flags_go_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.log_level, args.log_format) == ("DEBUG", "json")


def test_a_command_does_not_reset_the_global_flags_to_their_defaults() -> None:
    args = build_parser().parse_args(["worker", "-f", "x.yaml"])
    assert (args.log_level, args.log_format) == (None, None)  # unset: each command picks its own default


def test_submit_takes_a_task_instead_of_a_tier() -> None:
    args = build_parser().parse_args(["submit", "-f", POOL, "--task", "resolve", "--payload", '{"ticket": 1}'])
    assert (args.task, args.tier) == ("resolve", None)
    both = build_parser().parse_args(["submit", "-f", POOL, "--task", "resolve", "--tier", "p1"])
    assert (both.task, both.tier) == ("resolve", "p1")
