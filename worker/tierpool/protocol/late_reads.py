"""Which reads must have their entries' ownership confirmed before they start. Pure, no I/O.

A read (TAKE, a blocking XREADGROUP, a reclaim) makes its entries pending on this worker's consumer when the
server serves it. If the process then stalls before it starts them (SIGSTOP, a long GC pause, a VM stall),
another worker may reclaim them once they have been idle for ``claimIdle``, run them and write their final
record; the stalled worker, when it wakes, would start user code for a task that is already finished. Its outcome
would be refused, but the run itself must not happen. So a read that reached its launch late has its entries'
ownership confirmed first (one round trip); a read that returned promptly starts them at once.

Whether a read is late is measured on this process's monotonic clock, from just before the read was sent to just
before its entries start; every entry of one read shares that time, so the decision is per read.
"""

from __future__ import annotations


def confirm_threshold(claim_idle: float, heartbeat: float) -> float:
    """Seconds after which a read's entries are confirmed before they start: ``(claimIdle - heartbeat) / 2``.

    Small enough that no other worker can have reclaimed an entry the check lets through unchecked: an entry's
    idle time (what reclaim compares with ``claimIdle``, on the server's clock) starts when the server delivers
    it, after the read was sent, so it is never more than the time measured here. An entry started unchecked at
    most T after its read was sent is first refreshed by this worker's heartbeat loop within one ``heartbeat``
    interval, so its idle time stays under T + heartbeat; with T = (claimIdle - heartbeat) / 2 that is still
    half of ``claimIdle - heartbeat`` short of ``claimIdle``, room for the heartbeat's own round trip, event-loop
    delays and clock-rate differences. It can then be taken over neither before it starts nor before its first
    heartbeat.

    Large enough that normal reads never pay for the check: a TAKE returns within a round trip, and a blocking
    read waits at most its block, which the read loop keeps under the reclaim interval (at most claimIdle / 4,
    see tierpool.protocol.policy.reclaim_interval) and under ``block_ms`` (500 ms by default). With the default
    recovery settings (claimIdle 60 s, heartbeat 10 s) T is 25 s, so only a process that stalled for many seconds
    confirms. A heartbeat close to claimIdle makes T small, and a long blocking read may then pay one round trip:
    harmless, as the check only confirms what is true.
    """
    return max((claim_idle - heartbeat) / 2, 0.0)


def must_confirm(sent_at: float, now: float, threshold: float) -> bool:
    """Whether a read sent at ``sent_at`` whose entries are about to start at ``now`` (the same monotonic clock)
    returned too late to start them unchecked. A clock that went backwards counts as prompt."""
    return now - sent_at > threshold
