"""Decisions about observing and carrying out a plan, kept out of ``reconcile.py`` (which only
observes, calls the planner and applies): which passes need the children, what a failed apply
does to the status, and what the global cap's books record afterwards."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from sendgroup_operator import conditions, models
from sendgroup_operator.plan.types import (
    DeleteDeployment,
    EnsureDeployment,
    Event,
    Group,
    Measurement,
    Observed,
    Plan,
    QueueMeasure,
)
from sendgroup_operator.settings import Settings

#: Ready reasons that mean "the operator left this group without a Deployment".
NO_DEPLOYMENT_REASONS: Final = frozenset(
    {conditions.REASON_IDLE, conditions.REASON_NO_WORK, conditions.REASON_COMPLETED}
)
#: Degraded reason while the last plan could not be carried out.
REASON_APPLY_FAILED: Final = "ApplyFailed"
#: Degraded reason while the group's PodDisruptionBudget is refused (its workers run).
REASON_BUDGET_REFUSED: Final = "DisruptionBudgetRefused"


def needs_children(
    group: Group, spec: models.SendGroupSpec, st: models.SendGroupStatus, m: Measurement
) -> bool:
    """Whether this pass must list the group's Jobs and pods (two API requests); otherwise the
    Deployment (from the watch-fed index) is all it reads.

    Listed while deleting or cancelled, while a dump/restore Job is in flight, while jobs on
    the volume may need a restore (not paused), and while a paused group still has jobs in
    Redis (a dump may fall due, and it waits for the workers' pods to be gone). A paused group
    with an empty queue (Redis measured, nothing there, nothing in flight: the steady state of
    a dumped or drained paused group) lists nothing: no decision of its pass reads Jobs or
    pods, and at 10,000 groups with 20 % paused the two lists per pass were ~400 API requests
    per second at rest (issue 15, bench/scale)."""
    if group.deleting or spec.state == models.State.CANCELLED or st.operation is not None:
        return True
    if spec.paused:
        steady = isinstance(m, QueueMeasure) and m.total == 0 and m.staging == 0 and not m.busy
        return not steady
    return st.dump.total_jobs > 0


def _settled(
    group: Group, spec: models.SendGroupSpec, st: models.SendGroupStatus, m: Measurement
) -> str | None:
    """The last written Ready reason of a group at rest (empty queue measured, nothing to
    list, the spec already acted on); None when it is not at rest."""
    if not isinstance(m, QueueMeasure) or m.total > 0:
        return None
    if needs_children(group, spec, st, m) or st.observed_generation != group.generation:
        return None
    ready = conditions.find(st.conditions, conditions.READY)
    return None if ready is None else ready.reason


def skips_observation(
    group: Group, spec: models.SendGroupSpec, st: models.SendGroupStatus, m: Measurement
) -> bool:
    """An idle group: empty queue, nothing to list, the spec already acted on, and the last
    written status says the operator left it without a Deployment. The pass then makes no API
    request at all."""
    return _settled(group, spec, st, m) in NO_DEPLOYMENT_REASONS


def rests_paused(
    group: Group, spec: models.SendGroupSpec, st: models.SendGroupStatus, m: Measurement
) -> bool:
    """A paused group at rest: empty queue, nothing to list (see :func:`needs_children`), the
    spec already acted on, and the last written status says ``Ready=False`` reason
    ``Paused``. Its Deployment (0 replicas) is read from the watch-fed index, so the pass makes
    no API request; it may then wait :func:`idle_wait` like an idle group (the observer wakes
    it when jobs arrive, a spec change or a change of its Deployment wakes it too). At 3,000
    groups, 20 % of them paused, their passes every ``reaperInterval`` (10 s) were 60 of the
    operator's 114-128 passes per second at rest (issue 15, bench/scale)."""
    if group.deleting or not spec.paused:
        return False
    return _settled(group, spec, st, m) == conditions.REASON_PAUSED


def idle_wait(
    spec: models.SendGroupSpec, st: models.SendGroupStatus, now: datetime, settings: Settings
) -> float:
    """Seconds the reaper daemon of an idle group (the observer watches its queue: a push
    wakes it; a spec or provider change wakes it too) may sleep before its next pass:
    ``SENDGROUP_IDLE_PASS_INTERVAL``, at least ``reaperInterval`` and at most half of
    ``SENDGROUP_LIVENESS_STALL`` (the liveness probe needs passes), and no later than a
    finished group's ``ttlSecondsAfterFinished`` deadline (then at least 1 s). At 10,000
    groups, 70 % of them idle, passes every ``reaperInterval`` (10 s) were ~700 per second
    (issue 15)."""
    wait = min(
        max(settings.idle_pass_interval, settings.reaper_interval), settings.liveness_stall / 2
    )
    if st.finished_at is not None and spec.ttl_seconds_after_finished is not None:
        due = st.finished_at + timedelta(seconds=spec.ttl_seconds_after_finished) - now
        wait = min(wait, max(due.total_seconds(), 1.0))
    return wait


def apply_failed(
    group: Group, old: models.SendGroupStatus, result: Plan, message: str, now: datetime
) -> Plan:
    """The plan could not be carried out: keep the old status (clocks, operations, the old
    ``observedGeneration``) and say so with ``Degraded=True`` (reason ``ApplyFailed``) and a
    Warning event on the transition. The next pass tries again.

    What the pass measured (``status.queue``, ``status.progress``) is taken from ``result``
    when the planner meant to write its status (its refresh rules): a group whose Deployment
    the API server refuses still shows the jobs waiting in its queue. Before, its status kept
    the measurement of its last good pass (an empty queue, before the jobs were pushed), and
    ``kubectl sendgroup status --watch`` called the group done (found by a fresh user)."""
    status = old.model_copy(deep=True)
    measured = result.write_status and (
        status.queue != result.status.queue or status.progress != result.status.progress
    )
    if measured:
        status.queue = result.status.queue.model_copy(deep=True)
        status.progress = result.status.progress.model_copy(deep=True)
    before = conditions.find(status.conditions, conditions.DEGRADED)
    changed, events = _degraded(
        status.conditions, before, REASON_APPLY_FAILED, message, now, group.generation
    )
    changed = changed or measured
    if changed:
        status.last_refresh = now
    return Plan(status=status, write_status=changed, events=events, demand=result.demand)


def applied(result: Plan) -> None:
    """The plan was carried out: an ``ApplyFailed`` degradation is over (a status write)."""
    if conditions.remove_reason(result.status.conditions, conditions.DEGRADED, REASON_APPLY_FAILED):
        result.write_status = True


def granted_after(result: Plan, observed: Observed) -> int | None:
    """Workers the group holds of the global cap after a pass that wrote no Deployment: what
    the observed Deployment runs (0 without one and without actions). None: leave the books as
    the apply step wrote them (it records what it asked for)."""
    if any(isinstance(a, EnsureDeployment | DeleteDeployment) for a in result.actions):
        return None
    if observed.deployment is not None:
        return observed.deployment.replicas
    return 0 if not result.actions else None


def budget_applied(
    group: Group, old: models.SendGroupStatus, result: Plan, refused: str | None, now: datetime
) -> None:
    """After a pass that wrote the worker Deployment and, before it, its PodDisruptionBudget:
    ``refused`` (the API's reason) sets ``Degraded=True`` reason ``DisruptionBudgetRefused``
    with a Warning event when it appears (the Deployment says the budget is pending, so the
    next pass tries again: :func:`~sendgroup_operator.builders.budget_pending_hash`); None
    (applied, or deleted with the field) ends that degradation."""
    conds = result.status.conditions
    if refused is None:
        if conditions.remove_reason(conds, conditions.DEGRADED, REASON_BUDGET_REFUSED):
            result.write_status = True
        return
    before = conditions.find(old.conditions, conditions.DEGRADED)
    changed, events = _degraded(
        conds, before, REASON_BUDGET_REFUSED, refused, now, group.generation
    )
    if changed:
        result.write_status = True
        result.status.last_refresh = now
    result.events.extend(events)


def _degraded(
    conds: list[models.Condition],
    before: models.Condition | None,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None,
) -> tuple[bool, list[Event]]:
    """Set ``Degraded=True`` with ``reason`` and ``message`` in ``conds``; ``before``: the
    Degraded condition as it was. Returns whether ``conds`` changed, and the Warning event
    to post: one when the degradation begins (or its reason changes), none while it lasts."""
    flipped = before is None or before.status != "True" or before.reason != reason
    changed = conditions.set_condition(
        conds, conditions.DEGRADED, "True", reason, message, now, generation
    )
    return changed, [Event("Warning", reason, message)] if flipped else []
