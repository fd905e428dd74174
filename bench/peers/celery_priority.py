"""The Celery app both peer benches run (bench/peers/refill_celery.py, fanout_celery.py): the Redis broker with
priorities as Celery's docs set them up. ``priority_steps`` 0-9 (one list per step) and the ``priority`` queue order,
so BRPOP always names the step-0 list first; for the Redis transport 0 is the highest priority.
``worker_prefetch_multiplier=1`` and ``task_acks_late`` keep a worker from holding more than one task a slot."""

from __future__ import annotations

from typing import Any

from celery import Celery

LOWEST, HIGHEST = 9, 0


def priority_app(name: str, broker: str, **conf: Any) -> Celery:
    """A Celery app on ``broker`` with the priority settings above, and ``conf`` on top."""
    app = Celery(name, broker=broker, backend=conf.pop("backend", None))
    app.conf.update(
        broker_transport_options={"priority_steps": list(range(10)), "queue_order_strategy": "priority"},
        broker_connection_retry_on_startup=True,
        worker_prefetch_multiplier=1,
        task_acks_late=True,
        worker_hijack_root_logger=False,
        **conf,
    )
    return app
