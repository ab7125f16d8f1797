"""Groups sharded over N operator replicas (issue 15): who owns a group, and when may a replica
act on what it owns. Pure: no kopf, no Kubernetes client, no clock of its own (every method
takes ``now``, monotonic seconds of the calling process).

**Assignment.** Rendezvous (highest-random-weight) hashing, Thaler & Ravishankar, "A
Name-Based Mapping Scheme for Rendezvous" (1996): a group's owner is the member with the
highest ``blake2b(member, uid)``. Every replica that sees the same members computes the same
owner with no coordination; a member that joins takes only the groups it now wins, a member
that leaves gives up only its own, each to the member that was second for it.

**Membership.** One Lease per replica (see ``shardlease.py``). Liveness is judged the way
client-go's leader election (``k8s.io/client-go/tools/leaderelection``) judges a leader: not
by the ``renewTime`` written in the record (another machine's clock) but by when THIS process
saw the record change, on its own monotonic clock. A record whose (holder, renewTime,
resourceVersion) did not change for ``lease_duration`` seconds of our observation is dead.

**Safety** (no group acted on by two replicas at once), with ``L = lease_duration`` seconds
and ``M = margin`` seconds:

(a) Self-fencing: a replica acts only while its last successful poll (its own Lease renewed
    AND the members listed), timed at the poll's START, is younger than ``L - M``. A replica
    that lost the API server stops before anyone else can drop it (rule c).
(b) A newly joined replica acts on nothing until it has been a member for ``L`` (from the
    moment its Lease was first written): by then every replica that still acts has polled
    after the join (rule a: its view is younger than ``L - M``), has seen it, and has stopped
    acting on the groups that moved to it.
(c) A member is dropped only after its Lease went unchanged for ``L`` of our observation:
    a listing of ours, sent at least ``L`` after the answer of the one that first showed its
    current record, still shows that record. Its last renewal started before that first
    listing was answered, so by rule (a) it stopped acting at least ``M`` seconds before we
    drop it; then its groups move. (The first sighting is dated at the listing's answer, not
    at our renewal before it: a slow LIST may read a renewal made seconds after our own.)
    The clock alone never drops a member: a replica cut off from the API server has no
    observation newer than its last poll, so it keeps every member it last saw alive until
    its own fence (rule a) closes. (Judging by ``now`` instead would let a cut-off replica
    drop a peer that is still renewing, and take that peer's groups before its own fence
    closed: found by the partition property test.)
(d) A replica that stops cleanly stops its passes, then deletes its Lease; the others see
    the Lease gone at their next poll and take its groups at once (no wait of ``L``).

A group is therefore never acted on by two replicas at once, as long as one pass does not
outlast the margins (a pass checks :meth:`Membership.may_act` when it starts; the Jobs it creates
have deterministic names, so a dump or purge Job is created once even if two passes raced).
Between an owner's loss and the takeover a group is acted on by nobody, for at most ``L`` plus
one poll period (``L / 3``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

#: Default seconds a member lives without a renewal seen (the Lease's leaseDurationSeconds).
DEFAULT_LEASE_DURATION: Final = 15.0
#: Share of the lease duration kept as the self-fencing margin (rule a).
MARGIN_SHARE: Final = 0.2
#: Lease durations a member's Lease must go unchanged before another member deletes it.
STALE_LIFETIMES: Final = 10.0


def weight(member: str, uid: str) -> int:
    """The rendezvous weight of ``member`` for object ``uid``: the first 8 bytes of
    ``blake2b(member NUL uid)`` as an unsigned integer (stable across processes and Python
    versions, unlike ``hash()``)."""
    digest = hashlib.blake2b(f"{member}\0{uid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(uid: str, members: Iterable[str]) -> str | None:
    """The member that owns ``uid`` (highest weight; ties broken by name), None without
    members."""
    best: tuple[int, str] | None = None
    for member in members:
        key = (weight(member, uid), member)
        if best is None or key > best:
            best = key
    return None if best is None else best[1]


def part(total: int, members: Sequence[str], member: str) -> int:
    """``member``'s part of a budget of ``total`` shared by ``members`` (the global worker
    cap): an equal split, the remainder to the first members by name, so the parts of one view
    add up to ``total``. ``total`` itself when ``member`` is not among ``members`` (alone)."""
    ordered = sorted(members)
    if member not in ordered:
        return total
    base, extra = divmod(total, len(ordered))
    return base + (1 if ordered.index(member) < extra else 0)


@dataclass(frozen=True)
class LeaseRecord:
    """What a poll saw of one member's Lease: ``holder`` (the member's identity) and the
    fields whose change proves it alive (``renew_time`` as written, ``resource_version``)."""

    holder: str
    renew_time: str | None
    resource_version: str

    @property
    def fingerprint(self) -> tuple[str | None, str]:
        """What must change between two polls for the member to count as alive."""
        return (self.renew_time, self.resource_version)


@dataclass
class _Seen:
    fingerprint: tuple[str | None, str]
    changed_at: float


@dataclass
class Membership:
    """This replica's view of the shard set. Feed it every successful poll (:meth:`polled`);
    ask it :meth:`may_act` before acting on a group, :meth:`view` for a snapshot.

    ``identity``: this replica's member name; ``lease_duration``: ``L`` in seconds;
    ``margin``: ``M`` in seconds (default ``MARGIN_SHARE * L``)."""

    identity: str
    lease_duration: float = DEFAULT_LEASE_DURATION
    margin: float | None = None
    #: member -> last fingerprint and when we saw it change (monotonic seconds).
    seen: dict[str, _Seen] = field(default_factory=dict)
    #: Start of our last poll that both renewed our Lease and listed the members (rule a).
    last_poll: float | None = None
    #: When our last listing was answered (rule c): the only observation members are judged by.
    observed_at: float | None = None
    #: When our Lease was first written successfully (rule b).
    joined_at: float | None = None
    #: True once we stop (rule d): we act on nothing any more.
    stopping: bool = False

    def __post_init__(self) -> None:
        if self.margin is None:
            self.margin = MARGIN_SHARE * self.lease_duration
        if not 0 <= self.margin < self.lease_duration:
            raise ValueError("margin must be >= 0 and below the lease duration")

    def polled(
        self, started: float, renewed: float, listed: float, records: Iterable[LeaseRecord]
    ) -> None:
        """One successful poll: our Lease written by a request that started at ``started``
        and was answered at ``renewed``, then the members listed by a request sent after that
        and answered at ``listed`` (``records``; monotonic seconds, ``started <= renewed <=
        listed``). The first poll is the join, timed at the renewal's answer (rule b waits at
        least ``L`` after our Lease existed); the poll counts for rule (a) from its start (the
        earlier moment). A member whose Lease is no longer listed is gone at once (rule d:
        deleted on a clean stop).

        Rule (c) needs two bounds. A member whose record changed is dated at ``listed``: the
        renewal that wrote it started before the listing read it, so before ``listed``, and
        that member stops acting at most ``L - M`` after it. A later listing judges the member
        at its poll's ``renewed`` (:attr:`observed_at`), before the listing read anything.
        Dating the change at ``renewed`` instead (as until 2026-12-05) let a slow LIST (up to
        ``L - M`` is accepted) see a renewal made long after ``renewed``: the member was
        dropped while it still acted (found by a fresh reader with this model: two members
        acting on one group for ~6 s, L=15)."""
        if self.joined_at is None:
            self.joined_at = renewed
        self.last_poll = started
        self.observed_at = renewed
        listed_now: dict[str, LeaseRecord] = {r.holder: r for r in records}
        for gone in set(self.seen) - set(listed_now):
            del self.seen[gone]
        for holder, record in listed_now.items():
            prev = self.seen.get(holder)
            if prev is None or prev.fingerprint != record.fingerprint:
                self.seen[holder] = _Seen(record.fingerprint, listed)

    def lost(self) -> None:
        """Our Lease was gone when we renewed it (deleted by someone): we join again."""
        self.joined_at = None

    def stale(self, now: float, lifetimes: float = STALE_LIFETIMES) -> tuple[str, ...]:
        """Members (not us) whose Lease went unchanged for ``lifetimes`` lease durations of our
        observation: long dead (a crash, a scale-down by SIGKILL); their Lease may be deleted.
        A member that was only cut off is fenced long before, and joins again (waiting ``L``)
        when its renewal finds its Lease gone. Judged by our last listing, like
        :meth:`members` (``now`` is accepted for symmetry; the clock alone judges nobody)."""
        del now
        if self.observed_at is None:
            return ()
        at = self.observed_at
        limit = lifetimes * self.lease_duration
        return tuple(
            sorted(
                m for m, s in self.seen.items() if m != self.identity and at - s.changed_at >= limit
            )
        )

    def members(self, now: float) -> tuple[str, ...]:
        """Live members, sorted (rule c: a Lease our last listing shows unchanged for ``L``
        is dead). Members change only at polls: ``now`` is accepted for symmetry with the
        other questions, and judges nobody."""
        del now
        if self.observed_at is None:
            return ()
        at = self.observed_at
        return tuple(
            sorted(m for m, s in self.seen.items() if at - s.changed_at < self.lease_duration)
        )

    def fenced(self, now: float) -> bool:
        """True when we may not act: stopping, never polled, our last poll too old (rule a),
        or joined less than ``L`` ago (rule b)."""
        assert self.margin is not None
        if self.stopping or self.last_poll is None or self.joined_at is None:
            return True
        if now - self.last_poll >= self.lease_duration - self.margin:
            return True
        return now - self.joined_at < self.lease_duration

    def next_change(self, now: float) -> float | None:
        """The next moment after ``now`` at which :meth:`view` changes by time alone (our
        join wait ends, our fence closes), None when nothing would. Members change only at
        polls (rule c), never by time alone."""
        assert self.margin is not None
        moments: list[float] = []
        if self.last_poll is not None:
            moments.append(self.last_poll + self.lease_duration - self.margin)
        if self.joined_at is not None:
            moments.append(self.joined_at + self.lease_duration)
        future = [m for m in moments if m > now]
        return min(future) if future else None

    def may_act(self, uid: str, now: float) -> bool:
        """Whether this replica may act on object ``uid`` at ``now``: it owns it among the
        live members and is not fenced (rules a-d)."""
        return not self.fenced(now) and owner(uid, self.members(now)) == self.identity

    def view(self, now: float) -> View:
        """A snapshot at ``now`` (two equal views assign every object alike)."""
        return View(self.identity, self.members(now), self.fenced(now))


@dataclass(frozen=True)
class View:
    """Members and whether we are fenced, as of one moment. Equal views assign every group
    to the same member (compare two views to know whether anything moved)."""

    identity: str
    members: tuple[str, ...]
    fenced: bool

    def owner(self, uid: str) -> str | None:
        """The member owning ``uid`` in this view."""
        return owner(uid, self.members)

    def owns(self, uid: str) -> bool:
        """Whether we may act on ``uid`` in this view (owner, and not fenced)."""
        return not self.fenced and self.owner(uid) == self.identity

    def owned(self, uids: Sequence[str]) -> int:
        """How many of ``uids`` we may act on."""
        return sum(1 for uid in uids if self.owns(uid))
