"""set_condition follows apimachinery's SetStatusCondition; phase comes from conditions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sendgroup_operator import conditions as c
from sendgroup_operator.models import Condition, Phase

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def test_new_condition_gets_transition_time_now() -> None:
    conds: list[Condition] = []
    assert c.set_condition(conds, "Ready", "True", "WorkersReady", "2/2", T0, 1)
    assert conds[0].last_transition_time == T0 and conds[0].observed_generation == 1


def test_transition_time_changes_only_when_status_flips() -> None:
    conds: list[Condition] = []
    c.set_condition(conds, "Ready", "False", "Scaling", "0/2", T0, 1)
    changed = c.set_condition(conds, "Ready", "False", "Scaling", "1/2", T1, 2)
    assert changed
    assert conds[0].last_transition_time == T0  # same status: time kept
    assert (conds[0].message, conds[0].observed_generation) == ("1/2", 2)
    c.set_condition(conds, "Ready", "True", "WorkersReady", "2/2", T1, 2)
    assert conds[0].last_transition_time == T1


def test_identical_set_reports_no_change() -> None:
    conds: list[Condition] = []
    c.set_condition(conds, "Paused", "True", "Paused", "m", T0, 1)
    assert not c.set_condition(conds, "Paused", "True", "Paused", "m", T1, 1)
    assert c.remove_condition(conds, "Paused") and conds == []


def _conds(*items: tuple[str, str, str]) -> list[Condition]:
    out: list[Condition] = []
    for type_, status, reason in items:
        c.set_condition(out, type_, status, reason, "", T0, 1)  # type: ignore[arg-type]
    return out


def test_phase_derivation() -> None:
    assert c.derive_phase([]) is Phase.PENDING
    assert c.derive_phase(_conds(("Ready", "False", "NoWork"))) is Phase.PENDING
    assert c.derive_phase(_conds(("Ready", "True", "WorkersReady"))) is Phase.RUNNING
    assert c.derive_phase(_conds(("Ready", "False", "Scaling"))) is Phase.RUNNING
    assert c.derive_phase(_conds(("Ready", "False", "Idle"))) is Phase.IDLE
    assert (
        c.derive_phase(_conds(("Ready", "False", "Paused"), ("Paused", "True", "Paused")))
        is Phase.PAUSED
    )
    paused_dumping = _conds(("Paused", "True", "Paused"), ("Dumped", "False", "Dumping"))
    assert c.derive_phase(paused_dumping) is Phase.DUMPING
    dumped = _conds(("Paused", "True", "Paused"), ("Dumped", "True", "Dumped"))
    assert c.derive_phase(dumped) is Phase.DUMPED
    assert c.derive_phase(_conds(("Dumped", "True", "Restoring"))) is Phase.RESTORING
    assert c.derive_phase(_conds(("Ready", "False", "Completed"))) is Phase.COMPLETED
    cancelled = _conds(("Ready", "False", "Cancelled"), ("Paused", "True", "Paused"))
    assert c.derive_phase(cancelled) is Phase.CANCELLED
    assert c.derive_phase(_conds(("Ready", "False", "Failed"))) is Phase.FAILED
