"""The planner's inputs and outputs: plain data, no I/O.

Inputs: :class:`Group` (the object's metadata), :class:`Observed` (its children as the adapter
saw them), a :data:`Measurement` of its queue. Outputs: a :class:`Plan` of :data:`Action`
values, the complete new status and :class:`Event` values, carried out by ``reconcile.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sendgroup_contract.measure import QueueMeasure as QueueMeasure
from sendgroup_operator import builders, models

# ------------------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class QueueError:
    """Redis could not be measured; ``message`` is safe to show (no password)."""

    message: str


Measurement = QueueMeasure | QueueError


@dataclass(frozen=True)
class Refused:
    """The operator may not act on the group's queue (issue 16): ``reason`` is the Ready
    reason (``QueueConflict``: another group claimed the queue first; ``RedisNotAllowed``:
    ``spec.redis`` names a Redis outside ``allowedRedisHosts``; ``QueueNameNotAllowed``: the
    queue lacks ``<namespace>.`` under the queue-name policy); ``message`` is safe to show (no
    URL, no other namespace's names). Decided by the adapter (the claim lives in Redis)."""

    reason: str
    message: str


@dataclass(frozen=True)
class DeploymentObs:
    """The worker Deployment as observed."""

    replicas: int
    ready_replicas: int = 0
    template_hash: str | None = None
    #: :func:`~sendgroup_operator.builders.owned_fingerprint` of its pod template as read back
    #: (None: not known; then only the template hash is compared)
    owned: str | None = None


@dataclass(frozen=True)
class JobObs:
    """A dump/restore/purge Job as observed (``failed_final``: its Failed condition is True).

    ``summary``: the command's JSON summary (``sendgroup-worker dump`` prints one line:
    ``jobs, ready, delayed, reserved, failed, bytes, segment, redisVersion``) when the operator
    could read it from the succeeded pod's log, else None.
    ``waiting``: why the Job's pod has not started (not scheduled, e.g. an unbound claim; a
    container waiting, e.g. an image that cannot be pulled), one line; None when it runs, ran,
    or is starting the usual way (only looked at for the operation in flight).
    """

    name: str
    active: int = 0
    succeeded: int = 0
    failed_final: bool = False
    summary: Mapping[str, Any] | None = None
    waiting: str | None = None


@dataclass(frozen=True)
class Observed:
    """Children of one group. ``pods``: worker pods of the group still present;
    ``jobs_listed``: whether Jobs/pods were looked at in this pass (they are only listed when
    the plan can need them)."""

    deployment: DeploymentObs | None = None
    pods: int = 0
    jobs: Mapping[str, JobObs] = field(default_factory=dict)
    jobs_listed: bool = False


def rule_reason(name: str) -> str:
    """The condition reason naming pushback rule ``name``: ``unusual-rate`` ->
    ``RuleUnusualRate`` (one CamelCase word; the same on the provider and on its groups)."""
    return "Rule" + "".join(part[:1].upper() + part[1:] for part in name.split("-") if part)


@dataclass(frozen=True)
class ProviderRule:
    """A pushback rule of the group's provider in force, as the provider's status lists it
    (``status.activeRules``, written once a second by the provider's pass).

    ``provider``: ``"<kind> <name>"`` (``ClusterSendProvider google``); ``rule``: its name and
    ``index`` its position in the provider's ``spec.pushback.rules`` (None: no longer in the
    spec); ``action``: ``Suspend``, ``ScaleRate(<n>%)`` or ``CapConcurrency(<n>)``; ``since`` /
    ``until``: when it fired and when its action ends (a ScaleRate rule then recovers
    additively and stays listed until recovered); ``reply``: the reply that fired it.
    """

    provider: str
    rule: str
    index: int | None
    action: str
    since: datetime
    until: datetime
    reply: str = ""

    @property
    def reason(self) -> str:
        """The condition reason naming the rule (:func:`rule_reason`)."""
        return rule_reason(self.rule)

    @property
    def suspends(self) -> bool:
        """A Suspend rule (the group's ``Suspended`` condition), else a throttle."""
        return self.action == "Suspend"

    def holds(self, now: datetime) -> bool:
        """Whether it acts at ``now``: Suspend and CapConcurrency until ``until``; ScaleRate
        while listed (it recovers after ``until``)."""
        return self.action.startswith("ScaleRate") or now < self.until

    def describe(self, now: datetime) -> str:
        """One line naming the rule, e.g. ``ClusterSendProvider google rule unusual-rate
        (spec.pushback.rules[0]): ScaleRate(20%) until 2026-12-01T15:00:00+00:00 (fired by
        "421 4.7.28 ...")``."""
        where = f" (spec.pushback.rules[{self.index}])" if self.index is not None else ""
        until = self.until.isoformat(timespec="seconds")
        when = f"until {until}" if now < self.until else f"recovering since {until}"
        reply = self.reply.strip()
        fired = f' (fired by "{reply[:200]}")' if reply else ""
        return f"{self.provider} rule {self.rule}{where}: {self.action} {when}{fired}"


@dataclass(frozen=True)
class Group:
    """Metadata of the SendGroup the plan is for."""

    namespace: str
    name: str
    uid: str
    generation: int
    created_at: datetime
    deleting: bool = False
    deleting_since: datetime | None = None

    def ref(self, spec: models.SendGroupSpec) -> builders.GroupRef:
        """The identity its children need."""
        return builders.GroupRef(
            self.namespace,
            self.name,
            self.uid,
            spec.campaign,
            spec.host,
            self.created_at.isoformat(),
        )


# ------------------------------------------------------------------------------ outputs


@dataclass(frozen=True)
class EnsureDeployment:
    """Create the worker Deployment, or set its replicas (adopt on AlreadyExists)."""

    replicas: int


@dataclass(frozen=True)
class DeleteDeployment:
    """Delete the worker Deployment (absent is fine)."""


@dataclass(frozen=True)
class CreateJob:
    """Create Job ``builders.job_name(name, kind, number)`` (adopt on AlreadyExists)."""

    kind: builders.JobKind
    number: int


@dataclass(frozen=True)
class DeleteJob:
    """Delete a Job and its pods (absent is fine)."""

    name: str


@dataclass(frozen=True)
class PurgeQueue:
    """Delete every key of the queue in Redis (explicit names)."""


@dataclass(frozen=True)
class RequestPurge:
    """Set the queue's purge marker in Redis (before a purge Job starts)."""


@dataclass(frozen=True)
class SetPauseMarker:
    """Set (``paused``) or delete the queue's pause marker in Redis (``QueueKeys.paused``).
    Planned first in a pass: a pause reaches every worker's next ``reserve`` before any
    Deployment is scaled, and a resume clears it before workers are asked for."""

    paused: bool


@dataclass(frozen=True)
class ReleaseQueue:
    """Give up the group's claim on its queue (the last action of its deletion; only the
    owner's release has an effect)."""


@dataclass(frozen=True)
class DeleteGroup:
    """Delete the SendGroup itself (ttlSecondsAfterFinished passed)."""


Action = (
    SetPauseMarker
    | EnsureDeployment
    | DeleteDeployment
    | CreateJob
    | DeleteJob
    | PurgeQueue
    | RequestPurge
    | ReleaseQueue
    | DeleteGroup
)


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event on the SendGroup."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass
class Plan:
    """What to do now. ``status`` is the complete new status; ``write_status`` says whether it
    differs meaningfully from the old one. ``finalized``: deletion may proceed (the finalizer
    can go). ``requeue_after``: seconds until the next pass is useful (None: the reaper
    daemon's own interval). ``idle_wait``: set (seconds) when the pass left the group idle
    and watched by the observer: the daemon's next pass may wait that long (see
    ``plan.idle_wait``)."""

    actions: list[Action] = field(default_factory=list)
    status: models.SendGroupStatus = field(default_factory=models.SendGroupStatus)
    write_status: bool = False
    events: list[Event] = field(default_factory=list)
    finalized: bool = False
    requeue_after: float | None = None
    demand: int = 0
    idle_wait: float | None = None
