"""The planner's decision rules as tables of (inputs, expected): phase derivation, job
outcomes, meaningful change (when a status is worth a write), the pause marker, and the
worker demand the global cap sees. Scenario tests over many passes are in test_plan.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sendgroup_operator import conditions, models
from sendgroup_operator import plan as p
from sendgroup_operator.models import Condition, Phase
from sendgroup_operator.plan import lifecycle
from sendgroup_operator.plan.decisions import Decisions

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GROUP = p.Group("mail", "g1", "uid-1", 1, T0)
SPEC = models.SendGroupSpec.model_validate({"campaign": "c", "host": "gmail.com", "workers": 3})


def cond(type_: str, status: str, reason: str) -> Condition:
    return Condition(type=type_, status=status, reason=reason, message="", last_transition_time=T0)


R, D, P = conditions.READY, conditions.DUMPED, conditions.PAUSED


@pytest.mark.parametrize(
    ("conds", "phase"),
    [
        ([], Phase.PENDING),
        ([cond(R, "False", "NoWork")], Phase.PENDING),
        ([cond(R, "True", "WorkersReady")], Phase.RUNNING),
        ([cond(R, "False", "Scaling")], Phase.RUNNING),
        ([cond(R, "False", "Idle")], Phase.IDLE),
        ([cond(R, "False", "Paused"), cond(P, "True", "Paused")], Phase.PAUSED),
        ([cond(R, "False", "Paused"), cond(D, "False", "Dumping")], Phase.DUMPING),
        ([cond(R, "False", "Paused"), cond(P, "True", "Paused"), cond(D, "True", "Dumped")],
         Phase.DUMPED),
        ([cond(R, "False", "Restoring"), cond(D, "True", "Restoring")], Phase.RESTORING),
        ([cond(R, "False", "Completed")], Phase.COMPLETED),
        ([cond(R, "False", "Cancelling"), cond(D, "True", "Dumped")], Phase.CANCELLING),
        ([cond(R, "False", "Cancelled")], Phase.CANCELLED),
        ([cond(R, "False", "Deleting"), cond(P, "True", "Paused")], Phase.DELETING),
        ([cond(R, "False", "Failed"), cond(D, "True", "Dumped")], Phase.FAILED),
        # conditions that do not change the phase
        ([cond(R, "True", "WorkersReady"), cond("FailedJobs", "True", "JobsFailed")],
         Phase.RUNNING),
        ([cond(R, "True", "WorkersReady"), cond("Suspended", "True", "ProviderPushback")],
         Phase.RUNNING),
    ],
)  # fmt: skip
def test_phase_derivation(conds: list[Condition], phase: Phase) -> None:
    assert conditions.derive_phase(conds) is phase


def _with_operation(kind: str, baseline: int = 0, dumped: int = 0) -> Decisions:
    status = models.SendGroupStatus(dump=models.DumpStatus(total_jobs=dumped))
    status.operation = models.OperationStatus(
        kind=kind, number=1, job_name="job-1", started_at=T0, baseline_total=baseline, attempts=1
    )
    return Decisions(GROUP, SPEC, status, T0 + timedelta(seconds=10))


def obs(listed: bool = True, **job: Any) -> p.Observed:
    jobs = {"job-1": p.JobObs("job-1", **job)} if job else {}
    return p.Observed(jobs=jobs, jobs_listed=listed)


@pytest.mark.parametrize(
    ("kind", "observed", "measure", "dumped", "outcome"),
    [
        # the Job's own word
        ("dump", obs(succeeded=1), p.QueueMeasure(ready=5), 0, "done"),
        ("dump", obs(failed_final=True), p.QueueMeasure(ready=5), 0, "failed"),
        ("dump", obs(active=1), p.QueueMeasure(ready=5), 0, None),
        # Redis as evidence: keys gone, no staging, no lock, the Job no longer running
        ("dump", obs(), p.QueueMeasure(), 0, "done"),
        ("dump", obs(active=1), p.QueueMeasure(), 0, None),  # wait for its summary
        ("dump", obs(), p.QueueMeasure(staging=2), 0, None),
        ("dump", obs(), p.QueueMeasure(busy=True), 0, None),
        ("dump", obs(failed_final=True), p.QueueMeasure(), 0, "done"),
        # restore: the queue holds baseline + dumped
        ("restore", obs(), p.QueueMeasure(ready=12), 10, "done"),
        ("restore", obs(), p.QueueMeasure(ready=9), 10, None),
        ("restore", obs(), p.QueueMeasure(ready=12, busy=True), 10, None),
        # Redis unreachable: only the Job can tell
        ("restore", obs(), p.QueueError("down"), 10, None),
        ("restore", obs(succeeded=1), p.QueueError("down"), 10, "done"),
        # not listed this pass: a missing Job is not "lost"
        ("restore", obs(listed=False), p.QueueMeasure(ready=1), 10, None),
    ],
)  # fmt: skip
def test_job_outcome(
    kind: str, observed: p.Observed, measure: p.Measurement, dumped: int, outcome: str | None
) -> None:
    b = _with_operation(kind, baseline=2, dumped=dumped)
    assert lifecycle.job_outcome(b, observed, measure) == outcome


def test_a_job_gone_without_outcome_is_lost_after_30_seconds() -> None:
    b = _with_operation("restore", baseline=2, dumped=10)
    assert lifecycle.job_outcome(b, obs(), p.QueueMeasure(ready=1)) is None
    b.now = T0 + timedelta(seconds=31)
    assert lifecycle.job_outcome(b, obs(), p.QueueMeasure(ready=1)) == "failed"


def status(**kw: Any) -> models.SendGroupStatus:
    queue = kw.pop("queue", {})
    progress = kw.pop("progress", {})
    return models.SendGroupStatus(
        queue=models.QueueStatus(**queue), progress=models.ProgressStatus(**progress), **kw
    )


@pytest.mark.parametrize(
    ("old", "new", "seconds", "write"),
    [
        (status(), status(), 0, False),
        (status(queue={"total": 0}), status(queue={"total": 1}), 0, True),  # crossed zero
        (status(queue={"total": 100}, last_refresh=T0), status(queue={"total": 95}), 0, False),
        (status(queue={"total": 100}), status(queue={"total": 95}), 0, True),  # never written
        (status(queue={"total": 100}), status(queue={"total": 89}), 0, True),  # >= 10 %
        (status(queue={"total": 100}, last_refresh=T0), status(queue={"total": 95}), 59, False),
        (status(queue={"total": 100}, last_refresh=T0), status(queue={"total": 95}), 60, True),
        (status(progress={"failed": 3}), status(progress={"failed": 4}), 0, True),  # a failure
        (status(progress={"delivered": 100}, last_refresh=T0),
         status(progress={"delivered": 105}), 0, False),
        (status(phase=Phase.RUNNING), status(phase=Phase.IDLE), 0, True),  # anything else
        (status(idle_since=None), status(idle_since=T0), 0, True),
    ],
)  # fmt: skip
def test_meaningful_change(
    old: models.SendGroupStatus, new: models.SendGroupStatus, seconds: int, write: bool
) -> None:
    assert p.meaningful_change(old, new, T0 + timedelta(seconds=seconds), 60.0) is write


@pytest.mark.parametrize(
    ("spec", "deleting", "measure", "dep", "pods", "action"),
    [
        ({"paused": True}, False, p.QueueMeasure(ready=3), None, 0, p.SetPauseMarker(True)),
        ({"paused": True}, False, p.QueueMeasure(), p.DeploymentObs(2), 0, p.SetPauseMarker(True)),
        ({"paused": True}, False, p.QueueMeasure(), None, 1, p.SetPauseMarker(True)),
        ({"paused": True}, False, p.QueueMeasure(), None, 0, None),  # nothing to protect
        ({"paused": True}, False, p.QueueMeasure(ready=3, paused=True), None, 0, None),  # set
        ({"state": "Cancelled"}, False, p.QueueMeasure(ready=3), None, 0, p.SetPauseMarker(True)),
        ({}, True, p.QueueMeasure(ready=3), None, 0, p.SetPauseMarker(True)),
        ({}, False, p.QueueMeasure(ready=3, paused=True), None, 0, p.SetPauseMarker(False)),
        ({}, False, p.QueueMeasure(ready=3), None, 0, None),
        ({"paused": True}, False, p.QueueError("down"), p.DeploymentObs(2), 0, None),
    ],
)  # fmt: skip
def test_pause_marker(
    spec: dict[str, Any],
    deleting: bool,
    measure: p.Measurement,
    dep: p.DeploymentObs | None,
    pods: int,
    action: p.Action | None,
) -> None:
    s = models.SendGroupSpec.model_validate({"campaign": "c", "host": "gmail.com", **spec})
    group = p.Group("mail", "g1", "uid-1", 1, T0, deleting=deleting, deleting_since=T0)
    result = p.plan(
        group,
        s,
        models.SendGroupStatus(),
        p.Observed(dep, pods=pods, jobs_listed=True),
        measure,
        1,
        lifecycle.Settings(),
        T0,
    )
    markers = [a for a in result.actions if isinstance(a, p.SetPauseMarker)]
    assert markers == ([action] if action else [])
    if markers:
        assert result.actions[0] == action, "the marker goes before any other action"


@pytest.mark.parametrize(
    ("spec", "total", "has_workers", "dumped", "deleting", "want"),
    [
        ({}, 5, False, 0, False, 3),
        ({}, 0, False, 0, False, 0),
        ({}, 0, True, 0, False, 3),  # a trickle keeps its workers' demand
        ({"paused": True}, 5, True, 0, False, 0),
        ({"state": "Cancelled"}, 5, True, 0, False, 0),
        ({}, 5, True, 0, True, 0),
        ({}, 5, False, 7, False, 0),  # restore first
    ],
)  # fmt: skip
def test_demand(
    spec: dict[str, Any], total: int, has_workers: bool, dumped: int, deleting: bool, want: int
) -> None:
    s = models.SendGroupSpec.model_validate(
        {"campaign": "c", "host": "gmail.com", "workers": 3, **spec}
    )
    st = models.SendGroupStatus(dump=models.DumpStatus(total_jobs=dumped))
    assert p.demand(s, st, p.QueueMeasure(ready=total), deleting, has_workers) == want


def test_mx_lookups_can_be_switched_off() -> None:
    """SENDGROUP_DNS_SERVERS=none: no query is sent (tests keep every packet on the machine)."""
    from sendgroup_operator.provider_dns import MxCache

    off = MxCache.from_env("none")
    assert off.lookup("example.org") == () and off.queries == 0
    local = MxCache.from_env("127.0.0.1:5353")
    assert (local.resolver.nameservers, local.resolver.port) == (["127.0.0.1"], 5353)
    assert not MxCache.from_env("").disabled
