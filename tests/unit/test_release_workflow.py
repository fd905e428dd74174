"""The release workflow (.github/workflows/release.yml) cannot run here; actionlint checks its form (`make lint`),
and this checks that it publishes what the defaults name: the images the chart and the model default to, for both
architectures, at the version the tag must match, and the chart and the Python distributions."""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import ROOT
from tierpool.model.spec import WORKER_REPOSITORY

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return loaded


def steps(job: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = workflow()["jobs"][job]["steps"]
    return found


def test_a_version_tag_starts_it_and_the_tag_must_match_the_version_source() -> None:
    # PyYAML reads the bare key `on` as True.
    assert workflow()[True] == {"push": {"tags": ["v*"]}}
    script = "\n".join(step.get("run", "") for step in steps("version"))
    assert "bash hack/version.sh" in script and '"$GITHUB_REF_NAME" != "v$version"' in script
    assert "helm/tierpool/Chart.yaml" in script


def test_it_pushes_both_images_for_both_architectures_under_the_default_names() -> None:
    values = yaml.safe_load((ROOT / "helm" / "tierpool" / "values.yaml").read_text())
    registry = workflow()["env"]["REGISTRY"]
    assert values["image"]["repository"] == f"{registry}/operator"
    assert f"{registry}/worker" == WORKER_REPOSITORY
    job = workflow()["jobs"]["images"]
    assert job["strategy"]["matrix"]["image"] == ["operator", "worker"]
    [build] = [step for step in job["steps"] if step.get("uses", "").startswith("docker/build-push-action@")]
    assert build["with"]["file"] == "${{ matrix.image }}/Dockerfile"
    assert set(build["with"]["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert build["with"]["tags"] == "${{ env.REGISTRY }}/${{ matrix.image }}:${{ needs.version.outputs.version }}"
    assert build["with"]["build-args"] == "VERSION=${{ needs.version.outputs.version }}"
    assert build["with"]["push"] is True
    assert any(step.get("uses", "").startswith("docker/setup-buildx-action@") for step in job["steps"])


def test_it_pushes_the_chart_as_an_oci_artifact() -> None:
    script = "\n".join(step.get("run", "") for step in steps("chart"))
    assert "helm package helm/tierpool" in script.replace('"$helm"', "helm")
    assert 'push "chart-dist/tierpool-$VERSION.tgz" "$CHART_REPOSITORY"' in script
    assert workflow()["env"]["CHART_REPOSITORY"].startswith("oci://ghcr.io/")


def test_pypi_gets_the_checked_wheel_and_sdist_by_trusted_publishing_and_last() -> None:
    script = "\n".join(step.get("run", "") for step in steps("python"))
    assert "python -m build" in script and "twine check --strict dist/*" in script
    job = workflow()["jobs"]["pypi"]
    assert job["permissions"] == {"id-token": "write"} and job["environment"]["name"] == "pypi"
    assert [step["uses"] for step in job["steps"]][-1] == "pypa/gh-action-pypi-publish@release/v1"
    assert not any("password" in step.get("with", {}) for step in job["steps"]), "trusted publishing needs no token"
    assert set(job["needs"]) == {"python", "images", "chart"}
