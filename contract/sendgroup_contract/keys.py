"""Redis key names for one queue: Laravel's layout plus the keys this project adds.

Laravel (``Illuminate/Queue/RedisQueue.php``) names a queue ``<q>``'s keys ``queues:<q>``,
``queues:<q>:delayed``, ``queues:<q>:reserved`` and ``queues:<q>:notify``, behind an optional
client-side key prefix (Laravel 11's default is ``laravel_database_``). Every key this project
adds for the queue is ``queues:<q>:<suffix>``, so:

* a queue name carrying a Redis Cluster hash tag (``{mail-x}``) gives all of its keys the same
  tag, and multi-key scripts work on a cluster;
* purging queue ``mail-1`` deletes an explicit list of names and never touches ``mail-10``.

This module is the one place key names are spelled; everything else (the worker's queue core,
dump/restore, the operator's measurement and purge) asks a :class:`QueueKeys`. It is part of
:mod:`sendgroup_contract` and imports no I/O library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

#: Longest queue name, characters.
QUEUE_NAME_MAX: Final = 200
#: One piece of a queue name without braces and without ``..``: ``[A-Za-z0-9._-]*``, a dot
#: never next to a dot.
_PLAIN: Final = r"(?:\.?[A-Za-z0-9_-])*\.?"
#: A hash tag's text: non-empty, no braces, no ``..``.
_TAG: Final = r"(?:(?:\.?[A-Za-z0-9_-])+\.?|\.)"
#: Queue names we accept, the whole rule as one expression (Python ``re``, Go RE2 and Rust
#: ``regex`` read it alike): Laravel allows almost anything, we allow what is safe in a key, a
#: file name on the dumps volume and a label value once escaped. Characters
#: ``[A-Za-z0-9._{}-]``, starting with a letter, a digit or ``{``; no ``..`` (a path segment);
#: at most one hash tag ``{...}``, non-empty and balanced (Redis Cluster slots). No ``:``:
#: every key of ours is ``queues:<q>:<suffix>``, so a queue named ``mail-1:delayed`` would
#: share keys with queue ``mail-1``. 1..:data:`QUEUE_NAME_MAX` characters (``maxLength`` in
#: the CRD). The CRD's ``spec.queue`` pattern is this same expression
#: (``sendgroup_operator.models`` writes it into the schema), so the API server refuses
#: exactly the names :func:`validate_queue_name` refuses.
QUEUE_NAME_PATTERN: Final = (
    rf"^(?:[A-Za-z0-9]{_PLAIN}(?:\{{{_TAG}\}}{_PLAIN})?|\{{{_TAG}\}}{_PLAIN})$"
)
#: Use with ``fullmatch`` (as the API server's RE2 does): Python's ``$`` also matches before a
#: trailing newline, so ``match`` would accept ``"mail-1\n"``.
QUEUE_NAME_RE: Final = re.compile(QUEUE_NAME_PATTERN)

#: The live structures a dump moves aside, plus its ``meta`` record, in the order the dump's
#: scripts take them: ``QueueKeys.staging(name)`` for each is a staging key.
STAGING_NAMES: Final = ("ready", "delayed", "reserved", "failed", "failed:jobs", "meta")

_HASH_TAG_RE: Final = re.compile(r"\{([^{}]+)\}")


class InvalidQueueName(ValueError):
    """A queue name that cannot be used as a key, a path segment or a label."""


def validate_queue_name(queue: str) -> str:
    """Return ``queue`` unchanged if it is usable, else raise :class:`InvalidQueueName`.

    Rules (:data:`QUEUE_NAME_PATTERN`, the CRD's rule too): 1..200 characters from
    ``[A-Za-z0-9._{}-]``, starting with a letter, digit or ``{``, no ``..``, and at most one
    hash tag (``{...}``, non-empty, balanced). The checks before the pattern only pick the
    message.
    """
    if not 1 <= len(queue) <= QUEUE_NAME_MAX:
        raise InvalidQueueName(
            f"invalid queue name {queue!r}: use 1..{QUEUE_NAME_MAX} characters, not {len(queue)}"
        )
    if ".." in queue:
        raise InvalidQueueName(f"invalid queue name {queue!r}: '..' is not allowed")
    if queue.count("{") != queue.count("}") or queue.count("{") > 1:
        raise InvalidQueueName(
            f"invalid queue name {queue!r}: at most one balanced hash tag like '{{mail-x}}'"
        )
    if "{" in queue and hash_tag(queue) is None:
        raise InvalidQueueName(f"invalid queue name {queue!r}: empty or malformed hash tag")
    if not QUEUE_NAME_RE.fullmatch(queue):
        raise InvalidQueueName(
            f"invalid queue name {queue!r}: use characters of [A-Za-z0-9._{{}}-], "
            "starting with a letter, digit or '{'"
        )
    return queue


def hash_tag(name: str) -> str | None:
    """The Redis Cluster hash tag of ``name`` (the text inside the first ``{...}``), or None.

    Source: Redis Cluster specification, "Hash tags": only the first ``{`` and the first ``}``
    after it count, and an empty tag ``{}`` is no tag.
    """
    start = name.find("{")
    if start < 0:
        return None
    end = name.find("}", start + 1)
    if end <= start + 1:
        return None
    return name[start + 1 : end]


def outcome_stream_key(namespace: str, prefix: str = "") -> str:
    """A namespace's outcome stream, ``<prefix>sendgroups:<namespace>:outcomes``
    (``sendgroup_worker.loopback``)."""
    return f"{prefix}sendgroups:{namespace}:outcomes"


def suppression_set_key(namespace: str, prefix: str = "") -> str:
    """A namespace's suppression set, ``<prefix>sendgroups:<namespace>:suppressed``
    (``sendgroup_worker.loopback``)."""
    return f"{prefix}sendgroups:{namespace}:suppressed"


def provider_key(provider_id: str, suffix: str) -> str:
    """One key of a provider's pacing state, ``sendgroups:provider:{<id>}:<suffix>``
    (``sendgroup_worker.provider.ProviderKeys``): no client-side prefix (the state is not the
    producers'), all of a provider's keys under one hash tag; ``<id>`` = ``csp/<name>`` or
    ``sp/<namespace>/<name>``."""
    return f"sendgroups:provider:{{{provider_id}}}:{suffix}"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """All key names of one queue, with the client-side ``prefix`` applied.

    ``queue`` is the Laravel queue name (``mail-gmail``, ``{mail-x}``); ``prefix`` is what
    phpredis/predis prepend to every key (``""`` or ``laravel_database_``).
    """

    queue: str
    prefix: str = ""

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)

    @property
    def base(self) -> str:
        """``<prefix>queues:<queue>``: also the ready list's name."""
        return f"{self.prefix}queues:{self.queue}"

    def _sub(self, suffix: str) -> str:
        return f"{self.base}:{suffix}"

    # --- Laravel's four keys ------------------------------------------------------------
    @property
    def ready(self) -> str:
        """List of ready jobs (RPUSH at the tail, LPOP at the head)."""
        return self.base

    @property
    def delayed(self) -> str:
        """Sorted set of delayed jobs; score = unix seconds when the job becomes ready."""
        return self._sub("delayed")

    @property
    def reserved(self) -> str:
        """Sorted set of reserved jobs; score = unix seconds when the reservation expires."""
        return self._sub("reserved")

    @property
    def notify(self) -> str:
        """List of ``"1"`` tokens, one per ready job, for workers blocking on BLPOP."""
        return self._sub("notify")

    # --- keys this project adds -----------------------------------------------------------
    @property
    def failed(self) -> str:
        """Sorted set index of failed jobs: member = job uuid, score = failedAt (unix s)."""
        return self._sub("failed")

    @property
    def failed_jobs(self) -> str:
        """Hash of failed jobs: field = job uuid, value = JSON failed record."""
        return self._sub("failed:jobs")

    @property
    def stats(self) -> str:
        """Hash of counters since the group began: ``delivered``, ``failed``, ``released``."""
        return self._sub("stats")

    @property
    def sent(self) -> str:
        """Sorted set of idempotency markers: member = job uuid, score = sent at (unix s)."""
        return self._sub("sent")

    @property
    def ratelimit(self) -> str:
        """String: GCRA theoretical arrival time for the group's shared rate limit."""
        return self._sub("ratelimit")

    @property
    def ratelimit_ledger(self) -> str:
        """Hash: what the group's rate limit took since its epoch (``e``: created at, ``a``:
        microseconds of schedule added, ``l``: latest take), for safe give-backs
        (``sendgroup_worker/scripts/gcra.lua``)."""
        return self._sub("ratelimit:ledger")

    @property
    def backpressure(self) -> str:
        """Hash: run of temporary failures and the group's suspension deadline."""
        return self._sub("backpressure")

    @property
    def lock(self) -> str:
        """String: owner token of the dump/restore/purge lock, with an expiry."""
        return self._sub("lock")

    @property
    def restored(self) -> str:
        """Hash of restore progress: field = dump segment id, value = number of the segment's
        chunks already merged (makes restore idempotent; see ``sendgroup_worker.dumps``)."""
        return self._sub("restored")

    @property
    def purge_requested(self) -> str:
        """String set by the operator before it starts a purge Job; the purge deletes it with
        every other key, so its absence tells the operator the purge ran."""
        return self._sub("purge")

    @property
    def paused(self) -> str:
        """String set by the operator while the group is paused, cancelled or being deleted:
        ``reserve`` hands out no job while it exists, so a worker that starts (or has not yet
        received its SIGTERM) after the pause takes nothing. Kept through a dump; purged."""
        return self._sub("paused")

    @property
    def owner(self) -> str:
        """String naming the SendGroup that owns the queue (``<namespace>/<name>/<uid>``),
        set atomically by the claim script (``sendgroup_worker.queue.protocol.claim_call``).
        Not in :attr:`all_keys`: a purge (cancel) keeps the claim; only the owner's deletion
        releases it."""
        return self._sub("owner")

    def staging(self, name: str) -> str:
        """Staging copy of live key ``name`` (``ready``, ``delayed``, ``reserved``, ...) used
        while a dump runs; same hash tag, so the atomic move works on a cluster."""
        return self._sub(f"dump:{name}")

    @property
    def laravel_keys(self) -> tuple[str, str, str, str]:
        """(ready, delayed, reserved, notify), the order Laravel's scripts take them in."""
        return (self.ready, self.delayed, self.reserved, self.notify)

    @property
    def staging_data_keys(self) -> tuple[str, str, str, str, str]:
        """The staging copies of (ready, delayed, reserved, failed, failed:jobs): what dump
        writes to a segment and what restore unstages, in that order."""
        ready, delayed, reserved, failed, failed_jobs, _meta = STAGING_NAMES
        return (
            self.staging(ready),
            self.staging(delayed),
            self.staging(reserved),
            self.staging(failed),
            self.staging(failed_jobs),
        )

    @property
    def staging_meta(self) -> str:
        """Hash recording the segment id and ``createdAt`` of the dump in progress."""
        return self.staging(STAGING_NAMES[-1])

    @property
    def staging_keys(self) -> tuple[str, ...]:
        """Every staging key a dump may leave behind (data keys, then the meta record)."""
        return (*self.staging_data_keys, self.staging_meta)

    @property
    def all_keys(self) -> tuple[str, ...]:
        """Every key this queue can own: what purge deletes. Explicit names only, never a
        pattern, so ``mail-1`` never matches ``mail-10``."""
        return (
            *self.laravel_keys,
            self.failed,
            self.failed_jobs,
            self.stats,
            self.sent,
            self.ratelimit,
            self.ratelimit_ledger,
            self.backpressure,
            self.restored,
            self.purge_requested,
            self.paused,
            *self.staging_keys,
        )

    @property
    def slot_tag(self) -> str | None:
        """The hash tag shared by all keys, or None when the queue name has none."""
        return hash_tag(self.queue)
