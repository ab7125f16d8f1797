"""The pure planner, scenario by scenario, with an injected clock."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from sendgroup_operator import builders, models
from sendgroup_operator import plan as p
from sendgroup_operator.conditions import find
from sendgroup_operator.models import Phase
from sendgroup_operator.plan.status import progress_percent
from sendgroup_operator.settings import Settings

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings()
GROUP = p.Group("mail", "g1", "uid-1", 1, T0)


def spec(**kw: Any) -> models.SendGroupSpec:
    base = {"campaign": "c", "host": "gmail.com", "workers": 3}
    base.update(kw)
    return models.SendGroupSpec.model_validate(base)


def q(total: int = 0, **kw: Any) -> p.QueueMeasure:
    return p.QueueMeasure(ready=total, **kw)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run(
    s: models.SendGroupSpec,
    status: models.SendGroupStatus | None = None,
    obs: p.Observed | None = None,
    measure: p.Measurement | None = None,
    now: datetime = T0,
    allowed: int | None = None,
    group: p.Group = GROUP,
) -> p.Plan:
    obs = obs or p.Observed(jobs_listed=True)
    if obs.deployment is not None and obs.deployment.template_hash is None:
        # Children built from this very spec (tests of template drift pass their own hash).
        current = builders.template_hash(group.ref(s), s, SETTINGS)
        obs = dataclasses.replace(
            obs, deployment=dataclasses.replace(obs.deployment, template_hash=current)
        )
    status = status or models.SendGroupStatus()
    before = status.model_dump()
    result = p.plan(
        group,
        s,
        status,
        obs,
        measure if measure is not None else q(0),
        s.workers if allowed is None else allowed,
        SETTINGS,
        now,
    )
    # the planner works on a copy: reconcile shares the status it plans from between passes
    # (its parse cache, and the last status it wrote, ``Runtime.written``), uncopied
    assert status.model_dump() == before
    return result


def dep(replicas: int, ready: int | None = None) -> p.Observed:
    return p.Observed(
        p.DeploymentObs(replicas, replicas if ready is None else ready), jobs_listed=True
    )


def cond(plan: p.Plan, type_: str) -> tuple[str, str]:
    c = find(plan.status.conditions, type_)
    assert c is not None, type_
    return c.status, c.reason


def test_work_creates_workers_and_steady_state_writes_nothing() -> None:
    s = spec()
    first = run(s, measure=q(10))
    assert first.actions == [p.EnsureDeployment(3)]
    assert first.status.phase is Phase.RUNNING and first.write_status
    assert first.status.queue.total == 10 and first.status.workers.desired == 3
    ready = run(s, first.status, dep(3), q(10), at(10))
    assert ready.actions == [] and ready.status.workers.summary == "3/3"
    assert cond(ready, "Ready") == ("True", "WorkersReady") and ready.write_status
    steady = run(s, ready.status, dep(3), q(10), at(20))
    assert steady.actions == [] and not steady.write_status and steady.events == []


def test_small_count_changes_do_not_write_until_refresh() -> None:
    s = spec()
    st = run(s, run(s, measure=q(1000)).status, dep(3), q(1000), at(1)).status
    assert not run(s, st, dep(3), q(990), at(5)).write_status
    assert run(s, st, dep(3), q(800), at(5)).write_status  # >= 10 % moved
    assert run(s, st, dep(3), q(990), at(5 + SETTINGS.status_refresh)).write_status


def test_no_work_yet_is_pending_without_children() -> None:
    plan = run(spec(), measure=q(0))
    assert plan.actions == [] and plan.status.phase is Phase.PENDING


def test_idle_after_reaps_then_work_brings_workers_back() -> None:
    s = spec(reaper={"idleAfter": "5s"})
    running = run(s, run(s, measure=q(5)).status, dep(3), q(5), at(1)).status
    empty = run(s, running, dep(3), q(0), at(10))
    assert empty.status.idle_since == at(10) and empty.actions == [] and empty.write_status
    early = run(s, empty.status, dep(3), q(0), at(14))
    assert early.actions == []
    reaped = run(s, empty.status, dep(3), q(0), at(15))
    assert reaped.actions == [p.DeleteDeployment()] and reaped.status.phase is Phase.IDLE
    assert any(e.reason == "Reaped" for e in reaped.events)
    idle = run(s, reaped.status, p.Observed(), q(0), at(16))
    assert idle.actions == [] and idle.status.phase is Phase.IDLE
    back = run(s, idle.status, p.Observed(), q(2), at(30))
    assert back.actions == [p.EnsureDeployment(3)] and back.status.idle_since is None


def test_restart_keeps_the_original_deadline() -> None:
    """The clock lives in status: a fresh operator acting on old status reaps on time."""
    s = spec(reaper={"idleAfter": "60s"})
    status = models.SendGroupStatus(idle_since=at(0), queue=models.QueueStatus(measured_at=at(0)))
    assert run(s, status, dep(3), q(0), at(59)).actions == []
    assert run(s, status, dep(3), q(0), at(60)).actions == [p.DeleteDeployment()]


def test_pause_dump_resume_restore() -> None:
    s = spec(paused=True, reaper={"dumpAfter": "30s"})
    running = run(spec(), measure=q(40)).status
    paused = run(s, running, dep(3), q(40), at(1))
    # The pause marker first (workers' next reserve takes nothing), then the scale-down.
    assert paused.actions == [p.SetPauseMarker(True), p.EnsureDeployment(0)]
    assert paused.status.phase is Phase.PAUSED
    assert paused.status.unchanged_since == at(1)
    assert paused.status.workers.allowed == 0
    waiting = run(s, paused.status, dep(0), q(40, paused=True), at(20))
    assert waiting.actions == []
    # A push resets the unchanged clock.
    pushed = run(s, paused.status, dep(0), q(41, paused=True), at(25))
    assert pushed.status.unchanged_since == at(25) and pushed.write_status
    # Pods still terminating: no dump yet.
    busy = p.Observed(p.DeploymentObs(0), pods=1, jobs_listed=True)
    assert run(s, pushed.status, busy, q(41, paused=True), at(60)).actions == []
    dumping = run(s, pushed.status, dep(0), q(41, paused=True), at(60))
    assert dumping.actions == [p.CreateJob("dump", 1)]
    assert dumping.status.phase is Phase.DUMPING
    assert dumping.status.operation is not None
    assert dumping.status.operation.job_name == "sg-g1-dump-1"
    # Job not seen yet (just created): still dumping, no second Job.
    again = run(s, dumping.status, p.Observed(p.DeploymentObs(0)), q(41, paused=True), at(62))
    assert again.actions == [] and again.status.phase is Phase.DUMPING
    # Outcome from Redis: keys gone, no staging keys (the Job ran elsewhere).
    dumped = run(s, dumping.status, dep(0), q(0, paused=True), at(70))
    assert dumped.status.phase is Phase.DUMPED and dumped.status.dump.total_jobs == 41
    assert dumped.status.operation is None and cond(dumped, "Dumped") == ("True", "Dumped")
    assert any(e.reason == "Dumped" for e in dumped.events)
    # Resume: restore first, no workers.
    resumed_spec = spec(reaper={"dumpAfter": "30s"})
    restoring = run(resumed_spec, dumped.status, dep(0), q(0, paused=True), at(80))
    assert restoring.actions == [p.SetPauseMarker(False), p.CreateJob("restore", 2)]
    assert restoring.status.phase is Phase.RESTORING and restoring.demand == 0
    partial = run(resumed_spec, restoring.status, dep(0), q(20), at(85))
    assert partial.actions == [] and partial.status.phase is Phase.RESTORING
    locked = run(resumed_spec, restoring.status, dep(0), q(41, busy=True), at(86))
    assert locked.status.phase is Phase.RESTORING, "the restore still holds the lock"
    restored = run(resumed_spec, restoring.status, dep(0), q(41), at(90))
    assert restored.status.dump.total_jobs == 0 and restored.status.operation is None
    # Restored in this pass: the workers are asked for in the same pass, not a pass later.
    assert restored.actions == [p.EnsureDeployment(3)]
    assert restored.status.phase is Phase.RUNNING
    steady = run(resumed_spec, restored.status, dep(3), q(41), at(92))
    assert steady.actions == [] and steady.status.phase is Phase.RUNNING


def test_dump_job_failure_degrades_and_retries_later() -> None:
    s = spec(paused=True, reaper={"dumpAfter": "30s"})
    status = models.SendGroupStatus(
        unchanged_since=at(0), queue=models.QueueStatus(total=5, measured_at=at(0))
    )
    started = run(s, status, dep(0), q(5), at(30))
    name = started.status.operation.job_name if started.status.operation else ""
    failed_obs = p.Observed(
        p.DeploymentObs(0), jobs={name: p.JobObs(name, failed_final=True)}, jobs_listed=True
    )
    failed = run(s, started.status, failed_obs, q(5), at(40))
    assert cond(failed, "Degraded") == ("True", "DumpFailed")
    assert failed.status.operation is None and failed.status.unchanged_since == at(40)
    assert any(e.type == "Warning" for e in failed.events)


def test_cancel_stops_workers_then_purges() -> None:
    s = spec(state="Cancelled")
    st = run(spec(), measure=q(10)).status
    first = run(s, st, dep(3), q(10), at(1))
    assert p.EnsureDeployment(0) in first.actions and p.PurgeQueue() not in first.actions
    pods = p.Observed(p.DeploymentObs(0), pods=2, jobs_listed=True)
    assert first.actions[0] == p.SetPauseMarker(True)
    assert first.status.phase is Phase.CANCELLING, "nothing purged yet"
    second = run(s, first.status, pods, q(10, paused=True), at(2))
    assert p.PurgeQueue() not in second.actions and p.DeleteDeployment() not in second.actions
    assert second.status.phase is Phase.CANCELLING
    third = run(s, second.status, dep(0), q(10, paused=True), at(3))
    assert third.actions == [p.DeleteDeployment()]
    purge = run(s, third.status, p.Observed(jobs_listed=True), q(10, paused=True), at(4))
    assert purge.actions == [p.PurgeQueue()] and purge.status.phase is Phase.CANCELLING
    done = run(s, purge.status, p.Observed(jobs_listed=True), q(0), at(5))
    assert done.actions == [] and done.status.phase is Phase.CANCELLED
    assert done.status.finished_at == at(5)


def test_cancel_with_dumps_runs_a_purge_job() -> None:
    s = spec(state="Cancelled")
    st = models.SendGroupStatus(dump=models.DumpStatus(total_jobs=7))
    first = run(s, st, p.Observed(jobs_listed=True), q(0), at(1))
    assert first.actions == [p.RequestPurge(), p.CreateJob("purge", 1)]
    name = "sg-g1-purge-1"
    running = p.Observed(jobs={name: p.JobObs(name, active=1)}, jobs_listed=True)
    marked = q(0, purge_requested=True)
    waiting = run(s, first.status, running, marked, at(3))
    assert waiting.actions == [] and waiting.status.dump.total_jobs == 7
    ok = p.Observed(jobs={name: p.JobObs(name, succeeded=1)}, jobs_listed=True)
    done = run(s, first.status, ok, marked, at(5))
    assert done.status.dump.total_jobs == 0 and done.status.phase is Phase.CANCELLED
    # The Job ran elsewhere (or was removed by its TTL): the marker's absence is the outcome.
    gone = run(s, first.status, running, q(0), at(5))
    assert gone.status.dump.total_jobs == 0 and gone.actions == []


def test_delete_retain_leaves_keys_and_purge_purges() -> None:
    deleting = p.Group("mail", "g1", "uid-1", 1, T0, deleting=True, deleting_since=at(0))
    retain = run(
        spec(deletionPolicy="Retain"),
        obs=p.Observed(jobs_listed=True),
        measure=q(9),
        group=deleting,
    )
    assert retain.finalized and p.PurgeQueue() not in retain.actions
    purge = run(spec(), obs=p.Observed(jobs_listed=True), measure=q(9, paused=True), group=deleting)
    assert not purge.finalized and purge.actions == [p.PurgeQueue()]
    assert run(spec(), measure=q(0), group=deleting).finalized


def test_delete_with_redis_down_gives_up_after_the_timeout() -> None:
    deleting = p.Group("mail", "g1", "uid-1", 1, T0, deleting=True, deleting_since=at(0))
    down = p.QueueError("connection refused")
    early = run(spec(), measure=down, group=deleting, now=at(10))
    assert not early.finalized
    late = run(spec(), measure=down, group=deleting, now=at(SETTINGS.purge_timeout))
    assert late.finalized and cond(late, "Degraded") == ("True", "PurgeAbandoned")


def test_redis_unreachable_is_a_condition_and_changes_nothing() -> None:
    s = spec()
    st = run(s, run(s, measure=q(10)).status, dep(3), q(10), at(1)).status
    down = run(s, st, dep(3), p.QueueError("connection refused"), at(2))
    assert down.actions == [] and cond(down, "QueueReachable") == ("False", "RedisUnreachable")
    assert [e.reason for e in down.events] == ["QueueUnreachable"] and down.write_status
    assert down.status.queue.total == 10  # last known count kept
    again = run(s, down.status, dep(3), p.QueueError("connection refused"), at(3))
    assert again.events == [] and not again.write_status
    back = run(s, again.status, dep(3), q(10), at(4))
    assert cond(back, "QueueReachable") == ("True", "Measured")


def test_global_cap_throttles() -> None:
    plan = run(spec(workers=5), measure=q(10), allowed=2)
    assert plan.actions == [p.EnsureDeployment(2)] and plan.status.workers.allowed == 2
    assert cond(plan, "Throttled") == ("True", "GlobalCap") and plan.demand == 5


def test_completed_drains_then_removes_workers_without_idle_wait() -> None:
    s = spec(state="Completed")
    draining = run(s, run(spec(), measure=q(3)).status, dep(3), q(3), at(1))
    assert draining.actions == []
    done = run(s, draining.status, dep(3), q(0), at(2))
    assert done.actions == [p.DeleteDeployment()] and done.status.phase is Phase.COMPLETED


def test_ttl_after_finished_deletes_the_group() -> None:
    s = spec(state="Completed", ttlSecondsAfterFinished=60)
    done = run(s, measure=q(0), now=at(0))
    assert done.status.finished_at == at(0) and p.DeleteGroup() not in done.actions
    assert p.DeleteGroup() in run(s, done.status, measure=q(0), now=at(60)).actions


def test_the_longest_ttl_the_schema_accepts_plans_and_a_longer_one_is_refused() -> None:
    """ttlSecondsAfterFinished is capped like every duration (36500 days): the cap plans (a
    deadline a century out, no DeleteGroup), and the model refuses one over it, which before
    the cap overflowed the deadline's date (OverflowError in every reaper pass, no status)."""
    import pydantic
    import pytest

    longest = 36500 * 86400
    s = spec(state="Completed", ttlSecondsAfterFinished=longest)
    done = run(s, measure=q(0), now=at(0))
    later = run(s, done.status, measure=q(0), now=at(86400))
    assert p.DeleteGroup() not in later.actions
    with pytest.raises(pydantic.ValidationError, match="less than or equal"):
        spec(state="Completed", ttlSecondsAfterFinished=300_000_000_000)


def test_workers_clamped_by_operator_setting() -> None:
    assert p.desired_workers(spec(workers=50), Settings(max_workers_per_group=10), "mail") == 10


def test_spec_change_updates_the_worker_template() -> None:
    s = spec()
    st = run(s, measure=q(5)).status
    old = p.Observed(p.DeploymentObs(3, 3, template_hash="0123abcd"), jobs_listed=True)
    assert run(s, st, old, q(5), at(1)).actions == [p.EnsureDeployment(3)]


def test_provider_pushback_sets_suspended() -> None:
    plan = run(spec(), measure=q(5, suspended_seconds=300))
    assert cond(plan, "Suspended") == ("True", "ProviderPushback")
    assert plan.actions == [p.EnsureDeployment(3)]  # workers stay, they stop sending
    assert cond(run(spec(), plan.status, measure=q(5)), "Suspended")[0] == "False"


def test_dump_summary_from_the_job_is_recorded() -> None:
    s = spec(paused=True, reaper={"dumpAfter": "30s"})
    status = models.SendGroupStatus(
        unchanged_since=at(0), queue=models.QueueStatus(total=6, measured_at=at(0))
    )
    started = run(s, status, dep(0), q(6), at(30))
    name = "sg-g1-dump-1"
    summary = {
        "jobs": 7,
        "ready": 4,
        "delayed": 1,
        "reserved": 1,
        "failed": 1,
        "bytes": 2048,
        "segment": "/dumps/mail/g1/mail-g1/20260301T120000000000Z-0a1b2c3d.sgdump",
        "redisVersion": "7.0.15",
    }
    ok = p.Observed(
        p.DeploymentObs(0),
        jobs={name: p.JobObs(name, succeeded=1, summary=summary)},
        jobs_listed=True,
    )
    done = run(s, started.status, ok, q(0), at(40))
    seg = done.status.dump.segments[0]
    assert (seg.jobs, seg.bytes, seg.redis_version) == (6, 2048, "7.0.15")
    assert seg.path.endswith(".sgdump") and done.status.dump.total_jobs == 6


def test_dump_waits_for_the_running_job_when_redis_already_shows_the_keys_gone() -> None:
    """On a real node the keys vanish a moment before the Job's pod turns Succeeded: the
    operator waits for the Job so status.dump carries its summary, not a guess."""
    s = spec(paused=True, reaper={"dumpAfter": "30s"})
    status = models.SendGroupStatus(
        unchanged_since=at(0), queue=models.QueueStatus(total=6, measured_at=at(0))
    )
    started = run(s, status, dep(0), q(6), at(30))
    name = "sg-g1-dump-1"
    running = p.Observed(
        p.DeploymentObs(0), jobs={name: p.JobObs(name, active=1)}, jobs_listed=True
    )
    waiting = run(s, started.status, running, q(0), at(35))
    assert waiting.status.operation is not None and waiting.status.dump.segments == []
    assert cond(waiting, "Dumped") == ("False", "Dumping")
    summary = {"ready": 6, "delayed": 0, "reserved": 0, "bytes": 900, "segment": "/d/x.sgdump"}
    ok = p.Observed(
        p.DeploymentObs(0),
        jobs={name: p.JobObs(name, succeeded=1, summary=summary)},
        jobs_listed=True,
    )
    done = run(s, waiting.status, ok, q(0), at(37))
    seg = done.status.dump.segments[0]
    assert (seg.path, seg.bytes, seg.jobs) == ("/d/x.sgdump", 900, 6)
    # A Job removed (TTL) after the keys were gone: Redis alone decides, nothing is lost.
    gone = p.Observed(p.DeploymentObs(0), jobs={}, jobs_listed=True)
    fallback = run(s, waiting.status, gone, q(0), at(37))
    assert fallback.status.dump.total_jobs == 6 and fallback.status.operation is None


def test_restore_that_keeps_failing_ends_failed_until_the_spec_changes() -> None:
    s = spec()
    status = models.SendGroupStatus(
        dump=models.DumpStatus(total_jobs=4), queue=models.QueueStatus(measured_at=at(0))
    )
    current = run(s, status, dep(0), q(0), at(1))
    for attempt in range(1, p.MAX_OPERATION_ATTEMPTS + 1):
        op = current.status.operation
        assert op is not None and op.kind == "restore" and op.attempts == attempt
        failed = p.Observed(
            p.DeploymentObs(0, template_hash="x"),
            jobs={op.job_name: p.JobObs(op.job_name, failed_final=True)},
            jobs_listed=True,
        )
        current = run(s, current.status, failed, q(0), at(10 * attempt))
    assert current.status.phase is Phase.FAILED
    assert not any(isinstance(a, p.CreateJob) for a in current.actions)
    stuck = run(s, current.status, dep(0), q(0), at(100))
    assert stuck.status.phase is Phase.FAILED and stuck.actions == []
    # A spec change (new generation) is the user's "try again".
    retry_group = p.Group("mail", "g1", "uid-1", 2, T0)
    retried = run(s, current.status, dep(0), q(0), at(110), group=retry_group)
    assert [type(a) for a in retried.actions] == [p.CreateJob]


def test_progress_counts_dumped_jobs_as_still_to_send() -> None:
    """A Dumped group with 30 delivered and 10 on the volume is 75 % done, not 100 %."""
    s = spec(paused=True, reaper={"dumpAfter": "30s"})
    paused = run(s, run(spec(), measure=q(10, delivered=30)).status, dep(3), q(10, delivered=30))
    dumping = run(s, paused.status, dep(0), q(10, delivered=30, paused=True), at(60))
    assert dumping.actions == [p.CreateJob("dump", 1)]
    dumped = run(s, dumping.status, dep(0), q(0, delivered=30, paused=True), at(70))
    assert dumped.status.phase is Phase.DUMPED and dumped.status.dump.total_jobs == 10
    assert dumped.status.progress.percent == 75.0


def test_progress_holds_while_jobs_move_between_redis_and_the_volume() -> None:
    """Mid-dump the queue reads 0 before the Job has counted what it wrote (it read 100 %);
    mid-restore the jobs are in Redis and still on the volume's count: the percent holds."""
    for kind, queue_total, on_volume in (("dump", 0, 0), ("restore", 2046, 2046)):
        st = models.SendGroupStatus.model_validate(
            {
                "progress": {"delivered": 954, "failed": 0, "percent": 31.8},
                "queue": {"total": queue_total},
                "dump": {"totalJobs": on_volume},
                "operation": {
                    "kind": kind,
                    "number": 1,
                    "jobName": f"sg-g1-{kind}-1",
                    "startedAt": "2026-12-05T03:00:00Z",
                },
            }
        )
        progress_percent(st)
        assert st.progress.percent == 31.8, kind
        st.operation = None  # the Job ended: computed again
        progress_percent(st)
        assert st.progress.percent == round(100 * 954 / (954 + queue_total + on_volume), 1)


# --- issue 21: the lifecycle under real traffic -------------------------------------------


def test_spec_changes_reach_an_existing_deployment_while_the_queue_reads_empty() -> None:
    """A trickle drained in milliseconds samples empty: workers 2 -> 3 and a new timeout still
    reach the Deployment (replicas and template), on the first pass after the edit."""
    before = spec(workers=2)
    st = run(before, measure=q(5)).status
    steady = run(before, st, dep(2), q(0, delivered=5), at(10))
    assert steady.actions == []
    more = run(spec(workers=3), steady.status, dep(2), q(0, delivered=9), at(20))
    assert more.actions == [p.EnsureDeployment(3)] and more.status.workers.allowed == 3
    stale = dataclasses.replace(dep(3), deployment=p.DeploymentObs(3, 3, template_hash="old"))
    edited = spec(workers=3, worker={"timeout": 50, "retryAfter": 90})
    assert run(edited, more.status, stale, q(0, delivered=12), at(30)).actions == [
        p.EnsureDeployment(3)
    ]


def test_paused_group_template_follows_the_spec_without_waking_workers() -> None:
    s = spec(paused=True, worker={"timeout": 50, "retryAfter": 90})
    stale = p.Observed(p.DeploymentObs(0, template_hash="old"), jobs_listed=True)
    result = run(s, obs=stale, measure=q(3, paused=True))
    assert result.actions == [p.EnsureDeployment(0)]


def test_a_trickle_is_not_idle_and_a_quiet_queue_is() -> None:
    s = spec(reaper={"idleAfter": "60s"})
    st = run(s, measure=q(1)).status
    delivered = 1
    for t in range(10, 200, 10):  # one mail per 10 s pass, every sample reads empty
        delivered += 1
        step = run(s, st, dep(3), q(0, delivered=delivered), at(t))
        assert step.status.idle_since is None and p.DeleteDeployment() not in step.actions
        st = step.status
    quiet = run(s, st, dep(3), q(0, delivered=delivered), at(200))
    assert quiet.status.idle_since == at(200)
    assert run(s, quiet.status, dep(3), q(0, delivered=delivered), at(259)).actions == []
    assert run(s, quiet.status, dep(3), q(0, delivered=delivered), at(260)).actions == [
        p.DeleteDeployment()
    ]


def test_failed_jobs_raise_an_event_once_and_a_condition() -> None:
    s = spec()
    st = run(s, measure=q(5)).status
    failed = run(s, st, dep(3), q(3, failed=2, failed_total=2), at(10))
    assert [e.reason for e in failed.events if e.type == "Warning"] == ["JobsFailed"]
    assert "2 job(s) failed" in failed.events[-1].message and failed.write_status
    assert cond(failed, "FailedJobs") == ("True", "JobsFailed")
    again = run(s, failed.status, dep(3), q(3, failed=2, failed_total=2), at(20))
    assert not any(e.reason == "JobsFailed" for e in again.events)
    retried = run(s, again.status, dep(3), q(5, failed=0, failed_total=2), at(30))
    assert cond(retried, "FailedJobs") == ("False", "NoFailedJobs")


def test_resume_clears_the_pause_marker_before_asking_for_workers() -> None:
    result = run(spec(), obs=dep(0), measure=q(10, paused=True))
    assert result.actions == [p.SetPauseMarker(False), p.EnsureDeployment(3)]


def test_passes_close_together_do_not_call_a_trickle_idle() -> None:
    """A change handler's pass and the daemon pass it wakes can run milliseconds apart: a
    trickle finishes nothing between them, and that is not idleness (seen in CI)."""
    s = spec(reaper={"idleAfter": "60s"})
    st = run(s, run(s, measure=q(1)).status, dep(3), q(0, delivered=5), at(10)).status
    assert st.idle_since is None
    soon = run(s, st, dep(3), q(0, delivered=5), at(10.3))
    assert soon.status.idle_since is None
    later = run(s, st, dep(3), q(0, delivered=5), at(10 + p.QUIET_WINDOW))
    assert later.status.idle_since == at(10 + p.QUIET_WINDOW)
    busy = run(s, later.status, dep(3), q(0, delivered=6), at(12.1))
    assert busy.status.idle_since is None
    # a new group's first measurement, nothing queued and nothing ever sent: idle at once (200
    # idle groups each wrote their status a second time, 10 s later, without this)
    assert run(s, measure=q(0), now=at(20)).status.idle_since == at(20)


# --- a PodDisruptionBudget the API server refuses ----------------------------------------


def test_a_refused_budget_is_retried_every_pass_not_at_the_busy_pace() -> None:
    """The Deployment written while its PodDisruptionBudget was refused carries
    builders.budget_pending_hash of the wanted hash: the planner plans the Deployment (and
    with it the budget) again, without a Scaled event and without the 2 s busy requeue; any
    other hash is a stale template (busy); the wanted hash, nothing to do."""
    s = spec(workers=2, disruptionBudget={"minAvailable": 1})
    st = run(s, measure=q(5)).status
    want = builders.template_hash(GROUP.ref(s), s, SETTINGS)
    assert builders.budget_pending_hash(want) != want

    def with_hash(h: str) -> p.Observed:
        return p.Observed(p.DeploymentObs(2, 2, template_hash=h), jobs_listed=True)

    pending = run(s, st, with_hash(builders.budget_pending_hash(want)), q(5), at(10))
    assert pending.actions == [p.EnsureDeployment(2)]
    assert pending.events == [] and pending.requeue_after is None
    stale = run(s, st, with_hash("old"), q(5), at(10))
    assert stale.actions == [p.EnsureDeployment(2)] and stale.requeue_after == p.BUSY_REQUEUE
    assert run(s, st, with_hash(want), q(5), at(10)).actions == []
    # the Deployment's body claims the budget only when it was applied
    ref = GROUP.ref(s)
    applied = builders.deployment(ref, s, SETTINGS, 2)
    refused = builders.deployment(ref, s, SETTINGS, 2, budget_applied=False)
    hash_of = builders.ANNOTATION_TEMPLATE_HASH
    assert applied["metadata"]["annotations"][hash_of] == want
    assert refused["metadata"]["annotations"][hash_of] == builders.budget_pending_hash(want)
    assert refused["spec"] == applied["spec"]  # same pods: no rollout


def test_a_refused_budget_degrades_the_group_once_and_clears_when_applied() -> None:
    s = spec(workers=2, disruptionBudget={"minAvailable": 1})
    old = run(s, measure=q(5)).status
    result = run(s, old, dep(2), q(5), at(10))
    p.budget_applied(GROUP, old, result, "PodDisruptionBudget sg-g1: HTTP 422: no", at(10))
    assert cond(result, "Degraded") == ("True", "DisruptionBudgetRefused")
    assert result.write_status
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "DisruptionBudgetRefused")]
    # refused again on the next pass: the condition stays, no second event, no status write
    again = run(s, result.status, dep(2), q(5), at(11))
    p.budget_applied(GROUP, result.status, again, "PodDisruptionBudget sg-g1: HTTP 422: no", at(11))
    assert cond(again, "Degraded") == ("True", "DisruptionBudgetRefused")
    assert again.events == [] and not again.write_status
    # applied: the degradation ends (a status write)
    done = run(s, again.status, dep(2), q(5), at(12))
    p.budget_applied(GROUP, again.status, done, None, at(12))
    assert find(done.status.conditions, "Degraded") is None and done.write_status
