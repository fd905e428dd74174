"""Kind-tier fixtures: the images, built once per session, and the cluster tier's real API server for the
operator container."""

from __future__ import annotations

import subprocess

import pytest

from tests.cluster.conftest import api, control_plane, custom, namespace  # noqa: F401 - fixtures reused
from tests.conftest import ROOT, unavailable

OPERATOR_IMAGE = "tierpool/operator:dev"
WORKER_IMAGE = "tierpool/worker:dev"


@pytest.fixture(scope="session")
def images() -> tuple[str, str]:
    """The two images, as `make images` builds them (FROM a Debian-made base when no registry is in reach)."""
    up = subprocess.run(["bash", "hack/docker-up.sh"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if up.returncode != 0:
        unavailable(f"no Docker engine: hack/docker-up.sh failed: {up.stderr[-2000:]}")
    built = subprocess.run(
        ["make", "images", f"OPERATOR_IMAGE={OPERATOR_IMAGE}", f"WORKER_IMAGE={WORKER_IMAGE}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return OPERATOR_IMAGE, WORKER_IMAGE
