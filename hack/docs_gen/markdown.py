"""Markdown helpers shared by the generators."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def banner(source: str) -> str:
    """The comment every generated page starts with: where it comes from and how to regenerate it."""
    return f"<!-- Generated from {source} by `make docs-gen`; do not edit by hand. -->\n"


def cell(text: str) -> str:
    """Text fit for one table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("``", "`").replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code(text: str) -> str:
    """Inline code, or empty for empty text."""
    return f"`{text}`" if text else ""
