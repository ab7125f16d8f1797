"""Status conditions with apimachinery's ``SetStatusCondition`` semantics, and the phase.

Source: k8s.io/apimachinery/pkg/api/meta/conditions.go. ``lastTransitionTime`` changes only
when ``status`` flips (or the condition is new); ``reason``, ``message`` and
``observedGeneration`` are always updated. ``phase`` is a summary computed from the
conditions by :func:`derive_phase` and never read back as state.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final, Literal

from sendgroup_operator.models import Condition, Phase

ConditionStatus = Literal["True", "False", "Unknown"]

READY: Final = "Ready"
PAUSED: Final = "Paused"
SUSPENDED: Final = "Suspended"
QUEUE_REACHABLE: Final = "QueueReachable"
DUMPED: Final = "Dumped"
THROTTLED: Final = "Throttled"
DEGRADED: Final = "Degraded"
FAILED_JOBS: Final = "FailedJobs"

#: Reasons of the Ready condition that name a finished or special lifecycle state.
REASON_CANCELLED: Final = "Cancelled"
REASON_CANCELLING: Final = "Cancelling"
REASON_DELETING: Final = "Deleting"
REASON_COMPLETED: Final = "Completed"
REASON_IDLE: Final = "Idle"
#: Ready=False while ``spec.paused`` (workers at 0).
REASON_PAUSED: Final = "Paused"
REASON_NO_WORK: Final = "NoWork"
REASON_FAILED: Final = "Failed"
#: Ready reasons of a group the operator refuses to act for (issue 16): the spec does not
#: parse, another group owns its queue, its Redis is not allowed, its queue name lacks the
#: namespace. Its phase is Pending: nothing runs until the cause goes.
REASON_INVALID_SPEC: Final = "InvalidSpec"
REASON_QUEUE_CONFLICT: Final = "QueueConflict"
REASON_REDIS_NOT_ALLOWED: Final = "RedisNotAllowed"
REASON_QUEUE_NAME_NOT_ALLOWED: Final = "QueueNameNotAllowed"
#: Ready reason of a group whose workers the operator cannot run: ``runtime: laravel`` while
#: image overrides are not allowed (the operator's own image has no ``php``). Unlike the
#: refusals above, the rest of its lifecycle goes on (pause, dump, restore, cancel and purge
#: run the operator's image on the queue's keys); also phase Pending.
REASON_RUNTIME_NOT_ALLOWED: Final = "RuntimeNotAllowed"
#: Ready reason (and ``ProviderResolved`` reason) of a group whose provider has a spec the
#: operator cannot use (a pattern RE2 refuses, an object stored before the CRD's rules): the
#: group is held, no workers, instead of sending without the provider's limits; the rest of
#: its lifecycle goes on as for :data:`REASON_RUNTIME_NOT_ALLOWED`; phase Pending.
REASON_PROVIDER_INVALID: Final = "ProviderInvalid"
#: Ready reason (and ``ProviderResolved`` reason) of a group whose ``spec.provider`` names a
#: provider that does not exist (a typo): held as for :data:`REASON_PROVIDER_INVALID`, never
#: sent outside the limits it named.
REASON_PROVIDER_NOT_FOUND: Final = "ProviderNotFound"
REFUSED_REASONS: Final = frozenset(
    {
        REASON_INVALID_SPEC,
        REASON_QUEUE_CONFLICT,
        REASON_REDIS_NOT_ALLOWED,
        REASON_QUEUE_NAME_NOT_ALLOWED,
        REASON_RUNTIME_NOT_ALLOWED,
        REASON_PROVIDER_INVALID,
        REASON_PROVIDER_NOT_FOUND,
    }
)
#: Reasons of the Dumped condition.
REASON_DUMPING: Final = "Dumping"
REASON_RESTORING: Final = "Restoring"


def find(conditions: Sequence[Condition], type_: str) -> Condition | None:
    """The condition of type ``type_``, or None."""
    for cond in conditions:
        if cond.type == type_:
            return cond
    return None


def is_true(conditions: Sequence[Condition], type_: str) -> bool:
    """True if the condition exists with status ``"True"``."""
    cond = find(conditions, type_)
    return cond is not None and cond.status == "True"


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None,
) -> bool:
    """Set one condition in place, apimachinery style. Returns True if anything changed.

    A new condition gets ``lastTransitionTime = now``; an existing one keeps its
    ``lastTransitionTime`` unless ``status`` changes.
    """
    existing = find(conditions, type_)
    if existing is None:
        conditions.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=now,
                observed_generation=observed_generation,
            )
        )
        return True
    changed = False
    if existing.status != status:
        existing.status = status
        existing.last_transition_time = now
        changed = True
    for attr, value in (
        ("reason", reason),
        ("message", message),
        ("observed_generation", observed_generation),
    ):
        if getattr(existing, attr) != value:
            setattr(existing, attr, value)
            changed = True
    return changed


def remove_condition(conditions: list[Condition], type_: str) -> bool:
    """Remove the condition of type ``type_``; True if there was one."""
    for i, cond in enumerate(conditions):
        if cond.type == type_:
            del conditions[i]
            return True
    return False


def remove_reason(conditions: list[Condition], type_: str, reason: str) -> bool:
    """Remove the condition of type ``type_`` only if its reason is ``reason``."""
    cond = find(conditions, type_)
    if cond is None or cond.reason != reason:
        return False
    return remove_condition(conditions, type_)


def derive_phase(conditions: Sequence[Condition]) -> Phase:
    """The one place ``status.phase`` is computed, from the conditions only.

    Order: terminal and tear-down states (Ready reason Cancelled, Cancelling, Deleting,
    Completed, Failed: Cancelled only once the queue is purged), then the dump cycle
    (Dumped reason Dumping/Restoring, Dumped=True), then Paused, then Running (Ready=True or
    workers starting), Idle, and Pending (no work yet, or refused: :data:`REFUSED_REASONS`).
    """
    ready = find(conditions, READY)
    dumped = find(conditions, DUMPED)
    ready_reason = ready.reason if ready else ""
    if ready_reason == REASON_CANCELLED:
        return Phase.CANCELLED
    if ready_reason == REASON_CANCELLING:
        return Phase.CANCELLING
    if ready_reason == REASON_DELETING:
        return Phase.DELETING
    if ready_reason == REASON_FAILED:
        return Phase.FAILED
    if ready_reason == REASON_COMPLETED:
        return Phase.COMPLETED
    if dumped is not None:
        if dumped.reason == REASON_DUMPING:
            return Phase.DUMPING
        if dumped.reason == REASON_RESTORING:
            return Phase.RESTORING
        if dumped.status == "True":
            return Phase.DUMPED
    if is_true(conditions, PAUSED):
        return Phase.PAUSED
    if ready_reason == REASON_IDLE:
        return Phase.IDLE
    if ready is None or ready_reason == REASON_NO_WORK or ready_reason in REFUSED_REASONS:
        return Phase.PENDING
    return Phase.RUNNING
