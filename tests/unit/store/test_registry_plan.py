"""Loading the published pool spec (tierpool.store.registry.load_spec_plan), driven by hand."""

from __future__ import annotations

import pytest

from tests.unit.client.conversation import converse
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import parse_pool
from tierpool.store.plans import call
from tierpool.store.registry import UnknownPool, load_spec_plan, spec_json, spec_key

POOL = parse_pool(
    {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": "agents", "namespace": "team"},
        "spec": {"tiers": [{"name": "p0", "weight": 1}]},
    }
)
KEYS = PoolKeys.parse(POOL.ref)


def test_the_published_spec_is_read_back() -> None:
    assert converse(load_spec_plan(KEYS), [(call("get", spec_key(KEYS)), spec_json(POOL.spec))]) == POOL.spec


@pytest.mark.parametrize("raw", [None, ""])
def test_a_pool_nobody_published_is_unknown(raw: str | None) -> None:
    with pytest.raises(UnknownPool, match="team/agents is not known"):
        converse(load_spec_plan(KEYS), [(call("get", spec_key(KEYS)), raw)])


def test_an_unknown_pool_is_explained_in_library_terms() -> None:
    """The library says what to pass to it, never which CLI flag: the CLI adds its own advice."""
    with pytest.raises(UnknownPool) as raised:
        converse(load_spec_plan(KEYS), [(call("get", spec_key(KEYS)), None)])
    message = str(raised.value)
    assert raised.value.ref == "team/agents"
    assert "Pass the AgentPool itself" in message
    assert "start a worker" in message
    assert "--" not in message


def test_unknown_pool_is_exported_from_the_package() -> None:
    import tierpool

    assert tierpool.UnknownPool is UnknownPool
    assert "UnknownPool" in tierpool.__all__


def test_the_command_line_adds_its_own_advice() -> None:
    from tierpool.runtime.failures import describe

    line = describe(UnknownPool("team/agents"))
    assert line.startswith("pool team/agents is not known")
    assert line.endswith("pass --file pool.yaml instead of --pool team/agents")
