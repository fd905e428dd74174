"""What the scaler remembers between decisions (kept in AgentPool status, so an operator restart loses nothing)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


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
    """Arrival rates (tasks/s) of the last ``ARRIVAL_MEMORY`` passes, oldest first."""
    throttled_at: float | None = None
    """When a pass last saw tasks throttled by a pool rate limit."""
    wanted: int | None = None
    """The last pass's recommendation before the rate-limit hold (a scale-up it asked for, confirmed or not)."""

    def to_json(self) -> dict[str, Any]:
        # shallow, not dataclasses.asdict: its recursive deep copy was half of a scaling pass's CPU (6 of 11 ms)
        data = {item.name: getattr(self, item.name) for item in fields(self)}
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
            throttled_at=data.get("throttled_at"),
            wanted=data.get("wanted"),
        )
