"""One observer per Redis: batched measurements for every group, and a cheap idle watch.

The reaper daemons no longer make their own Redis round trip per pass. A pass asks
:meth:`Observer.measure` and gets one of:

* the full measurement (``sendgroup_contract.measure``), taken in a **batch**: every request
  that arrives while a batch is being sent waits for the next one, and a batch is one pipeline
  of ``EVALSHA measure.lua`` (up to :data:`BATCH` groups per round trip; the script is loaded
  once per connection on ``NOSCRIPT``);
* for an **idle** group (the last pass left it with an empty queue, no Deployment and nothing in
  motion: :meth:`Observer.settle`), the last full measurement with its clock moved on, without
  touching Redis, for up to :data:`IDLE_REFRESH` seconds.

While groups are idle, one task per Redis URL watches them. Its check is **one** ``EXISTS
ready delayed reserved ...`` over up to :data:`BATCH` groups (the key count comes back: zero
means every one of them is still empty). A nonzero count is resolved with one ``EXISTS`` per
group of that batch; each group with work leaves the idle set and its daemon is woken (the
``wake`` callback). The queue structures, not the ``notify`` list, are the signal: ``notify``
keeps tokens no worker popped, so it can exist while the queue is empty;
``ready``/``delayed``/``reserved`` exist exactly when the queue holds jobs (Redis deletes an
empty list or sorted set).

On standalone Redis and Sentinel (Redis >= 6.0) the check runs over a connection with **client
tracking** on (:class:`_Tracking`): Redis remembers the keys the check read and, the first time
one of them is modified, names it on a second connection subscribed to its invalidation
channel. An idle group is then woken by the push itself (milliseconds, not the next poll), and
an idle Redis sees no command at all between two safety checks (every :data:`TRACKED_RECHECK`
seconds; groups that just became idle are checked, and so tracked, within
:data:`POLL_INTERVAL`). Where tracking is refused (Redis < 6, an ACL user without ``CLIENT``,
a proxy) or on Redis Cluster the check runs every :data:`POLL_INTERVAL` seconds instead, and a
tracking connection that fails falls back to that until it can be opened again.

On Redis Cluster (keys of different groups live in different slots) a batch is one pipeline of
single-group commands (``EVAL`` per group for the measurement, ``EXISTS`` of the group's three
keys per group for the idle check), routed per node by the cluster client.

Costs at rest (``INFO commandstats`` counts the commands a script runs as well as the script
call): polled, an idle group costs ``3 x 60 / POLL_INTERVAL / BATCH`` key checks per minute
inside a shared ``EXISTS`` (``120 / groups per batch`` commands per minute, shared); tracked,
``60 / TRACKED_RECHECK`` shared ``EXISTS`` per batch per minute and one ``PING`` per Redis; plus
one full measurement (~15 commands) per :data:`IDLE_REFRESH` seconds either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, cast

import redis.asyncio
import redis.exceptions

from sendgroup_contract import measure as contract_measure
from sendgroup_contract.keys import QueueKeys
from sendgroup_contract.measure import QueueMeasure
from sendgroup_operator.queueio import QueueUnavailable, RedisQueues, safe_host
from sendgroup_worker.redisclient import REDIS_ERRORS, AsyncClient, is_cluster

#: Seconds between two idle checks of one Redis (the wake-up latency's main part).
POLL_INTERVAL: Final = 0.5
#: Seconds an idle group's full measurement is reused (its failed count and counters can only
#: change by hand meanwhile, e.g. ``sendgroup-worker failed forget``; anything that touches the
#: queue itself is seen by the idle check).
IDLE_REFRESH: Final = 1800.0
#: Groups per pipelined measurement batch and per idle ``EXISTS``.
BATCH: Final = 500
#: Seconds between two checks of every idle group of one Redis while client tracking works: a
#: safety net only (an invalidation is what wakes a group); also how often the invalidation
#: connection is asked for a ``PING`` to prove it is still there.
TRACKED_RECHECK: Final = 60.0
#: The channel Redis sends invalidations to in RESP2's redirect mode.
INVALIDATE_CHANNEL: Final = "__redis__:invalidate"

SCRIPT_SHA: Final = hashlib.sha1(contract_measure.SCRIPT.encode()).hexdigest()

log = logging.getLogger(__name__)


@dataclass
class _Entry:
    """What the observer knows of one group (key ``namespace/name``)."""

    url: str
    queue: str
    keys: QueueKeys
    #: The last full measurement and when it was taken (monotonic seconds).
    last: QueueMeasure | None = None
    taken: float = 0.0
    #: The last pass left the group idle: answer from ``last`` and watch it in the idle check.
    idle: bool = False


@dataclass
class _Pending:
    keys: QueueKeys
    future: asyncio.Future[QueueMeasure]


@dataclass
class _Redis:
    """Per Redis URL: the requests waiting for the next batch, the batch sender and the
    idle poller."""

    url: str
    pending: list[_Pending] = field(default_factory=list)
    sender: asyncio.Task[None] | None = None
    poller: asyncio.Task[None] | None = None
    #: The idle groups on this Redis: key -> the structures the idle check reads
    #: (:func:`_watched`), kept as groups settle and wake, not found by a scan of every group
    #: per poll.
    idle: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    #: The idle check's batches, ``(keys, their structures flattened)`` per ``batch`` groups,
    #: built once per change of ``idle`` (None: to be built). Before, every poll scanned
    #: every group and rebuilt every key name: ~60 % of the poll's CPU, and the poll ~30 % of
    #: the operator's CPU at rest (2,000 groups, 1,400 idle, py-spy; issue 15).
    chunks: list[tuple[list[str], list[str]]] | None = None
    #: Key name -> the idle group whose structure it is (what an invalidation names).
    owner: dict[str, str] = field(default_factory=dict)
    #: Groups that became idle since the last check (tracked: to be read, and so tracked).
    fresh: set[str] = field(default_factory=set)
    #: The client tracking connections while they work (:class:`_Tracking`).
    tracking: _Tracking | None = None
    #: Why this Redis refused client tracking (then it is polled; logged once).
    untracked: str | None = None


@dataclass
class Counts:
    """What the observer did since it started (for tests and the benchmark): round trips to
    Redis, full measurements, measurements answered from an idle group's last one, idle
    checks (one per group per check), groups found with work by the idle check (or named by
    an invalidation)."""

    round_trips: int = 0
    measured: int = 0
    reused: int = 0
    idle_checks: int = 0
    woken: int = 0
    #: key names Redis reported modified (client tracking)
    invalidations: int = 0


class Observer:
    """One per operator process (``Runtime.observer``): see the module docstring.

    ``wake(key)`` is called (in the event loop) for each idle group the idle check found with
    work; the operator passes ``Runtime.kick(key, 0)``.
    """

    def __init__(
        self,
        queues: RedisQueues,
        wake: Callable[[str], None],
        poll_interval: float = POLL_INTERVAL,
        idle_refresh: float = IDLE_REFRESH,
        batch: int = BATCH,
        track: bool = True,
        tracked_recheck: float = TRACKED_RECHECK,
    ) -> None:
        self.queues = queues
        self.wake = wake
        self.poll_interval = poll_interval
        self.idle_refresh = idle_refresh
        self.batch = batch
        #: use client tracking where Redis offers it (False: always poll)
        self.track = track
        self.tracked_recheck = tracked_recheck
        self.counts = Counts()
        self._entries: dict[str, _Entry] = {}
        self._redis: dict[str, _Redis] = {}

    # -- the daemons' side ---------------------------------------------------------------

    async def measure(self, key: str, url: str, queue: str) -> QueueMeasure:
        """The measurement of group ``key``'s ``queue`` on ``url``: the idle group's last one
        (clock moved on) while it stays idle and fresh, else a full one from the next batch.
        Raises :class:`QueueUnavailable` (as ``RedisQueues.measure``)."""
        entry = self._entries.get(key)
        if entry is None or entry.url != url or entry.queue != queue:
            if entry is not None:
                self._unwatch(key, entry)
            entry = _Entry(url, queue, QueueKeys(queue, self.queues.prefix))
            self._entries[key] = entry
        now = time.monotonic()
        last = entry.last
        if entry.idle and last is not None and now - entry.taken < self.idle_refresh:
            self.counts.reused += 1
            clock = None if last.measured_at is None else last.measured_at + (now - entry.taken)
            return dataclasses.replace(last, measured_at=clock)
        self._unwatch(key, entry)
        red = self._for(url)
        future: asyncio.Future[QueueMeasure] = asyncio.get_running_loop().create_future()
        red.pending.append(_Pending(entry.keys, future))
        if red.sender is None or red.sender.done():
            red.sender = asyncio.create_task(self._send(red))
        measured = await future
        if self._entries.get(key) is entry:
            entry.last, entry.taken = measured, time.monotonic()
        return measured

    def settle(self, key: str, idle: bool) -> bool:
        """After a pass: whether it left group ``key`` idle (empty queue, no Deployment,
        nothing in motion). Only a group whose last full measurement shows an empty queue with
        no dump, restore or purge in progress is taken as idle. Returns whether the group is
        now watched as idle (its jobs will wake it)."""
        entry = self._entries.get(key)
        if entry is None:
            return False
        m = entry.last
        entry.idle = (
            idle
            and m is not None
            and m.total == 0
            and m.staging == 0
            and not m.busy
            and not m.purge_requested
            and m.suspended_seconds == 0
        )
        red = self._for(entry.url)
        if entry.idle:
            if key not in red.idle:
                red.idle[key] = watched = _watched(entry.keys)
                red.owner.update(dict.fromkeys(watched, key))
                if not red.fresh and red.tracking is not None:
                    red.tracking.event.set()  # the watch may be waiting for its safety check
                red.fresh.add(key)
                red.chunks = None
            if red.poller is None or red.poller.done():
                red.poller = asyncio.create_task(self._poll(red))
        else:
            _drop(red, key)
        return entry.idle

    def invalidate(self, key: str) -> None:
        """The next measurement of ``key`` is a full one (e.g. the operator changed a marker)."""
        entry = self._entries.get(key)
        if entry is not None:
            self._unwatch(key, entry)

    def forget(self, key: str) -> None:
        """The group is gone."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._unwatch(key, entry)

    def _unwatch(self, key: str, entry: _Entry) -> None:
        """Group ``key`` is no longer idle: out of its Redis' idle check."""
        entry.idle = False
        red = self._redis.get(entry.url)
        if red is not None:
            _drop(red, key)

    def idle_groups(self) -> list[str]:
        """The keys of the groups watched by the idle check now."""
        return [k for red in self._redis.values() for k in red.idle]

    async def close(self) -> None:
        """Stop the senders and pollers (requests still waiting fail)."""
        for red in self._redis.values():
            for task in (red.sender, red.poller):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            for p in red.pending:
                if not p.future.done():
                    p.future.set_exception(QueueUnavailable("operator stopping"))
        self._redis.clear()

    # -- per Redis -----------------------------------------------------------------------

    def _for(self, url: str) -> _Redis:
        red = self._redis.get(url)
        if red is None:
            red = self._redis[url] = _Redis(url)
        return red

    def _unavailable(self, url: str, exc: BaseException) -> QueueUnavailable:
        return QueueUnavailable(f"Redis at {safe_host(url)} unreachable: {type(exc).__name__}")

    async def _send(self, red: _Redis) -> None:
        """Send batches until nothing waits: each takes up to ``batch`` waiting requests."""
        await asyncio.sleep(0)  # let the daemons woken in the same loop turn join this batch
        while red.pending:
            chunk, red.pending = red.pending[: self.batch], red.pending[self.batch :]
            try:
                await self._answer(red, chunk)
            except Exception:
                log.exception("measuring %d group(s) at %s failed", len(chunk), safe_host(red.url))
            finally:
                # Whatever happened (a client library's own bug, e.g. redis-py's cluster
                # pipeline raising TypeError; the operator stopping), every waiting group gets
                # an answer: a future left unresolved hangs that group's daemon (seen once on
                # the node: a Redis Cluster group stuck in Dumping, its status never refreshed).
                for p in chunk:
                    if not p.future.done():
                        p.future.set_exception(
                            QueueUnavailable(f"Redis at {safe_host(red.url)}: not measured")
                        )

    async def _answer(self, red: _Redis, chunk: list[_Pending]) -> None:
        """Measure one chunk of waiting requests and resolve each one's future."""
        try:
            client = await self.queues.client(red.url)
            replies = await self._measure_batch(client, red.url, [p.keys for p in chunk])
        except QueueUnavailable as exc:
            for p in chunk:
                if not p.future.done():
                    p.future.set_exception(QueueUnavailable(str(exc)))
            return
        except (*REDIS_ERRORS, OSError) as exc:
            for p in chunk:
                if not p.future.done():
                    p.future.set_exception(self._unavailable(red.url, exc))
            return
        for p, reply in zip(chunk, replies, strict=True):
            if p.future.done():
                continue
            if isinstance(reply, BaseException):
                p.future.set_exception(reply)
            else:
                p.future.set_result(reply)

    async def _measure_batch(
        self, client: AsyncClient, url: str, batch: list[QueueKeys]
    ) -> list[QueueMeasure | BaseException]:
        """One pipeline of measurements (a second one for the groups whose EVALSHA found no
        script: the script is then sent in full, which also loads it)."""
        cluster = is_cluster(client)
        out: list[QueueMeasure | BaseException | None] = [None] * len(batch)
        todo = list(range(len(batch)))
        for attempt in ("evalsha", "eval"):
            pipe = cast(Any, client).pipeline(transaction=False)
            sent: list[int] = []
            for i in todo:
                keys = batch[i]
                if cluster and keys.slot_tag is None:
                    out[i] = QueueUnavailable(
                        f"queue {keys.queue!r} has no hash tag, so on Redis Cluster its keys "
                        f"land in different slots; name it like '{{{keys.queue}}}' (spec.queue)"
                    )
                    continue
                script_keys = contract_measure.script_keys(keys)
                if attempt == "evalsha" and not cluster:
                    pipe.evalsha(SCRIPT_SHA, len(script_keys), *script_keys)
                else:
                    pipe.eval(contract_measure.SCRIPT, len(script_keys), *script_keys)
                sent.append(i)
            if not sent:
                break
            replies = await pipe.execute(raise_on_error=False)
            self.counts.round_trips += 1
            todo = []
            for i, reply in zip(sent, replies, strict=True):
                if isinstance(reply, redis.exceptions.NoScriptError):
                    todo.append(i)
                elif isinstance(reply, BaseException):
                    out[i] = self._unavailable(url, reply)
                else:
                    try:
                        out[i] = contract_measure.parse_reply(reply)
                        self.counts.measured += 1
                    except ValueError as exc:
                        out[i] = QueueUnavailable(f"bad measurement reply: {exc}")
            if not todo:
                break
        return [QueueUnavailable("not measured") if o is None else o for o in out]

    async def _poll(self, red: _Redis) -> None:
        """The idle watch of one Redis while it has idle groups: client tracking where it
        works (:meth:`_tracked_round`), else a check every ``poll_interval`` seconds. A failed
        check is logged (debug) and wakes every idle group of that Redis (their next passes
        measure in full and report the outage); the next round tries again."""
        checked = time.monotonic()  # the last check of every idle group
        fresh_checked = 0.0  # the last check of the groups that had just become idle
        try:
            while True:
                tracking = red.tracking
                if tracking is None:
                    await asyncio.sleep(self.poll_interval)
                else:
                    # until an invalidation, the next safety check or, with groups that just
                    # became idle (settle sets the event for the first), one poll interval
                    # after the last check of such groups (a burst is read in one batch)
                    now = time.monotonic()
                    wait = checked + self.tracked_recheck - now
                    if red.fresh:
                        wait = min(wait, fresh_checked + self.poll_interval - now)
                    await tracking.wait(wait)
                if not red.idle:
                    red.poller = None
                    return
                if red.tracking is None and self.track and red.untracked is None:
                    red.tracking = await self._open_tracking(red)
                    if red.tracking is not None:
                        red.fresh.update(red.idle)  # read once more, now tracked
                tracking = red.tracking
                if tracking is not None and tracking.broken:
                    log.debug("client tracking of %s lost: polling", safe_host(red.url))
                    red.tracking = None
                    await tracking.close()
                    tracking = None  # this round polls, the next one opens tracking again
                try:
                    if tracking is None:
                        found = await self._check_idle(red.url, self._chunks(red))
                        checked = time.monotonic()
                    else:
                        now = time.monotonic()
                        everything = now - checked >= self.tracked_recheck
                        fresh = bool(red.fresh) and now - fresh_checked >= self.poll_interval
                        found = await self._tracked_round(red, tracking, everything, fresh)
                        if everything:
                            checked = time.monotonic()
                        if everything or fresh:
                            fresh_checked = time.monotonic()
                except (QueueUnavailable, *REDIS_ERRORS, OSError) as exc:
                    log.debug("idle check of %s failed: %s", safe_host(red.url), exc)
                    await self._close_tracking(red)
                    for key in list(red.idle):
                        stale = self._entries.get(key)
                        if stale is not None:
                            self._unwatch(key, stale)
                        self.wake(key)
                    continue
                for key in found:
                    entry = self._entries.get(key)
                    if entry is not None and entry.idle:
                        self._unwatch(key, entry)
                        self.counts.woken += 1
                        self.wake(key)
        finally:
            if red.poller is None or red.poller is asyncio.current_task():
                await self._close_tracking(red)

    def _chunks(self, red: _Redis) -> list[tuple[list[str], list[str]]]:
        """Every idle group of ``red`` in batches (built once per change of its idle set)."""
        if red.chunks is None:
            red.chunks = self._batches(red, list(red.idle))
        red.fresh.clear()  # all of them are checked now
        return red.chunks

    def _batches(self, red: _Redis, keys: list[str]) -> list[tuple[list[str], list[str]]]:
        return [
            (part, [name for k in part for name in red.idle[k]])
            for part in (keys[i : i + self.batch] for i in range(0, len(keys), self.batch))
        ]

    async def _open_tracking(self, red: _Redis) -> _Tracking | None:
        """Client tracking for ``red``, or None: on Redis Cluster, where Redis refuses it
        (remembered and logged once: that Redis is polled from then on), or when it cannot
        be reached now (the round polls; the next one tries again)."""
        try:
            client = await self.queues.client(red.url)
            if is_cluster(client):
                red.untracked = "Redis Cluster"
                return None
            return await _Tracking.open(client)
        except redis.exceptions.ResponseError as exc:
            red.untracked = str(exc)
            log.info(
                "idle check of %s: no client tracking (%s); polling every %gs",
                safe_host(red.url),
                exc,
                self.poll_interval,
            )
        except (QueueUnavailable, *REDIS_ERRORS, OSError) as exc:
            log.debug("client tracking of %s: not now (%s)", safe_host(red.url), exc)
        return None

    async def _close_tracking(self, red: _Redis) -> None:
        tracking, red.tracking = red.tracking, None
        if tracking is not None:
            await tracking.close()

    async def _tracked_round(
        self, red: _Redis, tracking: _Tracking, everything: bool, fresh: bool
    ) -> list[str]:
        """One round of the tracked idle watch: the groups whose structures Redis named as
        modified, then a check over the tracked connection (which tracks what it reads) of the
        groups that just became idle when ``fresh``, of every idle group when ``everything``
        (the safety check, which also pings the invalidation connection and gives it up when
        the previous ping went unanswered) or when Redis said any key may have changed.
        Returns the groups with work or named by an invalidation."""
        names, flushed = tracking.take()
        self.counts.invalidations += len(names)
        named = {red.owner[n] for n in names if n in red.owner}
        if everything:
            if tracking.silent():
                raise redis.exceptions.ConnectionError("invalidation connection silent")
            await tracking.ping()
        if everything or flushed:
            keys, red.fresh = [k for k in red.idle if k not in named], set()
        elif fresh:
            keys = [k for k in red.fresh if k in red.idle and k not in named]
            red.fresh.clear()
        else:
            keys = []
        if keys:
            named.update(await self._with_work(tracking.exists, self._batches(red, keys), True))
        return list(named)

    async def _check_idle(self, url: str, chunks: list[tuple[list[str], list[str]]]) -> list[str]:
        """The keys of the idle groups whose queue holds jobs now (:meth:`_with_work` over a
        pipeline of the Redis' pooled client; one ``EXISTS`` per batch first except on Redis
        Cluster, where a batch's keys live in different slots)."""
        client = await self.queues.client(url)

        async def exists(commands: list[list[str]]) -> list[int]:
            pipe = cast(Any, client).pipeline(transaction=False)
            for names in commands:
                pipe.exists(*names)
            return [int(n) for n in await pipe.execute()]

        return await self._with_work(exists, chunks, not is_cluster(client))

    async def _with_work(
        self,
        exists: Callable[[list[list[str]]], Awaitable[list[int]]],
        chunks: list[tuple[list[str], list[str]]],
        batched: bool,
    ) -> list[str]:
        """The keys of the groups of ``chunks`` (per batch, the group keys and their watched
        structures flattened, ``_Redis.chunks``) whose queue holds jobs now. ``exists`` sends
        one ``EXISTS`` per list of key names in one round trip (a pipeline, polled; the
        tracked connection, :meth:`_Tracking.exists`). ``batched``: one ``EXISTS`` per batch
        first (a count of 0 clears the whole batch), then one per group of the batches with
        work only; else one per group."""
        self.counts.idle_checks += sum(len(keys) for keys, _ in chunks)
        if batched:
            counts = await exists([names for _, names in chunks])
            self.counts.round_trips += 1
            chunks = [c for c, n in zip(chunks, counts, strict=True) if n]
            if not chunks:
                return []
        candidates = [
            (key, names[3 * i : 3 * i + 3]) for keys, names in chunks for i, key in enumerate(keys)
        ]
        counts = await exists([watched for _, watched in candidates])
        self.counts.round_trips += 1
        return [key for (key, _), n in zip(candidates, counts, strict=True) if n]


def _watched(keys: QueueKeys) -> tuple[str, str, str]:
    """The structures that exist exactly when the queue holds jobs."""
    return (keys.ready, keys.delayed, keys.reserved)


def _drop(red: _Redis, key: str) -> None:
    """Group ``key`` leaves ``red``'s idle watch."""
    watched = red.idle.pop(key, None)
    if watched is not None:
        red.chunks = None
        red.fresh.discard(key)
        for name in watched:
            red.owner.pop(name, None)


class _Tracking:
    """Redis' client tracking used as a change feed for the idle watch (Redis >= 6.0,
    "Client-side caching in Redis", https://redis.io/docs/latest/develop/reference/client-side-caching/,
    and ``CLIENT TRACKING``): ``reads`` has ``CLIENT TRACKING ON REDIRECT <feed's id>``, so
    Redis remembers every key read over it (an ``EXISTS`` of a key that does not exist too)
    and, the first time such a key is modified (an ``RPUSH`` into a group's empty ready list
    creates it), publishes its name on ``__redis__:invalidate``, to which ``feed`` is
    subscribed (the redirect mode of RESP2). A key is reported once and then forgotten until it
    is read again; a null payload (``FLUSHALL``, ``FLUSHDB``) means any key may have changed.

    Two connections of the client's pool class (same address, credentials, TLS; Sentinel:
    the current master), outside the pool. ``feed`` is read by one task only, with a read
    time-out that redis-py answers with None (a cancelled or timed-out read would close it).
    """

    def __init__(self, feed: Any, reads: Any) -> None:
        self.feed = feed
        self.reads = reads
        #: Key names reported modified since the last :meth:`take`.
        self.names: set[str] = set()
        self.flushed = False
        #: The feed connection failed: the watch falls back to polling.
        self.broken = False
        self.event = asyncio.Event()
        self.heard = time.monotonic()
        self.pinged: float | None = None
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, client: redis.asyncio.Redis[bytes]) -> _Tracking:
        """Both connections, tracking on. Raises ``ResponseError`` when Redis refuses (no
        ``CLIENT TRACKING`` before 6.0; an ACL user without ``client`` or ``subscribe``),
        other Redis errors or ``OSError`` when it cannot be reached."""
        pool = client.connection_pool
        feed = pool.connection_class(**pool.connection_kwargs)
        reads = pool.connection_class(**pool.connection_kwargs)
        try:
            await feed.connect()
            await feed.send_command("CLIENT", "ID")
            feed_id = int(await feed.read_response())
            await feed.send_command("SUBSCRIBE", INVALIDATE_CHANNEL)
            await feed.read_response()
            await reads.connect()
            await reads.send_command("CLIENT", "TRACKING", "ON", "REDIRECT", feed_id)
            await reads.read_response()
        except BaseException:
            await feed.disconnect()
            await reads.disconnect()
            raise
        return cls(feed, reads)

    async def _read(self) -> None:
        try:
            while True:
                message = await self.feed.read_response(timeout=TRACKED_RECHECK)
                if message is None:  # nothing within the time-out: read on
                    continue
                self.heard = time.monotonic()
                if (
                    isinstance(message, list)
                    and len(message) == 3
                    and message[0] in (b"message", "message")
                ):
                    payload = message[2]
                    if payload is None:
                        self.flushed = True
                    else:
                        self.names.update(
                            n.decode() if isinstance(n, bytes) else str(n) for n in payload
                        )
                    self.event.set()
        except (*REDIS_ERRORS, OSError) as exc:
            log.debug("client tracking: the invalidation connection failed: %s", exc)
            self.broken = True
            self.event.set()

    async def wait(self, seconds: float) -> None:
        """Until an invalidation (or the feed's failure) or ``seconds`` passed."""
        if seconds > 0 and not self.event.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self.event.wait()

    def take(self) -> tuple[set[str], bool]:
        """The key names reported since the last call, and whether a flush was reported."""
        names, flushed = self.names, self.flushed
        self.names, self.flushed = set(), False
        self.event.clear()
        return names, flushed

    def silent(self) -> bool:
        """The last ``PING`` over the feed got no answer (a half-open connection)."""
        return self.pinged is not None and self.heard < self.pinged

    async def ping(self) -> None:
        """A ``PING`` over the feed (allowed while subscribed; its answer arrives as a
        message the reader notes)."""
        self.pinged = time.monotonic()
        # no health check: it would read the answer itself, beside the reader
        await self.feed.send_packed_command(self.feed.pack_command("PING"), check_health=False)

    async def exists(self, commands: list[list[str]]) -> list[int]:
        """One ``EXISTS`` per entry of ``commands`` (key names), pipelined over ``reads``."""
        await self.reads.send_packed_command(
            self.reads.pack_commands([("EXISTS", *names) for names in commands])
        )
        return [int(await self.reads.read_response()) for _ in commands]

    async def close(self) -> None:
        self.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.reader
        for conn in (self.feed, self.reads):
            with contextlib.suppress(Exception):
                await conn.disconnect()
