"""This replica's membership in the shard set (issue 15): its Lease, the poll that renews it
and lists the others, and what the handlers ask (:meth:`Shard.may_act`, :meth:`Shard.changed`).

One ``coordination.k8s.io/v1`` Lease per replica in the operator's namespace, labelled
``app.kubernetes.io/name: sendgroup-operator``, ``app.kubernetes.io/component: shard-member``
and ``sendgroups.io/shard-set: <set>``; ``spec.holderIdentity`` is the replica's identity
(``POD_ID``, else the host name: a StatefulSet pod's name, or the chart's instance name).
Every ``lease_duration / 3`` seconds: one conditional merge patch of our Lease (a conflict
means another process holds our identity: logged, and we join again) and ONE list of the set
(never a call per group or per namespace). The decisions are :mod:`sharding` (pure).

**A slow or refused poll.** A poll counts from its start (rule a of :mod:`sharding`), so one
that takes longer than the fence (``L - M``) cannot unfence this replica even when it succeeds.
Every Lease request therefore gets the time left of that budget as its timeout, the requests
run on a client of their own (:meth:`Kube.dedicated`: own threads and connections, so a backlog
of the operator's other calls cannot delay them, and no retry inside the client: urllib3 would
otherwise retry a list answered 429 with Retry-After three times, sleeping Retry-After each
time), and a failed poll is tried again after ``2 L / 15`` (client-go leader election's retry
period, 2 s of 15 s) instead of ``L / 3``. Failing sooner is always safe: only a SUCCESSFUL poll
lets a replica act (rule a), and the fence is unchanged. A renewal whose outcome is unknown (it
timed out, the connection broke) forgets the Lease's resourceVersion, so the next renewal takes
the Lease over (create, 409, plain patch) instead of taking its own applied renewal for another
holder's and joining again.

API Priority and Fairness: the chart's FlowSchema (``sharding.flowSchema``) gives these
requests the API server's ``leader-election`` priority level, apart from kopf's traffic.

Waiting without polling: :meth:`Shard.changed` is an event set (and replaced) whenever the
assignment this replica sees changes (a member joined or left, we became fenced or unfenced);
a reaper daemon of a group it does not own waits on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import socket
import time
from datetime import UTC, datetime
from typing import Any, Final

from sendgroup_operator import metrics, sharding
from sendgroup_operator.kube import Kube, KubeError
from sendgroup_operator.settings import Settings

LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_SET: Final = "sendgroups.io/shard-set"
COMPONENT: Final = "shard-member"
#: Share of the lease duration after which a FAILED poll is tried again (client-go's leader
#: election: RetryPeriod 2 s with LeaseDuration 15 s); a successful one waits ``L / 3``.
RETRY_SHARE: Final = 2 / 15
#: Seconds a Lease request gets at least, even when the poll's budget is nearly spent.
MIN_REQUEST_TIMEOUT: Final = 0.5

Logger = logging.Logger | logging.LoggerAdapter[Any]


def identity() -> str:
    """This replica's member name: ``POD_ID`` (kopf's own variable), else the host name."""
    return os.environ.get("POD_ID") or socket.gethostname()


def lease_name(shard_set: str, member: str) -> str:
    """``<set>-<member>`` as a DNS subdomain name; a long one is shortened with a hash."""
    name = re.sub(r"[^a-z0-9.-]+", "-", f"{shard_set}-{member}".lower()).strip("-.")
    if len(name) > 63:
        digest = hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
        name = f"{name[:54].rstrip('-.')}-{digest}"
    return name


def _micro_time(epoch: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record(lease: dict[str, Any]) -> sharding.LeaseRecord | None:
    """The member a listed Lease stands for (None without a holder)."""
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if not holder:
        return None
    return sharding.LeaseRecord(
        holder=str(holder),
        renew_time=spec.get("renewTime"),
        resource_version=str(lease.get("metadata", {}).get("resourceVersion", "")),
    )


class Shard:
    """This replica's membership (one per process, in ``Runtime.shard``)."""

    def __init__(self, kube: Kube, settings: Settings, member: str | None = None) -> None:
        self.kube = kube
        self.namespace = settings.namespace
        self.shard_set = settings.shard_set
        self.duration = settings.shard_lease_duration
        self.membership = sharding.Membership(member or identity(), self.duration)
        self.name = lease_name(self.shard_set, self.membership.identity)
        self.selector = (
            f"{LABEL_NAME}=sendgroup-operator,{LABEL_COMPONENT}={COMPONENT},"
            f"{LABEL_SET}={self.shard_set}"
        )
        #: Object uids whose passes this replica runs or waits to run: key -> uid.
        self.groups: dict[str, str] = {}
        #: Passes in flight (a clean stop waits for them before deleting the Lease).
        self.busy = 0
        self._version: str | None = None
        self._changed = asyncio.Event()
        self._view: sharding.View | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._failing = False

    @property
    def identity(self) -> str:
        """This replica's member name."""
        return self.membership.identity

    def changed(self) -> asyncio.Event:
        """The event set at the next change of the assignment (take it BEFORE checking
        :meth:`may_act`, then wait on it: a change in between is not lost)."""
        return self._changed

    def may_act(self, uid: str) -> bool:
        """Whether this replica may act on object ``uid`` now (see :mod:`sharding`)."""
        return self.membership.may_act(uid, time.monotonic())

    def part(self, total: int) -> int:
        """This replica's part of a budget shared by the live members (the global cap)."""
        members = self.membership.members(time.monotonic())
        return sharding.part(total, members, self.identity)

    def owner(self, uid: str) -> str | None:
        """The live member owning ``uid`` in our view (maybe one still joining)."""
        return sharding.owner(uid, self.membership.members(time.monotonic()))

    # --- the poll -------------------------------------------------------------------------
    @property
    def budget(self) -> float:
        """Seconds a poll may take and still unfence us: the fence, ``L - M`` (rule a)."""
        return self.duration - (self.membership.margin or 0)

    def _timeout(self, started: float) -> float:
        """The timeout of the poll's next request: what is left of its budget."""
        return max(MIN_REQUEST_TIMEOUT, started + self.budget - time.monotonic())

    async def poll(self, logger: Logger) -> bool:
        """Renew our Lease and list the set, each request timed out at what is left of the
        poll's budget; True when both succeeded. On failure log once per failing streak (the
        fencing rule stops our passes if it lasts)."""
        started = time.monotonic()
        ok = False
        try:
            await self._renew(logger, started)
            renewed = time.monotonic()
            leases = await self.kube.list_leases(
                self.namespace, self.selector, timeout=self._timeout(started)
            )
            listed = time.monotonic()
            records = [r for r in map(record, leases) if r is not None]
            self.membership.polled(started, renewed, listed, records)
            ok = True
            await self._forget_stale(leases, logger)
            if self._failing:
                logger.info("shard: Lease %s renewed again", self.name)
            self._failing = False
        except (KubeError, OSError) as exc:
            if isinstance(exc, KubeError) and exc.status == 0:
                self._version = None  # a renewal's outcome may be unknown: take it over next
            if not self._failing:
                logger.warning(
                    "shard: cannot renew Lease %s or list the set: %s (this replica stops "
                    "acting %.0f s after its last renewal)",
                    self.name,
                    exc,
                    self.duration - (self.membership.margin or 0),
                )
            self._failing = True
        self.publish(logger)
        return ok

    async def _forget_stale(self, leases: list[dict[str, Any]], logger: Logger) -> None:
        """Delete the Leases of members long dead (:meth:`sharding.Membership.stale`), so a
        crashed or removed replica's Lease does not stay forever (and a starting replica does
        not count it live for its first lease duration)."""
        stale = set(self.membership.stale(time.monotonic()))
        for lease in leases:
            rec = record(lease)
            if rec is not None and rec.holder in stale:
                name = lease["metadata"]["name"]
                await self.kube.delete_lease(self.namespace, name, timeout=self.budget)
                logger.info("shard: deleted the stale Lease of %s", rec.holder)

    async def _renew(self, logger: Logger, started: float) -> None:
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.duration)),
            "renewTime": _micro_time(time.time()),
        }
        if self._version is not None:
            patch: dict[str, Any] = {
                "metadata": {"resourceVersion": self._version},
                "spec": spec,
            }
            try:
                stored = await self.kube.patch_lease(
                    self.namespace, self.name, patch, timeout=self._timeout(started)
                )
            except KubeError as exc:
                if exc.status != 409:
                    raise
                logger.error(
                    "shard: Lease %s was changed by someone else: is another replica running "
                    "with identity %s? Joining again",
                    self.name,
                    self.identity,
                )
                self.membership.lost()
                stored = await self.kube.patch_lease(
                    self.namespace, self.name, {"spec": spec}, timeout=self._timeout(started)
                )
            if stored is not None:
                self._version = str(stored["metadata"]["resourceVersion"])
                return
            self.membership.lost()  # deleted under us: join again
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {
                    LABEL_NAME: "sendgroup-operator",
                    LABEL_COMPONENT: COMPONENT,
                    LABEL_SET: self.shard_set,
                },
            },
            "spec": {**spec, "acquireTime": spec["renewTime"]},
        }
        try:
            stored = await self.kube.create_lease(body, timeout=self._timeout(started))
        except KubeError as exc:
            if exc.status != 409:
                raise
            # our own Lease from before a restart (same identity): take it over
            stored = (
                await self.kube.patch_lease(
                    self.namespace, self.name, {"spec": spec}, timeout=self._timeout(started)
                )
                or {}
            )
        self._version = str(stored.get("metadata", {}).get("resourceVersion", "")) or None

    def publish(self, logger: Logger) -> None:
        """Compare the current view with the last one: on a change, log it, set the
        metrics and wake the waiting daemons. Schedules itself for the next moment the view
        changes by time alone (a member's expiry, our join wait, our fence)."""
        now = time.monotonic()
        view = self.membership.view(now)
        if view != self._view:
            owned = view.owned(list(self.groups.values()))
            logger.info(
                "shard: members %s; this replica (%s) %s %d of %d groups",
                ",".join(view.members) or "-",
                self.identity,
                "acts on nothing yet (joining, stopping, or its Lease not renewed):"
                if view.fenced
                else "owns",
                owned,
                len(self.groups),
            )
            metrics.OWNED_GROUPS.set(owned)
            metrics.SHARD_MEMBERS.set(len(view.members))
            self._view = view
            self._changed.set()
            self._changed = asyncio.Event()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        at = self.membership.next_change(now)
        if at is not None:
            self._timer = asyncio.get_running_loop().call_later(
                max(0.0, at - now) + 0.01, self.publish, logger
            )

    def count(self) -> None:
        """Refresh ``sendgroup_operator_owned_groups`` (a group came or went)."""
        now = time.monotonic()
        metrics.OWNED_GROUPS.set(self.membership.view(now).owned(list(self.groups.values())))

    async def run(self, logger: Logger) -> None:
        """Poll every ``lease_duration / 3`` seconds until cancelled; after a failed poll,
        ``RETRY_SHARE * lease_duration`` seconds."""
        while True:
            ok = await self.poll(logger)
            await asyncio.sleep(self.duration / 3 if ok else RETRY_SHARE * self.duration)

    async def leave(self, logger: Logger, wait: float = 10.0) -> None:
        """A clean stop (rule d): act on nothing any more, wait up to ``wait`` seconds for
        the passes in flight, then delete our Lease so the others take over at once. A pass
        still running after ``wait`` keeps the Lease: the others then take our groups as
        after a crash (rule c, about ``4/3 L`` later), not while that pass may still act
        (before 2026-12-05 the Lease was deleted regardless: found by a fresh reader)."""
        self.membership.stopping = True
        self.publish(logger)
        if self._timer is not None:
            self._timer.cancel()
        deadline = time.monotonic() + wait
        while self.busy and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if self.busy:
            logger.warning(
                "shard: %d pass(es) still running after %.0f s; Lease %s kept, the others "
                "take our groups once it expires",
                self.busy,
                wait,
                self.name,
            )
            return
        with contextlib.suppress(KubeError, OSError):
            await self.kube.delete_lease(self.namespace, self.name, timeout=self.budget)
            logger.info("shard: left the set (Lease %s deleted)", self.name)
