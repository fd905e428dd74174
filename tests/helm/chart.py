"""Rendering the chart in tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.helm.conftest import CHART

KUBE_VERSION = "1.34.4"
"""The version the control-plane tier runs; helm built from modules would otherwise assume 1.20."""


def render(helm: Path, *sets: str, namespace: str = "tierpool-system", release: str = "tp") -> list[dict[str, Any]]:
    args = [str(helm), "template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    for item in sets:
        args += ["--set", item]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]
