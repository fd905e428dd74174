"""Operator metrics: reconciles and errors, replicas and dead letters per pool, per-tier backlog and ages, scaling
decisions."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        pool = ("namespace", "pool")
        tier = (*pool, "tier")
        self.reconciles = Counter(
            "tierpool_operator_reconciles", "Reconciles by result.", (*pool, "result"), registry=registry
        )
        self.errors = Counter("tierpool_operator_errors", "Errors by kind.", (*pool, "kind"), registry=registry)
        self.desired = Gauge("tierpool_pool_desired_replicas", "The scaler's decision.", pool, registry=registry)
        self.replicas = Gauge("tierpool_pool_replicas", "Current worker replicas.", pool, registry=registry)
        self.ready = Gauge("tierpool_pool_ready_replicas", "Ready worker replicas.", pool, registry=registry)
        self.backlog = Gauge("tierpool_pool_backlog", "Waiting (undelivered) tasks.", tier, registry=registry)
        self.pending = Gauge("tierpool_pool_pending", "Delivered, unacknowledged tasks.", tier, registry=registry)
        self.oldest = Gauge("tierpool_pool_oldest_age_seconds", "Oldest waiting task.", tier, registry=registry)
        self.oldest_pending = Gauge(
            "tierpool_pool_oldest_pending_age_seconds",
            "Age of the oldest delivered, unacknowledged task (since it entered its tier).",
            tier,
            registry=registry,
        )
        self.dead_letters = Gauge(
            "tierpool_pool_dead_letters", "Entries in the dead-letter stream.", pool, registry=registry
        )
        self.sla = Gauge("tierpool_pool_sla_seconds", "Tier SLA (absent: none).", tier, registry=registry)
        self.decisions = Counter(
            "tierpool_operator_scaling_decisions",
            "Scaling decisions by direction.",
            (*pool, "direction"),
            registry=registry,
        )
