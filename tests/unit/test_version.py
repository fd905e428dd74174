"""One version source (worker/tierpool/_version.py): pyproject, `tierpool --version`, tierpool.__version__, the
worker image the model defaults to, the chart's version, appVersion and images, the Makefile's image names and every
ghcr.io/tierpool image named in the repository follow it; none of them says `latest`."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

import tierpool
from tests.conftest import ROOT
from tierpool._version import __version__ as VERSION
from tierpool.cli.main import main
from tierpool.model.spec import WORKER_IMAGE, WorkerSpec

CHART = ROOT / "helm" / "tierpool"
PUBLISHED = re.compile(r"ghcr\.io/tierpool/(operator|worker):([A-Za-z0-9][\w.+-]*)")
"""A published image with a literal tag (not `:<version>`, `:$(VERSION)` or `:${{ ... }}`)."""
RECORDED = ("bench/results/",)
"""Recorded runs keep the image names they ran with."""


def chart() -> dict[str, object]:
    found: dict[str, object] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return found


def test_pyproject_reads_the_version_from_its_one_source() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tierpool._version.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+([.-]?(a|b|rc|dev)\d+)?", VERSION)


def test_the_package_and_the_cli_say_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert tierpool.__version__ == VERSION
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"tierpool {VERSION}\n"


def test_the_worker_image_default_is_the_published_image_at_the_version() -> None:
    assert f"ghcr.io/tierpool/worker:{VERSION}" == WORKER_IMAGE
    assert WorkerSpec().image == WORKER_IMAGE


def test_the_chart_follows_the_version_and_names_the_published_images() -> None:
    meta = chart()
    assert meta["version"] == VERSION and meta["appVersion"] == VERSION
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"] == {"repository": "ghcr.io/tierpool/operator", "tag": "", "pullPolicy": "IfNotPresent"}
    annotations = meta["annotations"]
    assert isinstance(annotations, dict)
    images = {entry["name"]: entry["image"] for entry in yaml.safe_load(annotations["artifacthub.io/images"])}
    assert images == {"operator": f"ghcr.io/tierpool/operator:{VERSION}", "worker": WORKER_IMAGE}


def test_the_makefile_builds_the_images_under_the_default_names() -> None:
    printed = subprocess.run(["bash", "hack/version.sh"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert printed.stdout.strip() == VERSION
    makefile = (ROOT / "Makefile").read_text()
    assert "OPERATOR_IMAGE ?= ghcr.io/tierpool/operator:$(VERSION)" in makefile
    assert "WORKER_IMAGE ?= ghcr.io/tierpool/worker:$(VERSION)" in makefile
    deploy = makefile.split("\ndeploy:", 1)[1].split("\n\n", 1)[0]
    assert "image." not in deploy, "make deploy must install the chart's default images"


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [name for name in listed.decode().split("\0") if name and not name.startswith(RECORDED)]
    found = []
    for name in names:
        path = ROOT / name
        if path.is_file() and b"\0" not in path.read_bytes()[:4096]:
            found.append(path)
    return found


def test_every_published_image_named_in_the_repository_is_at_the_version() -> None:
    wrong = []
    for path in tracked_text_files():
        for match in PUBLISHED.finditer(path.read_text(errors="replace")):
            if match.group(2).rstrip(".") != VERSION:
                wrong.append(f"{path.relative_to(ROOT)}: {match.group(0)}")
    assert not wrong, wrong


def test_the_dockerfiles_label_the_version_they_are_given() -> None:
    for dockerfile in (ROOT / "operator" / "Dockerfile", ROOT / "worker" / "Dockerfile"):
        text = dockerfile.read_text()
        assert 'org.opencontainers.image.version="${VERSION}"' in text, dockerfile
    assert '--build-arg "VERSION=$(bash "$here/version.sh")"' in (ROOT / "hack" / "images.sh").read_text()
