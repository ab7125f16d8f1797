"""Connecting the dump/restore commands to Redis: URL sources, password redaction, cluster
detection and the hash-tag rule.

The URL comes from ``--redis-url`` / ``REDIS_URL``, or from a file (``--redis-url-file`` /
``REDIS_URL_FILE``, e.g. a mounted Secret key). It is never printed: :func:`redact` replaces
the password in anything we show.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeAlias, cast

import redis
import redis.cluster

from sendgroup_worker import redisclient, redisurl
from sendgroup_worker.queue.keys import QueueKeys

Client: TypeAlias = "redis.Redis[bytes] | redis.cluster.RedisCluster[bytes]"

_SOCKET_TIMEOUT: Final = 60.0


class ConfigError(Exception):
    """Missing or unusable connection settings (no URL, unreadable file, bad scheme)."""


class ClusterRuleError(Exception):
    """A queue whose keys cannot share one Redis Cluster slot (no hash tag)."""


def resolve_url(url: str | None, url_file: str | None) -> str:
    """The Redis URL: ``url`` if given, else the stripped contents of ``url_file``.

    Raises :class:`ConfigError` when neither is set, the file cannot be read, or the URL is not
    one of :mod:`sendgroup_worker.redisurl`'s forms.
    """
    if not url and url_file:
        try:
            url = Path(url_file).read_text().strip()
        except OSError as e:
            raise ConfigError(f"cannot read the Redis URL file {url_file}: {e.strerror}") from e
    if not url:
        raise ConfigError("no Redis URL: pass --redis-url, or set REDIS_URL or REDIS_URL_FILE")
    try:
        return redisurl.check(url)
    except redisurl.RedisUrlError as e:
        raise ConfigError(redisurl.redact(str(e), url)) from None


def redact(text: str, url: str) -> str:
    """``text`` with every password of ``url`` replaced by ``***``
    (:func:`sendgroup_worker.redisurl.redact`)."""
    return redisurl.redact(text, url)


def connect(url: str) -> Client:
    """A client for ``url`` (:func:`sendgroup_worker.redisclient.connect`: standalone, Redis
    Cluster, detected or named, or the Sentinel-managed primary), 60 s socket timeouts.

    Raises ``redis.RedisError`` when a ``redis://`` server cannot be probed.
    """
    return redisclient.connect(url, socket_timeout=_SOCKET_TIMEOUT)


def is_cluster(client: Client) -> bool:
    """True for a Redis Cluster client."""
    return redisclient.is_cluster(client)


def check_slot_rule(client: Client, keys: QueueKeys) -> None:
    """Raise :class:`ClusterRuleError` when ``client`` is a cluster and the queue name has no
    hash tag: its keys would hash to different slots and every multi-key script would fail
    with CROSSSLOT (queue-protocol.md, "Redis Cluster")."""
    if is_cluster(client) and keys.slot_tag is None:
        raise ClusterRuleError(
            f"queue {keys.queue!r} has no hash tag, so on Redis Cluster its keys "
            f"({keys.ready}, {keys.delayed}, ...) land in different slots; name the queue with "
            f"a hash tag, e.g. '{{{keys.queue}}}', so all its keys share one slot"
        )


def redis_version(client: Client) -> str:
    """``redis_version`` from ``INFO server`` (of one node on a cluster), ``unknown`` when the
    server refuses INFO: a tenant's ACL user has no INFO (``tenancy.tenant_acl_rules``: it
    tells about the whole server), and the version is only recorded in the segment header and
    the summary."""
    try:
        if isinstance(client, redis.cluster.RedisCluster):
            info = client.info("server", target_nodes=client.get_default_node())
        else:
            info = client.info("server")
    except redis.exceptions.NoPermissionError:
        return "unknown"
    return str(info.get("redis_version", "unknown"))


def script(client: Client, lua: str) -> Callable[..., Any]:
    """A callable ``(keys=[...], args=[...])`` that runs ``lua`` by EVALSHA, falling back to
    EVAL on the keys' server on NOSCRIPT (:class:`sendgroup_worker.redisclient.Script`; works
    on Redis Cluster right after a failover)."""
    return redisclient.Script(cast("redis.Redis[bytes]", client), lua)
