"""Helm tier: the chart rendered by a real helm binary (built from Go modules, see tests/conftest.py)."""

from __future__ import annotations

from tests.conftest import ROOT

CHART = ROOT / "helm" / "tierpool"
