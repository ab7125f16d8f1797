"""One pass's accumulator: the new status being built, the actions, the events, and the
condition rule that turns condition flips into events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from sendgroup_operator import builders, conditions, models
from sendgroup_operator.conditions import ConditionStatus
from sendgroup_operator.plan.types import Action, CreateJob, Event, Group, Plan, ProviderRule


class Decisions:
    """Accumulates one pass's decisions (see :func:`sendgroup_operator.plan.lifecycle.plan`)."""

    def __init__(
        self,
        group: Group,
        spec: models.SendGroupSpec,
        old: models.SendGroupStatus,
        now: datetime,
    ) -> None:
        self.group = group
        self.spec = spec
        self.old = old
        self.now = now
        self.status = models.clone(old)  # the pass's own copy (models.clone: issue 15)
        self.plan = Plan()
        self.busy = False
        #: env entries of the group's provider (part of the worker pod template)
        self.provider_env: Sequence[Mapping[str, Any]] = ()
        #: the provider's pushback rules that act now (``Suspended`` / ``Throttled``)
        self.provider_rules: Sequence[ProviderRule] = ()
        #: why the group must not send: its provider's spec is unusable (no workers)
        self.provider_hold: str | None = None
        self.provider_hold_reason: str = conditions.REASON_PROVIDER_INVALID

    def cond(self, type_: str, status: ConditionStatus, reason: str, message: str) -> None:
        old = conditions.find(self.old.conditions, type_)
        conditions.set_condition(
            self.status.conditions, type_, status, reason, message, self.now, self.group.generation
        )
        flipped = old is None or old.status != status or old.reason != reason
        if flipped and type_ == conditions.QUEUE_REACHABLE and status == "False":
            self.event("Warning", "QueueUnreachable", message)
        if flipped and type_ == conditions.QUEUE_REACHABLE and status == "True" and old:
            self.event("Normal", "QueueReachable", "queue measured again")
        if flipped and type_ == conditions.THROTTLED and status == "True":
            self.event("Normal", "Throttled", message)
        if flipped and type_ == conditions.SUSPENDED and status == "True":
            self.event("Warning", "Suspended", message)

    def event(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.plan.events.append(Event(type_, reason, message))

    def act(self, action: Action) -> None:
        self.plan.actions.append(action)

    def start_job(self, kind: builders.JobKind, baseline: int, attempts: int = 1) -> None:
        number = self.status.operations_started + 1
        self.status.operations_started = number
        name = builders.job_name(self.group.name, kind, number)
        self.status.operation = models.OperationStatus(
            kind=kind,
            number=number,
            job_name=name,
            started_at=self.now,
            baseline_total=baseline,
            attempts=attempts,
        )
        self.act(CreateJob(kind, number))
        self.busy = True
