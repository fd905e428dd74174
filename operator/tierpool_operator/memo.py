"""What the operator keeps between handler calls, typed: one ``OperatorContext`` for the whole process, and a
``PoolMemo`` for each object kopf watches.

kopf is given one memo object (``kopf.spawn_tasks(memo=...)``). The startup handler gets that object itself; every
watched object (each AgentPool, and each worker Deployment for its event handler) gets ``copy.copy`` of it when
kopf first sees the object, kept until the object is deleted. ``PoolMemo.__copy__`` shares the context and starts
an empty per-pool memory: what the operator sets up once (the API client at startup, the gate before kopf starts)
is seen by every pool, whenever its memo was copied, and what one pool's scaler remembers never leaks into another's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tierpool.model.resource import AgentPool
from tierpool.model.spec import RedisSpec
from tierpool.scaling.decision import History
from tierpool.store.connection import AsyncRedis
from tierpool_operator.config import OperatorConfig
from tierpool_operator.deployments import DeploymentCache
from tierpool_operator.gate import Gate
from tierpool_operator.kube import Kube
from tierpool_operator.metrics import OperatorMetrics


class NotStarted(RuntimeError):
    """An operator-wide object was used before the startup handler created it."""


class OperatorContext:
    """Operator-wide state: one per process, shared by every object's memo. The API client and the metrics are
    created by the startup handler (unless given here, as tests do)."""

    def __init__(
        self,
        config: OperatorConfig,
        *,
        kube: Kube | None = None,
        metrics: OperatorMetrics | None = None,
        deployments: DeploymentCache | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.config = config
        """The operator's settings, read once at start-up."""
        self.deployments = DeploymentCache() if deployments is None else deployments
        """The worker Deployments as the watch and the scaler's own reads and writes last showed them."""
        self.gate: Gate | None = gate
        """Counts the handler runs in flight and stops admitting them on SIGTERM (None: ungated, as in tests)."""
        self._kube = kube
        self._metrics = metrics

    @property
    def kube(self) -> Kube:
        """Every Kubernetes API call the operator makes."""
        if self._kube is None:
            raise NotStarted("no Kubernetes client yet: the startup handler creates it")
        return self._kube

    @kube.setter
    def kube(self, kube: Kube) -> None:
        self._kube = kube

    @property
    def has_kube(self) -> bool:
        return self._kube is not None

    @property
    def metrics(self) -> OperatorMetrics:
        """The operator's Prometheus metrics."""
        if self._metrics is None:
            raise NotStarted("no metrics yet: the startup handler creates them")
        return self._metrics

    @metrics.setter
    def metrics(self, metrics: OperatorMetrics) -> None:
        self._metrics = metrics

    @property
    def has_metrics(self) -> bool:
        return self._metrics is not None


@dataclass(eq=False)
class PoolMemo:
    """kopf's ``memo`` for one watched object: the shared context and what this pool's handlers and scaler daemon
    remember between calls. Lost on a restart or a pause; what must survive those is in the pool's status.
    (A worker Deployment's memo uses only the context.)"""

    context: OperatorContext
    """Shared by every object's memo."""

    parsed: tuple[object, AgentPool | None] | None = None
    """(generation, the pool parsed from that generation's spec; None: rejected)."""
    draining: list[str] | None = None
    """Removed tiers whose streams still drain, as last written to status (None: not known here, status says)."""

    last_pass: float | None = None
    """When the scaler's last pass started (None: none since the daemon started; status has the saved one)."""
    first_tick: float | None = None
    """When the daemon first found no pass time at all: the start of ``max_defer`` for its first pass."""
    pass_failures: int = 0
    """Scaling passes failed in a row."""
    history: History | None = None
    """The scaler's memory after its last decision (None: not decided yet, read it from status)."""

    last_converge: float = 0.0
    """When all of the pool's children were last ensured (read fresh, re-applied where they drifted)."""
    in_step: tuple[object, object, list[str]] | None = None
    """(Deployment resourceVersion, pool generation, tiers) last found to match: not compared again."""
    forbidden_until: float | None = None
    """RBAC refused a child: no pass tries again before this (None: not refused; the next refusal posts an Event)."""

    redis: AsyncRedis | None = None
    """The client for the pool's Redis (None: built on the next observation)."""
    redis_spec: RedisSpec | None = None
    """``spec.redis`` at the last pass: a change drops the client and ends the back-off."""
    redis_backoff: tuple[int, float] | None = None
    """(failures in a row, retry time) as this scaler last wrote them (None: read them from status)."""
    published_spec: tuple[str, float] | None = None
    """(the spec as last published to the pool's Redis for producers, when; None: not yet through this client)."""

    status_written: tuple[dict[str, Any], float] | None = None
    """The status the scaler's report last wrote, and when (None: judge against kopf's copy)."""
    report_due: bool = False
    """Something else wrote status since: the next report is written whatever kopf's copy shows."""
    ready_written: dict[str, Any] | None = None
    """The Ready condition last written by anyone in this operator (None: none since the daemon started)."""

    deletion_cost_refused: bool = False
    """RBAC refused the pods permission and the Event about it was posted (until a scale-in marks pods again)."""
    unmatched_consumers_logged: bool = False
    """Busy consumers that match no worker pod were logged (once per pool)."""

    def __copy__(self) -> PoolMemo:
        """What kopf gives a newly seen object: the same context, a memory of its own."""
        return PoolMemo(self.context)
