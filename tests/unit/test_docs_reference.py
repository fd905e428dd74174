"""The generated reference pages under docs/reference/ match what their generators make from each fact's one
source (the model, the parser, the collectors, OperatorConfig, the exit codes, the chart's values comments)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hack.docs_gen import PAGES, ROOT
from hack.docs_gen.exit_codes import documented_codes
from hack.docs_gen.helm_values import documented_keys

from tierpool.cli.exits import Exit
from tierpool_operator.config import ENV_SETTINGS, OperatorConfig


@pytest.mark.parametrize("relative", sorted(PAGES))
def test_the_committed_reference_page_matches_its_source(relative: str) -> None:
    committed = (ROOT / relative).read_text(encoding="utf-8")
    assert committed == PAGES[relative](), f"{relative} is stale: run `make docs-gen`"


def test_every_generated_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    site = [relative for relative in PAGES if relative.startswith("docs/")]
    assert [relative for relative in site if relative.removeprefix("docs/") not in nav] == []
    assert set(PAGES) - set(site) == {"helm/tierpool/README.md"}  # the chart's own, shipped inside it


def test_the_readme_links_every_page_of_the_site() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    pages = re.findall(r":\s+(\S+\.md)$", nav, flags=re.MULTILINE)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(pages) > 30
    assert [page for page in pages if page != "index.md" and f"(docs/{page})" not in readme] == []


def test_the_env_table_names_each_variable_and_field_once() -> None:
    names = [setting.name for setting in ENV_SETTINGS]
    fields = [setting.field for setting in ENV_SETTINGS]
    assert len(set(names)) == len(names) and len(set(fields)) == len(fields)
    not_from_env = {"redis_timeout", "max_backoff"}
    assert set(fields) | not_from_env == {field.name for field in dataclasses.fields(OperatorConfig)}


def test_the_variables_the_readme_once_left_out_are_on_the_page() -> None:
    page = PAGES["docs/reference/operator-env.md"]()
    for name in ("TIERPOOL_API_THREADS", "TIERPOOL_MAX_DEFER_SECONDS", "TIERPOOL_FORBIDDEN_RETRY_SECONDS"):
        assert f"`{name}`" in page


@pytest.mark.parametrize(
    ("environ", "field", "expected"),
    [
        ({"TIERPOOL_WATCH_NAMESPACES": "a, b,,"}, "namespaces", ("a", "b")),
        ({}, "standalone", True),
        ({"TIERPOOL_PEERING": "TRUE"}, "standalone", False),
        ({"TIERPOOL_PEERING": "no"}, "standalone", True),
        ({"TIERPOOL_PEERING_PRIORITY": "7"}, "peering_priority", 7),
        ({"TIERPOOL_API_THREADS": "3"}, "api_threads", 3),
        ({"TIERPOOL_MAX_DEFER_SECONDS": "2.5"}, "max_defer", 2.5),
        ({"TIERPOOL_FORBIDDEN_RETRY_SECONDS": "9"}, "forbidden_retry", 9.0),
        ({"POD_NAME": "op-0"}, "pod_name", "op-0"),
        ({}, "metrics_port", 8080),
    ],
)
def test_each_variable_sets_its_field(environ: dict[str, str], field: str, expected: object) -> None:
    assert getattr(OperatorConfig.from_env(environ), field) == expected


def test_an_unset_peering_priority_comes_from_the_start_time() -> None:
    assert OperatorConfig.from_env({}).peering_priority > 2**52
    assert OperatorConfig.from_env({"TIERPOOL_PEERING_PRIORITY": " "}).peering_priority > 2**52


def test_the_exit_code_table_covers_the_enum() -> None:
    from tierpool.cli import exits

    assert sorted(documented_codes(exits.__doc__ or "")) == sorted(code.value for code in Exit)


def test_values_comments_are_read_helm_docs_style() -> None:
    text = "# -- top\n# continued\na: 1\n# plain section\nb:\n  # -- inner\n  c: 2\n  d: 3\n# -- last\ne: []\n"
    assert documented_keys(text) == [("a", "top continued"), ("b.c", "inner"), ("e", "last")]
