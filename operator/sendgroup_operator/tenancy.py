"""Tenancy rules the operator enforces before it acts for a SendGroup (docs/security.md,
"Tenancy model"). Pure: no Kubernetes, no Redis.

* Allowed Redis hosts: a tenant's ``redis.url`` / ``redis.secretRef`` may only name the
  operator's default Redis or a host the platform team listed (``allowedRedisHosts``). The
  check runs before any connection, and its message is the same whatever listens there, so the
  operator is no port scanner (the ``QueueReachable`` message told a closed port, a non-Redis
  port and a Redis apart).
* Queue-name policy: when the operator serves several namespaces (or on request), every queue
  name must start with its namespace and a dot (``team-a.newsletter``, ``{team-a.x}``).
  Namespaces are DNS labels, which never hold a dot, so no namespace can name, claim first or
  drain another's queue; the default queue of group ``g`` in namespace ``ns`` is then
  ``ns.mail-g``. Producers still choose the rest of the name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

from sendgroup_operator import conditions, models
from sendgroup_worker import redisurl

QueueNamePolicy = Literal["auto", "namespace", "off"]

#: Condition reasons (Ready=False / QueueReachable=False).
REASON_REDIS_NOT_ALLOWED: Final = conditions.REASON_REDIS_NOT_ALLOWED
REASON_QUEUE_NOT_IN_NAMESPACE: Final = conditions.REASON_QUEUE_NAME_NOT_ALLOWED


def _nodes(url: str) -> tuple[tuple[str, int], ...] | None:
    """The (host, port) pairs a URL names (a unix socket as ``("unix:<path>", 0)``)."""
    try:
        target = redisurl.parse(url)
    except redisurl.RedisUrlError:
        return None
    if target.socket is not None:
        return ((f"unix:{target.socket}", 0),)
    return tuple((host.lower(), port) for host, port in target.nodes)


def _allowed(node: tuple[str, int], allowed_hosts: Sequence[str]) -> bool:
    host, port = node
    for entry in allowed_hosts:
        name, _, entry_port = entry.strip().lower().rpartition(":")
        if not name or not entry_port.isdigit():
            name, entry_port = entry.strip().lower(), ""
        if name == host and (not entry_port or int(entry_port) == port):
            return True
    return False


def redis_refusal(url: str, default_url: str, allowed_hosts: Sequence[str]) -> str | None:
    """None when ``url`` may be used, else the message for the group's condition (the same
    for every refused URL: it says nothing about what listens there). ``allowed_hosts``:
    ``host`` (any port) or ``host:port`` entries; the default Redis (every node of it) is
    always allowed; a cluster or Sentinel URL needs every node allowed."""
    nodes = _nodes(url)
    default = set(_nodes(default_url) or ())
    if nodes and all(n in default or _allowed(n, allowed_hosts) for n in nodes):
        return None
    return (
        "this Redis is not one the operator may use for tenants: use the default Redis "
        "(no spec.redis) or ask the platform team to add the host to allowedRedisHosts; "
        "nothing was contacted"
    )


def policy_applies(policy: QueueNamePolicy, watched: Sequence[str]) -> bool:
    """Whether the queue-name policy is on: ``namespace`` always, ``off`` never, ``auto``
    when the operator watches all namespaces (``*``) or more than one."""
    if policy == "namespace":
        return True
    if policy == "off":
        return False
    return "*" in watched or len(set(watched)) > 1


def queue_in_namespace(queue: str, namespace: str) -> bool:
    """True when ``queue`` (hash-tag braces ignored) starts with ``<namespace>.``."""
    bare = queue.lstrip("{")
    return bare.startswith(f"{namespace}.")


def queue_refusal(queue: str, namespace: str) -> str | None:
    """None when ``queue`` carries ``namespace``, else the condition message."""
    if queue_in_namespace(queue, namespace):
        return None
    return (
        f"queue {queue!r} does not start with this namespace ({namespace}.): this operator "
        f"serves several namespaces, so each namespace's queues carry its name, e.g. "
        f"'{namespace}.{queue.strip('{}')}'"
    )


def default_queue(namespace: str, name: str, policy_on: bool) -> str:
    """The default queue of group ``name``: ``mail-<name>``, or ``<namespace>.mail-<name>``
    under the queue-name policy (long names shortened as ``SendGroupSpec.queue_name``)."""
    queue = models.SendGroupSpec.model_construct(queue=None).queue_name(name)
    if not policy_on:
        return queue
    prefixed = f"{namespace}.{queue}"
    return prefixed if len(prefixed) <= 200 else f"{namespace}.{queue[: 199 - len(namespace)]}"


__all__ = [
    "REASON_QUEUE_NOT_IN_NAMESPACE",
    "REASON_REDIS_NOT_ALLOWED",
    "QueueNamePolicy",
    "default_queue",
    "policy_applies",
    "queue_in_namespace",
    "queue_refusal",
    "redis_refusal",
]
