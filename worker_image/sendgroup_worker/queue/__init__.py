"""The Laravel-layout Redis queue core.

* :mod:`sendgroup_contract.keys` key names (prefix, hash tags): :class:`QueueKeys`
* :mod:`.protocol`  Lua scripts, argument building, reply parsing, result dataclasses
* :mod:`.client`    :class:`Queue` (sync) and :class:`AsyncQueue` (asyncio) transports

The names below are loaded on first use (PEP 562), so importing a submodule such as
:mod:`.protocol` does not import redis: only :mod:`.client` does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sendgroup_contract.keys import QueueKeys
    from sendgroup_contract.measure import QueueMeasure
    from sendgroup_worker.queue.client import AsyncQueue, Queue
    from sendgroup_worker.queue.protocol import (
        Ack,
        FailedJob,
        FailedPage,
        QueueSettings,
        Reserved,
        ReserveResult,
        RetryResult,
    )

#: Public name -> module that defines it.
_HOMES = {
    "Ack": "sendgroup_worker.queue.protocol",
    "AsyncQueue": "sendgroup_worker.queue.client",
    "FailedJob": "sendgroup_worker.queue.protocol",
    "FailedPage": "sendgroup_worker.queue.protocol",
    "Queue": "sendgroup_worker.queue.client",
    "QueueKeys": "sendgroup_contract.keys",
    "QueueMeasure": "sendgroup_contract.measure",
    "QueueSettings": "sendgroup_worker.queue.protocol",
    "ReserveResult": "sendgroup_worker.queue.protocol",
    "Reserved": "sendgroup_worker.queue.protocol",
    "RetryResult": "sendgroup_worker.queue.protocol",
}

__all__ = [
    "Ack",
    "AsyncQueue",
    "FailedJob",
    "FailedPage",
    "Queue",
    "QueueKeys",
    "QueueMeasure",
    "QueueSettings",
    "ReserveResult",
    "Reserved",
    "RetryResult",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
