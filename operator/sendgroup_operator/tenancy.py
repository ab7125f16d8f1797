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
* Redis credentials per tenant: :func:`tenant_acl_rules` gives the ``ACL SETUSER`` rules of the
  Redis user whose URL a namespace's copy of the default Redis Secret holds: its own keys only,
  and only the commands its pods send (docs/security.md, "Redis credentials per tenant").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, Literal

from sendgroup_contract import keys as contract_keys
from sendgroup_contract.keys import QueueKeys
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


#: A Kubernetes namespace name (RFC 1123 label): never a dot, a slash or a glob character.
_NAMESPACE_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

#: The commands a tenant's Redis user may run, each for a reason; everything else (``-@all``
#: first) is refused with NOPERM. Keys are checked separately (:func:`tenant_acl_rules`), also
#: for every command a script calls (Redis 7 checks each ``redis.call`` as if sent).
TENANT_ACL_COMMANDS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    # redis-py's health check and the worker's /readyz. AUTH needs no rule. Not CLIENT SETINFO
    # (redis-py names its library on each connection and ignores a refusal; Redis 7.0 does
    # not know the subcommand, so SETUSER would refuse the rule)
    ("connection", ("ping",)),
    # every queue, rate-limit, backpressure and provider step is a Lua script run by its SHA
    # (loaded once); no SCRIPT FLUSH/KILL, no FUNCTION
    ("scripting", ("evalsha", "eval", "script|load")),
    # the worker's own calls: wait for work (BLMOVE on the notify list), the clock, the outcome
    # stream, the suppression set, the failed index, WAIT (WORKER_REDIS_WAIT_REPLICAS)
    ("worker", ("blpop", "blmove", "time", "xadd", "sismember", "wait")),
    # what the scripts call (queue core, GCRA, backpressure, provider permit/pushback) and
    # what the dump, restore and purge Jobs call directly
    (
        "keys",
        (
            "get", "set", "exists", "del", "unlink", "rename", "pexpire", "pttl",
            "lpop", "lpush", "rpush", "llen", "lindex", "lrange", "ltrim",
            "hget", "hmget", "hset", "hsetnx", "hdel", "hexists", "hgetall", "hincrby",
            "hlen", "hkeys", "hscan",
            "zadd", "zcard", "zrange", "zrangebyscore", "zrevrange", "zrem", "zscore",
            "zremrangebyrank", "zremrangebyscore",
        ),
    ),
)  # fmt: skip


def _glob_literal(text: str) -> str:
    """``text`` with Redis glob characters escaped, so a pattern matches it literally."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def tenant_acl_rules(
    namespace: str, key_prefix: str = "", cluster_providers: Sequence[str] = ()
) -> list[str]:
    """``ACL SETUSER <user>`` rules for namespace ``namespace``'s Redis user (the one its copy
    of ``defaultRedisSecretRef`` names), password not included: append ``on`` and
    ``>password`` (or ``#<sha256>``) after them. Starts with ``reset`` (no key, no channel, no
    command, off), then:

    * keys, with the producers' ``key_prefix``: its queues' keys (``<p>queues:<ns>.*`` and the
      hash-tagged ``<p>queues:{<ns>.*``; the queue-name policy makes every queue of the
      namespace start so, and a namespace never holds a dot), its outcome stream and
      suppression set (exact names), and its SendProviders' pacing state
      (``sendgroups:provider:{sp/<ns>/*``, no prefix: provider keys have none; a namespace
      never holds a slash);
    * each of ``cluster_providers`` (ClusterSendProvider names its groups use) gives
      read-write access to that provider's shared state (``sendgroups:provider:{csp/<name>}:*``):
      the worker's permit script writes there, so a tenant can disturb that shared budget
      (known limit: docs/security.md);
    * no pub/sub channel; only :data:`TENANT_ACL_COMMANDS`.

    Raises ValueError for a name that is not a namespace."""
    if not _NAMESPACE_RE.fullmatch(namespace):
        raise ValueError(f"{namespace!r} is not a Kubernetes namespace name")
    # key names spelled where every key is made (sendgroup_contract.keys), cut where the part
    # a pattern leaves open begins
    plain = QueueKeys(f"{namespace}.q", key_prefix).base.removesuffix("q")
    tagged = QueueKeys(f"{{{namespace}.q}}", key_prefix).base.removesuffix("q}")
    provider = contract_keys.provider_key(f"sp/{namespace}/p", "").removesuffix("p}:")
    keys = [
        f"~{_glob_literal(plain)}*",
        f"~{_glob_literal(tagged)}*",
        f"~{_glob_literal(contract_keys.outcome_stream_key(namespace, key_prefix))}",
        f"~{_glob_literal(contract_keys.suppression_set_key(namespace, key_prefix))}",
        f"~{_glob_literal(provider)}*",
    ]
    for name in cluster_providers:
        shared = contract_keys.provider_key(f"csp/{name}", "")
        keys.append(f"~{_glob_literal(shared)}*")
    commands = [f"+{c}" for _, group in TENANT_ACL_COMMANDS for c in group]
    return ["reset", "resetchannels", *keys, "-@all", *commands]


__all__ = [
    "REASON_QUEUE_NOT_IN_NAMESPACE",
    "REASON_REDIS_NOT_ALLOWED",
    "TENANT_ACL_COMMANDS",
    "QueueNamePolicy",
    "default_queue",
    "policy_applies",
    "queue_in_namespace",
    "queue_refusal",
    "redis_refusal",
    "tenant_acl_rules",
]
