"""The Lua scripts' loader (tierpool.scripts): one script a file, its helpers included by its first line, each
source hashed once."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tierpool import scripts

FOLDER = Path(scripts.__file__).parent


def test_every_lua_file_but_the_helpers_is_one_script_named_after_it() -> None:
    files = {p.relative_to(FOLDER).as_posix() for p in FOLDER.rglob("*.lua") if p.parent.name != scripts.HELPERS}
    found = scripts.by_name()
    assert {script.path for script in found.values()} == files
    assert all(name == Path(script.path).stem.upper() for name, script in found.items())
    assert {"TAKE", "COMPLETE_MANY", "MOVE_DUE", "CANCEL", "REPLAY_GATED"} <= set(found)


def test_a_source_is_its_helpers_then_its_own_file_and_the_sha_is_its_sha1() -> None:
    script = scripts.by_name()["REPLAY_GATED"]
    assert script.includes == ("helpers/stream.lua", "helpers/where.lua", "helpers/tenants.lua", "helpers/replay.lua")
    parts = [(FOLDER / path).read_text() for path in [*script.includes, script.path]]
    assert script.source == "".join(parts)
    assert script.sha == hashlib.sha1(script.source.encode()).hexdigest()
    assert scripts.source("REPLAY_GATED") == script.source and scripts.sha("REPLAY_GATED") == script.sha


def test_a_script_without_an_include_line_is_its_file_alone() -> None:
    script = scripts.by_name()["TAKE"]
    assert script.includes == () and script.source == (FOLDER / script.path).read_text()


def test_the_sources_are_assembled_once() -> None:
    assert scripts.by_name() is scripts.by_name()


def write(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_a_folder_of_files_loads_in_order(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "helpers/a.lua": "local function a() return 1 end\n",
            "helpers/b.lua": "local function b() return a() end\n",
            "x/both.lua": "-- include: helpers/a.lua  helpers/b.lua\nreturn b()\n",
            "y/plain.lua": "return 2\n",
            "y/notes.txt": "not a script",
        },
    )
    found = scripts.load(root)
    assert list(found) == ["BOTH", "PLAIN"]
    assert found["BOTH"].source == (
        "local function a() return 1 end\nlocal function b() return a() end\n"
        "-- include: helpers/a.lua  helpers/b.lua\nreturn b()\n"
    )
    assert found["PLAIN"].source == "return 2\n" and found["PLAIN"].includes == ()


@pytest.mark.parametrize(
    ("files", "error"),
    [
        ({"a/x.lua": "return 1\n", "b/x.lua": "return 2\n"}, "two scripts named X"),
        ({"a/x.lua": "-- include: helpers/none.lua\nreturn 1\n"}, "not a file under helpers/"),
        ({"a/x.lua": "-- include: a/y.lua\nreturn 1\n", "a/y.lua": "return 2\n"}, "not a file under helpers/"),
        (
            {"a/x.lua": "-- include: helpers/h.lua\n", "helpers/h.lua": "-- include: helpers/g.lua\n"},
            "a helper includes nothing",
        ),
        ({"a/x.lua": "-- include: helpers/h.lua\n", "helpers/h.lua": "local h = 1"}, "ends with a newline"),
    ],
    ids=["duplicate name", "missing helper", "include outside helpers", "nested include", "no final newline"],
)
def test_a_broken_folder_is_refused(tmp_path: Path, files: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        scripts.load(write(tmp_path, files))


def test_the_include_line_is_the_first_line_only() -> None:
    assert scripts.includes("-- include: helpers/a.lua helpers/b.lua\nx") == ["helpers/a.lua", "helpers/b.lua"]
    assert scripts.includes("return 1\n-- include: helpers/a.lua\n") == []
    assert scripts.includes("-- includes nothing\n") == []
