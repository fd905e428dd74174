"""Kind-tier fixtures: the images, built once per session, and the cluster tier's real API server for the
operator container."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.cluster.conftest import api, control_plane, custom, namespace  # noqa: F401 - fixtures reused
from tests.conftest import ROOT, unavailable
from tierpool.model.spec import WORKER_IMAGE


def default_operator_image() -> str:
    """What the chart runs when its values name no image: image.repository at the chart's appVersion."""
    chart = yaml.safe_load((ROOT / "helm" / "tierpool" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "helm" / "tierpool" / "values.yaml").read_text())
    return f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"


OPERATOR_IMAGE = default_operator_image()


@pytest.fixture(scope="session")
def images() -> tuple[str, str]:
    """The two images, as `make images` builds them: under the names the chart and the model default to (FROM a
    Debian-made base when no registry is in reach), so that the kind tier runs what the defaults name."""
    up = subprocess.run(["bash", "hack/docker-up.sh"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if up.returncode != 0:
        unavailable(f"no Docker engine: hack/docker-up.sh failed: {up.stderr[-2000:]}")
    built = subprocess.run(["make", "images"], cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    for image in (OPERATOR_IMAGE, WORKER_IMAGE):
        found = subprocess.run(["docker", "image", "inspect", image], capture_output=True, text=True)
        assert found.returncode == 0, f"`make images` built no {image} (the chart's default): {found.stderr}"
    return OPERATOR_IMAGE, WORKER_IMAGE
