"""Loading the published pool spec (tierpool.store.registry.load_spec_plan), driven by hand."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from tests.unit.client.conversation import converse
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import parse_pool
from tierpool.protocol.compat import NewerProtocol
from tierpool.protocol.version import PROTOCOL
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


def _published(protocol: object) -> str:
    document = json.loads(spec_json(POOL.spec))
    if protocol is None:
        del document["protocol"]
    else:
        document["protocol"] = protocol
    return json.dumps(document)


def test_the_published_spec_carries_this_protocol_first() -> None:
    assert spec_json(POOL.spec).startswith(f'{{"protocol":{PROTOCOL},"tiers":')


@pytest.mark.parametrize(
    ("protocol", "producer", "refused"),
    [
        (None, True, None),  # a publisher before protocol 10
        (PROTOCOL - 1, True, None),
        (PROTOCOL, True, None),
        (PROTOCOL + 1, True, NewerProtocol),
        (PROTOCOL + 1, False, None),  # a worker or the CLI reads it as it can
        (0, False, ValueError),
        ("10", True, ValueError),
        (True, True, ValueError),
    ],
)
def test_a_producer_refuses_a_spec_of_a_newer_protocol(
    protocol: object, producer: bool, refused: type[Exception] | None
) -> None:
    plan = load_spec_plan(KEYS, producer=producer)
    reply = [(call("get", spec_key(KEYS)), _published(protocol))]
    if refused is None:
        assert converse(plan, reply) == POOL.spec
    else:
        with pytest.raises(refused):
            converse(plan, reply)


def test_the_refusal_names_both_protocols() -> None:
    with pytest.raises(NewerProtocol) as raised:
        converse(load_spec_plan(KEYS, producer=True), [(call("get", spec_key(KEYS)), _published(PROTOCOL + 3))])
    assert str(raised.value).startswith(f"pool team/agents speaks protocol {PROTOCOL + 3}, newer than this ")
    assert f"({PROTOCOL})" in str(raised.value) and raised.value.published == PROTOCOL + 3


def test_a_spec_that_is_not_json_is_refused_as_before() -> None:
    with pytest.raises(ValidationError):
        converse(load_spec_plan(KEYS), [(call("get", spec_key(KEYS)), "{nope")])
