"""The operator's Redis adapter: measure a queue in one round trip, purge its keys.

Key names come only from ``sendgroup_worker.queue.keys.QueueKeys``. The measurement is one
Lua script (atomic, one round trip, on any deployment: its keys share the queue's slot): LLEN
ready, ZCARD delayed/reserved/failed, HMGET stats delivered/failed, LINDEX ready 0 (the oldest
job's ``pushedAt``, else ``createdAt``), EXISTS of the dump's staging keys, of the purge marker,
of the dump/restore lock and restore progress, of the pause marker, the workers' backpressure
deadline (HGET ``backpressure`` ``until``) and TIME. "Empty" and "unchanged" always mean ready +
delayed + reserved.

Errors never carry the URL (it may hold a password from a Secret): :class:`QueueUnavailable`
messages name the exception type and the host only.
"""

from __future__ import annotations

import json
from typing import Any, Final, cast

from sendgroup_operator.plan import QueueMeasure
from sendgroup_worker.queue.keys import QueueKeys
from sendgroup_worker.redisclient import REDIS_ERRORS, AsyncClient, connect_async, is_cluster
from sendgroup_worker.redisurl import RedisUrlError, describe

SOCKET_TIMEOUT: Final = 3.0


class QueueUnavailable(Exception):
    """Redis could not be reached or answered with an error; the message is safe to show."""


def safe_host(url: str) -> str:
    """The hosts of a Redis URL (``host:port``, ``cluster h1:p1,h2:p2``, ``sentinel master
    'm' via s1:p1``), without user or password."""
    return describe(url)


def _pushed_at(payload: bytes | str | None) -> float | None:
    if payload is None:
        return None
    try:
        data: Any = json.loads(payload)
        if not isinstance(data, dict):
            return None
        value = data.get("pushedAt", data.get("createdAt"))  # Horizon's, else Laravel 12's
        return float(value) if value is not None else None
    except (ValueError, TypeError):
        return None


def _suspended(until_ms: Any, server_time: Any) -> float:
    """Seconds the workers' backpressure suspension still lasts (hash ``backpressure``, field
    ``until`` in unix ms, written by the worker), against Redis' own clock (TIME)."""
    try:
        now_ms = int(server_time[0]) * 1000 + int(server_time[1]) // 1000
        return max(0.0, (int(until_ms or 0) - now_ms) / 1000)
    except (TypeError, ValueError, IndexError):
        return 0.0


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


#: The measurement, atomic in one script. KEYS: ready, delayed, reserved, failed, stats, purge
#: marker, lock, restore progress, backpressure, pause marker, then the dump's staging keys
#: (KEYS[11..]). Reply: LLEN ready, ZCARD delayed/reserved/failed, HMGET stats
#: delivered/failed, LINDEX ready 0, EXISTS staging, EXISTS marker, EXISTS lock+restored, HGET
#: backpressure until, EXISTS pause marker, TIME.
_MEASURE_LUA: Final = """
local staging = 0
for i = 11, #KEYS do staging = staging + redis.call('EXISTS', KEYS[i]) end
return {
  redis.call('LLEN', KEYS[1]),
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]),
  redis.call('HMGET', KEYS[5], 'delivered', 'failed'),
  redis.call('LINDEX', KEYS[1], 0),
  staging,
  redis.call('EXISTS', KEYS[6]),
  redis.call('EXISTS', KEYS[7]) + redis.call('EXISTS', KEYS[8]),
  redis.call('HGET', KEYS[9], 'until'),
  redis.call('EXISTS', KEYS[10]),
  redis.call('TIME'),
}
"""


class RedisQueues:
    """One connection pool per Redis URL, shared by all groups using it. ``prefix``: the
    producers' client-side key prefix (``laravel_database_``), as in ``QueueKeys``."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self._clients: dict[str, AsyncClient] = {}

    async def client(self, url: str) -> AsyncClient:
        """The cached client for ``url`` (3 s socket timeouts, no retries: the reaper is the
        retry loop); standalone, Redis Cluster or Sentinel (:mod:`sendgroup_worker.redisclient`).
        A plain ``redis://`` URL is probed once (``INFO cluster``); a failed probe is not cached.
        Raises :class:`QueueUnavailable`."""
        client = self._clients.get(url)
        if client is None:
            try:
                client = await connect_async(
                    url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
                )
            except RedisUrlError as exc:
                raise QueueUnavailable(f"bad Redis URL: {exc}") from None
            except (*REDIS_ERRORS, OSError) as exc:
                raise QueueUnavailable(
                    f"Redis at {safe_host(url)} unreachable: {type(exc).__name__}"
                ) from None
            self._clients[url] = client
        return client

    async def measure(self, url: str, queue: str) -> QueueMeasure:
        """One atomic measurement of ``queue`` (:data:`_MEASURE_LUA`, one round trip; on Redis
        Cluster the keys share the queue's slot). Raises :class:`QueueUnavailable`."""
        keys = QueueKeys(queue, self.prefix)
        client = await self.client(url)
        if is_cluster(client) and keys.slot_tag is None:
            raise QueueUnavailable(
                f"queue {queue!r} has no hash tag, so on Redis Cluster its keys land in "
                f"different slots; name it like '{{{queue}}}' (spec.queue)"
            )
        try:
            replies = await cast(Any, client).eval(
                _MEASURE_LUA,
                11,
                keys.ready,
                keys.delayed,
                keys.reserved,
                keys.failed,
                keys.stats,
                keys.purge_requested,
                keys.lock,
                keys.restored,
                keys.backpressure,
                keys.paused,
                *keys.staging_keys,
            )
            (
                ready,
                delayed,
                reserved,
                failed,
                stats,
                head,
                staging,
                marker,
                busy,
                until_ms,
                paused,
                server_time,
            ) = replies
        except (*REDIS_ERRORS, OSError) as exc:
            raise QueueUnavailable(
                f"Redis at {safe_host(url)} unreachable: {type(exc).__name__}"
            ) from None
        return QueueMeasure(
            ready=_int(ready),
            delayed=_int(delayed),
            reserved=_int(reserved),
            failed=_int(failed),
            delivered=_int(stats[0]),
            failed_total=_int(stats[1]),
            oldest_pushed_at=_pushed_at(head),
            staging=_int(staging),
            purge_requested=bool(_int(marker)),
            busy=bool(_int(busy)),
            suspended_seconds=_suspended(until_ms, server_time),
            paused=bool(_int(paused)),
        )

    async def purge(self, url: str, queue: str) -> int:
        """Delete every key of ``queue`` (explicit names, never a pattern); returns how many
        keys existed. Raises :class:`QueueUnavailable`."""
        keys = QueueKeys(queue, self.prefix)
        try:
            return int(await (await self.client(url)).delete(*keys.all_keys))
        except (*REDIS_ERRORS, OSError) as exc:
            raise QueueUnavailable(
                f"Redis at {safe_host(url)} unreachable: {type(exc).__name__}"
            ) from None

    async def request_purge(self, url: str, queue: str) -> None:
        """Set the purge marker (deleted by the purge Job with every other key).
        Raises :class:`QueueUnavailable`."""
        try:
            client = await self.client(url)
            await client.set(QueueKeys(queue, self.prefix).purge_requested, "1")
        except (*REDIS_ERRORS, OSError) as exc:
            raise QueueUnavailable(
                f"Redis at {safe_host(url)} unreachable: {type(exc).__name__}"
            ) from None

    async def set_pause_marker(self, url: str, queue: str, paused: bool) -> None:
        """Set or delete the queue's pause marker (``QueueKeys.paused``): while it exists the
        workers' ``reserve`` hands out nothing. Raises :class:`QueueUnavailable`."""
        key = QueueKeys(queue, self.prefix).paused
        try:
            client = await self.client(url)
            await (client.set(key, "1") if paused else client.delete(key))
        except (*REDIS_ERRORS, OSError) as exc:
            raise QueueUnavailable(
                f"Redis at {safe_host(url)} unreachable: {type(exc).__name__}"
            ) from None

    async def close(self) -> None:
        """Close every pool."""
        for client in self._clients.values():
            await cast(Any, client).aclose()
        self._clients.clear()
