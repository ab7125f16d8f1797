"""A group the operator refuses to act for (issue 16: queue owned by another group, Redis or
queue name outside the tenancy policy): the pure planner's decisions, with an injected
clock. What a user checks: Ready=False with the reason, phase Pending, one Warning event, no
workers, no Job, nothing for Redis, and a deletion that finishes without touching the queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sendgroup_operator import models
from sendgroup_operator import plan as p
from sendgroup_operator.conditions import find
from sendgroup_operator.models import Phase
from sendgroup_operator.settings import Settings

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings()
GROUP = p.Group("team-b", "thief", "uid-b", 1, T0)
SPEC = models.SendGroupSpec.model_validate(
    {"campaign": "c", "host": "gmail.com", "workers": 3, "queue": "mail-newsletter"}
)
CONFLICT = p.Refused("QueueConflict", "queue 'mail-newsletter' is claimed by another group")
REDIS_ONLY = (p.SetPauseMarker, p.PurgeQueue, p.RequestPurge, p.ReleaseQueue, p.CreateJob)


def refuse(
    status: models.SendGroupStatus | None = None,
    observed: p.Observed | None = None,
    refusal: p.Refused = CONFLICT,
    group: p.Group = GROUP,
    now: datetime = T0,
) -> p.Plan:
    return p.refused(
        group,
        SPEC,
        status or models.SendGroupStatus(),
        observed or p.Observed(jobs_listed=True),
        refusal,
        SETTINGS,
        now,
    )


def test_refused_group_gets_condition_and_one_event_and_no_actions() -> None:
    first = refuse()
    ready = find(first.status.conditions, "Ready")
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == (
        "False",
        "QueueConflict",
        CONFLICT.message,
    )
    assert first.status.phase is Phase.PENDING and first.write_status
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "QueueConflict")]
    assert first.actions == [] and first.demand == 0 and first.status.workers.desired == 0
    # the next passes: the same refusal posts nothing and writes nothing
    again = refuse(first.status, now=T0 + timedelta(seconds=30))
    assert again.events == [] and not again.write_status and again.actions == []
    # another reason is a new event
    other = p.Refused("RedisNotAllowed", "spec.redis.url: not allowed")
    changed = refuse(first.status, refusal=other, now=T0 + timedelta(seconds=60))
    assert [e.reason for e in changed.events] == ["RedisNotAllowed"] and changed.write_status


def test_refused_group_loses_its_own_workers_and_jobs_but_never_touches_redis() -> None:
    op = models.OperationStatus(
        kind="dump", number=1, job_name="thief-dump-1", started_at=T0, baseline_total=5
    )
    status = models.SendGroupStatus(operation=op)
    observed = p.Observed(
        deployment=p.DeploymentObs(replicas=3, ready_replicas=3),
        pods=3,
        jobs={"thief-dump-1": p.JobObs("thief-dump-1", active=1)},
        jobs_listed=True,
    )
    result = refuse(status, observed)
    assert p.DeleteDeployment() in result.actions
    assert p.DeleteJob("thief-dump-1") in result.actions
    assert not any(isinstance(a, REDIS_ONLY) for a in result.actions)
    assert result.status.operation is None and result.requeue_after is not None


def test_refused_group_deletion_finishes_once_its_workers_are_gone_without_release() -> None:
    deleting = p.Group("team-b", "thief", "uid-b", 1, T0, deleting=True, deleting_since=T0)
    busy = refuse(
        observed=p.Observed(deployment=p.DeploymentObs(1), pods=1, jobs_listed=True),
        group=deleting,
    )
    assert not busy.finalized and busy.actions == [p.DeleteDeployment()]
    done = refuse(group=deleting)
    assert done.finalized and done.actions == []
    assert done.status.phase is Phase.DELETING


def test_owner_deletion_releases_the_claim_last() -> None:
    deleting = p.Group("team-a", "newsletter", "uid-a", 1, T0, deleting=True, deleting_since=T0)
    result = p.plan(
        deleting,
        SPEC,
        models.SendGroupStatus(),
        p.Observed(jobs_listed=True),
        p.QueueMeasure(),
        0,
        SETTINGS,
        T0,
    )
    assert result.finalized and result.actions[-1] == p.ReleaseQueue()
    waiting = p.plan(
        deleting,
        SPEC,
        models.SendGroupStatus(),
        p.Observed(deployment=p.DeploymentObs(0), pods=1, jobs_listed=True),
        p.QueueMeasure(),
        0,
        SETTINGS,
        T0,
    )
    assert not waiting.finalized and p.ReleaseQueue() not in waiting.actions
