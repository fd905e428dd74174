"""The exit-code reference, from the table in tierpool.cli.exits' docstring, checked against its Exit enum."""

from __future__ import annotations

import re

from hack.docs_gen.markdown import banner, table

from tierpool.cli import exits

ROW = re.compile(r"^\| (\d+) \| (.*) \|$")


def documented_codes(doc: str) -> dict[int, str]:
    """The code → meaning rows of a docstring's table."""
    found = {}
    for line in doc.splitlines():
        match = ROW.match(line)
        if match:
            found[int(match[1])] = match[2]
    return found


def page() -> str:
    doc = exits.__doc__ or ""
    codes = documented_codes(doc)
    if sorted(codes) != sorted(code.value for code in exits.Exit):
        raise ValueError(f"tierpool.cli.exits documents codes {sorted(codes)}, not those of its Exit enum")
    prose = [line for line in doc.strip().splitlines() if not line.startswith("|")]
    rows = [(str(code.value), f"`{code.name}`", codes[code.value]) for code in exits.Exit]
    text = "\n".join(prose).replace("``", "`").strip()
    intro, _, rest = text.partition("\n\n")
    return (
        banner("tierpool.cli.exits")
        + "# Exit codes\n\n"
        + intro.replace("\n", " ").removesuffix(" Pure.")
        + "\n\n"
        + table(("code", "name", "meaning"), rows)
        + ("\n" + rest.strip() + "\n" if rest.strip() else "")
    )
