"""The Lua scripts of every multi-step protocol operation (each one atomic on the server), loaded from this folder.

Each script is one ``.lua`` file in a folder of its concern (``stream/``, ``due/``, ``tenants/``, ...); its name is
the file's stem in upper case (``stream/complete_many.lua`` is ``COMPLETE_MANY``), unique across the folders. The
functions several scripts share are in ``helpers/``. All keys of a pool share one hash tag, so the scripts are
valid on Redis Cluster too; every script declares every key it touches in KEYS. tierpool.store.script_registry
runs them.

The include convention, language-neutral so that any client assembles the same sources (and SHA1s) from the same
files: when a script's first line is ``-- include: <path> <path> ...`` (paths relative to this folder, separated
by spaces), its source is the bytes of each named helper file, in that order, then the script file's own bytes,
include line and all. Helpers include nothing and end with a newline. Files are UTF-8, read as bytes (no newline
translation). hack/luacheck.sh lints each script so assembled, which finds a helper function a script lacks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType
from typing import Any

INCLUDE = "-- include:"
HELPERS = "helpers"
SUFFIX = ".lua"


@dataclass(frozen=True)
class Script:
    name: str
    path: str
    """The script's file, relative to this folder."""
    includes: tuple[str, ...]
    """The helper files its source starts with, in order."""
    source: str
    """The full source sent to the server: its helpers, then the script file."""
    sha: str
    """SHA1 of ``source`` (what SCRIPT LOAD returns and EVALSHA names)."""


def sha1_hex(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def source(name: str) -> str:
    return by_name()[name].source


def sha(name: str) -> str:
    return by_name()[name].sha


@cache
def by_name() -> Mapping[str, Script]:
    """Every script by name, assembled and hashed once."""
    return MappingProxyType(load(resources.files(__package__)))


def load(root: Traversable) -> dict[str, Script]:
    """Every script of the folder ``root`` by name, each with its helpers included."""
    found: dict[str, Script] = {}
    for path, file in _lua_files(root, ""):
        name = path.rsplit("/", 1)[-1].removesuffix(SUFFIX).upper()
        if name in found:
            raise ValueError(f"two scripts named {name}: {found[name].path} and {path}")
        text = _read(file)
        helpers = tuple(includes(text))
        full = "".join(_helper(root, path, helper) for helper in helpers) + text
        found[name] = Script(name, path, helpers, full, sha1_hex(full))
    return dict(sorted(found.items()))


def includes(text: str) -> list[str]:
    """The helper paths a script's first line names (none without an include line)."""
    first = text.split("\n", 1)[0]
    return first.removeprefix(INCLUDE).split() if first.startswith(INCLUDE) else []


def _lua_files(folder: Traversable, prefix: str) -> list[tuple[str, Traversable]]:
    """Every script file under ``folder`` as (path relative to this folder, file), helpers left out."""
    files: list[tuple[str, Traversable]] = []
    for entry in sorted(folder.iterdir(), key=lambda entry: entry.name):
        path = prefix + entry.name
        if entry.is_dir() and path != HELPERS:
            files += _lua_files(entry, path + "/")
        elif entry.is_file() and entry.name.endswith(SUFFIX):
            files.append((path, entry))
    return files


def _helper(root: Traversable, script: str, path: str) -> str:
    file = root.joinpath(*path.split("/"))
    if not path.startswith(HELPERS + "/") or not file.is_file():
        raise ValueError(f"{script} includes {path}, which is not a file under {HELPERS}/")
    text = _read(file)
    if includes(text) or not text.endswith("\n"):
        raise ValueError(f"{script} includes {path}: a helper includes nothing and ends with a newline")
    return text


def _read(file: Traversable) -> str:
    return file.read_bytes().decode("utf-8")


def evalsha_command(name: str, keys: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
    """The call of script ``name`` by its SHA1, as a plain command (redis-py's cluster pipelines refuse the
    ``.evalsha()`` method, not the command)."""
    return ("EVALSHA", sha(name), len(keys), *keys, *args)


def eval_command(name: str, keys: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
    """The call with the script's whole source (EVAL): never refused with NOSCRIPT, for a pipeline of calls that
    cannot be sent again."""
    return ("EVAL", source(name), len(keys), *keys, *args)
