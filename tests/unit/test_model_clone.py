"""models.clone (issue 15): the planner's copy of a group's status, equal to pydantic's
``model_copy(deep=True)`` and independent of the original (the planner changes its copy in
place: conditions, clocks, dump segments, the operation)."""

from __future__ import annotations

from datetime import UTC, datetime

from sendgroup_operator import conditions, models

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _status() -> models.SendGroupStatus:
    status = models.SendGroupStatus.model_validate(
        {
            "observedGeneration": 3,
            "phase": "Dumped",
            "workers": {"desired": 2, "ready": 1, "allowed": 2},
            "queue": {"ready": 5, "delayed": 1, "total": 6, "oldestJobAgeSeconds": 30},
            "idleSince": "2026-12-03T11:00:00Z",
            "dump": {"segments": [{"number": 1, "path": "ns/g/1.seg", "jobs": 10, "bytes": 2048}]},
            "provider": {"kind": "ClusterSendProvider", "name": "google", "via": "domain x"},
            "lastRefresh": "2026-12-03T11:59:00Z",
        }
    )
    conditions.set_condition(
        status.conditions, conditions.DEGRADED, "True", "DumpFailed", "m", NOW, 3
    )
    conditions.set_condition(
        status.conditions, conditions.QUEUE_REACHABLE, "True", "Ok", "", NOW, 3
    )
    return status


def test_clone_equals_a_deep_copy_and_is_independent() -> None:
    original = _status()
    reference = original.model_copy(deep=True)
    copy = models.clone(original)
    assert copy == reference and copy is not original
    assert copy.model_dump(mode="json", by_alias=True, exclude_unset=True) == (
        reference.model_dump(mode="json", by_alias=True, exclude_unset=True)
    )
    assert copy.model_fields_set == original.model_fields_set
    # changes to the copy, nested ones too, leave the original as it was
    copy.conditions[0].status = "False"
    copy.conditions.append(copy.conditions[1].model_copy())
    copy.dump.segments[0].bytes = 1
    copy.workers.ready = 0
    copy.queue.ready = 0
    copy.idle_since = None
    assert original == reference
