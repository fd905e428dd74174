"""Rendering the chart in tests."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
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


def notes(helm: Path, *sets: str, namespace: str = "tierpool-system", release: str = "tp") -> str:
    """NOTES.txt as ``helm install`` prints it: rendered from a copy of the chart where it is an ordinary template
    (``helm template`` leaves NOTES out, and a dry-run install needs a cluster)."""
    with tempfile.TemporaryDirectory() as scratch:
        chart = Path(scratch) / "tierpool"
        shutil.copytree(CHART, chart)
        (chart / "templates" / "NOTES.txt").rename(chart / "notes.copy")  # .Files cannot read templates/
        wrapper = 'kind: Notes\ntext: {{ tpl (.Files.Get "notes.copy") . | toJson }}\n'
        (chart / "templates" / "notes-rendered.yaml").write_text(wrapper)
        args = [str(helm), "template", release, str(chart), "--namespace", namespace, "--kube-version", KUBE_VERSION]
        args += ["--show-only", "templates/notes-rendered.yaml"]
        for item in sets:
            args += ["--set", item]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    text: str = yaml.safe_load(done.stdout)["text"]
    return text


def notes_pool(text: str) -> dict[str, Any]:
    """The AgentPool the NOTES' ``kubectl apply -f - <<'EOF'`` step applies."""
    body = text.split("kubectl apply -f - <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]  # EOF flush left: bash ends there
    pool: dict[str, Any] = yaml.safe_load(body)
    return pool
