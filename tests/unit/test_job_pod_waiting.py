"""Why a dump or restore Job's pod has not started, from the pod as the API server returns it,
up to the group's Dumped condition and one Warning event (a claim that never binds, e.g. no
default StorageClass, left a group saying only "Job NAME" until the Job's deadline)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sendgroup_operator import models
from sendgroup_operator import plan as p
from sendgroup_operator.conditions import find
from sendgroup_operator.reconcile import WAITING_MAX, job_pod_waiting
from sendgroup_operator.settings import Settings

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GROUP = p.Group("mail", "g1", "uid-1", 1, T0)
UNBOUND = (
    "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: "
    "0/1 nodes are available: 1 Preemption is not helpful for scheduling."
)


def pod(name: str, phase: str = "Pending", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase, **status}}


def unscheduled(name: str, message: str = UNBOUND) -> dict[str, Any]:
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return pod(name, conditions=[{**cond, "message": message}])


def waiting(name: str, reason: str, message: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message is not None:
        state["message"] = message
    return pod(name, containerStatuses=[{"name": "dump", "state": {"waiting": state}}])


def test_an_unscheduled_pod_says_why_in_the_schedulers_words() -> None:
    assert job_pod_waiting([unscheduled("d-1-abc")]) == f"pod d-1-abc not scheduled: {UNBOUND}"


def test_a_container_that_cannot_start_names_its_reason() -> None:
    got = job_pod_waiting([waiting("d-1-abc", "ErrImageNeverPull", 'image "x:dev" not present')])
    assert got == 'pod d-1-abc waiting: ErrImageNeverPull: image "x:dev" not present'
    assert job_pod_waiting([waiting("d-1-abc", "CreateContainerConfigError")]) == (
        "pod d-1-abc waiting: CreateContainerConfigError"
    )


def test_starting_running_or_finished_pods_say_nothing() -> None:
    assert job_pod_waiting([]) is None
    assert job_pod_waiting([waiting("a", "ContainerCreating")]) is None
    assert (
        job_pod_waiting([pod("a", conditions=[{"type": "PodScheduled", "status": "True"}])]) is None
    )
    # a retried Job: one pod failed, its successor runs
    assert job_pod_waiting([pod("a", "Failed"), pod("b", "Running")]) is None
    assert job_pod_waiting([unscheduled("a"), pod("b", "Running")]) is None


def test_a_failed_attempt_does_not_hide_why_its_successor_waits() -> None:
    """Review finding: the first non-Pending pod ended the search, so a retried Job whose
    first pod failed and whose second cannot be scheduled said nothing."""
    got = job_pod_waiting([pod("d-1-a", "Failed"), unscheduled("d-1-b")])
    assert got == f"pod d-1-b not scheduled: {UNBOUND}"


def test_the_text_is_one_printable_line_of_bounded_length() -> None:
    got = job_pod_waiting([unscheduled("a", "line1\nline2\x1b[31m\t" + "x" * 1000)])
    assert got is not None and got.startswith("pod a not scheduled: line1 line2 [31m x")
    assert len(got) == WAITING_MAX and got.endswith("...")
    assert all(ch.isprintable() for ch in got)


def _dumping() -> tuple[models.SendGroupSpec, models.SendGroupStatus]:
    s = models.SendGroupSpec.model_validate(
        {"campaign": "c", "host": "gmail.com", "workers": 3, "paused": True}
    )
    status = models.SendGroupStatus(
        operation=models.OperationStatus(
            kind="dump", number=1, job_name="sg-g1-dump-1", started_at=T0, baseline_total=41
        ),
        operations_started=1,
        queue=models.QueueStatus(total=41, ready=41, measured_at=T0),
    )
    return s, status


def _pass(
    s: models.SendGroupSpec, status: models.SendGroupStatus, why: str | None, seconds: float
) -> p.Plan:
    job = p.JobObs("sg-g1-dump-1", active=1, waiting=why)
    observed = p.Observed(p.DeploymentObs(0), jobs={job.name: job}, jobs_listed=True)
    measure = p.QueueMeasure(ready=41, paused=True)
    now = T0 + timedelta(seconds=seconds)
    return p.plan(GROUP, s, status, observed, measure, 0, Settings(), now)


def test_a_dump_whose_pod_waits_says_why_on_the_group_once() -> None:
    s, status = _dumping()
    why = f"pod sg-g1-dump-1-x not scheduled: {UNBOUND}"
    first = _pass(s, status, why, 5)
    dumped = find(first.status.conditions, "Dumped")
    assert dumped is not None and (dumped.status, dumped.reason) == ("False", "Dumping")
    assert dumped.message == f"Job sg-g1-dump-1: {why}"
    events = [e for e in first.events if e.reason == "JobPodWaiting"]
    assert [(e.type, e.message) for e in events] == [("Warning", f"dump Job sg-g1-dump-1: {why}")]
    assert first.write_status and first.status.phase is models.Phase.DUMPING
    again = _pass(s, first.status, why, 7)
    assert not [e for e in again.events if e.reason == "JobPodWaiting"], "the event repeated"
    # once the pod starts, the message goes back to the Job's name
    started = _pass(s, again.status, None, 9)
    dumped = find(started.status.conditions, "Dumped")
    assert dumped is not None and dumped.message == "Job sg-g1-dump-1"


def test_alternating_kubelet_reasons_post_one_event_for_the_job() -> None:
    """Review finding: the kubelet alternates ErrImagePull and ImagePullBackOff while a pull
    keeps failing; each change of text posted another event. One per Job now; the message
    follows the latest reason."""
    s, status = _dumping()
    texts = [
        'pod sg-g1-dump-1-x waiting: ErrImagePull: pull "x:dev" failed',
        'pod sg-g1-dump-1-x waiting: ImagePullBackOff: Back-off pulling image "x:dev"',
    ]
    events = 0
    for i in range(6):
        step = _pass(s, status, texts[i % 2], 5 + 2 * i)
        events += sum(1 for e in step.events if e.reason == "JobPodWaiting")
        dumped = find(step.status.conditions, "Dumped")
        assert dumped is not None and dumped.message == f"Job sg-g1-dump-1: {texts[i % 2]}"
        status = step.status
    assert events == 1, events


def test_a_restore_whose_pod_waits_says_why_once() -> None:
    s = models.SendGroupSpec.model_validate({"campaign": "c", "host": "gmail.com", "workers": 3})
    status = models.SendGroupStatus(
        operation=models.OperationStatus(
            kind="restore", number=2, job_name="sg-g1-restore-2", started_at=T0, baseline_total=0
        ),
        operations_started=2,
        dump=models.DumpStatus(total_jobs=41),
    )
    why = f"pod sg-g1-restore-2-x not scheduled: {UNBOUND}"
    job = p.JobObs("sg-g1-restore-2", active=1, waiting=why)
    observed = p.Observed(p.DeploymentObs(0), jobs={job.name: job}, jobs_listed=True)
    first = p.plan(
        GROUP, s, status, observed, p.QueueMeasure(), 0, Settings(), T0 + timedelta(seconds=3)
    )
    dumped = find(first.status.conditions, "Dumped")
    assert dumped is not None and dumped.reason == "Restoring"
    assert dumped.message == f"Job sg-g1-restore-2 running: {why}"
    assert [e.reason for e in first.events].count("JobPodWaiting") == 1
    again = p.plan(
        GROUP, s, first.status, observed, p.QueueMeasure(), 0, Settings(), T0 + timedelta(seconds=5)
    )
    assert [e.reason for e in again.events].count("JobPodWaiting") == 0
    assert first.actions == [] and again.actions == []
