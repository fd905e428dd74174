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
