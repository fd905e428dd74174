"""The Helm values reference, from the ``# --`` comments of the chart's values.yaml (helm-docs' convention: a
comment starting ``# --`` documents the key right below it, and the ``#`` lines after it continue it)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from hack.docs_gen.markdown import banner, table

KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):")
COMMENT = re.compile(r"^ *# ?(?P<text>.*)$")

INTRO = """\
# Helm values

The chart `helm/tierpool`'s values: `helm install tierpool helm/tierpool --set KEY=VALUE` or `-f my-values.yaml`.
`helm/tierpool/values.schema.json` checks them at install.
"""


def documented_keys(text: str) -> list[tuple[str, str]]:
    """(dotted key, description) of each key that has a ``# --`` comment, in file order."""
    found: list[tuple[str, str]] = []
    parents: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in text.splitlines():
        comment = COMMENT.match(line)
        if comment:
            body = comment["text"]
            if body.startswith("--"):
                pending = [body[2:].strip()]
            elif pending is not None:
                pending.append(body.strip())
            continue
        key = KEY.match(line)
        if key is None:
            continue
        indent = len(key["indent"])
        parents = [(depth, name) for depth, name in parents if depth < indent]
        parents.append((indent, key["key"]))
        if pending is not None:
            found.append((".".join(name for _, name in parents), " ".join(pending)))
        pending = None
    return found


def _value_at(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        node = node[part]
    return node


def page(values_file: Path) -> str:
    text = values_file.read_text(encoding="utf-8")
    values = yaml.safe_load(text)
    documented = documented_keys(text)
    parents = {key.rsplit(".", depth)[0] for key, _ in documented for depth in range(1, key.count(".") + 1)}
    rows = [
        (f"`{key}`", "" if key in parents else f"`{json.dumps(_value_at(values, key))}`", doc)
        for key, doc in documented
    ]
    return (
        banner("the `# --` comments of helm/tierpool/values.yaml")
        + INTRO
        + "\n"
        + table(("key", "default", "meaning"), rows)
    )
