"""The pure planner, by job: ``(group, spec, status, observed children, measured queue,
allowed workers, settings, now) -> Plan(actions, status, events)``.

* :mod:`.types`: inputs (:class:`Group`, :class:`Observed`, :data:`Measurement`) and outputs
  (:class:`Plan`, the :data:`Action` values, :class:`Event`);
* :mod:`.status`: status rules (counts and the reaper's clocks from a measurement, progress,
  the failed-jobs condition, when a status is worth a write);
* :mod:`.lifecycle`: the lifecycle state machine (run, pause/dump, restore, teardown/purge)
  and the worker demand the global cap sees;
* :mod:`.refusal`: a group the operator refuses to act for (queue owned by another group,
  Redis or queue name outside the tenancy policy);
* :mod:`.apply`: decisions about carrying a plan out (which passes need the children, what a
  failed apply does to the status, what the global cap's books record).

No kopf, kubernetes or redis import, even transitively (an import-linter contract checks it):
everything arrives as plain data, so every decision is unit-tested with an injected clock.
"""

from sendgroup_operator.plan.apply import (
    applied,
    apply_failed,
    budget_applied,
    granted_after,
    idle_wait,
    needs_children,
    rests_paused,
    skips_observation,
)
from sendgroup_operator.plan.lifecycle import (
    BUSY_REQUEUE,
    MAX_OPERATION_ATTEMPTS,
    demand,
    desired_workers,
    plan,
    runtime_refusal,
)
from sendgroup_operator.plan.refusal import refused
from sendgroup_operator.plan.status import QUIET_WINDOW, SIGNIFICANT_FRACTION, meaningful_change
from sendgroup_operator.plan.types import (
    Action,
    CreateJob,
    DeleteDeployment,
    DeleteGroup,
    DeleteJob,
    DeploymentObs,
    EnsureDeployment,
    Event,
    Group,
    JobObs,
    Measurement,
    Observed,
    Plan,
    ProviderRule,
    PurgeQueue,
    QueueError,
    QueueMeasure,
    Refused,
    ReleaseQueue,
    RequestPurge,
    SetPauseMarker,
)

__all__ = [
    "BUSY_REQUEUE",
    "MAX_OPERATION_ATTEMPTS",
    "QUIET_WINDOW",
    "SIGNIFICANT_FRACTION",
    "Action",
    "CreateJob",
    "DeleteDeployment",
    "DeleteGroup",
    "DeleteJob",
    "DeploymentObs",
    "EnsureDeployment",
    "Event",
    "Group",
    "JobObs",
    "Measurement",
    "Observed",
    "Plan",
    "ProviderRule",
    "PurgeQueue",
    "QueueError",
    "QueueMeasure",
    "Refused",
    "ReleaseQueue",
    "RequestPurge",
    "SetPauseMarker",
    "applied",
    "apply_failed",
    "budget_applied",
    "demand",
    "desired_workers",
    "granted_after",
    "idle_wait",
    "meaningful_change",
    "needs_children",
    "plan",
    "refused",
    "rests_paused",
    "runtime_refusal",
    "skips_observation",
]
