"""The loop back to the app: a per-message outcome stream and a suppression set, per namespace.

Two Redis keys per Kubernetes namespace (``<ns>`` = ``SENDGROUP_NAMESPACE``, which the operator
sets on every worker pod; ``default`` when unset), behind the producers' key prefix
(``SENDGROUP_KEY_PREFIX``), so a Laravel app reads them through its usual phpredis connection:

* ``sendgroups:<ns>:outcomes``, a stream: the workers add one entry per attempt of a mail job;
  the app reads it (``XREAD`` / ``XREADGROUP``);
* ``sendgroups:<ns>:suppressed``, a set of lower-case addresses: the app adds an address on an
  unsubscribe or a bounce (``SADD``); the workers check it right before each send.

Outcome entries (``XADD <key> MAXLEN ~ <n> * field value ...``, all values text):

* ``uuid``: the job's uuid (also the ``X-SendGroup-Job`` header and the mail's Message-ID);
* ``outcome``: ``delivered`` (the relay accepted it), ``deferred`` (a temporary failure,
  retried after ``retryIn`` seconds), ``failed`` (a permanent failure or no tries left: the job
  is in the failed list), ``suppressed`` (every recipient is in the suppression set: not
  mailed, the job is deleted);
* ``reply``: the SMTP reply (``250 2.0.0 Ok: queued``, ``550 5.1.1 no such user``) or reason;
* ``exception``: for ``failed``/``deferred``, the failed-record class
  (``SmtpPermanentFailure``, ``SmtpTemporaryFailure``, ``MaxAttemptsExceededException``, ...);
* ``to``: the envelope recipients, comma-separated; ``suppressed``: recipients left out
  because they are in the suppression set;
* ``attempt``: the attempt number (1 = first); ``retryIn``: seconds until the retry;
* ``queue``, ``group``: the queue and the SendGroup; ``at``: unix seconds (Redis clock).

Delivery is at least once: an entry is written before the job's outcome is committed to the
queue, or with it: on one server or a Sentinel service a ``delivered`` entry rides in the
script that acknowledges the job (:meth:`Loopback.entry`, ``queue.protocol.StreamEntry``), so
the two land together; on Redis Cluster (the stream lies in another slot) and for the other
outcomes it is an XADD of its own, before the commit, so a worker killed in between writes it
again on the job's next attempt (consumers key on ``uuid`` + ``outcome``; the last entry of a
uuid is its latest state). An entry Redis refuses inside the acknowledging script (an app
overwrote the key with another type) is counted and logged, and the mail stays delivered.
The stream is capped with ``MAXLEN ~`` (``OUTCOME_STREAM_MAXLEN``, default 100,000 entries;
Redis trims whole macro nodes, so it may hold a little more); ``0`` turns it off.

The suppression set is checked once the SMTP connection is ready, right before MAIL
FROM/RCPT/DATA, so an address added while a group was paused or dumped for days is never mailed:
on one server or a Sentinel service inside the queue's ``begin_send`` script (one round trip for
the job's last check and the recipients, ``queue.protocol.begin_screen_call``); on Redis Cluster
in a round trip of its own (``SISMEMBER`` per recipient, pipelined). Addresses are compared
lower-cased. Suppressed recipients are left out of the envelope; when none is left, the job ends
``suppressed`` (deleted, counted neither delivered nor failed). A Redis error during the check
fails the attempt (retried later): no mail goes out unchecked.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import redis.asyncio

from sendgroup_contract import keys as contract_keys
from sendgroup_worker.queue.protocol import StreamEntry
from sendgroup_worker.redisclient import is_cluster

#: Outcome values of a stream entry.
DELIVERED: Final = "delivered"
DEFERRED: Final = "deferred"
FAILED: Final = "failed"
SUPPRESSED: Final = "suppressed"

#: Default cap of the outcome stream (entries, approximate).
DEFAULT_MAXLEN: Final = 100_000

#: Namespace used when ``SENDGROUP_NAMESPACE`` is unset (a worker run by hand).
DEFAULT_NAMESPACE: Final = "default"


def outcome_stream_key(namespace: str, prefix: str = "") -> str:
    """``<prefix>sendgroups:<namespace>:outcomes`` (spelled in :mod:`sendgroup_contract.keys`)."""
    return contract_keys.outcome_stream_key(namespace or DEFAULT_NAMESPACE, prefix)


def suppression_set_key(namespace: str, prefix: str = "") -> str:
    """``<prefix>sendgroups:<namespace>:suppressed`` (spelled in
    :mod:`sendgroup_contract.keys`)."""
    return contract_keys.suppression_set_key(namespace or DEFAULT_NAMESPACE, prefix)


def normalize(address: str) -> str:
    """How an address is stored in and compared with the suppression set: stripped,
    lower-cased (bare address, no display name)."""
    return address.strip().lower()


@dataclass(frozen=True, slots=True)
class Outcome:
    """One stream entry (see the module table); ``fields()`` gives what XADD writes."""

    uuid: str
    outcome: str
    reply: str
    attempt: int
    at: float
    queue: str
    group: str = ""
    to: Sequence[str] = ()
    suppressed: Sequence[str] = ()
    exception: str = ""
    retry_in: float | None = None

    def fields(self) -> dict[str, str]:
        """The entry's field -> value pairs (empty optional fields left out)."""
        out = {
            "uuid": self.uuid,
            "outcome": self.outcome,
            "reply": self.reply,
            "attempt": str(self.attempt),
            "at": f"{self.at:.3f}",
            "queue": self.queue,
        }
        optional: Mapping[str, str] = {
            "group": self.group,
            "to": ",".join(self.to),
            "suppressed": ",".join(self.suppressed),
            "exception": self.exception,
            "retryIn": "" if self.retry_in is None else f"{self.retry_in:g}",
        }
        out.update({k: v for k, v in optional.items() if v})
        return out


class Loopback:
    """The worker's side: write outcomes (:meth:`record`), screen recipients (:meth:`screen`).

    ``stream``/``suppressed``: key names, None to turn either off; ``maxlen``: the stream cap.
    Redis errors propagate (the worker retries them)."""

    def __init__(
        self,
        client: redis.asyncio.Redis[bytes],
        stream: str | None,
        suppressed: str | None,
        maxlen: int = DEFAULT_MAXLEN,
    ) -> None:
        self.client = client
        self.stream = stream if maxlen > 0 else None
        self.suppressed = suppressed
        self.maxlen = maxlen

    def bind(self, client: redis.asyncio.Redis[bytes]) -> Loopback:
        """The same keys and cap on another client of the same Redis (a lane's held
        connection); ``self`` when ``client`` is this one's."""
        if client is self.client:
            return self
        return Loopback(client, self.stream, self.suppressed, self.maxlen)

    def entry(self, outcome: Outcome) -> StreamEntry | None:
        """``outcome`` as an entry the acknowledging queue script writes itself (one round
        trip less per mail, and the entry lands with the acknowledgement, atomically); None
        when the stream is off or the client is a Redis Cluster's (the stream's key lies in
        another slot than the queue's: :meth:`record` it instead)."""
        if self.stream is None or is_cluster(self.client):
            return None
        fields = [text for pair in outcome.fields().items() for text in pair]
        return StreamEntry(self.stream, self.maxlen, tuple(fields))

    async def record(self, outcome: Outcome) -> None:
        """XADD one entry (no-op when the stream is off)."""
        if self.stream is None:
            return
        await self.client.xadd(
            self.stream,
            outcome.fields(),
            maxlen=self.maxlen,
            approximate=True,
        )

    @property
    def screens_in_queue_scripts(self) -> bool:
        """Whether the suppression check can ride in the queue's ``begin_send`` script (the
        set is on and the client is not a Redis Cluster's: there the set's key lies in
        another slot than the queue's)."""
        return self.suppressed is not None and not is_cluster(self.client)

    async def screen(self, recipients: Sequence[str]) -> Collection[str]:
        """The recipients (as given) that are in the suppression set; one round trip:
        ``SISMEMBER`` alone for one recipient (most mails: a pipeline object cost the worker
        about twice the CPU for the same round trip), pipelined for several. ``SISMEMBER``
        only, the command the tenant ACLs grant (``tenancy.py``, docs/security.md)."""
        if self.suppressed is None or not recipients:
            return ()
        if len(recipients) == 1:
            client: Any = self.client  # redis-py's async sismember is typed as a union
            hit: int = await client.sismember(self.suppressed, normalize(recipients[0]))
            return set(recipients) if hit else ()
        async with self.client.pipeline(transaction=False) as pipe:
            for recipient in recipients:
                pipe.sismember(self.suppressed, normalize(recipient))
            flags = await pipe.execute()
        return {r for r, hit in zip(recipients, flags, strict=True) if hit}
