"""The CLI reference: every command, its arguments and their help, from the argparse parser itself."""

from __future__ import annotations

import argparse

from hack.docs_gen.markdown import banner, code, table

from tierpool.cli.main import build_parser

INTRO = """\
# CLI reference

`tierpool COMMAND [options]`; `tierpool COMMAND --help` prints the same. Exit codes: [Exit codes](exit-codes.md).
The global options go before or after the command. DURATION is a number of seconds (`30`) or a duration (`30s`,
`5m`, `1h`, `250ms`, `1h30m`).
"""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand of ``parser``, in the order they were added."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


def _spelling(action: argparse.Action) -> str:
    if not action.option_strings:
        name = action.metavar if isinstance(action.metavar, str) else action.dest
        return f"`{name}`" + (" ..." if action.nargs in ("+", "*") else "")
    flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
    if action.nargs == 0:
        return flags
    value = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    return f"{flags} {value}"


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or action.required:
        return "required" if action.required else ""
    return code(str(action.default))


def _rows(parser: argparse.ArgumentParser, command: bool = True) -> list[tuple[str, str, str, str]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if command and action.default is argparse.SUPPRESS:  # a global option as a command takes it: listed globally
            continue
        choices = ", ".join(f"`{choice}`" for choice in action.choices or ())
        found.append((_spelling(action), choices, _default(action), action.help or ""))
    return found


def _section(path: str, summary: str, parser: argparse.ArgumentParser, depth: int) -> str:
    out = f"\n{'#' * depth} `{path}`\n\n"
    if summary:
        out += f"{summary[0].upper()}{summary[1:]}.\n\n"
    found = _rows(parser)
    if found:
        out += table(("argument", "choices", "default", "meaning"), found)
    for name, help_text, sub in _subcommands(parser):
        out += _section(f"{path} {name}", help_text, sub, depth + 1)
    return out


def page() -> str:
    parser = build_parser()
    out = [banner("the argparse parser, tierpool.cli.main.build_parser"), INTRO]
    found = _rows(parser, command=False)
    out.append("\n## Global options\n\n" + table(("argument", "choices", "default", "meaning"), found))
    for name, help_text, sub in _subcommands(parser):
        out.append(_section(f"tierpool {name}", help_text, sub, 2))
    return "".join(out)
