"""Every tierpool name the README and the documentation site use exists: ``from tierpool import X`` lines and dotted paths such as
``tierpool.runtime.reads`` or ``tierpool.handlers:simulate``."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tierpool.runtime.spans import ATTRIBUTES, SPAN_NAME

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FROM_IMPORT = re.compile(r"from (tierpool[\w.]*) import ([\w, ]+)")
DOTTED = re.compile(r"\b(tierpool(?:_operator)?(?:\.\w+)+)(?::(\w+))?")


def _names(text: str) -> set[str]:
    names = {f"{module}.{name.strip()}" for module, names in FROM_IMPORT.findall(text) for name in names.split(",")}
    for path, attribute in DOTTED.findall(text):
        if path.startswith("tierpool.io"):  # the API group, not a module
            continue
        if path in ATTRIBUTES or path == SPAN_NAME:  # what a run's OpenTelemetry span is called and carries
            continue
        names.add(f"{path}.{attribute}" if attribute else path)
    return names


def resolves(dotted: str) -> bool:
    """True when some prefix of ``dotted`` imports as a module and the rest are attributes of it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


def _id(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_every_name_the_docs_use_exists(doc: Path) -> None:
    names = _names(doc.read_text())
    assert sorted(n for n in names if not resolves(n)) == []


def test_the_patterns_still_find_names_and_paths() -> None:
    text = (ROOT / "README.md").read_text()
    assert _names(text), "README.md names no tierpool module: is the pattern still right?"
    assert REPO_PATH.findall(text), "README.md names no repository path: is the pattern still right?"


REPO_PATH = re.compile(r"\b((?:tests|worker|operator|hack|bench|helm|examples|crds)/[\w./-]*\w)")


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_every_repository_path_the_docs_name_exists(doc: Path) -> None:
    paths = set(REPO_PATH.findall(doc.read_text()))
    assert sorted(p for p in paths if not (ROOT / p).exists()) == []


def test_a_missing_name_is_caught() -> None:
    assert resolves("tierpool.handlers.simulate")
    assert not resolves("tierpool.handlers.no_such_handler")
    assert not resolves("tierpool.no_such_module")
    assert _names("from tierpool import Client, Task\nsee tierpool.handlers:noop") == {
        "tierpool.Client",
        "tierpool.Task",
        "tierpool.handlers.noop",
    }
