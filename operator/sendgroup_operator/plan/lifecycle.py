"""The pure planner: ``(group, spec, status, observed children, measured queue, allowed
workers, settings, now) -> Plan(actions, status, events)``.

No kopf, kubernetes or redis imports (.importlinter checks it): everything this
module knows arrives as plain data, so every decision is unit-tested with an injected clock.
Level-triggered: the same inputs give the same plan, and every state a crash can leave behind
is only a starting point for the next pass (a Job that exists is adopted by name, a clock
that is set is kept).

How outcomes are decided (Jobs may run where the operator cannot look, may be deleted by
their TTL, or retried by their backoffLimit):

* dump done   <- the Job succeeded, or Redis shows the live queue and the dump's staging
  keys empty after the Job was started, and no lock held (a dump deletes keys only after the
  bytes are on the volume, so "keys gone" is the durable evidence);
* restore done <- the Job succeeded, or the queue holds at least ``baseline + dumped`` jobs
  with no lock held and no restore progress left (no worker runs while restoring, so nothing
  else removes jobs);
* purge without dump segments: the operator deletes the queue's Redis keys itself (explicit
  names, never a pattern); with segments on the volume, it sets a purge marker key and starts
  a ``-purge-<n>`` Job (``sendgroup-worker purge --dumps-dir``) that deletes the keys, the
  marker with them, and the segments: done when the Job succeeded or the marker is gone.

A Job that failed (its backoffLimit or deadline exhausted) or vanished before giving an
outcome sets ``Degraded`` and is retried by a new Job with the next number, at most
:data:`MAX_OPERATION_ATTEMPTS` times, then the group goes ``Failed``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from sendgroup_operator import builders, conditions, models
from sendgroup_operator.plan.decisions import Decisions
from sendgroup_operator.plan.status import (
    elapsed,
    failed_jobs,
    meaningful_change,
    progress_percent,
    record_measure,
)
from sendgroup_operator.plan.types import (
    DeleteDeployment,
    DeleteGroup,
    DeleteJob,
    DeploymentObs,
    EnsureDeployment,
    Group,
    Measurement,
    Observed,
    Plan,
    ProviderRule,
    PurgeQueue,
    QueueError,
    QueueMeasure,
    ReleaseQueue,
    RequestPurge,
    SetPauseMarker,
)
from sendgroup_operator.settings import Settings, image_allowed

MAX_OPERATION_ATTEMPTS: Final = 3


#: Seconds between two passes while something is in motion (scaling, a Job, a deletion).
BUSY_REQUEUE: Final = 2.0


def desired_workers(spec: models.SendGroupSpec, settings: Settings, namespace: str) -> int:
    """Workers the spec asks for, clamped to ``maxWorkersPerGroup``; 0 when the operator cannot
    run them (:func:`runtime_refusal`: nothing is asked of the global cap either)."""
    if runtime_refusal(spec, settings, namespace) is not None:
        return 0
    return max(0, min(spec.workers, settings.max_workers_per_group))


def runtime_refusal(spec: models.SendGroupSpec, settings: Settings, namespace: str) -> str | None:
    """Why the operator cannot run the group's workers (the Ready message), or None.

    ``runtime: laravel`` runs the shop's app image; without ``allowImageOverride`` the worker
    image is the operator's own, which has no ``php``: each pod would exit at once (127, ``php:
    not found``) and restart in CrashLoopBackOff while the group read ``Scaling`` and held its
    share of ``maxTotalWorkers``. Such a group gets no worker Deployment (one left from before
    the setting changed is deleted); its pause, dump, restore and cancel still run (their Jobs
    run the operator's image)."""
    if spec.worker.runtime is not models.WorkerRuntime.LARAVEL:
        return None
    if not image_allowed(settings, spec.worker.image or "", namespace):
        return (
            "spec.worker.runtime laravel runs spec.worker.image (the app's image), but this "
            "operator does not allow that image in this namespace (Helm values "
            "allowedImages, a prefix per namespace, or allowImageOverride): no workers are "
            "started and the jobs stay queued; ask the platform team to allow it, or use the "
            "Python runtime"
        )
    return None


def demand(
    spec: models.SendGroupSpec,
    status: models.SendGroupStatus,
    measure: Measurement | None,
    deleting: bool = False,
    has_workers: bool = False,
) -> int:
    """Workers this group asks of the global cap now: the desired count while it has work or
    still has its worker Deployment (``has_workers``: a trickle drained in milliseconds reads
    empty, yet its workers must follow the spec until the reaper removes them), is not paused,
    not finished, not being deleted and has nothing waiting to be restored; else 0. With Redis
    unreachable the last measured total counts."""
    if deleting or spec.paused or spec.state == models.State.CANCELLED:
        return 0
    if status.dump.total_jobs > 0:
        return 0
    total = measure.total if isinstance(measure, QueueMeasure) else status.queue.total
    return spec.workers if total > 0 or has_workers else 0


def plan(
    group: Group,
    spec: models.SendGroupSpec,
    status: models.SendGroupStatus,
    observed: Observed,
    measure: Measurement,
    allowed: int,
    settings: Settings,
    now: datetime,
    provider_env: Sequence[Mapping[str, Any]] = (),
    provider_rules: Sequence[ProviderRule] = (),
    provider_hold: str | None = None,
    provider_hold_reason: str = conditions.REASON_PROVIDER_INVALID,
) -> Plan:
    """Decide one reconciliation pass for one SendGroup (see the module docstring).

    ``allowed``: workers the global cap grants this group now (:mod:`fairshare`).
    ``provider_env``: the worker env entries of the group's provider (issue 14), part of the
    pod template the Deployment must have. ``provider_rules``: the provider's pushback rules
    in force (its ``status.activeRules``): a Suspend rule sets ``Suspended``, a ScaleRate or
    CapConcurrency rule ``Throttled``, each naming the rule; a pass follows the earliest
    ``until`` so the condition clears on time. ``provider_hold``: the group resolved to a
    provider whose spec the operator cannot use (the message names it), or names in
    ``spec.provider`` one that does not exist: no workers, ``Ready`` False with reason
    ``provider_hold_reason`` (``ProviderInvalid``, ``ProviderNotFound``) and one Warning event,
    as for a runtime the operator cannot run; it never sends without its provider's limits.
    Raises ``durations.InvalidDuration`` only for a spec the CRD would have rejected.
    """
    b = Decisions(group, spec, status, now)
    b.provider_env = provider_env
    b.provider_rules = [r for r in provider_rules if r.holds(now)]
    b.provider_hold = provider_hold
    b.provider_hold_reason = provider_hold_reason
    st = b.status
    if (
        st.operation is not None
        and st.operation.attempts > MAX_OPERATION_ATTEMPTS
        and status.observed_generation != group.generation
    ):
        st.operation = None  # a spec change is the user's "try again"
    st.observed_generation = group.generation

    # --- measurement and the reaper's clocks ---------------------------------------------
    if isinstance(measure, QueueMeasure):
        b.cond(conditions.QUEUE_REACHABLE, "True", "Measured", "queue measured")
        _pause_marker(b, observed, measure)
        record_measure(b, measure)
        failed_jobs(b, measure)
    else:
        b.cond(conditions.QUEUE_REACHABLE, "False", "RedisUnreachable", measure.message)
    _suspended(b, measure)

    desired = desired_workers(spec, settings, group.namespace)
    st.workers.desired = desired
    st.workers.ready = observed.deployment.ready_replicas if observed.deployment else 0

    if group.deleting or spec.state == models.State.CANCELLED:
        _teardown(b, observed, measure, settings)
        if b.plan.finalized:
            b.act(ReleaseQueue())  # the owner's claim goes last (issue 16)
    else:
        _run(b, observed, measure, allowed, settings)

    st.workers.summary = f"{st.workers.ready}/{st.workers.desired}"
    st.phase = conditions.derive_phase(st.conditions)
    if st.phase != status.phase and status.phase is not None:
        b.event("Normal", "Phase", f"phase {status.phase.value} -> {st.phase.value}")
    if (
        st.finished_at is not None
        and spec.ttl_seconds_after_finished is not None
        and not group.deleting
        and now >= st.finished_at + timedelta(seconds=spec.ttl_seconds_after_finished)
    ):
        b.act(DeleteGroup())
        b.event("Normal", "Expired", "ttlSecondsAfterFinished passed: deleting the group")

    progress_percent(st)
    _follow_rules(b, settings)
    b.plan.write_status = meaningful_change(status, st, now, settings.status_refresh)
    if b.plan.write_status:
        st.last_refresh = now
    b.plan.status = st
    b.plan.demand = min(
        demand(spec, st, measure, group.deleting, _keeps_workers(b, observed)), desired
    )
    if provider_hold is not None:
        b.plan.demand = 0  # held: nothing asked of the global cap
    if b.busy:
        b.plan.requeue_after = BUSY_REQUEUE
    return b.plan


def _suspended(b: Decisions, measure: Measurement) -> None:
    """Condition ``Suspended``: a provider Suspend rule in force (reason ``Rule<Name>`` as on
    the provider, e.g. ``RuleBlocked``; the message names provider, rule, action and end),
    else the group's own backpressure (``ProviderPushback``: the workers report a suspension
    in Redis), else False. Unchanged when Redis could not be measured and no provider rule
    holds."""
    suspend = [r for r in b.provider_rules if r.suspends]
    if suspend:
        b.cond(
            conditions.SUSPENDED,
            "True",
            suspend[0].reason,
            "; ".join(r.describe(b.now) for r in suspend) + ": no mail is sent to the provider",
        )
    elif isinstance(measure, QueueMeasure) and measure.suspended_seconds > 0:
        b.cond(
            conditions.SUSPENDED,
            "True",
            "ProviderPushback",
            f"{b.spec.backpressure.suspend_after} temporary failures in a row or a deferral "
            "reply: workers stopped sending for a while",
        )
    elif isinstance(measure, QueueMeasure):
        b.cond(conditions.SUSPENDED, "False", "Sending", "no provider pushback")


def _follow_rules(b: Decisions, settings: Settings) -> None:
    """Ask for a pass when the earliest provider rule ends (if sooner than the reaper's own
    interval), so ``Suspended`` / ``Throttled`` clear on time."""
    ends = [(r.until - b.now).total_seconds() for r in b.provider_rules if r.until > b.now]
    if not ends:
        return
    wait = max(0.5, min(ends) + 0.1)
    if wait < settings.reaper_interval:
        current = b.plan.requeue_after
        b.plan.requeue_after = wait if current is None else min(current, wait)


def _keeps_workers(b: Decisions, observed: Observed) -> bool:
    """Whether the group ends this pass with its worker Deployment (not deleted now)."""
    if any(isinstance(a, DeleteDeployment) for a in b.plan.actions):
        return False
    return observed.deployment is not None or any(
        isinstance(a, EnsureDeployment) and a.replicas > 0 for a in b.plan.actions
    )


def _pause_marker(b: Decisions, observed: Observed, m: QueueMeasure) -> None:
    """Plan :class:`SetPauseMarker` first in the pass. Wanted while the group is paused,
    cancelled or being deleted and a worker could still take a job (jobs in the queue, or a
    Deployment or pod still there); cleared as soon as the group runs again. After a purge
    nothing is left to protect, so a finished group leaves no marker behind."""
    stopping = b.spec.paused or b.spec.state == models.State.CANCELLED or b.group.deleting
    could_take = m.total > 0 or observed.deployment is not None or observed.pods > 0
    if stopping and could_take and not m.paused:
        b.act(SetPauseMarker(True))
    elif not stopping and m.paused:
        b.act(SetPauseMarker(False))


def job_outcome(b: Decisions, observed: Observed, measure: Measurement) -> str | None:
    """'done', 'failed' or None (still running / unknown) for the current operation."""
    op = b.status.operation
    assert op is not None
    job = observed.jobs.get(op.job_name)
    if job is not None and job.succeeded > 0:
        return "done"
    if isinstance(measure, QueueMeasure) and not measure.busy:
        if op.kind == "dump" and measure.total == 0 and measure.staging == 0:
            # Redis shows the keys gone a moment before the Job's pod turns Succeeded. While
            # the Job still runs, wait for it: its summary (segment file, bytes, Redis
            # version) is what status.dump records. A Job that failed after the keys were
            # gone, or was removed (TTL), leaves Redis as the only evidence: done without it.
            # Bounded by the Job's activeDeadlineSeconds.
            if job is not None and not job.failed_final:
                return None
            return "done"
        if op.kind == "restore" and measure.total >= op.baseline_total + b.old.dump.total_jobs:
            return "done"
    if job is not None and job.failed_final:
        return "failed"
    if job is None and observed.jobs_listed:
        age = (b.now - op.started_at).total_seconds()
        if age > 30:  # created >30 s ago and gone without an outcome: lost (TTL, deleted)
            return "failed"
    return None


def job_waiting(b: Decisions, observed: Observed, message: str) -> str:
    """``message`` (the Dumped condition's text while the operation runs) with why the
    operation's Job pod has not started (``JobObs.waiting``) appended as ``": WHY"``; a Warning
    event ``JobPodWaiting`` in the first pass that shows a reason for this operation (the old
    Dumped message was ``message`` without one): once, even when the kubelet alternates its
    reasons (``ErrImagePull`` / ``ImagePullBackOff``). A dump whose claim never binds (no
    default StorageClass, no volume left) otherwise said only "Job NAME" until the Job's
    deadline."""
    op = b.status.operation
    job = observed.jobs.get(op.job_name) if op is not None else None
    if op is None or job is None or job.waiting is None:
        return message
    old = conditions.find(b.old.conditions, conditions.DUMPED)
    if old is None or not old.message.startswith(f"{message}: "):
        b.event("Warning", "JobPodWaiting", f"{op.kind} Job {op.job_name}: {job.waiting}")
    return f"{message}: {job.waiting}"


def _operation_failed(b: Decisions, kind: str) -> None:
    op = b.status.operation
    assert op is not None
    b.cond(
        conditions.DEGRADED,
        "True",
        f"{kind.capitalize()}Failed",
        f"{kind} Job {op.job_name} failed (attempt {op.attempts} of {MAX_OPERATION_ATTEMPTS})",
    )
    b.event("Warning", f"{kind.capitalize()}Failed", f"{kind} Job {op.job_name} failed")


def _run(
    b: Decisions, observed: Observed, measure: Measurement, allowed: int, settings: Settings
) -> None:
    spec, st = b.spec, b.status
    dep = observed.deployment
    measured = isinstance(measure, QueueMeasure)
    total = measure.total if isinstance(measure, QueueMeasure) else st.queue.total
    st.workers.allowed = 0
    b.cond(
        conditions.PAUSED,
        "True" if spec.paused else "False",
        "Paused" if spec.paused else "Active",
        "spec.paused is true: no workers" if spec.paused else "not paused",
    )
    failed_ops = st.operation is not None and st.operation.attempts > MAX_OPERATION_ATTEMPTS

    if failed_ops:
        b.cond(conditions.READY, "False", conditions.REASON_FAILED, "dump/restore kept failing")
        return

    if spec.paused:
        _paused(b, observed, measure, total, settings)
        return

    # --- not paused: first bring dumped jobs back --------------------------------------------
    if st.operation is not None and st.operation.kind == "dump":
        # Resumed while a dump was running: let the Job finish (it owns the lock).
        outcome = job_outcome(b, observed, measure)
        if outcome is None:
            b.busy = True
            b.cond(conditions.DUMPED, "False", conditions.REASON_DUMPING, "dump in progress")
            return
        _finish_dump(b, observed, measure, outcome)
    if st.dump.total_jobs > 0:
        if not _restore(b, observed, measure):
            if dep is not None and dep.replicas > 0:
                b.act(EnsureDeployment(0))
            return
        # restored in this very pass: the workers are asked for now, not a pass later
        total = measure.total if isinstance(measure, QueueMeasure) else total
    _serve(b, dep, total, measured, allowed, settings)


def _serve(
    b: Decisions,
    dep: DeploymentObs | None,
    total: int,
    measured: bool,
    allowed: int,
    settings: Settings,
) -> None:
    """Not paused, nothing to restore: finish a Completed group, reap an idle one, or keep
    the workers converged to the spec (``allowed`` of them) while there is work or workers."""
    spec, st, now = b.spec, b.status, b.now
    conditions.remove_condition(st.conditions, conditions.DUMPED)
    _throttled(b, total > 0 or dep is not None, allowed)
    if total == 0 and measured and spec.state == models.State.COMPLETED:
        if dep is not None:
            b.act(DeleteDeployment())
            b.event("Normal", "Reaped", "queue drained and state Completed: workers removed")
        b.cond(conditions.READY, "False", conditions.REASON_COMPLETED, "all jobs done")
        if st.finished_at is None:
            st.finished_at = now
        return
    refusal = runtime_refusal(spec, settings, b.group.namespace)
    if refusal is not None:
        _cannot_run(b, dep, refusal)
        return
    if b.provider_hold is not None:
        _cannot_run(b, dep, b.provider_hold, b.provider_hold_reason)
        return
    idle = total == 0 and measured and elapsed(st.idle_since, now, spec.reaper.idle_after)
    if idle and dep is not None:
        b.act(DeleteDeployment())
        b.event(
            "Normal",
            "Reaped",
            f"nothing queued or delivered for {spec.reaper.idle_after}: workers removed",
        )
        b.cond(conditions.READY, "False", conditions.REASON_IDLE, "queue empty, no workers")
        return
    if total > 0 or dep is not None:
        # Work, or workers still there (a trickle drained in milliseconds reads empty): the
        # Deployment converges to the spec on every pass, whatever the queue holds.
        st.workers.allowed = allowed
        _converge(b, dep, allowed, settings)
        ready = dep.ready_replicas if dep else 0
        if total == 0:  # nothing waits on the workers: ready for what comes
            b.cond(conditions.READY, "True", "WorkersReady", "queue empty, workers waiting")
        elif ready >= allowed and allowed > 0:
            message = f"{ready}/{allowed} workers ready"
            b.cond(conditions.READY, "True", "WorkersReady", message)
        else:
            b.cond(conditions.READY, "False", "Scaling", f"{ready}/{allowed} workers ready")
        return

    # --- no work, no workers -------------------------------------------------------------------
    if not measured:
        return  # keep what is there: no decision on an unknown queue
    old_ready = conditions.find(b.old.conditions, conditions.READY)
    if old_ready is not None and old_ready.reason != conditions.REASON_NO_WORK:
        b.cond(conditions.READY, "False", conditions.REASON_IDLE, "queue empty, no workers")
    else:
        b.cond(conditions.READY, "False", conditions.REASON_NO_WORK, "no jobs yet")


def _cannot_run(
    b: Decisions,
    dep: DeploymentObs | None,
    message: str,
    reason: str = conditions.REASON_RUNTIME_NOT_ALLOWED,
) -> None:
    """Workers the operator cannot run (:func:`runtime_refusal`, reason ``RuntimeNotAllowed``;
    a provider with an unusable spec, ``ProviderInvalid``): no Deployment (one still there is
    deleted), ``Ready=False`` with ``reason`` and one Warning event when that reason
    appears."""
    if dep is not None:
        b.act(DeleteDeployment())
    before = conditions.find(b.old.conditions, conditions.READY)
    b.cond(conditions.READY, "False", reason, message)
    if before is None or before.reason != reason:
        b.event("Warning", reason, message)


def _throttled(b: Decisions, active: bool, allowed: int) -> None:
    """Condition ``Throttled`` of a group with work or workers (``active``): a provider
    ScaleRate / CapConcurrency rule in force (reason ``Rule<Name>``, e.g. ``RuleUnusualRate``;
    the message names provider, rule, action and end, and the global cap too when it holds),
    else the global cap (``GlobalCap``), else False."""
    desired = b.status.workers.desired
    capped = active and allowed < desired
    cap = f"maxTotalWorkers allows {allowed} of {desired} workers"
    rules = [r for r in b.provider_rules if not r.suspends] if active else []
    if rules:
        text = "; ".join(r.describe(b.now) for r in rules)
        b.cond(conditions.THROTTLED, "True", rules[0].reason, text + (f"; {cap}" if capped else ""))
    elif capped:
        b.cond(conditions.THROTTLED, "True", "GlobalCap", cap)
    else:
        b.cond(conditions.THROTTLED, "False", "WithinCap", "no global cap or provider rule applies")


#: :func:`_stale`'s answers besides False: the template differs, or only the group's
#: PodDisruptionBudget is still to be applied (it was refused when the Deployment was written).
STALE: Final = "stale"
BUDGET_PENDING: Final = "budget-pending"


def _stale(b: Decisions, dep: DeploymentObs, settings: Settings) -> str | None:
    """Whether the Deployment's pod template differs from what the spec asks for: its
    template-hash annotation (a spec change), or what the operator owns in it as read back
    (someone edited the Deployment: :func:`~sendgroup_operator.builders.owned_fingerprint`):
    :data:`STALE`; :data:`BUDGET_PENDING` when the template is as wanted but the annotation
    says its PodDisruptionBudget was refused (:func:`~sendgroup_operator.builders.
    budget_pending_hash`); None when up to date."""
    want_hash, want_owned = builders.template_fingerprints(
        b.group.ref(b.spec), b.spec, settings, b.provider_env
    )
    if dep.owned is not None and dep.owned != want_owned:
        return STALE
    if dep.template_hash == want_hash:
        return None
    if dep.template_hash == builders.budget_pending_hash(want_hash):
        return BUDGET_PENDING
    return STALE


def _converge(b: Decisions, dep: DeploymentObs | None, replicas: int, settings: Settings) -> None:
    """Plan :class:`EnsureDeployment` when the Deployment is missing, has other replicas, or a
    stale pod template (any spec field the template carries: env, resources, image, grace), or
    its PodDisruptionBudget was refused when it was written (retried every pass, not at the
    busy pace: the API server refuses it again until something changes)."""
    stale = _stale(b, dep, settings) if dep is not None else STALE
    if dep is not None and dep.replicas == replicas and stale is None:
        return
    b.act(EnsureDeployment(replicas))
    if dep is None or dep.replicas != replicas:
        was = dep.replicas if dep is not None else 0
        b.event("Normal", "Scaled", f"workers {was} -> {replicas}")
    elif stale == BUDGET_PENDING:
        return
    b.busy = True


def _finish_dump(b: Decisions, observed: Observed, measure: Measurement, outcome: str) -> None:
    st, op = b.status, b.status.operation
    assert op is not None
    if outcome == "failed":
        _operation_failed(b, "dump")
        st.operation = None
        st.unchanged_since = b.now  # try again after another dumpAfter
        return
    job = observed.jobs.get(op.job_name)
    # A Job still running when Redis already shows the outcome is left to finish (its last
    # steps touch only the volume) and to its TTL; it holds no worker back.
    summary = dict(job.summary) if job is not None and job.summary else {}
    if all(k in summary for k in ("ready", "delayed", "reserved")):
        jobs = int(summary["ready"]) + int(summary["delayed"]) + int(summary["reserved"])
    else:
        jobs = op.baseline_total
    segment = models.DumpSegment(
        path=str(summary.get("segment") or builders.dumps_dir(b.group.ref(b.spec))),
        bytes=summary.get("bytes"),
        jobs=jobs,
        created_at=b.now,
        redis_version=summary.get("redisVersion"),
    )
    st.dump.segments.append(segment)
    st.dump.total_jobs += jobs
    st.operation = None
    conditions.remove_condition(st.conditions, conditions.DEGRADED)
    b.event("Normal", "Dumped", f"{jobs} jobs dumped to the volume; Redis keys removed")


def _paused(
    b: Decisions, observed: Observed, measure: Measurement, total: int, settings: Settings
) -> None:
    spec, st = b.spec, b.status
    dep = observed.deployment
    b.cond(conditions.READY, "False", conditions.REASON_PAUSED, "paused")
    conditions.remove_condition(st.conditions, conditions.THROTTLED)
    if dep is not None and dep.replicas != 0:
        b.act(EnsureDeployment(0))
        b.event("Normal", "Paused", "paused: workers -> 0")
        b.busy = True
    elif dep is not None and _stale(b, dep, settings):
        b.act(EnsureDeployment(0))  # the template follows the spec while paused too
    op = st.operation
    if op is not None and op.kind == "restore":
        # Paused again while restoring: let the restore finish, it is idempotent.
        outcome = job_outcome(b, observed, measure)
        if outcome == "done":
            _finish_restore(b, observed)
        elif outcome == "failed":
            _operation_failed(b, "restore")
            st.operation = None
        else:
            b.busy = True
        return
    if op is not None and op.kind == "dump":
        outcome = job_outcome(b, observed, measure)
        if outcome is None:
            b.busy = True
            text = job_waiting(b, observed, f"Job {op.job_name}")
            b.cond(conditions.DUMPED, "False", conditions.REASON_DUMPING, text)
            return
        _finish_dump(b, observed, measure, outcome)
    if st.dump.total_jobs > 0 and total == 0:
        b.cond(
            conditions.DUMPED,
            "True",
            "Dumped",
            f"{st.dump.total_jobs} jobs on the volume, none in Redis",
        )
        return
    if st.dump.total_jobs > 0:
        b.cond(conditions.DUMPED, "True", "PartlyDumped", "jobs on the volume and in Redis")
    if not isinstance(measure, QueueMeasure) or total == 0:
        return
    if elapsed(st.unchanged_since, b.now, spec.reaper.dump_after):
        if observed.pods > 0 or (dep is not None and dep.replicas > 0):
            b.busy = True  # workers still stopping: dump after they are gone
            return
        attempts = 1
        b.start_job("dump", total, attempts)
        b.cond(conditions.DUMPED, "False", conditions.REASON_DUMPING, "dump Job started")
        b.event(
            "Normal",
            "Dumping",
            f"queue unchanged for {spec.reaper.dump_after}: dumping {total} jobs",
        )


def _finish_restore(b: Decisions, observed: Observed) -> None:
    st = b.status
    jobs = st.dump.total_jobs
    st.dump = models.DumpStatus()
    st.operation = None
    conditions.remove_condition(st.conditions, conditions.DEGRADED)
    b.cond(conditions.DUMPED, "False", "Restored", f"{jobs} jobs restored to Redis")
    b.event("Normal", "Restored", f"{jobs} jobs restored from the volume")


def _restore(b: Decisions, observed: Observed, measure: Measurement) -> bool:
    """Drive the restore; True once it finished in this pass (the caller then starts the
    workers in the same pass)."""
    st = b.status
    op = st.operation
    b.cond(conditions.READY, "False", "Restoring", "restoring before workers start")
    if op is not None and op.kind == "restore":
        outcome = job_outcome(b, observed, measure)
        if outcome == "done":
            _finish_restore(b, observed)
            b.busy = True
            return True
        if outcome == "failed":
            _operation_failed(b, "restore")
            attempts = op.attempts + 1
            if attempts > MAX_OPERATION_ATTEMPTS:
                op.attempts = attempts
                b.cond(conditions.READY, "False", conditions.REASON_FAILED, "restore failed")
                return False
            st.operation = None
            if isinstance(measure, QueueMeasure):
                b.start_job("restore", measure.total, attempts)
        current = st.operation
        text = "restore Job running" if current is None else f"Job {current.job_name} running"
        if current is op:  # the Job observed in this pass (not one started just now)
            text = job_waiting(b, observed, text)
        b.cond(conditions.DUMPED, "True", conditions.REASON_RESTORING, text)
        b.busy = True
        return False
    if not isinstance(measure, QueueMeasure):
        return False
    if observed.pods > 0:
        b.busy = True
        return False
    b.start_job("restore", measure.total)
    b.cond(conditions.DUMPED, "True", conditions.REASON_RESTORING, "restore Job started")
    b.event("Normal", "Restoring", f"restoring {st.dump.total_jobs} dumped jobs before workers")
    return False


def _teardown(b: Decisions, observed: Observed, measure: Measurement, settings: Settings) -> None:
    """Cancelled or being deleted: workers to 0 and gone, then purge (policy), then done."""
    spec, st, group = b.spec, b.status, b.group
    dep = observed.deployment
    st.workers.allowed = 0
    purge = spec.state == models.State.CANCELLED or (
        group.deleting and spec.deletion_policy == models.DeletionPolicy.PURGE
    )
    cancelled = spec.state == models.State.CANCELLED and not group.deleting
    reason = conditions.REASON_CANCELLING if cancelled else conditions.REASON_DELETING
    # Step 1: no workers, no dump/restore Job running.
    waiting = False
    if dep is not None:
        if dep.replicas != 0:
            b.act(EnsureDeployment(0))
            b.event("Normal", "Scaled", "stopping workers before cleanup")
        waiting = True
        if observed.pods == 0:
            b.act(DeleteDeployment())
    op = st.operation
    if op is not None and op.kind in ("dump", "restore"):
        outcome = job_outcome(b, observed, measure)
        if outcome == "done" and op.kind == "dump":
            _finish_dump(b, observed, measure, outcome)
        elif outcome is None and op.job_name in observed.jobs:
            b.act(DeleteJob(op.job_name))
            waiting = True
        else:
            st.operation = None
    if observed.pods > 0:
        waiting = True
    if waiting:
        b.busy = True
        b.cond(conditions.READY, "False", reason, "waiting for workers to stop")
        return
    # Step 2: purge.
    if purge and not _purged(b, observed, measure, settings):
        b.busy = True
        b.cond(conditions.READY, "False", reason, "purging the queue")
        return
    b.cond(
        conditions.READY,
        "False",
        conditions.REASON_CANCELLED if cancelled else reason,
        "workers stopped; queue purged" if purge else "workers stopped; queue kept (Retain)",
    )
    if group.deleting:
        b.plan.finalized = True
    elif st.finished_at is None:
        st.finished_at = b.now


def _purged(b: Decisions, observed: Observed, measure: Measurement, settings: Settings) -> bool:
    """Drive the purge; True once keys and dump segments are gone (or, for a deletion with
    Redis unreachable past ``purgeTimeout``, given up on with a condition and an event)."""
    st = b.status
    if isinstance(measure, QueueError):
        since = b.group.deleting_since
        if since is not None and (b.now - since).total_seconds() >= settings.purge_timeout:
            b.cond(
                conditions.DEGRADED,
                "True",
                "PurgeAbandoned",
                f"Redis unreachable for {int(settings.purge_timeout)}s: queue keys left in Redis",
            )
            b.event("Warning", "PurgeAbandoned", "Redis unreachable: deleting without a purge")
            return True
        return False
    clean = (
        measure.total == 0
        and measure.failed == 0
        and measure.staging == 0
        and measure.delivered == 0
        and measure.failed_total == 0
    )
    op = st.operation
    if st.dump.total_jobs > 0 or st.dump.segments:
        if op is None or op.kind != "purge":
            b.act(RequestPurge())
            b.start_job("purge", 0)
            return False
        job = observed.jobs.get(op.job_name)
        if (job is not None and job.succeeded > 0) or not measure.purge_requested:
            st.dump = models.DumpStatus()
            st.operation = None
            b.event("Normal", "Purged", "queue keys purged and dump segments forgotten")
            return True
        if job is not None and job.failed_final:
            _operation_failed(b, "purge")
            attempts = op.attempts + 1
            st.operation = None
            if attempts <= MAX_OPERATION_ATTEMPTS:
                b.act(RequestPurge())
                b.start_job("purge", 0, attempts)
        return False
    if not clean:
        b.act(PurgeQueue())
        b.event("Normal", "Purged", f"queue keys purged ({measure.total + measure.failed} jobs)")
    return clean
