"""The pool spec published in Redis, so a producer that knows only ``NAMESPACE/NAME`` can validate tasks. It
carries the publisher's protocol (``"protocol"``, since protocol 10), which a producer checks before it writes."""

from __future__ import annotations

import json
from typing import Any

from tierpool.model.keys import PoolKeys
from tierpool.model.spec import PoolSpec, redis_defaults_left_out, sections_left_out, tier_defaults_left_out
from tierpool.protocol.compat import NewerProtocol, published_protocol
from tierpool.protocol.version import PROTOCOL
from tierpool.store.connection import AsyncRedis, redact_url
from tierpool.store.plans import Plan, call


class UnknownPool(LookupError):
    """No worker or operator has published this pool's spec to this Redis, so a producer that names the pool by
    ``NAMESPACE/NAME`` cannot validate its tasks. ``ref`` is the pool named."""

    def __init__(self, ref: str) -> None:
        super().__init__(
            f"pool {ref} is not known in this Redis: neither a worker nor the operator has published its spec yet. "
            "Pass the AgentPool itself (parsed, or a pool file's path) instead of its name, or start a worker for "
            "the pool (the operator publishes the spec when it reconciles the AgentPool)"
        )
        self.ref = ref


def spec_key(keys: PoolKeys) -> str:
    return f"{keys.prefix}spec"


def parse_published(keys: PoolKeys, raw: object, producer: bool = False) -> PoolSpec:
    """The published spec; for a ``producer``, NewerProtocol when its publisher speaks a newer protocol."""
    if not raw:
        raise UnknownPool(keys.ref)
    text = str(raw)
    try:
        document = json.loads(text)
    except ValueError:
        return PoolSpec.model_validate_json(text)  # refused, with pydantic's account of the fault
    published = published_protocol(document)
    if producer and published is not None and published > PROTOCOL:
        raise NewerProtocol(keys.ref, published)
    if published is not None:
        del document["protocol"]
        text = json.dumps(document)
    return PoolSpec.model_validate_json(text)


def spec_json(spec: PoolSpec) -> str:
    """The spec as published: anyone who can read the pool's keys reads it, so a password in ``redis.url`` is
    redacted (a producer that reads the spec is connected already and needs no URL) and ``worker.env`` is left
    out (its literal values are often API keys; no producer needs them)."""
    if spec.redis.url:
        spec = spec.model_copy(update={"redis": spec.redis.model_copy(update={"url": redact_url(spec.redis.url)})})
    # an empty rateLimits, default deadLetters and the default redis.mode are left out, so producers that predate
    # them can still read the spec
    exclude: dict[str, Any] = dict.fromkeys(sections_left_out(spec), True)
    exclude["redis"] = redis_defaults_left_out(spec.redis)
    exclude["worker"] = {"env"}
    if tiers := tier_defaults_left_out(spec):
        exclude["tiers"] = tiers
    body = spec.model_dump_json(by_alias=True, exclude_none=True, exclude=exclude)
    return f'{{"protocol":{PROTOCOL},{body[1:]}'


def load_spec_plan(keys: PoolKeys, producer: bool = False) -> Plan[PoolSpec]:
    """The pool's published spec (a plan: tierpool.store.plans); UnknownPool when none was published. A
    ``producer`` (a client about to write) gets NewerProtocol instead when the spec's publisher speaks a newer
    protocol than this code; a worker or the CLI reads such a spec as it can."""
    return parse_published(keys, (yield call("get", spec_key(keys))), producer)


async def publish_spec(connection: AsyncRedis, keys: PoolKeys, spec: PoolSpec) -> None:
    await connection.set(spec_key(keys), spec_json(spec))
