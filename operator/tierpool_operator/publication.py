"""The pool's spec in its Redis, for producers that name only the pool (``tierpool submit --pool NS/NAME``).

Workers publish it when they start, but a new pool at ``replicas.min: 0`` has no worker, and nothing queued ever
starts one: the operator publishes it too, from the AgentPool, once per distinct spec and again every
``children_check`` (a Redis that lost the key, say, restarted without persistence).
"""

from __future__ import annotations

import logging

from redis.exceptions import NoPermissionError, RedisError

from tierpool.model.keys import PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.store.registry import spec_json, spec_key
from tierpool_operator.memo import PoolMemo

log = logging.getLogger("tierpool.operator")


def publication_due(published: tuple[str, float] | None, text: str, now: float, every: float) -> bool:
    """Whether to write the spec now: never written through this client, changed, or written ``every`` ago. Pure."""
    return published is None or published[0] != text or now - published[1] >= every


async def publish_spec_for_producers(pool: AgentPool, memo: PoolMemo, now: float) -> None:
    """SET the pool's ``…:spec`` key when :func:`publication_due`. A refusal (an operator ACL without that key) is
    logged and tried again only after ``children_check``, not every pass; any other Redis error is retried on the
    next pass."""
    text = spec_json(pool.spec)
    if memo.redis is None or not publication_due(memo.published_spec, text, now, memo.context.config.children_check):
        return
    try:
        await memo.redis.set(spec_key(PoolKeys.parse(pool.ref)), text)
    except NoPermissionError as error:
        log.warning("%s: cannot publish the spec for producers (%s); see `tierpool acl operator`", pool.ref, error)
    except RedisError as error:
        log.info("%s: publishing the pool's spec failed, next pass tries again: %s", pool.ref, error)
        return
    memo.published_spec = (text, now)
