"""Run luacheck over every tierpool Lua script as the server receives it (its helpers included, assembled by
tierpool.scripts), and print each warning once, at the line of the file it comes from.

A script uses only some of the helper functions it includes: a helper function is reported unused only when no
script that includes it calls it. A helper file that no script includes fails too.
Usage: luacheck_scripts.py LUACHECKRC (hack/luacheck.sh runs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tierpool import scripts

FOLDER = Path(scripts.__file__).parent
WARNING = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<rest>.*)$")
UNUSED_FUNCTION = "(W211) unused function"


def origin(script: scripts.Script, line: int) -> tuple[str, int]:
    """The file (relative to the scripts' folder) and line that line ``line`` of the assembled source comes from."""
    for path in [*script.includes, script.path]:
        count = (FOLDER / path).read_text(encoding="utf-8").count("\n")
        if line <= count:
            return path, line
        line -= count
    return script.path, line


def run_luacheck(config: str, found: Mapping[str, scripts.Script]) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = Path(tempfile.mkdtemp(prefix="tierpool-luacheck-"))
    for script in found.values():
        (out / script.path).parent.mkdir(parents=True, exist_ok=True)
        (out / script.path).write_text(script.source, encoding="utf-8")
    command = ["luacheck", "--config", config, "--formatter", "plain", "--codes", "--no-color", "."]
    return subprocess.run(command, cwd=out, capture_output=True, text=True, check=False), out


def main(config: str) -> int:
    found = scripts.by_name()
    done, out = run_luacheck(str(Path(config).resolve()), found)
    by_path = {script.path: script for script in found.values()}
    warnings: dict[tuple[str, int, str], set[str]] = {}
    other: list[str] = []
    for text in done.stdout.splitlines():
        match = WARNING.match(text)
        script = by_path.get(match["file"].removeprefix("./")) if match else None
        if not match or not script:
            other.append(text)
            continue
        path, line = origin(script, int(match["line"]))
        warnings.setdefault((path, line, match["rest"]), set()).add(script.name)
    problems = []
    for (path, line, rest), names in sorted(warnings.items()):
        including = {script.name for script in found.values() if path in script.includes}
        if not including or UNUSED_FUNCTION not in rest or names == including:  # not including: a script's own
            problems.append(f"{FOLDER / path}:{line}:{rest} (in {', '.join(sorted(names))})")
    included = {path for script in found.values() for path in script.includes}
    helpers = sorted(str(p.relative_to(FOLDER)) for p in (FOLDER / scripts.HELPERS).glob("*.lua"))
    problems += [f"{FOLDER / path}: no script includes this helper" for path in helpers if path not in included]
    for text in problems + [text for text in other if text.strip() and not text.startswith("Total:")]:
        print(text)
    print(done.stderr, end="", file=sys.stderr)
    if done.returncode > 1 or problems:  # 1: warnings only, each of them judged above
        print(f"luacheck: problems found (the assembled scripts are in {out})", file=sys.stderr)
        return done.returncode or 1
    shutil.rmtree(out)
    print(f"luacheck: {len(found)} scripts, no warnings")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
