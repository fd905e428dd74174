"""The script reference: every Lua script's name, caller, KEYS, ARGV and return value, read from the header comment
of its file under worker/tierpool/scripts/ (the one source a client in any language runs, see tierpool.scripts).

A header says ``KEYS: … ARGV: …`` and ``Returns …`` in prose; a script whose header lacks one of them fails the
generator, so a new script cannot ship without its calling convention written down.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from hack.docs_gen.markdown import banner, table

from tierpool import scripts
from tierpool.store.streams import WORKER_SCRIPTS

PRODUCER_SCRIPTS = ("SUBMIT", "SUBMIT_ONCE", "SUBMIT_GATED", "SCHEDULE", "CANCEL")
"""What tierpool.client runs (tierpool.store.submits, tierpool.client.cancels): the producer's calls."""
ADMIN_SCRIPTS = ("REPLAY", "REPLAY_GATED")
"""What ``tierpool dlq replay`` runs (tierpool.store.dlq)."""
SOURCE = "https://github.com/tierpool/tierpool/blob/main/worker/tierpool/scripts/"
END = r"\.(?=\s+[A-Z(`{']|\s*$)"
"""The end of a sentence: a full stop before a capital (or the end); ``ids...`` ends at its last stop."""


@dataclass(frozen=True)
class Convention:
    name: str
    path: str
    callers: str
    keys: str
    argv: str
    returns: str
    header: str


def header(source: str) -> str:
    """A script file's leading comment, its include line left out, as one paragraph."""
    lines = []
    for line in source.splitlines():
        if not line.startswith("--"):
            break
        if not line.startswith(scripts.INCLUDE):
            lines.append(line.removeprefix("--").strip())
    return " ".join(" ".join(lines).split())


def _part(text: str, pattern: str, name: str, what: str) -> str:
    found = re.search(pattern, text, re.DOTALL)
    if found is None:
        raise ValueError(f"the header of script {name} says no {what}: write it there (see hack/docs_gen/scripts.py)")
    return found[1].strip()


ROLES = ("producer", "dlq replay", "worker")


def callers(name: str) -> str:
    """Who runs the script: its roles, in the order of :data:`ROLES`."""
    found = [
        role
        for role, names in zip(ROLES, (PRODUCER_SCRIPTS, ADMIN_SCRIPTS, WORKER_SCRIPTS), strict=True)
        if name in names
    ]
    if not found:
        raise ValueError(f"script {name} is run by no one this reference knows: add it to hack/docs_gen/scripts.py")
    return ", ".join(found)


def convention(script: scripts.Script) -> Convention:
    """What a script's header says of its calling convention."""
    return convention_of(script.name, script.path, _own_file(script))


def convention_of(name: str, path: str, text: str) -> Convention:
    """The calling convention the header of the script file ``text`` states; ValueError when it lacks a part."""
    said = header(text)
    keys = _part(said, r"\bKEYS:\s*(.*?)\.\s+ARGV:", name, "KEYS")
    if "Last key: ...:where" in said and "where" not in keys:
        keys += ", then ...:where (the last key)"
    argv = _part(said, r"\bARGV:\s*(.*?" + END + ")", name, "ARGV")
    verb = "Returns" if "Returns " in said else "returns"  # a capital first: "s now: returns 0 and ..." is prose
    returns = _part(said, rf"\b{verb}\s+(.*?" + END + ")", name, "return value")
    return Convention(name, path, callers(name), keys, argv, returns, said)


def _own_file(script: scripts.Script) -> str:
    """The script file's own text (its source without the helpers it includes)."""
    return resources.files(scripts).joinpath(*script.path.split("/")).read_text(encoding="utf-8")


def _escape(text: str) -> str:
    """Prose as Markdown: ````code```` as ```code```, and ``<`` ``>`` outside code as entities (not HTML tags)."""
    parts = re.split(r"(`[^`]*`)", text.replace("``", "`"))
    return "".join(part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;") for part in parts)


def page() -> str:
    found = [convention(script) for script in scripts.by_name().values()]
    ordered = sorted(found, key=lambda c: (ROLES.index(c.callers.split(", ")[0]), c.path))
    rows = [
        (f"[`{c.name}`](#{c.name.lower()})", c.callers, _escape(c.keys), _escape(c.argv), _escape(c.returns))
        for c in ordered
    ]
    details = "".join(
        f"### {c.name}\n\n[`{c.path}`]({SOURCE}{c.path}), run by the {c.callers}.\n\n{_escape(c.header)}\n\n"
        for c in ordered
    )
    return (
        banner("the header comments of worker/tierpool/scripts/**/*.lua")
        + "# Scripts\n\n"
        + "Every Lua script of the protocol, with its calling convention, as its file's header states it. Call "
        "a script with `EVALSHA <sha1> <number of keys> KEYS… ARGV…` (or `EVAL`); its source is its helpers' files "
        "then its own (the `-- include:` rule of `worker/tierpool/scripts/__init__.py`), and its SHA1 is that "
        "source's. Every key carries the pool's hash tag, `tierpool:{<namespace>/<pool>}:`, written `...:` below. "
        "What a producer may call, and in which order, is in [the producer contract](producer-contract.md).\n\n"
        + table(("script", "run by", "KEYS", "ARGV", "returns"), rows)
        + "\n## Each script\n\n"
        + details.rstrip("\n")
        + "\n"
    )
