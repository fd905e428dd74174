"""Example code the documentation shows in full is a file the test suite runs: the page's copy must equal it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [("docs/how-to/testing.md", "tests/integration/test_testing_example.py")]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


@pytest.mark.parametrize(("page", "example"), EXAMPLES)
def test_the_page_shows_the_example_file_as_it_is(page: str, example: str) -> None:
    assert (ROOT / example).read_text() in blocks((ROOT / page).read_text())


def test_blocks_finds_each_python_block_whole() -> None:
    text = "x\n```python\na = 1\n\nb = 2\n```\ntext\n```python\nc\n```\n"
    assert blocks(text) == ["a = 1\n\nb = 2\n", "c\n"]
