"""The AgentPool spec model: the one source of truth for the pool file, the worker and the CRD.

Field names are camelCase in YAML (``escalateAfter``) and snake_case in Python (``escalate_after``).
Structural rules (types, bounds, patterns) live on the fields. Cross-field rules live in
:func:`spec_rule_violations`, a pure function, and are mirrored as CEL rules in the generated CRD.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from tierpool._version import __version__
from tierpool.model.adoption import duplicate_stream_violations
from tierpool.model.base import Model, SecretKeyRef
from tierpool.model.durations import Duration
from tierpool.model.redis_spec import (
    SENTINEL_ADDRESS,
    OperatorRedisAuth,
    RedisMode,
    RedisSpec,
    RedisTLS,
    SentinelSpec,
    redis_defaults_left_out,
    redis_mode_violations,
    redis_tls_violations,
    tls_fields_without_tls,
)

__all__ = [  # the redis section and the base model moved to their own modules; importers keep this path
    "SENTINEL_ADDRESS",
    "Model",
    "OperatorRedisAuth",
    "RedisMode",
    "RedisSpec",
    "RedisTLS",
    "SecretKeyRef",
    "SentinelSpec",
    "redis_defaults_left_out",
    "tls_fields_without_tls",
]

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
HANDLER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
GROUP_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
STREAM_KEY = r"^[^\s]+$"
MAX_STREAM_KEY = 150
"""So that a task id derived from the stream and an entry id (tierpool.protocol.adopted) stays within 200."""
MAX_TIERS = 16

PreservedObject = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]
"""A free-form Kubernetes object (an EnvVarSource, say) that the API server keeps as written."""

Quantity = Annotated[
    str,
    BeforeValidator(lambda v: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v),
    WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}),
]
"""A Kubernetes resource quantity such as ``500m``, ``1Gi`` or ``2``."""


DEFAULT_METRICS_PORT = 8095
"""Not 9100 (node_exporter's) nor any port of the 9100-9999 range Prometheus allocates to exporters, nor 8080/8081
(the operator's) or 8000 (a development server's): a worker on a host running those must still start."""


class Tier(Model):
    """One priority tier; the list in ``spec.tiers`` runs from the highest priority to the lowest."""

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    """Tier name, DNS-safe (it appears in Redis keys and metric labels), unique within the pool."""
    weight: Annotated[int, Field(gt=0, le=1_000_000)]
    """Relative share of worker capacity when every tier has work. Must be > 0."""
    sla: Duration | None = None
    """Target queue wait for this tier (e.g. ``30s``). Drives the ``sla`` scaling policy and the SLA-miss metric."""
    escalate_after: Duration | None = None
    """Undelivered tasks older than this move up one tier. Not allowed on the top tier."""
    escalate_max_target_backlog: Annotated[int, Field(ge=0)] | None = None
    """Escalate only while the next tier up has fewer than this many tasks waiting (0: only when it is empty).
    Keeps aged work from flooding a busy top tier; weights still guarantee this tier its share. Unset: no limit."""
    max_concurrency: Annotated[int, Field(gt=0)] | None = None
    """Optional cap on this tier's tasks running at once in one worker; weights alone do not cap concurrency."""
    reserved_slots: Annotated[int, Field(ge=0, le=10_000)] = 0
    """Slots of every worker kept free for this tier or higher ones: a lower tier starts a task only if as many
    slots as the tiers above it reserve stay free. They idle while those tiers have nothing waiting. Not allowed
    on the lowest tier; all reservations together must leave the lowest tier at least one slot."""
    tenant_concurrency: Annotated[int, Field(gt=0, le=100_000)] | None = None
    """Fairness inside the tier: no tenant (the ``tenant`` of a submit) holds more than this many of the pool's
    admitted tasks of this tier at once; the rest wait, per tenant in order, outside the stream. Unset: no limit."""
    preemptible: bool = False
    """A running task of this tier may be stopped for a waiting task of a higher tier when every slot of its worker
    is held: its handler gets ``CancelledError`` at its current ``await`` (``async def`` handlers only), its entry
    goes back to the pool without counting a delivery, and it resumes later from its last checkpoint. Not allowed
    on the top tier."""
    preempt_after: Duration = 1.0
    """With ``preemptible``: how long a run must have run before it may be preempted."""
    max_preemptions: Annotated[int, Field(ge=1, le=1000)] = 3
    """With ``preemptible``: how many times one task may be preempted; after that it runs to its end."""
    stream: Annotated[str, Field(pattern=STREAM_KEY, max_length=MAX_STREAM_KEY)] | None = None
    """An existing stream key this tier adopts instead of the pool's own (``tierpool:{ns/name}:tier:<tier>``); its
    consumer group (``consumerGroup``) carries on from where it was. With ``redis.mode: cluster`` it must hash to
    the pool's slot (carry the hash tag ``{ns/name}``). See docs/how-to/adopt-streams.md."""


class RecoverySpec(Model):
    """At-least-once recovery: heartbeats, reclaiming, dead-lettering."""

    claim_idle: Duration = 60.0
    """A pending task idle this long belongs to a dead worker and is reclaimed (XAUTOCLAIM)."""
    heartbeat: Duration = 10.0
    """How often a live worker refreshes its in-flight tasks so they are not reclaimed. Must be < claimIdle."""
    max_deliveries: Annotated[int, Field(ge=1, le=1000)] = 5
    """A task delivered this many times without success goes to the dead-letter stream."""
    retry_backoff: Duration = 1.0
    """After a handler error, wait this long before the task may be redelivered (doubling on each further
    failure, up to a day; a backoff longer than claimIdle waits in the pool's due-time index)."""
    max_deferrals: Annotated[int, Field(ge=0, le=1000)] = 10
    """How many times a task may defer itself with ``tierpool.RetryAfter`` without counting a failed delivery;
    past that a RetryAfter is a failed attempt. 0 makes every RetryAfter a failed attempt."""
    sweep_interval: Duration = 2.0
    """How often the lease holder escalates stale tasks, trims history and removes dead consumers."""


class RateLimit(Model):
    """A provider rate limit shared by every worker of the pool: one bucket in Redis (GCRA, on Redis' clock)."""

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    """Limit name, unique within the pool; a handler (``tierpool.rate_limited``) or a submit (``rate_limit=``)
    names it."""
    per_minute: Annotated[int, Field(gt=0, le=10_000_000)]
    """Tasks started per minute, pool-wide. Bursts of up to one second's worth (at least one task)."""
    tokens_per_minute: Annotated[int, Field(gt=0, le=1_000_000_000)] | None = None
    """Optional second bucket: the submit's ``cost`` (default 1) drawn per task, per minute. A task costing more
    than a second's worth starts when the bucket is full and then holds the others back for its cost."""


class DispatchPolicy(StrEnum):
    """How a worker chooses the tier to read next."""

    WEIGHTED = "weighted"
    STRICT = "strict"


class EnvVar(Model):
    """A container environment variable (a subset of the Kubernetes EnvVar)."""

    name: Annotated[str, Field(min_length=1)]
    """Variable name."""
    value: str | None = None
    """Literal value."""
    value_from: PreservedObject | None = None
    """A Kubernetes EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef, ...)."""


class Resources(Model):
    """Container resource requests and limits."""

    requests: dict[str, Quantity] = {}
    """Requested resources, e.g. ``{cpu: 250m, memory: 256Mi}``."""
    limits: dict[str, Quantity] = {}
    """Resource limits."""


WORKER_REPOSITORY = "ghcr.io/tierpool/worker"
WORKER_IMAGE = f"{WORKER_REPOSITORY}:{__version__}"
"""The published worker image of this release: what a pool runs unless it names its own."""


class WorkerSpec(Model):
    """The worker processes (pods in a cluster, processes in local mode)."""

    handler: Annotated[str, Field(pattern=HANDLER_PATTERN)] = "tierpool.handlers:simulate"
    """Task handler as ``module:function``; sync functions run in a thread pool, async ones on the loop."""
    concurrency: Annotated[int, Field(ge=1, le=10_000)] = 8
    """Tasks one worker runs at once."""
    dispatch: DispatchPolicy = DispatchPolicy.WEIGHTED
    """``weighted`` (smooth weighted round-robin, work-conserving) or ``strict`` (always highest tier first)."""
    image: str = WORKER_IMAGE
    """Worker container image (the tierpool worker base, extended with your handler code)."""
    image_pull_policy: Annotated[str, Field(pattern=r"^(Always|IfNotPresent|Never)$")] = "IfNotPresent"
    """Kubernetes imagePullPolicy."""
    env: list[EnvVar] = []
    """Extra environment variables for the worker container."""
    resources: Resources = Resources()
    """Container resources."""
    termination_grace_period_seconds: Annotated[int, Field(ge=1, le=86_400)] = 60
    """How long a worker may drain in-flight tasks after SIGTERM before it is killed."""
    metrics_port: Annotated[int, Field(ge=1024, le=65_535)] = DEFAULT_METRICS_PORT
    """Port serving /metrics, /healthz and /readyz."""


class ReplicaBounds(Model):
    """Bounds on the number of workers."""

    min: Annotated[int, Field(ge=0, le=10_000)] = 1
    """Fewest workers. 0 lets an idle pool scale to zero after the cooldown."""
    max: Annotated[int, Field(ge=1, le=10_000)] = 10
    """Most workers."""
    desired: Annotated[int, Field(ge=0, le=10_000)] = 1
    """Replicas requested through the /scale subresource (by an HPA or KEDA). Followed only with
    ``scaling.policy: external``; the other policies decide for themselves and leave it alone."""


class ScalingPolicy(StrEnum):
    """How the desired replica count is chosen."""

    SLA = "sla"
    LAG = "lag"
    EXTERNAL = "external"


class ScalingSpec(Model):
    """The autoscaler's settings."""

    policy: ScalingPolicy = ScalingPolicy.SLA
    """``sla`` (default, SLA-aware), ``lag`` (KEDA-style ceil(backlog/target)) or ``external``
    (hands off: an HPA or KEDA drives the /scale subresource)."""
    interval: Duration = 5.0
    """How often the streams are observed and a decision is made."""
    target_per_replica: Annotated[int, Field(ge=1)] = 20
    """``lag`` policy: backlog one replica is expected to absorb."""
    drain_fraction: Annotated[float, Field(gt=0, le=1)] = 0.5
    """``sla`` policy: drain each tier's backlog within this fraction of its SLA."""
    task_seconds: Duration = 1.0
    """Expected run time of one task, used until completions have been observed."""
    scale_up_stabilization: Duration = 0.0
    """Scale up only to the lowest recommendation of this window (0 reacts at once)."""
    scale_down_stabilization: Duration = 60.0
    """Scale down only to the highest recommendation of this window (``sla``: not once a one-off backlog is drained)."""
    scale_down_step: Annotated[int, Field(ge=1)] = 1
    """Most replicas removed by one scale-down (``sla``: idle ones not counted once a one-off backlog is drained)."""
    scale_up_step: Annotated[int, Field(ge=1)] = 100
    """Most replicas added by one scale-up."""
    cooldown: Duration = 300.0
    """With min 0: every tier idle this long before the pool goes to zero."""


class TaskSpec(Model):
    """Per-task limits and bookkeeping."""

    result_ttl: Annotated[Duration, Field(alias="resultTTL")] = 3600.0
    """How long a task's result record is kept."""
    max_payload_bytes: Annotated[int, Field(ge=64, le=64 * 1024 * 1024)] = 262_144
    """Largest accepted JSON payload, in bytes."""
    dedupe_window: Duration = 3600.0
    """A producer-chosen task_id submitted again within this window is not enqueued twice."""
    timeout: Duration | None = None
    """Time limit of one run (unset: none). A run past it is stopped and counts as a failed attempt with the
    error ``timed out after <N>s``. A task's own ``timeout`` from submit takes precedence."""


class DeadLetterSpec(Model):
    """Retention of the dead-letter stream: one that nobody reads must not grow without bound."""

    max_length: Annotated[int, Field(ge=0, le=100_000_000)] = 100_000
    """Dead letters kept: each one written trims the oldest past about this many (``XADD … MAXLEN ~``, so a few
    more, up to one stream node, may stay), and so does the lease holder's sweep. 0: no length limit."""
    max_age: Duration = 604_800.0
    """Dead letters older than this (since they were dead-lettered, on Redis' clock) are deleted by the lease
    holder's sweep. ``0s``: no age limit."""


class PoolSpec(Model):
    """The spec of an AgentPool."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": []},  # filled by tierpool.model.crd from SPEC_RULES
    )

    tiers: Annotated[list[Tier], Field(min_length=1, max_length=MAX_TIERS)]
    """Priority tiers, highest first."""
    redis: RedisSpec = RedisSpec()
    """Redis connection. Local mode ignores it unless --redis-url is given."""
    recovery: RecoverySpec = RecoverySpec()
    """Heartbeat, reclaim and dead-letter settings."""
    worker: WorkerSpec = WorkerSpec()
    """Worker settings."""
    replicas: ReplicaBounds = ReplicaBounds()
    """Replica bounds."""
    scaling: ScalingSpec = ScalingSpec()
    """Autoscaler settings."""
    tasks: TaskSpec = TaskSpec()
    """Task limits and result retention."""
    rate_limits: Annotated[list[RateLimit], Field(max_length=64)] = []
    """Provider rate limits shared by every worker of the pool. A throttled task waits in the
    pool's due-time index, without holding a worker slot and without counting a failed delivery."""
    dead_letters: DeadLetterSpec = DeadLetterSpec()
    """Retention of the dead-letter stream (length and age)."""
    consumer_group: Annotated[str, Field(pattern=GROUP_NAME, max_length=128)] = "workers"
    """The consumer group the workers read every tier stream through: an adopted stream's existing group carries
    on from its last delivered entry (created at the stream's start when it is missing)."""

    @model_validator(mode="after")
    def _cross_field_rules(self) -> PoolSpec:
        violations = spec_rule_violations(self)
        if violations:
            detail = "; ".join(f"{path}: {message}" for path, message in violations)
            raise PydanticCustomError("tierpool_rules", detail, {"violations": violations})
        return self

    def tier(self, name: str) -> Tier:
        """The tier called ``name``; KeyError naming the known tiers otherwise."""
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise KeyError(f"unknown tier {name!r}; this pool has {', '.join(self.tier_names)}")

    @property
    def tier_names(self) -> list[str]:
        return [tier.name for tier in self.tiers]

    def rate_limit(self, name: str) -> RateLimit | None:
        """The rate limit called ``name``, or None."""
        return next((limit for limit in self.rate_limits if limit.name == name), None)

    @property
    def adopted_streams(self) -> dict[str, str]:
        """Tier -> stream key, for the tiers that adopt an existing stream."""
        return {tier.name: tier.stream for tier in self.tiers if tier.stream is not None}

    @property
    def tenant_limits(self) -> list[int | None]:
        """Each tier's ``tenantConcurrency`` (None: no limit), in tier order."""
        return [tier.tenant_concurrency for tier in self.tiers]


def spec_rule_violations(spec: PoolSpec) -> list[tuple[str, str]]:
    """Cross-field rules, as (path relative to spec, message). Pure; mirrored by CEL rules in the CRD."""
    found: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for index, tier in enumerate(spec.tiers):
        if tier.name in seen:
            found.append((f"tiers[{index}].name", f"duplicate tier name {tier.name!r} (also tiers[{seen[tier.name]}])"))
        seen.setdefault(tier.name, index)
    if spec.tiers and spec.tiers[0].escalate_after is not None:
        found.append(("tiers[0].escalateAfter", "not allowed on the top tier"))
    if spec.tiers and spec.tiers[0].preemptible:
        found.append(("tiers[0].preemptible", "not allowed on the top tier (no tier above it to preempt for)"))
    for index, tier in enumerate(spec.tiers):
        if tier.escalate_max_target_backlog is not None and tier.escalate_after is None:
            found.append((f"tiers[{index}].escalateMaxTargetBacklog", "needs escalateAfter on the same tier"))
    named: dict[str, int] = {}
    for index, limit in enumerate(spec.rate_limits):
        if limit.name in named:
            found.append(
                (
                    f"rateLimits[{index}].name",
                    f"duplicate rate limit name {limit.name!r} (also rateLimits[{named[limit.name]}])",
                )
            )
        named.setdefault(limit.name, index)
    found += _reservation_violations(spec) + duplicate_stream_violations([tier.stream for tier in spec.tiers])
    if spec.recovery.claim_idle <= spec.recovery.heartbeat:
        found.append(("recovery.claimIdle", "must be greater than recovery.heartbeat"))
    if spec.tasks.timeout is not None and spec.tasks.timeout <= 0:
        found.append(("tasks.timeout", "must be greater than 0"))
    if spec.replicas.min > spec.replicas.max:
        found.append(("replicas.min", f"must be <= replicas.max ({spec.replicas.max})"))
    return found + redis_tls_violations(spec.redis) + redis_mode_violations(spec.redis)


def sections_left_out(spec: PoolSpec) -> set[str]:
    """The spec sections added after the first release that are empty or at their defaults (``rateLimits``,
    ``deadLetters``): left out of the published spec and the pods' document like the fields of
    :func:`redis_defaults_left_out`. Pure."""
    found = set() if spec.rate_limits else {"rate_limits"}
    if spec.dead_letters == DeadLetterSpec():
        found.add("dead_letters")
    if spec.consumer_group == "workers":
        found.add("consumer_group")
    return found


TIER_FIELDS_ADDED_LATER = ("preemptible", "preempt_after", "max_preemptions", "stream")


def tier_defaults_left_out(spec: PoolSpec) -> dict[int, set[str]]:
    """Per tier index, the tier fields added after the first release that are at their defaults: left out of the
    published spec and the pods' document, like :func:`redis_defaults_left_out`. Pure."""
    default = Tier(name="t", weight=1)
    found: dict[int, set[str]] = {}
    for index, tier in enumerate(spec.tiers):
        fields = {name for name in TIER_FIELDS_ADDED_LATER if getattr(tier, name) == getattr(default, name)}
        if fields:
            found[index] = fields
    return found


def _reservation_violations(spec: PoolSpec) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    last = len(spec.tiers) - 1
    if spec.tiers[last].reserved_slots:
        found.append((f"tiers[{last}].reservedSlots", "not allowed on the lowest tier (no tier below it to keep out)"))
    reserved = sum(tier.reserved_slots for tier in spec.tiers)
    if reserved >= spec.worker.concurrency:
        found.append(
            (
                "tiers[].reservedSlots",
                f"the tiers reserve {reserved} slot(s) in all: must be less than worker.concurrency "
                f"({spec.worker.concurrency}), so the lowest tier keeps at least one slot",
            )
        )
    return found
