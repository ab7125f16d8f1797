"""The Laravel-layout Redis queue core.

* :mod:`.keys`      key names (prefix, hash tags): :class:`QueueKeys`
* :mod:`.protocol`  Lua scripts, argument building, reply parsing, result dataclasses
* :mod:`.client`    :class:`Queue` (sync) and :class:`AsyncQueue` (asyncio) transports
"""

from sendgroup_worker.queue.client import AsyncQueue, Queue
from sendgroup_worker.queue.keys import QueueKeys
from sendgroup_worker.queue.protocol import (
    Ack,
    FailedJob,
    FailedPage,
    QueueSettings,
    QueueStats,
    Reserved,
    ReserveResult,
    RetryResult,
)

__all__ = [
    "Ack",
    "AsyncQueue",
    "FailedJob",
    "FailedPage",
    "Queue",
    "QueueKeys",
    "QueueSettings",
    "QueueStats",
    "ReserveResult",
    "Reserved",
    "RetryResult",
]
