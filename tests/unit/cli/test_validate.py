"""``tierpool validate``: every AgentPool document of a file, and every YAML file of a folder, each failure named
with its file and document."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierpool.cli.main import main
from tierpool.model import resource

GOOD = "apiVersion: tierpool.io/v1alpha1\nkind: AgentPool\nmetadata: {name: NAME}\nspec:\n  tiers: [{name: p0, weight: 1}]\n"
BAD = "apiVersion: tierpool.io/v1alpha1\nkind: AgentPool\nmetadata: {name: NAME}\nspec:\n  tiers: []\n  colour: blue\n"
SECRET = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"


def _validate(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, list[str]]:
    code = main(["validate", *map(str, paths)])
    return code, capsys.readouterr().out.splitlines()


def test_every_document_of_a_file_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("---\n".join([GOOD.replace("NAME", "one"), SECRET, BAD.replace("NAME", "two")]))
    code, lines = _validate(capsys, path)
    assert code == 1
    assert lines[0] == f"{path}: document 1: ok: pool default/one, tiers p0, replicas 1-10, scaling sla"
    assert f"{path}: document 3: spec.colour: unknown field" in lines
    assert not any("document 2" in line for line in lines)  # a Secret is not a pool


def test_a_valid_multi_document_file_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("---\n".join([GOOD.replace("NAME", "one"), GOOD.replace("NAME", "two")]))
    code, lines = _validate(capsys, path)
    assert code == 0 and [line.split(": ok:")[0] for line in lines] == [f"{path}: document 1", f"{path}: document 2"]


def test_every_yaml_file_of_a_folder_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(GOOD.replace("NAME", "a"))
    (tmp_path / "b.yml").write_text(BAD.replace("NAME", "b"))
    (tmp_path / "c.yaml").write_text(SECRET)
    (tmp_path / "notes.txt").write_text("not a pool")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.yaml").write_text(BAD.replace("NAME", "d"))
    assert resource.pool_files(tmp_path) == [tmp_path / "a.yaml", tmp_path / "b.yml", tmp_path / "c.yaml"]
    code, lines = _validate(capsys, tmp_path)
    assert code == 1
    assert lines[0].startswith(f"{tmp_path / 'a.yaml'}: document 1: ok: pool default/a")
    assert f"{tmp_path / 'b.yml'}: document 1: spec.colour: unknown field" in lines
    assert f"{tmp_path / 'c.yaml'}: skipped: no document with kind: AgentPool" in lines


def test_a_file_named_without_a_pool_fails_and_an_empty_folder_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text(SECRET)
    assert _validate(capsys, secret) == (1, [f"{secret}: no document with kind: AgentPool"])
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _validate(capsys, empty) == (1, [f"{empty}: no *.yaml or *.yml files in the folder"])


def test_a_document_that_is_no_kubernetes_object_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(GOOD.replace("NAME", "x") + "---\n- just\n- a list\n")
    checks = resource.check_pool_file(path)
    assert [(c.index, c.pool is not None) for c in checks] == [(1, True), (2, False)]
    assert checks[1].error is not None and checks[1].error.source == f"{path}: document 2"
