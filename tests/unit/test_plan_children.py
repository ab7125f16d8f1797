"""Which passes list a group's Jobs and pods (``plan.needs_children``), and that leaving them
out of a steady paused group's pass changes nothing the planner decides (issue 15: 20 % paused
groups listed both on every pass, ~2,400 API requests per minute at rest for 1,000 groups)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any, Literal

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sendgroup_operator import models
from sendgroup_operator import plan as p
from sendgroup_operator.provider_handlers import group_entry
from sendgroup_operator.reconcile import Runtime
from tests.unit.test_plan import GROUP, SETTINGS, T0, q, run, spec


def _dumped(jobs: int) -> models.SendGroupStatus:
    status = models.SendGroupStatus()
    status.dump.total_jobs = jobs
    return status


def _op(kind: Literal["dump", "restore"]) -> models.SendGroupStatus:
    status = models.SendGroupStatus()
    status.operation = models.OperationStatus(
        kind=kind, number=1, job_name=f"sg-g1-{kind}-1", started_at=T0, baseline_total=5
    )
    return status


def test_a_steady_paused_group_lists_nothing() -> None:
    paused = spec(paused=True)
    for status in (models.SendGroupStatus(), _dumped(40)):
        assert not p.needs_children(GROUP, paused, status, q(0))


def test_a_paused_group_lists_while_redis_holds_jobs_or_is_unknown() -> None:
    paused = spec(paused=True)
    status = models.SendGroupStatus()
    assert p.needs_children(GROUP, paused, status, q(3))  # a dump may fall due
    assert p.needs_children(GROUP, paused, status, q(0, staging=1))  # a dump mid-way
    assert p.needs_children(GROUP, paused, status, q(0, busy=True))
    assert p.needs_children(GROUP, paused, status, p.QueueError("down"))


def test_in_flight_finishing_and_restoring_groups_list() -> None:
    deleting = p.Group("mail", "g1", "uid-1", 1, T0, deleting=True, deleting_since=T0)
    assert p.needs_children(deleting, spec(paused=True), models.SendGroupStatus(), q(0))
    assert p.needs_children(GROUP, spec(state="Cancelled"), models.SendGroupStatus(), q(0))
    assert p.needs_children(GROUP, spec(paused=True), _op("dump"), q(0))
    assert p.needs_children(GROUP, spec(), _dumped(40), q(0))  # running: restore first
    assert not p.needs_children(GROUP, spec(), models.SendGroupStatus(), q(7))


@given(
    pods=st.integers(0, 5),
    replicas=st.integers(0, 3),
    dumped=st.integers(0, 1000),
    seconds=st.integers(0, 7 * 86400),
)
def test_a_steady_paused_pass_plans_the_same_without_the_lists(
    pods: int, replicas: int, dumped: int, seconds: int
) -> None:
    """The pass without Jobs and pods (what the operator now does) and the pass with them
    (what it did) give the same actions, status and events, whatever the pods were."""
    paused = spec(paused=True)
    status = _dumped(dumped)
    status.unchanged_since = T0
    now = T0 + timedelta(seconds=seconds)
    dep = p.DeploymentObs(replicas)
    listed = run(paused, status, p.Observed(dep, pods=pods, jobs_listed=True), q(0), now)
    unlisted = run(paused, status, p.Observed(dep), q(0), now)
    assert unlisted.actions == listed.actions
    assert unlisted.status == listed.status
    assert unlisted.events == listed.events


def test_an_idle_group_waits_the_idle_interval_within_its_bounds() -> None:
    status = models.SendGroupStatus()
    settings = SETTINGS  # reaperInterval 10 s, idle interval 60 s, liveness stall 120 s
    assert p.idle_wait(spec(), status, T0, settings) == 60.0
    slow = dataclasses.replace(settings, idle_pass_interval=600.0)
    assert p.idle_wait(spec(), status, T0, slow) == 60.0  # half the liveness stall
    fast = dataclasses.replace(settings, idle_pass_interval=2.0)
    assert p.idle_wait(spec(), status, T0, fast) == 10.0  # never below reaperInterval


def test_an_idle_finished_group_wakes_for_its_ttl() -> None:
    status = models.SendGroupStatus(finished_at=T0)
    ttl = spec(ttlSecondsAfterFinished=25)
    assert p.idle_wait(ttl, status, T0 + timedelta(seconds=5), SETTINGS) == 20.0
    assert p.idle_wait(ttl, status, T0 + timedelta(seconds=90), SETTINGS) == 1.0
    assert p.idle_wait(spec(), status, T0, SETTINGS) == 60.0  # no ttl: no deadline


def _body(rv: str | None, workers: int = 3) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "mail", "name": "g1", "uid": "uid-1", "generation": 1}
    if rv is not None:
        meta["resourceVersion"] = rv
    spec_ = {"campaign": "c", "host": "gmail.com", "workers": workers}
    return {"metadata": meta, "spec": spec_, "status": {}}


def test_the_runtime_shares_the_watched_spec_and_keeps_no_status_per_group() -> None:
    """A pass takes the spec model the watch handler validated for the same version of the
    same object; anything else is validated on its own (a refused spec raises every time).
    The status is read from the body every time and remembered nowhere (issue 15: a status
    model per group was the largest single cost of a resting group)."""
    rt = Runtime(settings=SETTINGS, kube=None)  # type: ignore[arg-type]
    seen = _body("7")
    seen["status"] = {"phase": "Idle"}
    rt.groups[("mail", "g1")] = group_entry(seen)
    shared = rt.groups[("mail", "g1")]["parsed"]
    first = rt.parse(seen)
    assert first[1] is shared and first[2].phase == "Idle"
    later = _body("7")
    later["status"] = {"phase": "Paused"}  # same version in tests only: the status is read again
    assert rt.parse(later)[2].phase == "Paused"
    assert rt.parse(_body("8", workers=5))[1].workers == 5  # newer than the watch: its own
    other = _body("7", workers=6)
    other["metadata"]["uid"] = "uid-2"  # same version of another object: its own
    assert rt.parse(other)[1].workers == 6
    assert rt.parse(_body(None, workers=4))[1].workers == 4
    rt.groups[("mail", "g1")] = group_entry(_body("9", workers=-1))
    for _ in range(2):  # a refused spec is refused by every pass
        with pytest.raises(pydantic.ValidationError):
            rt.parse(_body("9", workers=-1))


def test_a_paused_group_at_rest_rests_like_an_idle_one() -> None:
    """After the pass that paused it (workers at 0, nothing in Redis), a paused group's next
    passes may wait the idle interval; jobs in Redis, an unacted spec, a deletion or a running
    spec do not rest."""
    paused = spec(paused=True)
    settled = run(paused, models.SendGroupStatus(), p.Observed(p.DeploymentObs(0)), q(0), T0)
    status = settled.status
    assert p.rests_paused(GROUP, paused, status, q(0))
    assert not p.rests_paused(GROUP, paused, status, q(3))  # a dump may fall due
    assert not p.rests_paused(GROUP, paused, status, p.QueueError("down"))
    newer = dataclasses.replace(GROUP, generation=GROUP.generation + 1)
    assert not p.rests_paused(newer, paused, status, q(0))  # the spec changed since
    deleting = dataclasses.replace(GROUP, deleting=True, deleting_since=T0)
    assert not p.rests_paused(deleting, paused, status, q(0))
    assert not p.rests_paused(GROUP, spec(), status, q(0))  # resumed
    assert not p.rests_paused(GROUP, paused, models.SendGroupStatus(), q(0))  # never planned


def test_a_change_of_a_resting_group_s_deployment_wakes_it_once() -> None:
    rt = Runtime(settings=SETTINGS, kube=None)  # type: ignore[arg-type]
    rt.scheduler.add("mail/g1")
    rt.hand_over("mail/g1", 60)  # resting: its next pass in a minute

    def next_pass() -> float:
        left = rt.scheduler.deadline("mail/g1")
        assert left is not None
        return left

    body: dict[str, Any] = {"metadata": {"name": "sg-g1"}, "spec": {"replicas": 0}}
    rt.saw_deployment("mail", "sg-g1", body)
    rt.rest("mail/g1", True)
    rt.saw_deployment("mail", "sg-g1", body)  # the same as seen: no wake
    assert next_pass() > 59
    rt.saw_deployment("mail", "sg-g1", {**body, "spec": {"replicas": 4}})  # scaled by hand
    assert next_pass() <= 0
    rt.hand_over("mail/g1", 60)  # its pass ran
    rt.saw_deployment("mail", "sg-g1", body)  # woken once: not resting until its next pass
    assert next_pass() > 59
    rt.rest("mail/g1", True)
    rt.forget("mail/g1")
    rt.saw_deployment("mail", "sg-g1", None)
    assert next_pass() > 59
