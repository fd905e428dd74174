"""The project files stay true: LICENSE is the Apache-2.0 text pyproject declares, CHANGELOG.md keeps the Keep a
Changelog form, and what CONTRIBUTING.md and SECURITY.md name (make targets, paths, layers, README sections, tests,
chart values) exists."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from tests.conftest import ROOT
from tests.unit.test_docs_names import REPO_PATH, _names, resolves

KEEP_A_CHANGELOG_KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
PATH = re.compile(r"`((?:worker|operator|helm|tests|hack|crds|examples|bench|\.github)/[\w./<>-]+)`")


def text(name: str) -> str:
    return (ROOT / name).read_text()


def readme_anchors() -> set[str]:
    return {
        re.sub(r"[^\w -]", "", h).strip().lower().replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", text("README.md"), re.M)
    }


def test_the_license_is_the_apache_2_text_pyproject_declares() -> None:
    assert tomllib.loads(text("pyproject.toml"))["project"]["license"] == "Apache-2.0"
    license_text = text("LICENSE")
    assert re.match(r"\s*Apache License\s+Version 2\.0, January 2004", license_text)
    for clause in ("TERMS AND CONDITIONS FOR USE", "9. Accepting Warranty or Additional Liability", "END OF TERMS"):
        assert clause in license_text
    assert len(license_text) > 11_000


def test_the_changelog_keeps_the_keep_a_changelog_form() -> None:
    changelog = text("CHANGELOG.md")
    assert changelog.startswith("# Changelog\n") and "keepachangelog.com/en/1.1.0" in changelog
    releases = re.findall(r"^## (.+)$", changelog, re.M)
    assert releases[0] == "[Unreleased]"
    assert all(re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", r) for r in releases[1:]), releases
    assert set(re.findall(r"^### (.+)$", changelog, re.M)) <= KEEP_A_CHANGELOG_KINDS


def test_the_changelog_points_at_the_readme_upgrade_notes_it_summarises() -> None:
    assert "(docs/how-to/upgrades.md)" in text("CHANGELOG.md")
    assert "**Upgrading to this release: what changes for running pools.**" in text("docs/how-to/upgrades.md")


@pytest.mark.parametrize("name", ["CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md"])
def test_every_path_and_readme_section_a_project_file_names_exists(name: str) -> None:
    body = text(name)
    for path in PATH.findall(body):
        if "<" not in path:
            assert (ROOT / path).exists(), f"{name} names {path}"
    for anchor in re.findall(r"\(README\.md#([\w-]+)\)", body):
        assert anchor in readme_anchors(), f"{name} links README.md#{anchor}"


def test_contributing_names_only_make_targets_that_exist() -> None:
    targets = set(re.findall(r"^([a-z][\w-]*):", text("Makefile"), re.M))
    named = set(re.findall(r"`make ([a-z][\w-]*)", text("CONTRIBUTING.md")))
    assert named and named <= targets, named - targets
    tiers = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {t for t in tiers if t != "support_handlers"} <= set(re.findall(r"`tests/(\w+)`", text("CONTRIBUTING.md")))


def test_contributing_lists_the_import_linter_layers_in_order() -> None:
    contracts = tomllib.loads(text("pyproject.toml"))["tool"]["importlinter"]["contracts"]
    [layers] = [c["layers"] for c in contracts if c["type"] == "layers"]
    block = text("CONTRIBUTING.md").split("```text\n", 1)[1].split("```", 1)[0]
    assert block.split("\n")[:-1] == layers
    folders = {p.name for p in (ROOT / "worker" / "tierpool").iterdir() if (p / "__init__.py").exists()}
    assert {layer for line in layers for layer in line.split(" | ")} == folders


def test_security_names_the_chart_values_and_policies_that_exist() -> None:
    security = text("SECURITY.md")
    values = yaml.safe_load(text("helm/tierpool/values.yaml"))
    named = re.findall(r"`security\.(\w+)`", security)
    assert named and set(named) <= set(values["security"]), named
    for key in ("secretNamespaces", "watchNamespaces", "peering", "security"):
        assert key in values and f"`{key}" in security
    templates = "".join(p.read_text() for p in (ROOT / "helm" / "tierpool" / "templates").glob("*admission.yaml"))
    for policy in re.findall(r"`<release>-tierpool-([a-z-]+)`", security):
        assert f"{{{{ $fullname }}}}-{policy}" in templates, policy
    assert "Creating an AgentPool amounts to creating a Deployment in its namespace" in security
    assert "(docs/security.md)" in security


@pytest.mark.parametrize("name", ["CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md"])
def test_every_tierpool_name_and_repository_path_a_project_file_uses_exists(name: str) -> None:
    body = text(name)
    assert sorted(n for n in _names(body) if not resolves(n)) == []
    assert sorted(p for p in REPO_PATH.findall(body) if not (ROOT / p).exists()) == []
