"""Redis key names. One hash tag per pool keeps a pool's keys in one cluster slot. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

GROUP = "workers"
"""The default consumer group on every tier stream (``spec.consumerGroup``)."""
ESCALATOR_CONSUMER = "tierpool-escalator"
"""Internal consumer that takes stale undelivered entries through the group to escalate them."""
RETRY_CONSUMER = "tierpool-retry"
"""Internal consumer that holds failed or handed-back entries until their backoff ends and any worker reclaims them
(a worker never reclaims entries its own consumer owns)."""


@dataclass(frozen=True)
class PoolKeys:
    """Key names for the pool ``namespace/name``."""

    namespace: str
    name: str
    group: str = GROUP
    """The consumer group the workers read every tier stream through (``spec.consumerGroup``)."""
    adopted: tuple[tuple[str, str], ...] = ()
    """(tier, stream key) of the tiers that adopt an existing stream (``tiers[].stream``)."""

    @classmethod
    def parse(cls, ref: str, group: str = GROUP, adopted: Mapping[str, str] | None = None) -> PoolKeys:
        """``"default/agents"`` -> PoolKeys; a ref without a slash means the ``default`` namespace. ``group`` and
        ``adopted`` (tier -> stream key) come from the spec (``consumerGroup``, ``tiers[].stream``)."""
        namespace, _, name = ref.rpartition("/")
        if not name:
            raise ValueError(f"pool reference {ref!r} should look like NAMESPACE/NAME")
        return cls(namespace or "default", name, group, tuple(sorted((adopted or {}).items())))

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def prefix(self) -> str:
        return f"tierpool:{{{self.ref}}}:"

    def tier(self, tier: str) -> str:
        """The tier's stream: the one it adopts (``tiers[].stream``), else the pool's own."""
        for name, stream in self.adopted:
            if name == tier:
                return stream
        return self.own_tier(tier)

    def own_tier(self, tier: str) -> str:
        """The stream key the pool gives a tier that adopts none."""
        return f"{self.prefix}tier:{tier}"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}dlq"

    def result(self, task_id: str) -> str:
        return f"{self.prefix}result:{task_id}"

    @property
    def result_prefix(self) -> str:
        return f"{self.prefix}result:"

    def dedupe(self, task_id: str) -> str:
        return f"{self.prefix}dedupe:{task_id}"

    def deferrals(self, task_id: str) -> str:
        """Counter of a task's RetryAfter deferrals (expires on its own; see policy.deferral_memory_ms)."""
        return f"{self.prefix}deferrals:{task_id}"

    def cancel(self, task_id: str) -> str:
        """The task's cancel marker (expires on its own, see taskstate.marker_ttl_ms)."""
        return f"{self.prefix}cancel:{task_id}"

    def events(self, task_id: str) -> str:
        """The task's event stream: progress, then its final outcome (bounded, TTL resultTTL)."""
        return f"{self.prefix}events:{task_id}"

    def preemptions(self, task_id: str) -> str:
        """Counter of the times the task was preempted (``tiers[].maxPreemptions``; expires on its own, as the
        cancel marker does)."""
        return f"{self.prefix}preemptions:{task_id}"

    def checkpoint(self, task_id: str) -> str:
        """The task's last checkpoint, JSON (dropped with its final outcome)."""
        return f"{self.prefix}checkpoint:{task_id}"

    def parked(self, task_id: str) -> str:
        """Hash of a parent parked in ``gather``: ``stream`` (its tier stream), ``fields`` (its envelope, a JSON array
        of field names and values), ``children`` (a JSON array of the child ids it waits for)."""
        return f"{self.prefix}parked:{task_id}"

    @property
    def gathering(self) -> str:
        """Sorted set of the parked parents' task ids, scored by when they parked (ms): the lease holder's sweep
        resumes those whose children all have an outcome."""
        return f"{self.prefix}gathering"

    def tenants(self, tier: str) -> str:
        """Hash tenant -> count of its admitted entries in the tier (``tenantConcurrency``; written by workers
        only)."""
        return f"{self.prefix}tenants:{tier}"

    def admitted(self, tier: str) -> str:
        """Hash entry id -> tenant: the tier's admitted entries not yet known to be finished (written by workers
        only)."""
        return f"{self.prefix}admitted:{tier}"

    def queued(self, tier: str) -> str:
        """Sorted set of the entries a producer's tenant gate put into the tier's stream that no worker has taken
        yet, ``<tenant>\\0<entry id>`` scored by when (written by producers, taken by workers)."""
        return f"{self.prefix}queued:{tier}"

    def held(self, tier: str) -> str:
        """Sorted set (lexicographic) of the tier's held tasks, ``<tenant>\\0<seq>\\0<fields JSON>``."""
        return f"{self.prefix}held:{tier}"

    def held_seq(self, tier: str) -> str:
        """Counter giving held tasks their order."""
        return f"{self.prefix}heldseq:{tier}"

    @property
    def errors(self) -> str:
        """Hash task_id -> last handler error, kept until the task completes or is dead-lettered."""
        return f"{self.prefix}errors"

    @property
    def escalator_lease(self) -> str:
        return f"{self.prefix}lease:escalator"

    @property
    def due(self) -> str:
        """Sorted set of scheduled tasks (delays, long retries and deferrals), scored by due time in ms on Redis'
        clock; each member is the task's envelope (see tierpool.store.due)."""
        return f"{self.prefix}due"

    @property
    def throttled(self) -> str:
        """Sorted set of tasks waiting for a rate limit, scored by the time their bucket let them start."""
        return f"{self.prefix}throttled"

    def rate_bucket(self, name: str) -> str:
        """GCRA state of rate limit ``name``: a hash {tat, tokens_tat} (theoretical arrival times, ms)."""
        return f"{self.prefix}ratelimit:{name}"

    def reservation(self, task_id: str) -> str:
        """The paid rate-limit reservation of a throttled task: its reserved start (ms), written only by the THROTTLE
        script when it throttles the task and taken (deleted) by THROTTLE when the task comes back to run on it; it
        expires on its own. A ``paid`` field with no such reservation is not paid (a plain XADD can write one)."""
        return f"{self.prefix}reservation:{task_id}"

    @property
    def stranded(self) -> str:
        """Sorted set of scheduled tasks naming a tier this pool's workers did not have when they came due (a
        rolling spec change), scored by their next try in ms; the same members as ``due``."""
        return f"{self.prefix}stranded"

    @property
    def where(self) -> str:
        """Hash task_id -> where the task is now (``stream:<tier>:<entry id>``, ``due:<ms>``, ``throttled:<ms>``,
        ``stranded:<ms>``, ``held:<tier>:<tenant>\\0<seq>``), written by every script that moves a task and dropped
        with its final outcome (see tierpool/scripts/helpers/where.lua)."""
        return f"{self.prefix}where"

    @property
    def reentered(self) -> str:
        """Hash tier -> count of tasks the mover put back into that tier's stream after a throttle or a long retry
        (not new work: the scaler takes them out of its arrival and delivery rates)."""
        return f"{self.prefix}reentered"


def adopting(keys: PoolKeys, tier: str) -> str:
    """``tier`` when it adopts a stream (``tiers[].stream``), else ``""``: the ARGV by which a script that moves an
    entry knows to complete its fields first (helpers/adopted.lua's adopted_entry)."""
    return tier if any(name == tier for name, _ in keys.adopted) else ""
