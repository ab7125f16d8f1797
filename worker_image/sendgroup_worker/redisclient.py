"""One connection factory for every Redis URL form (:mod:`sendgroup_worker.redisurl`), sync and
asyncio: standalone (``redis.Redis``), Redis Cluster (``redis.cluster.RedisCluster``, which
follows MOVED/ASK and re-reads the slot map after a failover or a resharding) and Sentinel
(``Sentinel.master_for``: a client whose connections ask the Sentinels for the current primary,
so a promoted replica is followed on the next reconnect).

Used by the worker, the producer CLI and library, the failed-job and dump/restore/purge
commands, and the operator's measurement and purge. Clients return bytes.

A plain ``redis://`` URL is probed once with ``INFO cluster``: a server reporting
``cluster_enabled:1`` gets a cluster client (a server that refuses INFO, as some managed
services do, is taken as standalone).
"""

from __future__ import annotations

import asyncio as _asyncio
import errno
import hashlib
import logging
import time
from collections.abc import Sequence
from typing import Any, Final, TypeAlias, cast
from urllib.parse import quote, urlencode

import hiredis
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.asyncio.sentinel
import redis.cluster
import redis.connection
import redis.exceptions
import redis.sentinel

from sendgroup_worker.redisurl import RedisTarget, parse

log = logging.getLogger(__name__)

#: A sync client: ``redis.Redis``, a Sentinel-managed ``redis.Redis`` or a
#: ``redis.cluster.RedisCluster``. Typed as ``redis.Redis``: the cluster client has the same
#: command methods (routing each by its keys' slot); the types-redis stubs lack many of them.
SyncClient: TypeAlias = "redis.Redis[bytes]"
#: The asyncio twin of :data:`SyncClient` (``redis.asyncio.cluster.RedisCluster`` inside).
AsyncClient: TypeAlias = "redis.asyncio.Redis[bytes]"

#: Errors that mean "the deployment cannot answer right now, retry later": connection loss and
#: timeouts, a cluster without a primary for the slot (failover in progress), a slot being
#: migrated (TRYAGAIN), a former primary now read-only, a Sentinel without a known primary
#: (``MasterNotFoundError`` is a ConnectionError).
TRANSIENT_ERRORS: Final = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.SlotNotCoveredError,
    redis.exceptions.ClusterError,
    # raised by the cluster client when no seed node lets it in (all down, or a bad password:
    # the same retry-and-log-once as a standalone server's AuthenticationError)
    redis.exceptions.RedisClusterException,
    OSError,
)

#: Every error a Redis call can raise (redis-py's cluster errors are not RedisErrors).
REDIS_ERRORS: Final = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)


def _node_url(target: RedisTarget, host: str, port: int, db: int | None = None) -> str:
    """A one-node ``redis(s)://`` URL for redis-py's own ``parse_url`` (option types)."""
    auth = ""
    if target.username or target.password:
        auth = quote(target.username or "", safe="")
        if target.password is not None:
            auth += ":" + quote(target.password, safe="")
        auth += "@"
    host_text = f"[{host}]" if ":" in host else host
    query = urlencode(target.options)
    db_part = target.db if db is None else db
    return f"{target.scheme}://{auth}{host_text}:{port}/{db_part}" + (f"?{query}" if query else "")


def _kwargs(target: RedisTarget, host: str, port: int, asyncio: bool) -> dict[str, Any]:
    url = _node_url(target, host, port)
    if asyncio:
        return dict(redis.asyncio.connection.parse_url(url))
    return dict(redis.connection.parse_url(url))


def _cluster_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    kw = {k: v for k, v in kwargs.items() if k not in ("host", "port", "db")}
    cls = kw.pop("connection_class", None)
    if cls is not None and cls.__name__ == "SSLConnection":
        kw["ssl"] = True
    return kw


def _sentinel_auth(target: RedisTarget, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Connection settings for the Sentinels themselves: socket and TLS options, and the
    URL's credentials unless ``sentinel_auth=none``."""
    keep = ("socket_", "ssl", "connection_class")
    kw = {k: v for k, v in kwargs.items() if k.startswith(keep)}
    if target.sentinel_auth:
        for name in ("username", "password"):
            if name in kwargs:
                kw[name] = kwargs[name]
    return kw


# --- sync ------------------------------------------------------------------------------------
def connect(url: str | RedisTarget, **overrides: Any) -> SyncClient:
    """A sync client for ``url``. ``overrides``: connection keywords (``socket_timeout``...).

    Raises :class:`~sendgroup_worker.redisurl.RedisUrlError` for a bad URL, and
    ``redis.RedisError`` when a ``redis://`` URL's server cannot be probed.
    """
    target = parse(url) if isinstance(url, str) else url
    if target.socket is not None:
        return _sync_plain(target, overrides)
    host, port = target.nodes[0]
    kwargs = _kwargs(target, host, port, asyncio=False) | overrides
    if target.kind == "sentinel":
        assert target.service is not None
        sentinel = redis.sentinel.Sentinel(
            list(target.nodes), sentinel_kwargs=_sentinel_auth(target, kwargs), **kwargs
        )
        kw = {k: v for k, v in kwargs.items() if k not in ("host", "port")}
        return cast(SyncClient, sentinel.master_for(target.service, **kw))
    if target.kind == "cluster":
        return _sync_cluster(target, kwargs)
    plain = _sync_plain(target, overrides)
    if target.kind == "standalone":
        return plain
    try:
        info = plain.info("cluster")
    except redis.exceptions.ResponseError:  # INFO refused (some managed services)
        return plain
    if int(info.get("cluster_enabled", 0)) == 1:
        plain.close()
        return _sync_cluster(target, kwargs)
    return plain


def _sync_cluster(target: RedisTarget, kwargs: dict[str, Any]) -> SyncClient:
    nodes = [redis.cluster.ClusterNode(h, p) for h, p in target.nodes]
    return cast(
        SyncClient, redis.cluster.RedisCluster(startup_nodes=nodes, **_cluster_kwargs(kwargs))
    )


# --- asyncio ---------------------------------------------------------------------------------
async def connect_async(url: str | RedisTarget, **overrides: Any) -> AsyncClient:
    """The asyncio twin of :func:`connect`. Only a plain ``redis://`` URL opens a connection
    here (the ``INFO cluster`` probe; raises ``redis.RedisError`` when it fails); every other
    form connects on first use."""
    target = parse(url) if isinstance(url, str) else url
    kind: str = target.kind
    if kind == "detect":
        kind = await detect_async(target, **overrides)
    return build_async(target, kind, **overrides)


async def detect_async(target: RedisTarget, **overrides: Any) -> str:
    """``cluster`` or ``standalone`` for a ``redis://`` URL, from ``INFO cluster``."""
    plain = _async_plain(target, overrides)
    try:
        info = await plain.info("cluster")
    except redis.exceptions.ResponseError:
        return "standalone"
    finally:
        await cast(Any, plain).aclose()
    return "cluster" if int(info.get("cluster_enabled", 0)) == 1 else "standalone"


def detect_sync(target: RedisTarget, **overrides: Any) -> str:
    """The sync twin of :func:`detect_async`."""
    plain = _sync_plain(target, overrides)
    try:
        info = plain.info("cluster")
    except redis.exceptions.ResponseError:
        return "standalone"
    finally:
        plain.close()
    return "cluster" if int(info.get("cluster_enabled", 0)) == 1 else "standalone"


def build_async(target: RedisTarget, kind: str, **overrides: Any) -> AsyncClient:
    """An asyncio client of ``kind`` (``standalone``, ``cluster``, ``sentinel``) for
    ``target``, opening no connection."""
    if target.socket is not None:
        return _async_plain(target, overrides)
    host, port = target.nodes[0]
    kwargs = _kwargs(target, host, port, asyncio=True) | overrides
    if kind == "sentinel":
        assert target.service is not None
        sentinel = redis.asyncio.sentinel.Sentinel(
            list(target.nodes), sentinel_kwargs=_sentinel_auth(target, kwargs), **kwargs
        )
        kw = {k: v for k, v in kwargs.items() if k not in ("host", "port")}
        return cast(AsyncClient, fast_pack(sentinel.master_for(target.service, **kw)))
    if kind == "cluster":
        nodes = [redis.asyncio.cluster.ClusterNode(h, p) for h, p in target.nodes]
        cluster: Any = redis.asyncio.cluster.RedisCluster(
            startup_nodes=nodes, **_cluster_kwargs(kwargs)
        )
        guard_cluster_connections(cluster)
        return cast(AsyncClient, cluster)
    return _async_plain(target, overrides)


class _WriteGuard:
    """Mixin for a redis-py asyncio ``Connection`` class: a write to a connection that another
    task closed in the meantime raises ``ConnectionResetError`` (which redis-py turns into its
    ``ConnectionError``: the cluster client then re-reads the slot map and retries, the worker
    logs one outage line) instead of ``AttributeError: 'NoneType' object has no attribute
    'writelines'``.

    The race (redis-py 7.4.1, ``redis/asyncio/cluster.py``): after a failed call the cluster
    client runs ``ClusterNode.disconnect_free_connections`` on a snapshot of the free
    connections, which stay in the free list while they close; another task takes one,
    ``send_packed_command`` finds it still connected and hands the write to ``asyncio.wait_for``
    (a new task, so one event-loop turn later), and by then ``disconnect`` has set
    ``_writer = None``. Nothing was written, so the command is safe to retry."""

    _writer: Any

    async def _send_packed_command(self, command: Any) -> None:
        writer = self._writer
        if writer is None:
            raise ConnectionResetError(
                errno.ECONNRESET, "closed by another task before the write (redis-py race)"
            )
        writer.writelines(command)
        await writer.drain()


class _HiredisPack:
    """Mixin for a redis-py asyncio ``Connection`` class: commands packed by hiredis' C packer
    (``hiredis.pack_command``), as redis-py's sync client does (``HiredisRespSerializer``);
    its asyncio client packs in Python, one ``Encoder.encode`` call per argument, which was
    17 % of the worker's CPU per no-op job (cProfile; the reserve call carries ~23 arguments).
    Same bytes on the wire (RESP arrays of bulk strings, str as UTF-8); a first argument with
    spaces is split as redis-py splits it (``"CONFIG GET"``). An argument hiredis does not
    take (a ``memoryview``, which redis-py sends as is; a type neither takes) goes to redis-py's
    own packer, so every call packs or fails exactly as it would without this mixin."""

    def pack_command(self, *args: Any) -> list[bytes]:
        split = args
        if isinstance(args[0], str):
            split = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            split = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(split)]
        except TypeError:
            packed: list[bytes] = super().pack_command(*args)  # type: ignore[misc]
            return packed


class _DirectWrite:
    """Mixin for a redis-py asyncio ``Connection`` class: a command is handed to the transport
    directly, and redis-py's timed drain (``asyncio.wait_for``, which in Python 3.11 wraps the
    drain in a new task: one task and one event-loop turn per command, ~6 % of the worker's
    CPU per mail, py-spy) runs only when the kernel did not take every byte at once (the
    transport kept some in its buffer), which is when a drain can wait at all.

    Everything else is redis-py's own ``send_packed_command``: a connection that is not
    connected, whose transport is closing, with a health check due or with a command that is
    not a list of packed chunks goes there whole; a buffered write is drained there (an empty
    command: same timeout, same ``TimeoutError``/``ConnectionError``, same disconnect). A write
    is synchronous, so a cancellation cannot cut one in half (redis-py disconnects for that).
    A socket error during the write is reported by the transport to its protocol and raised
    by the next read or drain, as for redis-py's own write."""

    _writer: Any
    health_check_interval: float

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        writer = self._writer
        send = super().send_packed_command  # type: ignore[misc]
        if (
            writer is None
            or not isinstance(command, list)
            or (check_health and self.health_check_interval)
            or not cast(Any, self).is_connected
            or writer.transport.is_closing()
        ):
            await send(command, check_health)
            return
        writer.writelines(command)
        if writer.transport.get_write_buffer_size():
            await send([], False)


_MIXED: dict[tuple[type, ...], type] = {}


def _with(cls: type, *mixins: type) -> type:
    """``cls`` (a redis-py asyncio connection class) with ``mixins`` in front, made once."""
    mixins = tuple(m for m in mixins if not issubclass(cls, m))
    if not mixins:
        return cls
    key = (cls, *mixins)
    if key not in _MIXED:
        name = "".join(m.__name__.strip("_") for m in mixins) + cls.__name__
        _MIXED[key] = type(name, (*mixins, cls), {})
    return _MIXED[key]


def _guarded(cls: type) -> type:
    """``cls`` (``Connection`` or ``SSLConnection``) with :class:`_WriteGuard`,
    :class:`_HiredisPack` and :class:`_DirectWrite` in front."""
    return _with(cls, _WriteGuard, _HiredisPack, _DirectWrite)


def fast_pack(client: Any) -> Any:
    """``client`` (an asyncio ``Redis`` of one server or of a Sentinel service, no connection
    made yet) with :class:`_HiredisPack` and :class:`_DirectWrite` connections; returned for
    chaining."""
    pool = client.connection_pool
    pool.connection_class = _with(pool.connection_class, _HiredisPack, _DirectWrite)
    return client


def guard_cluster_connections(client: Any) -> None:
    """Make every connection of ``client`` (an asyncio ``RedisCluster``) a :class:`_WriteGuard`
    one: those of the node objects it made from the seeds, and (through the shared
    ``connection_kwargs``, which the client passes to every ``ClusterNode`` it creates after a
    slot-map read or a MOVED) those of every later node. redis-py's ``RedisCluster`` takes no
    ``connection_class`` argument (it reads one only to turn TLS on), hence the two attributes
    set here."""
    kwargs: dict[str, Any] = client.connection_kwargs
    kwargs["connection_class"] = _guarded(
        kwargs.get("connection_class", redis.asyncio.connection.Connection)
    )
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = _guarded(node.connection_class)


def _one_server_url(target: RedisTarget) -> str:
    if target.socket is None:
        host, port = target.nodes[0]
        return _node_url(target, host, port)
    auth = ""
    if target.username or target.password:
        auth = quote(target.username or "", safe="")
        if target.password is not None:
            auth += ":" + quote(target.password, safe="")
        auth += "@"
    query = urlencode([("db", str(target.db)), *target.options])
    return f"unix://{auth}{quote(target.socket)}?{query}"


def _sync_plain(target: RedisTarget, overrides: dict[str, Any]) -> SyncClient:
    """A one-server client built as ``redis.Redis.from_url`` builds it: its connections raise
    on the first failure (no hidden retries with backoff), so the caller's own retry loop sees,
    logs and paces every outage."""
    return redis.Redis.from_url(_one_server_url(target), **overrides)


def _async_plain(target: RedisTarget, overrides: dict[str, Any]) -> AsyncClient:
    """The asyncio twin of :func:`_sync_plain` (commands packed by hiredis, :func:`fast_pack`)."""
    return cast(
        AsyncClient, fast_pack(redis.asyncio.Redis.from_url(_one_server_url(target), **overrides))
    )


class Script:
    """A Lua script run by EVALSHA, falling back to EVAL (which also caches it on that server)
    on NOSCRIPT, sync: ``script(keys=[...], args=[...])``. Unlike redis-py's ``Script``, the
    fallback goes to the server owning the keys, so it works on Redis Cluster right after a
    failover (the promoted replica's script cache is empty) and after SCRIPT FLUSH."""

    def __init__(self, client: SyncClient, source: str) -> None:
        self.client = client
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        self._pipelined: Any = None

    def __call__(
        self, keys: Sequence[Any] = (), args: Sequence[Any] = (), client: Any = None
    ) -> Any:
        """Run the script; ``client``: a (non-cluster) pipeline to queue it on instead, which
        loads missing scripts itself before it executes (redis-py's ``Script`` path)."""
        if client is not None:
            if self._pipelined is None:
                self._pipelined = cast(Any, self.client).register_script(self.source)
            return self._pipelined(keys=keys, args=args, client=client)
        c: Any = self.client
        try:
            return c.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return c.eval(self.source, len(keys), *keys, *args)


class AsyncScript:
    """The asyncio twin of :class:`Script`: ``await script(keys=[...], args=[...])``."""

    def __init__(self, client: AsyncClient, source: str) -> None:
        self.client = client
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        c: Any = self.client
        try:
            return await c.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return await c.eval(self.source, len(keys), *keys, *args)


def is_cluster(client: object) -> bool:
    """True for a Redis Cluster client (sync or asyncio)."""
    return isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster)


#: A lane's held connection unused for this long (seconds) is checked before its next command,
#: as redis-py's pool checks every connection it hands out (see :class:`_LaneRedis`).
LANE_PROBE_IDLE: Final = 1.0


class _LaneRedis(redis.asyncio.Redis):  # type: ignore[type-arg]
    """A one-connection client for a lane (:func:`lane_client`). redis-py's pool checks every
    connection it hands out for a server-side close or unread data (a zero-timeout read) and
    reconnects a bad one; a held connection is handed out once, so this client runs the same
    check itself, but only when the connection sat unused for :data:`LANE_PROBE_IDLE` seconds:
    a server's idle ``timeout``, a proxy or load balancer closing idle connections, a restart
    while the group was quiet are then met with a new connection, not an error. A connection
    closed while the lane is busy fails that command (``ConnectionError``), which the worker
    retries like any outage. One lane runs one command at a time."""

    _used_at: float = -1e18

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        now = time.monotonic()
        conn = self.connection
        if conn is not None and now - self._used_at > LANE_PROBE_IDLE:
            await _probe(conn)
        self._used_at = now
        parent: Any = super()
        return await parent.execute_command(*args, **options)


async def _probe(conn: Any) -> None:
    """What redis-py's pool does to a connection it hands out (``ensure_connection``):
    connected, nothing left to read; else closed and opened again."""
    try:
        await conn.connect()
        if await conn.can_read_destructive():
            raise redis.exceptions.ConnectionError("connection has unread data")
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
        await conn.disconnect()
        await conn.connect()


def lane_client(client: AsyncClient) -> AsyncClient:
    """A client for one of the worker's lanes: on one server or a Sentinel service, a client
    holding one connection of ``client``'s pool for its whole life (:class:`_LaneRedis`), so a
    lane's commands skip the pool's check-out and check-in; on Redis Cluster, ``client`` itself
    (its connections are per node). Close it with :func:`aclose` (the connection goes back to
    the pool, the pool stays open).

    Why: redis-py's asyncio pool probes every checked-out connection for unread data (a
    zero-timeout read, one extra event-loop turn) and records pool metrics on every check-out;
    on this machine a pooled ``SISMEMBER`` cost 139-150 us of client CPU against 77-84 us on a
    held connection (10,000 calls, loopback), and the worker makes four such calls per mail."""
    if is_cluster(client):
        return client
    return _LaneRedis(connection_pool=client.connection_pool, single_connection_client=True)


async def aclose(client: AsyncClient) -> None:
    """Close every connection of ``client`` (any kind)."""
    await cast(Any, client).aclose()


#: What redis-py's asyncio cluster client reports through the event loop when it drops a node
#: object after a slot-map refresh (a failover, a resharding) while the node's sockets are still
#: open; they close with the object. redis-py issue #3572; asyncio's default handler logs it at
#: ERROR, once or more per failover, with nothing for the user to do.
CLUSTER_NODE_NOTICE: Final = "Unclosed ClusterNode object"


def quiet_cluster_node_notices(loop: _asyncio.AbstractEventLoop) -> None:
    """Log :data:`CLUSTER_NODE_NOTICE` at DEBUG instead of ERROR on ``loop``; every other
    exception-handler call goes to the handler installed before (or the loop's default)."""
    previous = loop.get_exception_handler()

    def handler(loop: _asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == CLUSTER_NODE_NOTICE and "exception" not in context:
            log.debug("redis-py: %s (%r), see redis-py #3572", CLUSTER_NODE_NOTICE, context)
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


__all__ = [
    "CLUSTER_NODE_NOTICE",
    "REDIS_ERRORS",
    "TRANSIENT_ERRORS",
    "AsyncClient",
    "AsyncScript",
    "Script",
    "SyncClient",
    "aclose",
    "build_async",
    "connect",
    "connect_async",
    "detect_async",
    "detect_sync",
    "guard_cluster_connections",
    "is_cluster",
    "lane_client",
    "quiet_cluster_node_notices",
]
