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

While groups are idle, one task per Redis URL checks them every :data:`POLL_INTERVAL` seconds
with **one** ``EXISTS ready delayed reserved ...`` over up to :data:`BATCH` groups (the key
count comes back: zero means every one of them is still empty; standalone and Sentinel). A
nonzero count is resolved with one ``EXISTS`` per group of that batch; each group with work
leaves the idle set and its daemon is woken (the ``wake`` callback), so jobs pushed to an idle
group get a full measurement and a plan within about one poll interval. The queue structures,
not the ``notify`` list, are the signal: ``notify`` keeps tokens no worker popped, so it can
exist while the queue is empty; ``ready``/``delayed``/``reserved`` exist exactly when the queue
holds jobs (Redis deletes an empty list or sorted set).

On Redis Cluster (keys of different groups live in different slots) a batch is one pipeline of
single-group commands (``EVAL`` per group for the measurement, ``EXISTS`` of the group's three
keys per group for the idle check), routed per node by the cluster client.

Costs at rest (``INFO commandstats`` counts the commands a script runs as well as the script
call): an idle group costs ``3 x 60 / POLL_INTERVAL / BATCH`` key checks per minute inside a
shared ``EXISTS`` (``120 / groups per batch`` commands per minute, shared), plus one full
measurement (~15 commands) per :data:`IDLE_REFRESH` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, cast

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


@dataclass
class Counts:
    """What the observer did since it started (for tests and the benchmark): round trips to
    Redis, full measurements, measurements answered from an idle group's last one, idle
    checks (one per group per poll), groups found with work by the idle check."""

    round_trips: int = 0
    measured: int = 0
    reused: int = 0
    idle_checks: int = 0
    woken: int = 0


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
    ) -> None:
        self.queues = queues
        self.wake = wake
        self.poll_interval = poll_interval
        self.idle_refresh = idle_refresh
        self.batch = batch
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
                red.idle[key] = _watched(entry.keys)
                red.chunks = None
            if red.poller is None or red.poller.done():
                red.poller = asyncio.create_task(self._poll(red))
        elif red.idle.pop(key, None) is not None:
            red.chunks = None
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
        if red is not None and red.idle.pop(key, None) is not None:
            red.chunks = None

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
        """The idle check of one Redis, every ``poll_interval`` seconds while it has idle
        groups; errors are logged (debug) and the next poll tries again."""
        while True:
            await asyncio.sleep(self.poll_interval)
            if not red.idle:
                red.poller = None
                return
            if red.chunks is None:
                keys = list(red.idle)
                red.chunks = [
                    (part, [name for k in part for name in red.idle[k]])
                    for part in (keys[i : i + self.batch] for i in range(0, len(keys), self.batch))
                ]
            try:
                found = await self._check_idle(red.url, red.chunks)
            except (QueueUnavailable, *REDIS_ERRORS, OSError) as exc:
                # the groups' next passes, woken now (an idle group's daemon may sleep
                # SENDGROUP_IDLE_PASS_INTERVAL), measure in full, so each reports the outage
                # (its QueueError condition) as it did without the observer
                log.debug("idle check of %s failed: %s", safe_host(red.url), exc)
                for key in list(red.idle):
                    stale = self._entries.get(key)
                    if stale is not None:
                        self._unwatch(key, stale)
                    self.wake(key)
                red.idle.clear()
                red.chunks = None
                continue
            for key in found:
                entry = self._entries.get(key)
                if entry is not None and entry.idle:
                    self._unwatch(key, entry)
                    self.counts.woken += 1
                    self.wake(key)

    async def _check_idle(self, url: str, chunks: list[tuple[list[str], list[str]]]) -> list[str]:
        """The keys of the idle groups whose queue holds jobs now; ``chunks``: per batch, the
        group keys and their watched structures flattened (``_Redis.chunks``)."""
        client = await self.queues.client(url)
        self.counts.idle_checks += sum(len(keys) for keys, _ in chunks)
        if not is_cluster(client):
            pipe = cast(Any, client).pipeline(transaction=False)
            for _, names in chunks:
                pipe.exists(*names)
            counts = await pipe.execute()
            self.counts.round_trips += 1
            chunks = [c for c, n in zip(chunks, counts, strict=True) if int(n)]
            if not chunks:
                return []
        candidates = [
            (key, names[3 * i : 3 * i + 3]) for keys, names in chunks for i, key in enumerate(keys)
        ]
        pipe = cast(Any, client).pipeline(transaction=False)
        for _, watched in candidates:
            pipe.exists(*watched)
        counts = await pipe.execute()
        self.counts.round_trips += 1
        return [key for (key, _), n in zip(candidates, counts, strict=True) if int(n)]


def _watched(keys: QueueKeys) -> tuple[str, str, str]:
    """The structures that exist exactly when the queue holds jobs."""
    return (keys.ready, keys.delayed, keys.reserved)
