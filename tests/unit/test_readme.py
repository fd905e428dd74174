"""README.md stays a front page: what tierpool is, install, the two commands, a quickstart and links. The rest
lives on the documentation site under docs/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LINK = re.compile(r"\]\((docs/[^)#]+)\)")


def test_the_readme_has_at_most_200_lines() -> None:
    assert len(README.splitlines()) <= 200, "README.md is a front page: move the detail into a docs/ page"


def test_the_readme_links_to_pages_that_exist() -> None:
    links = LINK.findall(README)
    assert links, "README.md links to no docs/ page: is the pattern still right?"
    assert sorted(link for link in links if not (ROOT / link).is_file()) == []


def test_the_readme_shows_the_two_commands() -> None:
    assert "make demo" in README and "make test" in README
