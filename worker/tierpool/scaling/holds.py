"""Holds on the scaling decision: when more replicas would not help (flat throughput after a scale-up, tasks
throttled by a rate limit), and the flat-throughput baseline they judge by. Pure."""

from __future__ import annotations

from dataclasses import replace

from tierpool.model.spec import PoolSpec, ScalingPolicy
from tierpool.protocol.slots import usable_slots
from tierpool.scaling.history import History
from tierpool.scaling.observation import PoolObservation

SETTLE = 30.0
"""Seconds after a scale-up before its effect on throughput is judged, at least: new replicas must start
(``STARTUP``) and finish a task (``taskSeconds``) before they can show up in throughput."""
STARTUP = 30.0
"""Start-up allowance of a new replica (scheduling, image, connecting), added to ``taskSeconds`` in the settle time."""
PLATEAU_EXPIRY = 300.0
"""Seconds past the settle time after which a flat-throughput hold expires: the next scale-up is tried (and judged)
again, so a hold never blocks a needed scale-up indefinitely."""
SATURATED = 0.8
"""Share of the pool's task slots in use at which the pool counts as saturated."""
FLAT_GAIN = 1.1
"""Throughput after a scale-up below this multiple of the throughput before it counts as flat."""


def saturated(spec: PoolSpec, obs: PoolObservation, current: int) -> bool:
    """Whether the pool's replicas are (nearly) all busy: only then does a replica more mean throughput more.
    Slots reserved for higher tiers (``reservedSlots``) idle by design, so "all" is what the lowest tier may fill."""
    return current > 0 and obs.total_busy >= SATURATED * current * usable(spec)[-1]


def usable(spec: PoolSpec) -> tuple[int, ...]:
    """Per tier: the slots of one replica that tier (and those below it) may fill (see tierpool.protocol.slots)."""
    return usable_slots(spec.worker.concurrency, [tier.reserved_slots for tier in spec.tiers])


def settle_time(spec: PoolSpec) -> float:
    """Seconds after a scale-up before its effect on throughput is judged."""
    return max(SETTLE, spec.scaling.task_seconds + STARTUP)


def plateau_live(spec: PoolSpec, history: History, now: float) -> bool:
    """Whether the flat-throughput baseline still applies (armed, and not expired)."""
    armed = history.plateau_at if history.plateau_at is not None else history.last_scale
    return history.plateau is not None and armed is not None and now - armed < settle_time(spec) + PLATEAU_EXPIRY


def default_rate(spec: PoolSpec) -> float:
    """Tasks/s one replica handles by the spec: concurrency / taskSeconds."""
    return spec.worker.concurrency / max(spec.scaling.task_seconds, 0.001)


def hold_if_flat(spec: PoolSpec, history: History, current: int, raw: int, now: float) -> tuple[int, str]:
    """No scale-up past ``current`` when the last one, made while the pool was saturated, did not raise throughput
    once settled: the backlog is held up by something more replicas cannot fix (a stalled provider, a rate limit).
    The hold expires ``PLATEAU_EXPIRY`` after the settle time; the ``lag`` policy (the KEDA baseline) never holds.
    Returns the capped count and why."""
    if raw <= current or spec.scaling.policy is ScalingPolicy.LAG or history.last_scale is None:
        return raw, ""
    if history.plateau is None or not plateau_live(spec, history, now):
        return raw, ""
    replicas, before = history.plateau
    settle = settle_time(spec)
    if current <= replicas or now - history.last_scale < settle or history.delivery_rate > before * FLAT_GAIN:
        return raw, ""
    return current, (
        f"; holding at {current} (recommendation {raw}): throughput stayed flat at {history.delivery_rate:.2f}/s "
        f"while replicas rose {replicas} -> {current} ({before:.2f}/s); more replicas would not drain the backlog"
    )


def hold_if_throttled(
    spec: PoolSpec, obs: PoolObservation, history: History, current: int, raw: int, now: float
) -> tuple[int, str]:
    """No scale-up past ``current`` while tasks wait for a pool rate limit: the limit, not the
    replica count, decides when they run, and the tasks that come back from it (paid, one at a time) would count
    as arrivals. The hold lasts ``settle_time`` past the last pass that saw a throttled task (the set empties
    between a task's due time and its next draw), and a pool that declares rate limits scales up only on a need
    seen in two passes: a burst is in the streams, not yet throttled, when the first pass sees it. Waking from
    zero is still allowed. Returns the capped count and why."""
    if raw <= current or current == 0:
        return raw, ""
    held = f"; holding at {current} (recommendation {raw}): "
    if obs.throttled > 0:
        return (
            current,
            f"{held}{obs.throttled} task(s) throttled by rate limits; more replicas could not run them sooner",
        )
    if not spec.rate_limits or spec.scaling.policy is ScalingPolicy.LAG:  # lag stays KEDA's rule
        return raw, ""
    if history.throttled_at is not None and now - history.throttled_at < settle_time(spec):
        ago = now - history.throttled_at
        return current, f"{held}tasks were throttled by rate limits {ago:.0f}s ago; more replicas could not run them"
    if history.wanted is None or history.wanted <= current:
        return current, f"{held}the pool has rate limits, so a scale-up waits for a second pass to confirm it"
    return raw, ""


def next_plateau(
    spec: PoolSpec, obs: PoolObservation, history: History, current: int, desired: int, now: float
) -> History:
    """The baseline to keep: armed by a scale-up of a saturated pool, cleared by an unsaturated one, by going idle
    and by expiry."""
    active = obs.total_backlog > 0 or obs.total_pending > 0
    if desired > current > 0:
        if saturated(spec, obs, current):
            return replace(history, plateau=(current, history.delivery_rate), plateau_at=now)
        return replace(history, plateau=None, plateau_at=None)
    if not active or not plateau_live(spec, history, now):
        return replace(history, plateau=None, plateau_at=None)
    return history
