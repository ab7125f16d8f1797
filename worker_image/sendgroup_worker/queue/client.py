"""Queue clients: :class:`Queue` (sync, ``redis.Redis``) and :class:`AsyncQueue` (asyncio,
``redis.asyncio.Redis``).

Both are thin transports over :mod:`sendgroup_worker.queue.protocol`: every method builds a
:class:`~sendgroup_worker.queue.protocol.ScriptCall` there, runs it by EVALSHA (falling
back to EVAL on NOSCRIPT, :class:`~sendgroup_worker.redisclient.Script`) and parses the reply
there. Each method is ONE round trip unless its docstring says otherwise.

The Redis client must return bytes (``decode_responses=False``, redis-py's default): payloads
are compared byte for byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeVar, cast

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions

from sendgroup_worker.queue import protocol as p
from sendgroup_worker.queue.keys import QueueKeys
from sendgroup_worker.redisclient import (
    TRANSIENT_ERRORS,
    AsyncClient,
    AsyncScript,
    Script,
    SyncClient,
    is_cluster,
)

T = TypeVar("T")

log = logging.getLogger("sendgroup_worker.queue")

#: The worker's write scripts that ``wait_replicas`` makes durable (acknowledgement, sent
#: marker, reservation, retry and failure).
DURABLE_SCRIPTS: Final = frozenset({"reserve", "done", "release", "fail", "unreserve", "ack_begin"})

#: Jobs retried per script call by ``failed_retry_all`` (each call is atomic and bounded).
RETRY_ALL_CHUNK = 500


def _check_client(client: Any, keys: QueueKeys) -> None:
    """Refuse clients the protocol cannot work with (raises ValueError):

    * ``decode_responses=True``: payloads are bytes and compared byte for byte;
    * a Redis Cluster client with a queue name without a hash tag: the scripts touch several
      keys of the queue, which must then share one slot (``{mail-x}``).
    """
    get_kwargs = getattr(client, "get_connection_kwargs", None)
    if get_kwargs is not None and get_kwargs().get("decode_responses"):
        raise ValueError(
            "the queue needs a Redis client with decode_responses=False: payloads are bytes "
            "and are compared byte for byte"
        )
    if is_cluster(client) and keys.slot_tag is None:
        raise ValueError(
            f"queue {keys.queue!r} has no hash tag: on Redis Cluster name it like "
            f"'{{{keys.queue}}}' so all of its keys share one slot"
        )


class _Base:
    def __init__(
        self,
        keys: QueueKeys,
        retry_after: int,
        migrate_limit: int,
        failed_max_count: int,
        failed_max_age: int,
        sent_ttl: int,
    ) -> None:
        self.keys = keys
        self.settings = p.QueueSettings(
            retry_after=retry_after,
            migrate_limit=migrate_limit,
            failed_max_count=failed_max_count,
            failed_max_age=failed_max_age,
            sent_ttl=sent_ttl,
        )

    @property
    def retry_after(self) -> int:
        """Seconds a reservation lasts (Laravel's ``retry_after``)."""
        return self.settings.retry_after


class Queue(_Base):
    """Synchronous client of one Laravel-layout Redis queue (producer CLI, dump/restore, tests).

    ``client``: a ``redis.Redis`` (or ``RedisCluster``) returning bytes; ``keys``: the queue's
    :class:`QueueKeys` (name, prefix); ``retry_after``: seconds a reservation lasts. Keyword
    tunables: see :class:`~sendgroup_worker.queue.protocol.QueueSettings`. Methods raise
    ``redis.RedisError`` subclasses on connection or script errors.
    """

    def __init__(
        self,
        client: SyncClient,
        keys: QueueKeys,
        retry_after: int = 90,
        *,
        migrate_limit: int = 100,
        failed_max_count: int = 100_000,
        failed_max_age: int = 7 * 24 * 3600,
        sent_ttl: int = 7 * 24 * 3600,
    ) -> None:
        _check_client(client, keys)
        super().__init__(
            keys, retry_after, migrate_limit, failed_max_count, failed_max_age, sent_ttl
        )
        self.redis = client
        self._scripts = {n: Script(client, p.script_source(n)) for n in p.SCRIPT_NAMES}

    def run(self, call: p.ScriptCall[T]) -> T:
        """Run one prepared script call (one round trip) and return its parsed reply."""
        reply = self._scripts[call.script](keys=list(call.keys), args=list(call.args))
        return call.parse(reply)

    # --- worker side ------------------------------------------------------------------------
    def reserve(
        self, count: int = 1, ack: Sequence[p.Ack] = (), now: float | None = None
    ) -> list[p.Reserved]:
        """Acknowledge ``ack``, migrate due jobs, reserve up to ``count`` jobs (one script);
        see :func:`protocol.reserve_call`. Returns the jobs (possibly none)."""
        return self.run(p.reserve_call(self.keys, self.settings, count, ack, now)).jobs

    def reserve_detailed(
        self, count: int = 1, ack: Sequence[p.Ack] = (), now: float | None = None
    ) -> p.ReserveResult:
        """:meth:`reserve` that also reports lost acks, migrated and invalid counts."""
        return self.run(p.reserve_call(self.keys, self.settings, count, ack, now))

    def done(
        self, job: p.Reserved | p.Ack, delivered: bool = True, now: float | None = None
    ) -> bool:
        """Acknowledge a finished job; returns True when its reservation was lost. See
        :func:`protocol.done_call`."""
        return self.run(p.done_call(self.keys, self.settings, job, delivered, now))

    def release(self, job: p.Reserved, delay: float = 0, now: float | None = None) -> bool:
        """Back to delayed for ``delay`` seconds; True when lost (nothing changed)."""
        return self.run(p.release_call(self.keys, job, delay, now))

    def fail(
        self, job: p.Reserved, exception_class: str, message: str, now: float | None = None
    ) -> bool:
        """To the failed structure; True when lost (nothing changed)."""
        return self.run(p.fail_call(self.keys, self.settings, job, exception_class, message, now))

    def unreserve(self, jobs: Sequence[p.Reserved]) -> int:
        """Hand never-started reserved jobs back to ready, no attempt counted; returns how many
        went back. See :func:`protocol.unreserve_call`."""
        return self.run(p.unreserve_call(self.keys, jobs)) if jobs else 0

    def ack_begin(
        self,
        job: p.Reserved,
        ack: Sequence[p.Ack],
        now: float | None = None,
        suppressed: str | None = None,
        recipients: Sequence[str] = (),
    ) -> p.AckBegun:
        """Acknowledge ``ack``, then :meth:`begin_send` (with a screen when ``suppressed``) for
        ``job``: one script, see :func:`protocol.ack_begin_call`."""
        return self.run(
            p.ack_begin_call(self.keys, self.settings, job, ack, now, suppressed, recipients)
        )

    def begin_send(self, job: p.Reserved) -> p.BeginSend:
        """``"ok"``, ``"lost"`` or ``"already_sent"``: see :func:`protocol.begin_send_call`."""
        return self.run(p.begin_send_call(self.keys, job))

    def wait_for_work(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds until the notify list holds a token; True if it
        does. Uses ``BLMOVE notify notify LEFT RIGHT`` (Redis >= 6.2), which rotates a token
        instead of consuming it, so tokens keep matching ready jobs. The client's
        ``socket_timeout`` must exceed ``timeout``."""
        k = self.keys.notify
        return self.redis.blmove(k, k, timeout, "LEFT", "RIGHT") is not None

    # --- producer side ----------------------------------------------------------------------
    def push(self, payload: bytes) -> int:
        """RPUSH one payload and its notify token; returns 1."""
        return self.push_many([payload])

    def push_many(self, payloads: Iterable[bytes]) -> int:
        """RPUSH payloads + notify tokens; one round trip per :data:`protocol.PUSH_CHUNK`
        payloads (each chunk atomic). Returns the number pushed."""
        return sum(self.run(c) for c in p.push_calls(self.keys, payloads))

    def later(
        self, payload: bytes | Iterable[bytes], delay: float, now: float | None = None
    ) -> int:
        """ZADD payload(s) to delayed with score now + ``delay`` s; returns the number added."""
        items = [payload] if isinstance(payload, bytes) else list(payload)
        return self.run(p.later_call(self.keys, items, delay, now))

    # --- inspection -------------------------------------------------------------------------
    def size(self) -> int:
        """ready + delayed + reserved (jobs)."""
        return self.run(p.size_call(self.keys))

    def measure(self, now: float | None = None) -> p.QueueMeasure:
        """All counts and the oldest job's age, atomically, in one round trip."""
        return self.run(p.measure_call(self.keys, now))

    def clear(self) -> int:
        """Delete ready/delayed/reserved/notify; returns the number of jobs dropped."""
        return self.run(p.clear_call(self.keys))

    # --- failed jobs ------------------------------------------------------------------------
    def failed_list(self, offset: int = 0, limit: int = 50) -> p.FailedPage:
        """Failed jobs newest first, ``limit`` from ``offset``, plus the total."""
        return self.run(p.failed_list_call(self.keys, offset, limit))

    def failed_get(self, uuid: str) -> p.FailedJob | None:
        """The failed record of ``uuid``, or None."""
        data = self.redis.hget(self.keys.failed_jobs, uuid)
        return None if data is None else p.parse_failed_record(data, uuid)

    def failed_retry(self, *uuids: str) -> p.RetryResult:
        """Push these failed jobs back to ready (attempts 0) and forget their records."""
        return self.run(p.failed_retry_call(self.keys, uuids))

    def failed_retry_all(self) -> int:
        """Retry every failed job, oldest first, :data:`RETRY_ALL_CHUNK` per round trip.
        Returns the number pushed back to ready."""
        total = 0
        while True:
            r = self.run(p.failed_retry_oldest_call(self.keys, RETRY_ALL_CHUNK))
            total += r.retried
            if r.retried + len(r.missing) < RETRY_ALL_CHUNK:
                return total

    def failed_forget(self, *uuids: str) -> int:
        """Delete these failed records; returns how many existed."""
        return self.run(p.failed_forget_call(self.keys, uuids))

    def failed_flush(self) -> int:
        """Delete every failed record; returns how many there were."""
        return self.run(p.failed_forget_call(self.keys, None))


class AsyncQueue(_Base):
    """The asyncio twin of :class:`Queue` (worker, operator): same methods, awaited, same
    scripts and argument building. ``client`` is a ``redis.asyncio.Redis`` returning bytes."""

    def __init__(
        self,
        client: AsyncClient,
        keys: QueueKeys,
        retry_after: int = 90,
        *,
        migrate_limit: int = 100,
        failed_max_count: int = 100_000,
        failed_max_age: int = 7 * 24 * 3600,
        sent_ttl: int = 7 * 24 * 3600,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
    ) -> None:
        _check_client(client, keys)
        super().__init__(
            keys, retry_after, migrate_limit, failed_max_count, failed_max_age, sent_ttl
        )
        self.redis = client
        self._scripts = {n: AsyncScript(client, p.script_source(n)) for n in p.SCRIPT_NAMES}
        self._sha = {
            n: hashlib.sha1(p.script_source(n).encode()).hexdigest() for n in p.SCRIPT_NAMES
        }
        #: ``WAIT`` for this many replicas after every write script (0: asynchronous)
        self.wait_replicas = wait_replicas
        #: longest ``WAIT``, seconds
        self.wait_timeout = wait_timeout
        #: write calls whose ``WAIT`` timed out with fewer replicas than asked
        self.wait_short = 0
        self._wait_warned_at = -1e9
        self._node_clients: dict[str, redis.asyncio.Redis[bytes]] = {}

    def bind(self, client: AsyncClient) -> AsyncQueue:
        """This queue (same keys, settings and ``WAIT`` policy) on another client of the same
        Redis, e.g. one lane's held connection (:func:`~sendgroup_worker.redisclient.lane_client`);
        ``self`` when ``client`` is this queue's own client."""
        if client is self.redis:
            return self
        s = self.settings
        return AsyncQueue(
            client,
            self.keys,
            s.retry_after,
            migrate_limit=s.migrate_limit,
            failed_max_count=s.failed_max_count,
            failed_max_age=s.failed_max_age,
            sent_ttl=s.sent_ttl,
            wait_replicas=self.wait_replicas,
            wait_timeout=self.wait_timeout,
        )

    async def run(self, call: p.ScriptCall[T]) -> T:
        """Run one prepared script call (one round trip) and return its parsed reply. With
        ``wait_replicas`` set, a write script (:data:`DURABLE_SCRIPTS`) is followed by ``WAIT
        wait_replicas wait_timeout`` on the same connection (one pipelined round trip): the
        reply comes back once the write reached that many replicas, or after the timeout
        (counted in :attr:`wait_short`, logged at most once a minute)."""
        if self.wait_replicas and call.script in DURABLE_SCRIPTS:
            return call.parse(await self._run_durable(call))
        reply = await self._scripts[call.script](keys=list(call.keys), args=list(call.args))
        return call.parse(reply)

    async def _run_durable(self, call: p.ScriptCall[Any]) -> Any:
        timeout_ms = max(1, int(self.wait_timeout * 1000))
        for _ in range(3):
            conn = self._durable_client(call.keys[0])
            pipe = conn.pipeline(transaction=False)
            pipe.evalsha(self._sha[call.script], len(call.keys), *call.keys, *call.args)
            pipe.execute_command("WAIT", self.wait_replicas, timeout_ms)
            try:
                reply, acked = await pipe.execute(raise_on_error=False)
            except TRANSIENT_ERRORS:
                await self._forget_node(conn)
                raise
            if isinstance(reply, redis.exceptions.NoScriptError):
                # a new primary after a failover has an empty script cache
                await cast(Any, conn).script_load(p.script_source(call.script))
                continue
            if isinstance(reply, redis.exceptions.AskError):  # MOVED (a subclass) or ASK
                # the slot moved (resharding, failover): let the cluster client re-read the
                # slot map by following the redirection itself, then go to the new owner
                await self._forget_node(conn)
                await self.redis.exists(call.keys[0])
                continue
            if isinstance(reply, Exception):
                raise reply
            if isinstance(acked, Exception):
                raise acked
            if int(acked) < self.wait_replicas:
                self.wait_short += 1
                now = time.monotonic()
                if now - self._wait_warned_at > 60:
                    self._wait_warned_at = now
                    log.warning(
                        "WAIT: %d of %d replicas acknowledged within %gs; the write is not "
                        "yet durable against a primary loss",
                        int(acked),
                        self.wait_replicas,
                        self.wait_timeout,
                    )
            return reply
        raise redis.exceptions.TryAgainError("slot kept moving during a durable write")

    def _durable_client(self, key: str) -> redis.asyncio.Redis[bytes]:
        """The client whose pipeline runs a script and its WAIT on one connection: the client
        itself, or on Redis Cluster a plain client of the node owning ``key``'s slot (redis-py's
        cluster pipeline refuses scripts, and WAIT must follow the write on its connection)."""
        if not is_cluster(self.redis):
            return self.redis
        node = cast(Any, self.redis).get_node_from_key(key)
        client = self._node_clients.get(node.name)
        if client is None:
            pool = redis.asyncio.ConnectionPool(
                connection_class=node.connection_class, **node.connection_kwargs
            )
            client = redis.asyncio.Redis(connection_pool=pool)
            self._node_clients[node.name] = client
        return client

    async def _forget_node(self, conn: redis.asyncio.Redis[bytes]) -> None:
        """After an error on a cluster node's own client: drop it, and have the cluster client
        re-read the slot map on its next call (a failover may have promoted a replica)."""
        if conn is self.redis:
            return
        for name, client in list(self._node_clients.items()):
            if client is conn:
                del self._node_clients[name]
        with contextlib.suppress(Exception):
            await cast(Any, conn).aclose()
        with contextlib.suppress(Exception):
            await cast(Any, self.redis).aclose()  # next call re-initializes the slot map

    async def reserve(
        self, count: int = 1, ack: Sequence[p.Ack] = (), now: float | None = None
    ) -> list[p.Reserved]:
        """See :meth:`Queue.reserve`."""
        return (await self.run(p.reserve_call(self.keys, self.settings, count, ack, now))).jobs

    async def reserve_detailed(
        self, count: int = 1, ack: Sequence[p.Ack] = (), now: float | None = None
    ) -> p.ReserveResult:
        """See :meth:`Queue.reserve_detailed`."""
        return await self.run(p.reserve_call(self.keys, self.settings, count, ack, now))

    async def done(
        self, job: p.Reserved | p.Ack, delivered: bool = True, now: float | None = None
    ) -> bool:
        """See :meth:`Queue.done`."""
        return await self.run(p.done_call(self.keys, self.settings, job, delivered, now))

    async def done_detailed(
        self, job: p.Reserved | p.Ack, delivered: bool = True, now: float | None = None
    ) -> p.DoneResult:
        """:meth:`done`, also writing an :class:`~protocol.Ack`'s stream entry in the same
        script; says whether Redis refused the entry. See :func:`protocol.done_detailed_call`."""
        return await self.run(p.done_detailed_call(self.keys, self.settings, job, delivered, now))

    async def release(self, job: p.Reserved, delay: float = 0, now: float | None = None) -> bool:
        """See :meth:`Queue.release`."""
        return await self.run(p.release_call(self.keys, job, delay, now))

    async def fail(
        self, job: p.Reserved, exception_class: str, message: str, now: float | None = None
    ) -> bool:
        """See :meth:`Queue.fail`."""
        return await self.run(
            p.fail_call(self.keys, self.settings, job, exception_class, message, now)
        )

    async def unreserve(self, jobs: Sequence[p.Reserved]) -> int:
        """See :meth:`Queue.unreserve`."""
        return await self.run(p.unreserve_call(self.keys, jobs)) if jobs else 0

    async def ack_begin(
        self,
        job: p.Reserved,
        ack: Sequence[p.Ack],
        now: float | None = None,
        suppressed: str | None = None,
        recipients: Sequence[str] = (),
    ) -> p.AckBegun:
        """See :meth:`Queue.ack_begin`."""
        return await self.run(
            p.ack_begin_call(self.keys, self.settings, job, ack, now, suppressed, recipients)
        )

    async def begin_send(self, job: p.Reserved) -> p.BeginSend:
        """See :meth:`Queue.begin_send`."""
        return await self.run(p.begin_send_call(self.keys, job))

    async def begin_screen(
        self, job: p.Reserved, suppressed: str, recipients: Sequence[str]
    ) -> p.Screened:
        """:meth:`begin_send` and the suppression check in one round trip (see
        :func:`protocol.begin_screen_call`; not on Redis Cluster)."""
        return await self.run(p.begin_screen_call(self.keys, job, suppressed, recipients))

    async def wait_for_work(self, timeout: float) -> bool:
        """See :meth:`Queue.wait_for_work`."""
        k = self.keys.notify
        return (await self.redis.blmove(k, k, timeout, "LEFT", "RIGHT")) is not None

    async def push(self, payload: bytes) -> int:
        """See :meth:`Queue.push`."""
        return await self.push_many([payload])

    async def push_many(self, payloads: Iterable[bytes]) -> int:
        """See :meth:`Queue.push_many`."""
        total = 0
        for c in p.push_calls(self.keys, payloads):
            total += await self.run(c)
        return total

    async def later(
        self, payload: bytes | Iterable[bytes], delay: float, now: float | None = None
    ) -> int:
        """See :meth:`Queue.later`."""
        items = [payload] if isinstance(payload, bytes) else list(payload)
        return await self.run(p.later_call(self.keys, items, delay, now))

    async def size(self) -> int:
        """See :meth:`Queue.size`."""
        return await self.run(p.size_call(self.keys))

    async def measure(self, now: float | None = None) -> p.QueueMeasure:
        """See :meth:`Queue.measure`."""
        return await self.run(p.measure_call(self.keys, now))

    async def clear(self) -> int:
        """See :meth:`Queue.clear`."""
        return await self.run(p.clear_call(self.keys))

    async def failed_list(self, offset: int = 0, limit: int = 50) -> p.FailedPage:
        """See :meth:`Queue.failed_list`."""
        return await self.run(p.failed_list_call(self.keys, offset, limit))

    async def failed_get(self, uuid: str) -> p.FailedJob | None:
        """See :meth:`Queue.failed_get`."""
        data = await self.redis.hget(self.keys.failed_jobs, uuid)
        return None if data is None else p.parse_failed_record(data, uuid)

    async def failed_retry(self, *uuids: str) -> p.RetryResult:
        """See :meth:`Queue.failed_retry`."""
        return await self.run(p.failed_retry_call(self.keys, uuids))

    async def failed_retry_all(self) -> int:
        """See :meth:`Queue.failed_retry_all`."""
        total = 0
        while True:
            r = await self.run(p.failed_retry_oldest_call(self.keys, RETRY_ALL_CHUNK))
            total += r.retried
            if r.retried + len(r.missing) < RETRY_ALL_CHUNK:
                return total

    async def failed_forget(self, *uuids: str) -> int:
        """See :meth:`Queue.failed_forget`."""
        return await self.run(p.failed_forget_call(self.keys, uuids))

    async def failed_flush(self) -> int:
        """See :meth:`Queue.failed_flush`."""
        return await self.run(p.failed_forget_call(self.keys, None))


__all__ = ["DURABLE_SCRIPTS", "RETRY_ALL_CHUNK", "AsyncQueue", "Queue"]
