"""The scaling decision: (spec, observation, history, current, now) -> desired replicas and a reason. Pure.

Policies:
- ``sla``: enough replicas to keep up with arrivals (a robust forecast), drain each tier's waiting tasks within
  ``drainFraction`` of its SLA (less when its oldest task is already close to the SLA), and keep every in-flight
  task's worker when tasks may outlast the termination grace period (shorter ones finish in the drain).
- ``lag``: KEDA-style ``ceil(backlog / targetPerReplica)``; the baseline for the benchmark.
- ``external``: leave replicas alone (an HPA or KEDA drives the /scale subresource).

Both computing policies share the rules: wake from zero on the first waiting task; never go to zero while
anything is pending or waiting, and only after every tier has been idle for the cooldown; scale up at once (or
after the up window), scale down one step at a time, and only to the highest recommendation the down window
holds; for ``sla``, once nothing waits and arrivals have stopped after one batch, the window no longer holds, nor
does the step for idle workers: the replicas they kept were sized for a backlog that is drained and that nothing
refills (``backlog_spent``); workers still running tasks leave a step a pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tierpool.model.spec import PoolSpec, ScalingPolicy
from tierpool.scaling.history import History
from tierpool.scaling.holds import default_rate, hold_if_flat, hold_if_throttled, next_plateau, saturated, usable
from tierpool.scaling.observation import PoolObservation, TierObservation

__all__ = ["Decision", "History", "decide"]

NO_SLA_BUDGET = 600.0
"""Drain budget, in seconds, for a tier with no SLA."""
MIN_BUDGET = 1.0
EWMA = 0.3
RATE_RECOVERY = 60.0
"""Seconds for a learned per-replica rate to recover (1/e of the way) toward the configured one while it is not
being measured: a rate learned on a stalled provider must not keep the pool at max afterwards."""
QUIET = 0.5
"""Forecast arrivals below this share of one replica's rate count as none (see ``backlog_spent``)."""
ARRIVAL_WINDOW = 10
"""Passes of per-pass arrival rates the forecast reads; the ``sla`` policy forecasts arrivals as their median, so
a one-off dump of tasks (already counted as backlog) is not also counted as a rate of arrivals."""
ARRIVAL_MEMORY = 64
"""Passes of arrival rates kept in the history: dropping the down window (``backlog_spent``) needs twice the
window's passes."""


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
    # tasks coming back from a throttle or a long retry are neither arrivals nor new deliveries
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
    arrivals = (*history.arrivals, added / dt)[-ARRIVAL_MEMORY:] if history.counters else ()
    return replace(
        history,
        counters=counters,
        arrival_rate=arrival,
        per_replica_rate=per_replica,
        delivery_rate=delivery,
        arrivals=arrivals,
    )


def replica_rate(spec: PoolSpec, history: History) -> float:
    """Tasks/s one replica handles: measured when known, else concurrency / taskSeconds."""
    return history.per_replica_rate or default_rate(spec)


def forecast_arrivals(history: History) -> float:
    """Tasks/s expected to arrive: the lower of the smoothed rate and the median of the last passes' rates. A
    one-off dump (which the backlog term covers) moves the smoothed rate but not the median; a first sample moves
    the median all the way but the smoothed rate only part of it."""
    if not history.arrivals:
        return history.arrival_rate
    ordered = sorted(history.arrivals[-ARRIVAL_WINDOW:])
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


def in_flight_replicas(spec: PoolSpec, obs: PoolObservation, current: int) -> int:
    """Replicas that keep every running task's worker: running tasks do not move, so every live worker holding one
    counts, however few slots it fills (the tasks' count over ``concurrency`` when workers were not counted). Never
    above ``current``: a scaled-in worker still finishing its tasks is already on its way out."""
    packed = math.ceil(obs.total_busy / spec.worker.concurrency)
    return max(packed, min(obs.busy_workers or 0, current))


def busy_at_most(spec: PoolSpec, obs: PoolObservation, current: int) -> int:
    """The most replicas whose workers may be running tasks: those counted holding one, or, when workers were not
    counted, one per running task (they may be spread over as many workers). Never above ``current``. Pure."""
    counted = obs.busy_workers if obs.busy_workers is not None else obs.total_busy
    return min(max(counted, math.ceil(obs.total_busy / spec.worker.concurrency)), current)


def recommend(spec: PoolSpec, obs: PoolObservation, history: History, current: int) -> tuple[int, str]:
    """The policy's raw replica count and why."""
    busy = in_flight_replicas(spec, obs, current)
    if spec.scaling.policy is ScalingPolicy.LAG:
        wanted = math.ceil(obs.total_waiting / spec.scaling.target_per_replica)
        reason = f"lag policy: waiting {obs.total_waiting} / target {spec.scaling.target_per_replica}"
        return max(wanted, busy), reason
    need, driver = sla_need(spec, obs, history)
    wanted = math.ceil(need - 1e-9)
    if busy > wanted and in_flight_floor(spec, history):
        return busy, (
            f"{obs.total_busy} tasks in flight on {obs.busy_workers or busy} worker(s) need {busy} replica(s) "
            "(tasks may outlast the grace period)"
        )
    return wanted, f"sla policy: {need:.2f} replica(s) needed, driven by {driver}"


def backlog_spent(spec: PoolSpec, obs: PoolObservation, history: History) -> bool:
    """Whether the ``sla`` policy may scale in without the down window or the step limit: nothing waits (nor is
    throttled or due), and the backlog it drained was a one-off: in the passes twice the window spans, arrivals
    (``QUIET`` of a replica's rate or more) came in one batch (``one_batch``), and the latest pass brought none.
    The window holds recommendations sized to drain a backlog; once that backlog is drained and nothing refills
    it, the replicas it asked for are idle cost. While tasks keep arriving, or batches recur within twice the
    window, a drained backlog can come back, so the window holds as it does for ``lag`` (KEDA's rule, always)."""
    if spec.scaling.policy is not ScalingPolicy.SLA or obs.total_waiting > 0:
        return False
    if obs.throttled > 0 or obs.due_now > 0:  # tasks that come back into the streams: not drained yet
        return False
    # twice the window: batches that recur within it are held as lag's window would hold them; and the history
    # must span all of it, or an earlier batch may be out of sight
    passes = max(math.ceil(2 * spec.scaling.scale_down_stabilization / max(spec.scaling.interval, 0.001)), 1)
    if len(history.arrivals) < passes:
        return False
    floor = QUIET * replica_rate(spec, history)
    busy = [rate >= floor for rate in history.arrivals[-passes:]]
    return not busy[-1] and one_batch(busy)


def one_batch(busy: list[bool]) -> bool:
    """Whether the passes that brought arrivals (``busy``) saw one batch at most: one pass, or two in a row (a
    batch submitted while a pass read the streams is counted by that pass and the next). Pure."""
    marked = [index for index, arrived in enumerate(busy) if arrived]
    return len(marked) <= 1 or (len(marked) == 2 and marked[1] == marked[0] + 1)


def _stabilize(
    spec: PoolSpec, history: History, current: int, raw: int, now: float, busy_when_spent: int | None
) -> tuple[int, tuple[tuple[float, int], ...]]:
    """Up to the lowest recommendation of the up window; down, one step at a time, to the highest of the down
    window. Once the backlog is spent (``busy_when_spent``: the replicas whose workers still run tasks), to this
    pass's own recommendation at once for idle workers (sized for a backlog that is gone, they drain at once), and
    a step a pass for busy ones (every busy worker stopped at once would put every task that outlasts its drain back to
    run again)."""
    scaling = spec.scaling
    keep = max(scaling.scale_down_stabilization, scaling.scale_up_stabilization)
    window = (*tuple(r for r in history.recommendations if now - r[0] <= keep), (now, raw))
    if raw > current:
        ups = [n for t, n in window if now - t <= scaling.scale_up_stabilization]
        target = max(min(ups), current)
        return min(target, current + scaling.scale_up_step), window
    if busy_when_spent is not None:
        return max(min(raw, current), min(busy_when_spent, current) - scaling.scale_down_step), window
    downs = [n for t, n in window if now - t <= scaling.scale_down_stabilization]
    target = min(max(downs), current)
    return max(target, current - scaling.scale_down_step), window


def _bounded(
    spec: PoolSpec, obs: PoolObservation, history: History, current: int, active: bool, now: float
) -> tuple[int, str, int]:
    """The policy's recommendation within the pool's bounds, the cooldown before zero and the holds, with why, and
    the recommendation before the rate-limit hold (which the next pass confirms a scale-up by)."""
    bounds = spec.replicas
    raw, reason = recommend(spec, obs, history, current)
    missing = [t.name for t in obs.tiers if not t.exists]
    if missing:
        reason += f"; no consumer group yet for {', '.join(missing)} (waiting tasks counted from the stream)"
    if active:
        raw = max(raw, 1)
    elif bounds.min == 0 and current > 0 and now - (history.last_active or now) < spec.scaling.cooldown:
        idle = now - (history.last_active or now)
        raw, reason = max(raw, 1), f"idle for {idle:.0f}s, waiting {spec.scaling.cooldown:.0f}s cooldown before zero"
    raw = min(max(raw, bounds.min), bounds.max)
    raw, flat = hold_if_flat(spec, history, current, raw, now)
    wanted = raw
    raw, throttled = hold_if_throttled(spec, obs, history, current, raw, now)
    return raw, reason + flat + throttled, wanted


def decide(spec: PoolSpec, obs: PoolObservation, history: History, current: int, now: float) -> Decision:
    """The desired replica count for the pool, its reason and the history to keep."""
    bounds = spec.replicas
    history = _rates(spec, obs, history, current)
    active = obs.total_backlog > 0 or obs.total_pending > 0 or obs.due_now > 0  # due: a worker must move them
    last_active = now if active or history.last_active is None else history.last_active
    history = replace(history, at=obs.at, last_active=last_active)
    if spec.scaling.policy is ScalingPolicy.EXTERNAL:
        return Decision(current, current, "policy external: replicas are left to the /scale subresource", history)

    raw, reason, wanted = _bounded(spec, obs, history, current, active, now)
    history = replace(history, wanted=wanted, throttled_at=now if obs.throttled > 0 else history.throttled_at)
    if current == 0 and raw > 0:
        desired, window = raw, (*history.recommendations, (now, raw))
        reason = f"waking from zero: {reason}"
    elif raw == 0 and not active:  # the cooldown was the stabilization window for going to zero
        desired, window = max(current - spec.scaling.scale_down_step, 0), ((now, raw),)
    else:
        busy_when_spent = busy_at_most(spec, obs, current) if backlog_spent(spec, obs, history) else None
        desired, window = _stabilize(spec, history, current, raw, now, busy_when_spent)
        if busy_when_spent is not None and desired < current:
            reason += "; backlog drained and nothing arriving: the down window no longer holds"
        if desired != raw:
            reason += f"; stabilized at {desired} (recommendation {raw})"
    desired = min(max(desired, bounds.min), bounds.max)
    if not active and desired == 0 < current:
        reason = f"idle for {spec.scaling.cooldown:.0f}s cooldown: scaling to zero"
    history = next_plateau(spec, obs, history, current, desired, now)
    last_scale = now if desired != current else history.last_scale
    history = replace(history, recommendations=window, last_scale=last_scale)
    return Decision(desired, raw, reason, history)
