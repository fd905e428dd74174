"""Tiers removed from a pool's spec (or renamed) while their streams still hold work. Pure.

A removed tier is not forgotten at once: it stays in the workers' tier list, last and at weight 1 (so the
remaining tiers keep their shares while they have work), and in the scaler's view, until its stream has no
waiting and no pending entries. The names kept draining live in ``status.drainingTiers``, so a restart keeps them,
and a removed tier that adopted a stream (``tiers[].stream``) keeps draining that stream: ``status.adoptedStreams``
remembers the streams the tiers adopted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tierpool.model.adoption import group_refusal
from tierpool.model.resource import AgentPool
from tierpool.model.spec import MAX_TIERS, Tier
from tierpool.scaling.observation import PoolObservation
from tierpool_operator.conditions import condition

TIERS_IN_SPEC = "TiersInSpec"
ADOPTED_STREAMS = "adoptedStreams"


def removed(status: Mapping[str, Any], spec_names: Sequence[str]) -> list[str]:
    """Tiers the spec no longer lists that are already draining, or held work when last observed, in order.
    A removed tier last seen empty is let go at once (no second rollout to drop it again)."""
    held = [t.get("name") for t in status.get("tiers") or [] if t.get("lag") or t.get("pending")]
    before = [*(status.get("drainingTiers") or []), *held]
    found: list[str] = []
    for name in before:
        if isinstance(name, str) and name not in spec_names and name not in found:
            found.append(name)
    return found


def known_streams(status: Mapping[str, Any]) -> dict[str, str]:
    """Tier -> the stream it adopted, as last written in ``status.adoptedStreams`` (:func:`adopted_status`): where a
    tier removed from the spec since holds its work."""
    found: dict[str, str] = {}
    for item in status.get(ADOPTED_STREAMS) or []:
        if isinstance(item, Mapping) and isinstance(item.get("tier"), str) and isinstance(item.get("stream"), str):
            found[item["tier"]] = item["stream"]
    return found


def adopted_status(pool: AgentPool) -> dict[str, Any]:
    """``status.adoptedStreams`` of the pool as workers see it (draining tiers included): a list, so each write
    replaces it whole."""
    return {ADOPTED_STREAMS: [{"tier": t, "stream": s} for t, s in pool.spec.adopted_streams.items()]}


def with_draining(pool: AgentPool, names: Sequence[str], streams: Mapping[str, str] | None = None) -> AgentPool:
    """The pool as workers and scaler see it: its tiers, then each draining tier at weight 1 (as many as fit), on
    the stream it adopted (``streams``, from :func:`known_streams`) if it adopted one, so it drains that stream and
    not the pool's own (empty) key for it."""
    room = MAX_TIERS - len(pool.spec.tiers)
    known = streams or {}
    taken = {tier.stream for tier in pool.spec.tiers if tier.stream is not None}
    extra = [
        Tier(name=name, weight=1, stream=known.get(name) if known.get(name) not in taken else None)
        for name in names
        if name not in pool.spec.tier_names
    ][: max(room, 0)]
    if not extra:
        return pool
    spec = pool.spec.model_copy(update={"tiers": [*pool.spec.tiers, *extra]})
    return pool.model_copy(update={"spec": spec})


def drained(obs: PoolObservation, names: Sequence[str]) -> list[str]:
    """The draining tiers whose streams hold nothing any more (no waiting, no pending entries)."""
    empty = {t.name for t in obs.tiers if t.backlog == 0 and t.pending == 0}
    return [name for name in names if name in empty]


def tiers_condition(
    obs: PoolObservation, draining: Sequence[str], now: float, generation: int | None
) -> dict[str, Any]:
    """False while a tier removed from the spec still holds work, naming it and what it holds."""
    holding = [t for t in obs.tiers if t.name in draining and (t.backlog or t.pending)]
    if not holding:
        return condition(
            TIERS_IN_SPEC, True, "AllTiersInSpec", "every stream with work is a tier of the spec", now, generation
        )
    detail = ", ".join(f"{t.name}: {t.backlog} waiting, {t.pending} pending" for t in holding)
    message = (
        f"tier(s) removed from spec.tiers still hold work ({detail}); workers keep draining them last, at weight "
        "1, and drop them once empty. Stop producers from submitting to them"
    )
    return condition(TIERS_IN_SPEC, False, "DrainingRemovedTiers", message, now, generation)


STREAMS_ADOPTED = "StreamsAdopted"


def groups_condition(pool: AgentPool, obs: PoolObservation, now: float, generation: int | None) -> dict[str, Any]:
    """False while a stream a tier adopts has consumer groups and none named ``spec.consumerGroup``: the workers
    create no group there (they would run its acked history again) and read nothing from it."""
    adopted = pool.spec.adopted_streams
    refusals = [
        refusal
        for t in obs.tiers
        if t.name in adopted
        and (refusal := group_refusal(t.name, adopted[t.name], pool.spec.consumer_group, t.other_groups))
    ]
    if not refusals:
        return condition(
            STREAMS_ADOPTED, True, "GroupsFound", "every adopted stream has the pool's group, or none", now, generation
        )
    message = "; ".join(refusals) + ". Workers do not start until it is fixed"
    return condition(STREAMS_ADOPTED, False, "ConsumerGroupMissing", message, now, generation)
