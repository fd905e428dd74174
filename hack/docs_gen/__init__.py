"""Generators of the documentation's reference pages and of the wire's JSON Schemas, each from its fact's one
source.

``make docs-gen`` (``python -m hack.docs_gen``) writes every page and every ``schemas/*.schema.json``;
tests/unit/test_docs_reference.py and tests/unit/test_wire_schemas.py regenerate each and compare it with the
committed file, so a file that drifts from its source fails the unit tier.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from hack.docs_gen import (
    agentpool,
    chart_readme,
    cli_reference,
    exit_codes,
    helm_values,
    metrics,
    operator_env,
    scripts,
)

from tierpool.protocol.wire_schemas import SCHEMAS, schema_text

ROOT = Path(__file__).resolve().parents[2]

PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/agentpool.md": agentpool.page,
    "docs/reference/cli.md": cli_reference.page,
    "docs/reference/exit-codes.md": exit_codes.page,
    "docs/reference/metrics.md": metrics.page,
    "docs/reference/operator-env.md": operator_env.page,
    "docs/reference/scripts.md": scripts.page,
    "docs/reference/helm-values.md": lambda: helm_values.page(ROOT / "helm" / "tierpool" / "values.yaml"),
    "helm/tierpool/README.md": lambda: chart_readme.page(ROOT / "helm" / "tierpool"),
}

SCHEMA_FILES: dict[str, Callable[[], str]] = {f"schemas/{name}": partial(schema_text, name) for name in SCHEMAS}
"""The JSON Schemas of what tierpool stores (tierpool.protocol.wire_schemas)."""


def write_all(root: Path = ROOT) -> list[Path]:
    """Regenerate every reference page and schema under ``root``; the paths written."""
    written = []
    for relative, generate in {**PAGES, **SCHEMA_FILES}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(generate(), encoding="utf-8")
        written.append(path)
    return written
