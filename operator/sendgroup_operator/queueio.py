"""The operator's Redis adapter: measure a queue in one round trip, purge its keys.

Key names come only from ``sendgroup_contract.keys.QueueKeys``. Ownership (issue 16):
:meth:`RedisQueues.claim` runs the worker's ``claim.lua`` (first claim wins, atomically; only
the owner releases). The measurement is the contract's one script
(``sendgroup_contract.measure``: counts, the oldest job's ``pushedAt``
(else Laravel 12's ``createdAt``), the workers' counters, the dump's staging keys, the purge
marker, the lock and restore progress, the pause marker, the backpressure deadline and Redis'
clock; atomic, one round trip, on any deployment: its keys share the queue's slot); the
worker's ``sendgroup-worker stats`` runs the same script. "Empty" and "unchanged" always mean
ready + delayed + reserved.

Errors never carry the URL (it may hold a password from a Secret): :class:`QueueUnavailable`
messages name the exception type and the host only.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final, cast

from sendgroup_contract import measure as contract_measure
from sendgroup_contract.keys import QueueKeys
from sendgroup_contract.measure import QueueMeasure
from sendgroup_worker.queue import protocol
from sendgroup_worker.redisclient import REDIS_ERRORS, AsyncClient, connect_async, is_cluster
from sendgroup_worker.redisurl import RedisUrlError, describe

SOCKET_TIMEOUT: Final = 3.0
#: At most this many Redis clients (one pool per distinct URL) stay open; the least recently
#: used is closed beyond it (a tenant editing ``spec.redis.url`` 40 times held 40 connections
#: until the operator restarted; at ``maxclients`` every tenant would be refused).
MAX_CLIENTS: Final = 128
#: Seconds a client not asked for is kept open (every group's pass asks for its client at
#: least every ``reaperInterval``, 10 s by default, so a URL in use is never idle this long).
IDLE_CLOSE: Final = 300.0
#: Seconds between a client leaving the cache and its close (3 s command timeouts: a command
#: already sent on it by another coroutine finishes first).
CLOSE_GRACE: Final = 10.0
#: Claims per pipelined round trip (:meth:`RedisQueues.claim`).
CLAIM_BATCH: Final = 500


class QueueUnavailable(Exception):
    """Redis could not be reached or answered with an error; the message is safe to show."""


def safe_host(url: str) -> str:
    """The hosts of a Redis URL (``host:port``, ``cluster h1:p1,h2:p2``, ``sentinel master
    'm' via s1:p1``), without user or password."""
    return describe(url)


@dataclass
class _Claims:
    """Per Redis URL: the claims waiting for the next pipeline, and the task sending them."""

    pending: list[tuple[protocol.ScriptCall[protocol.Claim], asyncio.Future[protocol.Claim]]] = (
        field(default_factory=list)
    )
    sender: asyncio.Task[None] | None = None


class RedisQueues:
    """One connection pool per Redis URL, shared by all groups using it. ``prefix``: the
    producers' client-side key prefix (``laravel_database_``), as in ``QueueKeys``."""

    def __init__(
        self,
        prefix: str = "",
        max_clients: int = MAX_CLIENTS,
        idle_close: float = IDLE_CLOSE,
        close_grace: float = CLOSE_GRACE,
    ) -> None:
        self.prefix = prefix
        self.max_clients = max_clients
        self.idle_close = idle_close
        self.close_grace = close_grace
        #: url -> (client, monotonic seconds of its last use), least recently used first
        self._clients: OrderedDict[str, tuple[AsyncClient, float]] = OrderedDict()
        #: url -> the lock its first connect holds (dropped once connected)
        self._connecting: dict[str, asyncio.Lock] = {}
        #: clients out of the cache, each closing after ``close_grace`` s (its task)
        self._closing: dict[asyncio.Task[None], AsyncClient] = {}
        #: url -> the claims waiting to be sent together (:meth:`claim`)
        self._claims: dict[str, _Claims] = {}
        self.claim_batch = CLAIM_BATCH
        #: pipelines (or, on Redis Cluster, rounds of single calls) the claims took
        self.claim_round_trips = 0

    @property
    def open_clients(self) -> int:
        """How many clients (pools) are open now."""
        return len(self._clients)

    async def client(self, url: str) -> AsyncClient:
        """The cached client for ``url`` (3 s socket timeouts, no retries: the reaper is the
        retry loop); standalone, Redis Cluster or Sentinel (:mod:`sendgroup_worker.redisclient`).
        A plain ``redis://`` URL is probed once (``INFO cluster``); a failed probe is not cached;
        callers asking for a new URL at once share one connect (a lock per URL).
        Clients not asked for in :attr:`idle_close` seconds, and the least recently used beyond
        :attr:`max_clients`, leave the cache and are closed ``close_grace`` seconds later
        (a command already sent on one finishes: commands time out after 3 s). Raises
        :class:`QueueUnavailable`."""
        client = self._touch(url)
        if client is None:
            lock = self._connecting.setdefault(url, asyncio.Lock())
            async with lock:
                client = self._touch(url)
                if client is None:
                    try:
                        client = await connect_async(
                            url,
                            socket_timeout=SOCKET_TIMEOUT,
                            socket_connect_timeout=SOCKET_TIMEOUT,
                        )
                    except RedisUrlError as exc:
                        raise QueueUnavailable(f"bad Redis URL: {exc}") from None
                    except (*REDIS_ERRORS, OSError) as exc:
                        raise QueueUnavailable(
                            f"Redis at {safe_host(url)} unreachable: {type(exc).__name__}"
                        ) from None
                    self._clients[url] = (client, time.monotonic())
            if self._connecting.get(url) is lock and not lock.locked():
                del self._connecting[url]
        self._evict(time.monotonic(), keep=url)
        return client

    def _touch(self, url: str) -> AsyncClient | None:
        """The cached client for ``url`` marked as just used (moved last), or None."""
        entry = self._clients.get(url)
        if entry is None:
            return None
        self._clients[url] = (entry[0], time.monotonic())
        self._clients.move_to_end(url)
        return entry[0]

    def _evict(self, now: float, keep: str) -> None:
        """Take out of the cache the clients idle for :attr:`idle_close` s, then the least
        recently used beyond :attr:`max_clients` (never ``keep``, the one just asked for), and
        close each ``close_grace`` s later (synchronous: nothing else runs meanwhile)."""
        while self._clients:
            url, (client, used) = next(iter(self._clients.items()))
            if url == keep or (
                now - used < self.idle_close and len(self._clients) <= self.max_clients
            ):
                break
            del self._clients[url]
            task = asyncio.get_running_loop().create_task(self._close_later(client))
            self._closing[task] = client
            task.add_done_callback(lambda t: self._closing.pop(t, None))

    async def _close_later(self, client: AsyncClient) -> None:
        await asyncio.sleep(self.close_grace)
        await _close(client)

    async def measure(self, url: str, queue: str) -> QueueMeasure:
        """One atomic measurement of ``queue`` (``sendgroup_contract.measure.SCRIPT``, one round
        trip; on Redis Cluster the keys share the queue's slot). Raises
        :class:`QueueUnavailable`."""
        keys = QueueKeys(queue, self.prefix)
        client = await self.client(url)
        if is_cluster(client) and keys.slot_tag is None:
            raise QueueUnavailable(
                f"queue {queue!r} has no hash tag, so on Redis Cluster its keys land in "
                f"different slots; name it like '{{{queue}}}' (spec.queue)"
            )
        script_keys = contract_measure.script_keys(keys)
        try:
            replies = await cast(Any, client).eval(
                contract_measure.SCRIPT, len(script_keys), *script_keys
            )
        except (*REDIS_ERRORS, OSError) as exc:
            raise QueueUnavailable(
                f"Redis at {safe_host(url)} unreachable: {type(exc).__name__}"
            ) from None
        return contract_measure.parse_reply(replies)

    async def claim(
        self, url: str, queue: str, owner: str, release: bool = False, replace: str = ""
    ) -> protocol.Claim:
        """Claim ``queue`` for ``owner`` (``<namespace>/<name>/<uid>``, see
        ``protocol.owner_id``), or with ``release`` give it up; ``replace``: also take it
        from exactly this stale owner. One atomic script (``protocol.claim_call``): the reply
        says whether ``owner`` holds the queue afterwards and who does. Raises
        :class:`QueueUnavailable`.

        Claims (not releases, not replacements) asked for in the same turn of the event loop,
        or while the previous ones are on their way, share one pipeline per Redis (up to
        :data:`CLAIM_BATCH` per round trip): after an operator's start every group confirms
        its claim at once, which was one pooled connection and one round trip each, opening
        a connection per group waiting at that moment (issue 15: ~10 % of a restart's CPU in
        redis-py's pool and connection set-up, 1,000 groups, py-spy). Each claim is still its
        own atomic script call with its own reply."""
        call = protocol.claim_call(QueueKeys(queue, self.prefix), owner, release, replace)
        if release or replace:
            return (await self._run_claims(url, [call]))[0].result()
        batch = self._claims.setdefault(url, _Claims())
        future: asyncio.Future[protocol.Claim] = asyncio.get_running_loop().create_future()
        batch.pending.append((call, future))
        if batch.sender is None or batch.sender.done():
            batch.sender = asyncio.create_task(self._send_claims(url, batch))
        return await future

    async def _send_claims(self, url: str, batch: _Claims) -> None:
        """Send the waiting claims of ``url`` in pipelines until none waits; every claim's
        future gets its reply or a :class:`QueueUnavailable`."""
        await asyncio.sleep(0)  # the passes started in the same loop turn join this pipeline
        while batch.pending:
            chunk = batch.pending[: self.claim_batch]
            batch.pending = batch.pending[self.claim_batch :]
            try:
                answers = await self._run_claims(url, [call for call, _ in chunk])
                for (_, future), answer in zip(chunk, answers, strict=True):
                    if future.done():
                        continue
                    if answer.error is not None:
                        future.set_exception(answer.error)
                    else:
                        future.set_result(answer.result())
            except BaseException as exc:
                for _, future in chunk:
                    if not future.done():
                        future.set_exception(
                            exc
                            if isinstance(exc, QueueUnavailable)
                            else QueueUnavailable(f"Redis at {safe_host(url)}: not claimed")
                        )
                if isinstance(exc, asyncio.CancelledError):
                    raise

    async def _run_claims(
        self, url: str, calls: list[protocol.ScriptCall[protocol.Claim]]
    ) -> list[_Answer]:
        """Run ``calls`` at ``url``: one pipeline (Redis Cluster: the calls at once, each
        routed to its node); one answer per call, a :class:`QueueUnavailable` for a call that
        failed. Raises :class:`QueueUnavailable` when no client can be had."""
        try:
            client = await self.client(url)
            if is_cluster(client):
                replies = await asyncio.gather(
                    *(cast(Any, client).eval(*_claim_args(call)) for call in calls),
                    return_exceptions=True,
                )
            else:
                pipe = cast(Any, client).pipeline(transaction=False)
                for call in calls:
                    pipe.eval(*_claim_args(call))
                replies = await pipe.execute(raise_on_error=False)
        except (*REDIS_ERRORS, OSError) as exc:
            raise QueueUnavailable(
                f"Redis at {safe_host(url)} unreachable: {type(exc).__name__}"
            ) from None
        self.claim_round_trips += 1
        answers: list[_Answer] = []
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, BaseException):
                error = QueueUnavailable(
                    f"Redis at {safe_host(url)} unreachable: {type(reply).__name__}"
                )
                answers.append(_Answer(None, error))
            else:
                answers.append(_Answer(call.parse(reply), None))
        return answers

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
        """Close every pool, those waiting for their close too; claims still waiting fail."""
        for batch in self._claims.values():
            if batch.sender is not None:
                batch.sender.cancel()
            for _, future in batch.pending:
                if not future.done():
                    future.set_exception(QueueUnavailable("operator stopping"))
            batch.pending = []
        self._claims.clear()
        for task, client in list(self._closing.items()):
            task.cancel()
            await _close(client)
        self._closing.clear()
        for client, _ in self._clients.values():
            await _close(client)
        self._clients.clear()


@dataclass(frozen=True, slots=True)
class _Answer:
    """One claim's reply, or why it has none."""

    claim: protocol.Claim | None
    error: QueueUnavailable | None

    def result(self) -> protocol.Claim:
        """The claim; raises the error when the call failed."""
        if self.error is not None:
            raise self.error
        assert self.claim is not None
        return self.claim


def _claim_args(call: protocol.ScriptCall[protocol.Claim]) -> tuple[Any, ...]:
    """``EVAL``'s arguments for ``call``: the script, the key count, the keys, the args."""
    return (protocol.script_source(call.script), len(call.keys), *call.keys, *call.args)


async def _close(client: AsyncClient) -> None:
    """Close ``client``'s connections; errors of a connection already gone are ignored."""
    try:
        await cast(Any, client).aclose()
    except (*REDIS_ERRORS, OSError):
        pass
