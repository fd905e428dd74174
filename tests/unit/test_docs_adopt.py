"""docs/how-to/adopt-streams.md shows the pool files the integration tier runs (examples/adopt-*.yaml), as they
are: the page cannot drift from what tests/integration/test_seed_producers.py runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierpool.model.resource import load_pool_file

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "how-to" / "adopt-streams.md"


@pytest.mark.parametrize("example", ["adopt-swarm.yaml", "adopt-priority-streams.yaml"])
def test_the_page_shows_each_pool_file_whole(example: str) -> None:
    path = ROOT / "examples" / example
    assert f"```yaml\n{path.read_text(encoding='utf-8')}```" in PAGE.read_text(encoding="utf-8")
    assert f"`examples/{example}`" in PAGE.read_text(encoding="utf-8")
    assert any(tier.stream for tier in load_pool_file(path).spec.tiers)
