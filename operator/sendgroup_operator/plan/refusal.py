"""A group the operator refuses to act for (issue 16): another group owns its queue, or the
tenancy policy forbids its Redis or its queue name (:class:`Refused`, decided by the adapter
before anything touches the queue).

Such a group gets ``Ready=False`` with the refusal's reason and message and ONE Warning event
(when the reason or message appears or changes, never every pass); it has no workers (a
Deployment it still has, from before the refusal, is deleted), no dump, restore or purge Job
(one in flight is deleted) and nothing in Redis is measured, marked, purged or released. Its
deletion finalizes as soon as its own workers are gone.
"""

from __future__ import annotations

from datetime import datetime

from sendgroup_operator import conditions, models
from sendgroup_operator.plan.decisions import Decisions
from sendgroup_operator.plan.status import meaningful_change
from sendgroup_operator.plan.types import (
    DeleteDeployment,
    DeleteJob,
    Group,
    Observed,
    Plan,
    Refused,
)
from sendgroup_operator.settings import Settings

#: Seconds between passes while a refused group's own workers or Job are going away.
REFUSED_REQUEUE = 2.0


def refused(
    group: Group,
    spec: models.SendGroupSpec,
    status: models.SendGroupStatus,
    observed: Observed,
    refusal: Refused,
    settings: Settings,
    now: datetime,
) -> Plan:
    """The plan for a refused group (see the module docstring). Pure."""
    b = Decisions(group, spec, status, now)
    st = b.status
    st.observed_generation = group.generation
    before = conditions.find(status.conditions, conditions.READY)
    was = (before.reason, before.message) if before is not None else None
    conditions.remove_condition(st.conditions, conditions.QUEUE_REACHABLE)
    waiting = False
    if observed.deployment is not None:
        b.act(DeleteDeployment())
        waiting = True
    op = st.operation
    if op is not None:
        if op.job_name in observed.jobs:
            b.act(DeleteJob(op.job_name))
        st.operation = None
    if observed.pods > 0:
        waiting = True
    st.workers.desired = 0
    st.workers.allowed = 0
    st.workers.ready = observed.deployment.ready_replicas if observed.deployment else 0
    st.workers.summary = f"{st.workers.ready}/0"
    if group.deleting:
        b.cond(
            conditions.READY,
            "False",
            conditions.REASON_DELETING,
            f"{refusal.message}; deleting without touching the queue",
        )
        b.plan.finalized = not waiting
    else:
        b.cond(conditions.READY, "False", refusal.reason, refusal.message)
        if was != (refusal.reason, refusal.message):
            b.event("Warning", refusal.reason, refusal.message)
    st.phase = conditions.derive_phase(st.conditions)
    b.plan.write_status = meaningful_change(status, st, now, settings.status_refresh)
    if b.plan.write_status:
        st.last_refresh = now
    b.plan.status = st
    b.plan.demand = 0
    if waiting or b.plan.actions:
        b.plan.requeue_after = REFUSED_REQUEUE
    return b.plan
