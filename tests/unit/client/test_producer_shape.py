"""The two producer classes are built the same way, and say which pool they mean the same way
(tierpool.client.producer.resolve_pool)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from tierpool import AsyncClient, Client
from tierpool.client.producer import resolve_pool, settings_for
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import parse_pool
from tierpool.model.spec import RedisMode

POOL = parse_pool(
    {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": "agents", "namespace": "team"},
        "spec": {"tiers": [{"name": "p0", "weight": 1}], "redis": {"mode": "cluster"}},
    }
)


def shape(function: object) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(function).parameters.values()]  # type: ignore[arg-type]


def test_both_classes_have_one_constructor_shape() -> None:
    assert shape(Client.__init__) == shape(AsyncClient.__init__)
    assert shape(Client.from_url) == shape(AsyncClient.from_url)
    assert [name for name, _ in shape(Client.from_url)] == ["url", "pool", "spec"]


def test_a_pool_is_an_agentpool_a_file_or_a_name(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(POOL.model_dump_json(by_alias=True))
    assert resolve_pool(POOL) == (PoolKeys("team", "agents"), POOL.spec)
    assert resolve_pool(path) == (PoolKeys("team", "agents"), POOL.spec)
    assert resolve_pool("team/agents") == (PoolKeys("team", "agents"), None)
    assert resolve_pool("team/agents", POOL.spec) == (PoolKeys("team", "agents"), POOL.spec)
    assert resolve_pool(PoolKeys("team", "agents")) == (PoolKeys("team", "agents"), None)


@pytest.mark.parametrize("name", ["pool.yaml", "examples/minimal.yml", "pool.json"])
def test_a_string_that_names_a_file_asks_for_a_path(name: str) -> None:
    with pytest.raises(ValueError, match=r"pass pathlib\.Path"):
        resolve_pool(name)


def test_from_url_connects_in_the_pools_mode_when_it_is_known() -> None:
    assert settings_for("redis://h:7000/0", POOL.spec).mode is RedisMode.CLUSTER
    assert settings_for("redis://h:6379/0", None).mode is RedisMode.STANDALONE
    assert settings_for("redis://u:pw@h:6379/0", None).client_kwargs()["password"] == "pw"
