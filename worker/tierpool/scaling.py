"""The scaling decision: (spec, observation, history, current, now) -> desired replicas and a reason. Pure.

Policies:
- ``sla``: enough replicas to keep up with arrivals (a robust forecast), drain each tier's waiting tasks within
  ``drainFraction`` of its SLA (less when its oldest task is already close to the SLA), and keep every in-flight
  task's worker when tasks may outlast the termination grace period (shorter ones finish in the drain).
- ``lag``: KEDA-style ``ceil(backlog / targetPerReplica)``; the baseline for the benchmark.
- ``external``: leave replicas alone (an HPA or KEDA drives the /scale subresource).

Both computing policies share the rules: wake from zero on the first waiting task; never go to zero while
anything is pending or waiting, and only after every tier has been idle for the cooldown; scale up at once (or
after the up window), scale down only to the highest recommendation of the down window and one step at a time.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tierpool.observation import PoolObservation, TierObservation
from tierpool.slots import usable_slots
from tierpool.spec import PoolSpec, ScalingPolicy

NO_SLA_BUDGET = 600.0
"""Drain budget, in seconds, for a tier with no SLA."""
MIN_BUDGET = 1.0
EWMA = 0.3
RATE_RECOVERY = 60.0
"""Seconds for a learned per-replica rate to recover (1/e of the way) toward the configured one while it is not
being measured: a rate learned on a stalled provider must not keep the pool at max afterwards."""
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
ARRIVAL_WINDOW = 10
"""Passes of per-pass arrival rates kept; the ``sla`` policy forecasts arrivals as their median, so a one-off dump
of tasks (already counted as backlog) is not also counted as a rate of arrivals."""


@dataclass(frozen=True)
class History:
    """What the scaler remembers between decisions. Kept in AgentPool status so a restart loses nothing."""

    at: float | None = None
    counters: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per tier (entries-added, entries-read) at ``at``, for arrival and delivery rates."""
    arrival_rate: float = 0.0
    per_replica_rate: float | None = None
    """Measured tasks/s one replica delivers when saturated; None until observed."""
    recommendations: tuple[tuple[float, int], ...] = ()
    last_active: float | None = None
    last_scale: float | None = None
    delivery_rate: float = 0.0
    """Tasks/s the whole pool takes from its streams (smoothed)."""
    plateau: tuple[int, float] | None = None
    """(replicas, delivery rate) just before the last scale-up of a saturated pool: the baseline it must beat."""
    plateau_at: float | None = None
    """When the plateau was armed (None from older status: ``last_scale`` stands in)."""
    arrivals: tuple[float, ...] = ()
    """Arrival rates (tasks/s) of the last ``ARRIVAL_WINDOW`` passes, oldest first."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["counters"] = {k: list(v) for k, v in self.counters.items()}
        data["recommendations"] = [list(r) for r in self.recommendations]
        data["plateau"] = list(self.plateau) if self.plateau else None
        data["arrivals"] = [round(rate, 3) for rate in self.arrivals]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> History:
        if not data:
            return cls()
        return cls(
            at=data.get("at"),
            counters={k: (int(v[0]), int(v[1])) for k, v in (data.get("counters") or {}).items()},
            arrival_rate=float(data.get("arrival_rate") or 0.0),
            per_replica_rate=data.get("per_replica_rate"),
            recommendations=tuple((float(t), int(n)) for t, n in data.get("recommendations") or ()),
            last_active=data.get("last_active"),
            last_scale=data.get("last_scale"),
            delivery_rate=float(data.get("delivery_rate") or 0.0),
            plateau=(int(data["plateau"][0]), float(data["plateau"][1])) if data.get("plateau") else None,
            plateau_at=data.get("plateau_at"),
            arrivals=tuple(float(rate) for rate in data.get("arrivals") or ()),
        )


@dataclass(frozen=True)
class Decision:
    desired: int
    recommendation: int
    """What the policy asked for before stabilization and step limits."""
    reason: str
    history: History

    def direction(self, current: int) -> str:
        return "up" if self.desired > current else "down" if self.desired < current else "none"


def _rates(spec: PoolSpec, obs: PoolObservation, history: History, current: int) -> History:
    """Update arrival and per-replica delivery rates from the counters' deltas."""
    # tasks coming back from a throttle or a long retry (protocol 5) are neither arrivals nor new deliveries
    counters = {
        t.name: (t.entries_added - t.reentered, (t.entries_read or 0) - t.reentered) for t in obs.tiers if t.exists
    }
    if history.at is None or obs.at <= history.at:
        return replace(history, counters=counters)
    dt = obs.at - history.at
    added = read = 0
    for name, (now_added, now_read) in counters.items():
        before = history.counters.get(name)
        if before:  # a counter that went back (a stream recreated, a re-entry not read yet) adds nothing
            added += max(now_added - before[0], 0)
            read += max(now_read - before[1], 0)
    arrival = EWMA * (added / dt) + (1 - EWMA) * history.arrival_rate if history.counters else added / dt
    delivery = EWMA * (read / dt) + (1 - EWMA) * history.delivery_rate if history.counters else read / dt
    per_replica = history.per_replica_rate
    if saturated(spec, obs, current) and read > 0:
        measured = read / dt / current
        per_replica = measured if per_replica is None else EWMA * measured + (1 - EWMA) * per_replica
    elif per_replica is not None:  # not measured now: recover toward the configured rate
        prior = default_rate(spec)
        per_replica = prior + (per_replica - prior) * math.exp(-dt / RATE_RECOVERY)
    arrivals = (*history.arrivals, added / dt)[-ARRIVAL_WINDOW:] if history.counters else ()
    return replace(
        history,
        counters=counters,
        arrival_rate=arrival,
        per_replica_rate=per_replica,
        delivery_rate=delivery,
        arrivals=arrivals,
    )


def saturated(spec: PoolSpec, obs: PoolObservation, current: int) -> bool:
    """Whether the pool's replicas are (nearly) all busy: only then does a replica more mean throughput more.
    Slots reserved for higher tiers (``reservedSlots``) idle by design, so "all" is what the lowest tier may fill."""
    return current > 0 and obs.total_busy >= SATURATED * current * usable(spec)[-1]


def usable(spec: PoolSpec) -> tuple[int, ...]:
    """Per tier: the slots of one replica that tier (and those below it) may fill (see tierpool.slots)."""
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


def hold_if_throttled(obs: PoolObservation, current: int, raw: int) -> tuple[int, str]:
    """No scale-up past ``current`` while tasks wait for a pool rate limit (protocol 5): the limit, not the
    replica count, decides when they run, and the tasks that come back from it (paid, one at a time) would count
    as arrivals. Waking from zero is still allowed. Returns the capped count and why."""
    if obs.throttled <= 0 or raw <= current or current == 0:
        return raw, ""
    return current, (
        f"; holding at {current} (recommendation {raw}): {obs.throttled} task(s) throttled by rate limits; "
        "more replicas could not run them sooner"
    )


def _plateau(spec: PoolSpec, obs: PoolObservation, history: History, current: int, desired: int, now: float) -> History:
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


def replica_rate(spec: PoolSpec, history: History) -> float:
    """Tasks/s one replica handles: measured when known, else concurrency / taskSeconds."""
    return history.per_replica_rate or default_rate(spec)


def forecast_arrivals(history: History) -> float:
    """Tasks/s expected to arrive: the lower of the smoothed rate and the median of the last passes' rates. A
    one-off dump (which the backlog term covers) moves the smoothed rate but not the median; a first sample moves
    the median all the way but the smoothed rate only part of it."""
    if not history.arrivals:
        return history.arrival_rate
    ordered = sorted(history.arrivals)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return min(median, history.arrival_rate)


def in_flight_floor(spec: PoolSpec, history: History) -> bool:
    """Whether running tasks keep their workers (the ``sla`` policy never scales in below them): only when a task
    may outlast half the termination grace period. Shorter tasks finish inside a scaled-in worker's drain, so
    scaling in while the pool is busy costs no re-run, and the SLA need alone sizes the pool."""
    task_seconds = spec.worker.concurrency / replica_rate(spec, history)
    return task_seconds > spec.worker.termination_grace_period_seconds / 2


def sla_need(spec: PoolSpec, obs: PoolObservation, history: History) -> tuple[float, str]:
    """Replicas the SLA policy wants (unrounded), with what drives it.

    Waiting work is planned by deadline: each tier must drain within its budget (``drainFraction`` of its SLA, less
    the age of its oldest task), and higher tiers are served first, so the pool needs the most demanding horizon,
    ``max over tiers t of (waiting in tiers due by t's budget) / t's budget``, not the sum of every tier's own
    rate (which sizes the pool as if each tier drained alone, and over-provisions a mixed burst). With reserved
    slots, tier i and the tiers below it share only ``usable[i]`` of each replica's ``concurrency`` slots, so their
    horizon needs ``concurrency / usable[i]`` times the replicas. Forecast arrivals come on top."""
    rate = replica_rate(spec, history)
    arrivals = forecast_arrivals(history)
    budgets = []
    for index, (tier_spec, tier) in enumerate(zip(spec.tiers, obs.tiers, strict=True)):
        if tier.waiting:
            sla = tier_spec.sla or NO_SLA_BUDGET
            budget = max(spec.scaling.drain_fraction * sla - tier.oldest_age_seconds, MIN_BUDGET)
            budgets.append((budget, index, tier))
    drain, driver = _horizon([(budget, tier) for budget, _, tier in budgets])
    concurrency = spec.worker.concurrency
    for index, slots in enumerate(usable(spec)):
        if slots >= concurrency:
            continue
        below, why = _horizon([(budget, tier) for budget, at, tier in budgets if at >= index])
        below *= concurrency / max(slots, 1)
        if below > drain:
            name = obs.tiers[index].name
            drain, driver = below, f"{why}; {slots} of {concurrency} slots per replica open to tier {name} and below"
    if arrivals >= drain:
        driver = "arrivals"
    return (arrivals + drain) / rate, driver


def _horizon(budgets: list[tuple[float, TierObservation]]) -> tuple[float, str]:
    """The most demanding deadline horizon of these tiers: (tasks/s, what drives it). Pure."""
    drain, driver, due = 0.0, "arrivals", 0
    for budget, tier in sorted(budgets, key=lambda found: found[0]):
        due += tier.waiting
        if due / budget > drain:
            retries = f", {tier.reclaimable} of them due again" if tier.reclaimable else ""
            driver = (
                f"tier {tier.name} ({tier.waiting} waiting{retries}, oldest {tier.oldest_age_seconds:.0f}s; "
                f"{due} due within {budget:.0f}s)"
            )
            drain = due / budget
    return drain, driver


def recommend(spec: PoolSpec, obs: PoolObservation, history: History) -> tuple[int, str]:
    """The policy's raw replica count and why."""
    busy = math.ceil(obs.total_busy / spec.worker.concurrency)
    if spec.scaling.policy is ScalingPolicy.LAG:
        wanted = math.ceil(obs.total_waiting / spec.scaling.target_per_replica)
        reason = f"lag policy: waiting {obs.total_waiting} / target {spec.scaling.target_per_replica}"
        return max(wanted, busy), reason
    need, driver = sla_need(spec, obs, history)
    wanted = math.ceil(need - 1e-9)
    if busy > wanted and in_flight_floor(spec, history):
        return busy, f"{obs.total_busy} tasks in flight need {busy} replica(s) (tasks may outlast the grace period)"
    return wanted, f"sla policy: {need:.2f} replica(s) needed, driven by {driver}"


def _stabilize(
    spec: PoolSpec, history: History, current: int, raw: int, now: float
) -> tuple[int, tuple[tuple[float, int], ...]]:
    scaling = spec.scaling
    keep = max(scaling.scale_down_stabilization, scaling.scale_up_stabilization)
    window = (*tuple(r for r in history.recommendations if now - r[0] <= keep), (now, raw))
    if raw > current:
        ups = [n for t, n in window if now - t <= scaling.scale_up_stabilization]
        target = max(min(ups), current)
        return min(target, current + scaling.scale_up_step), window
    downs = [n for t, n in window if now - t <= scaling.scale_down_stabilization]
    target = min(max(downs), current)
    return max(target, current - scaling.scale_down_step), window


def decide(spec: PoolSpec, obs: PoolObservation, history: History, current: int, now: float) -> Decision:
    """The desired replica count for the pool, its reason and the history to keep."""
    bounds = spec.replicas
    history = _rates(spec, obs, history, current)
    active = obs.total_backlog > 0 or obs.total_pending > 0 or obs.due_now > 0  # due: a worker must move them
    last_active = now if active or history.last_active is None else history.last_active
    history = replace(history, at=obs.at, last_active=last_active)
    if spec.scaling.policy is ScalingPolicy.EXTERNAL:
        return Decision(current, current, "policy external: replicas are left to the /scale subresource", history)

    raw, reason = recommend(spec, obs, history)
    missing = [t.name for t in obs.tiers if not t.exists]
    if missing:
        reason += f"; no consumer group yet for {', '.join(missing)} (waiting tasks counted from the stream)"
    if active:
        raw = max(raw, 1)
    elif bounds.min == 0 and current > 0 and now - last_active < spec.scaling.cooldown:
        raw, reason = (
            max(raw, 1),
            f"idle for {now - last_active:.0f}s, waiting {spec.scaling.cooldown:.0f}s cooldown before zero",
        )
    raw = min(max(raw, bounds.min), bounds.max)
    raw, held = hold_if_flat(spec, history, current, raw, now)
    reason += held
    raw, throttled = hold_if_throttled(obs, current, raw)
    reason += throttled

    if current == 0 and raw > 0:
        desired, window = raw, (*history.recommendations, (now, raw))
        reason = f"waking from zero: {reason}"
    elif raw == 0 and not active:  # the cooldown was the stabilization window for going to zero
        desired, window = max(current - spec.scaling.scale_down_step, 0), ((now, raw),)
    else:
        desired, window = _stabilize(spec, history, current, raw, now)
        if desired != raw:
            reason += f"; stabilized at {desired} (recommendation {raw})"
    desired = min(max(desired, bounds.min), bounds.max)
    if not active and desired == 0 < current:
        reason = f"idle for {spec.scaling.cooldown:.0f}s cooldown: scaling to zero"
    history = _plateau(spec, obs, history, current, desired, now)
    history = replace(history, recommendations=window, last_scale=now if desired != current else history.last_scale)
    return Decision(desired, raw, reason, history)
