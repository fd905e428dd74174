"""The producer contract page (docs/reference/producer-contract.md) and the generated script reference name every
key, every schema and every script, so that neither falls behind a new one."""

from __future__ import annotations

import inspect

import pytest
from hack.docs_gen import ROOT
from hack.docs_gen.scripts import PRODUCER_SCRIPTS, callers, convention, convention_of, header

from tierpool import scripts
from tierpool.model.keys import PoolKeys
from tierpool.protocol.wire_schemas import SCHEMAS

PAGE = (ROOT / "docs" / "reference" / "producer-contract.md").read_text(encoding="utf-8")


def key_suffixes() -> list[str]:
    """Every key a PoolKeys names, after the pool's prefix, its arguments as ``<name>``; and the published spec."""
    keys, found = PoolKeys("ns", "pool"), ["spec"]
    for name, member in vars(PoolKeys).items():
        if name.startswith("_") or name in ("parse", "ref", "prefix", "result_prefix"):
            continue
        if isinstance(member, property):
            found.append(getattr(keys, name))
        elif inspect.isfunction(member):
            params = list(inspect.signature(member).parameters)[1:]
            found.append(member(keys, *[f"<{param}>" for param in params]))
    return list(dict.fromkeys(key.removeprefix(keys.prefix) for key in found))  # own_tier is tier, unadopted


@pytest.mark.parametrize("suffix", key_suffixes())
def test_the_contract_names_every_key(suffix: str) -> None:
    assert f"| `…:{suffix}` |" in PAGE


def test_the_key_list_is_complete() -> None:
    assert len(key_suffixes()) == PAGE.count("\n| `…:")


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_contract_names_every_schema(name: str) -> None:
    assert f"`schemas/{name}`" in PAGE


@pytest.mark.parametrize("name", PRODUCER_SCRIPTS)
def test_the_contract_names_every_producer_script(name: str) -> None:
    assert f"`{name}`" in PAGE and name in scripts.by_name()


def test_every_script_has_its_calling_convention() -> None:
    found = {name: convention(script) for name, script in scripts.by_name().items()}
    assert all(c.keys and c.argv and c.returns for c in found.values())
    assert found["SUBMIT_ONCE"].keys == "stream, dedupe key, ...:where"
    assert found["SUBMIT_ONCE"].argv == "dedupe ttl ms, fields..."
    assert found["SUBMIT_ONCE"].returns == "the entry id, or nil for a duplicate."
    assert found["HAND_BACK"].argv == "group, consumer, parking consumer, idle ms, entry ids..."
    assert found["ESCALATE"].keys.endswith("then ...:where (the last key)")


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("-- KEYS: stream. ARGV: group. Does things.\n", "return value"),
        ("-- include: helpers/stream.lua\n-- ARGV: group. Returns 1.\n", "KEYS"),
        ("-- KEYS: stream. Returns 1.\nlocal x = 'ARGV: a.'\n", "KEYS"),
    ],
)
def test_a_script_whose_header_lacks_a_part_fails_the_generator(text: str, missing: str) -> None:
    with pytest.raises(ValueError, match=f"says no {missing}"):
        convention_of("TRIM", "stream/trim.lua", text)


def test_a_script_nobody_runs_fails_the_generator() -> None:
    with pytest.raises(ValueError, match="run by no one"):
        callers("NEW")


def test_the_header_is_the_leading_comment_without_the_include_line() -> None:
    text = "-- include: helpers/stream.lua\n-- KEYS: a.\n-- ARGV: b.\nlocal x = 1\n-- later\n"
    assert header(text) == "KEYS: a. ARGV: b."
