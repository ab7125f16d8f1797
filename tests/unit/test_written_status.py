"""Which status a pass plans from (``reconcile.base_status``): the one this process wrote
until the watch brings it back, then the body's own, and the record of the write goes (issue
15: keeping both was a second status model per group, ~6 KB)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import kubernetes.client as k8s

from sendgroup_operator import models, reconcile
from sendgroup_operator.kube import Kube
from sendgroup_operator.settings import Settings

T1 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
KEY, UID = "mail/gmail", "uid-1"


def _runtime(written: models.SendGroupStatus) -> reconcile.Runtime:
    rt = reconcile.Runtime(settings=Settings(), kube=Kube(k8s.ApiClient()))  # never called
    rt.written[KEY] = (UID, written)
    return rt


def _written() -> models.SendGroupStatus:
    return models.SendGroupStatus.model_validate(
        {"phase": "Idle", "observedGeneration": 2, "lastRefresh": T1, "idleSince": T1}
    )


def _as_stored(status: models.SendGroupStatus) -> models.SendGroupStatus:
    """As the watch brings it back: JSON through the API server, parsed again."""
    return models.SendGroupStatus.model_validate(status.model_dump(mode="json", by_alias=True))


def test_the_written_status_until_the_body_carries_it_then_the_bodys() -> None:
    written = _written()
    rt = _runtime(written)
    older = models.SendGroupStatus.model_validate(
        {"phase": "Pending", "lastRefresh": T1 - timedelta(seconds=10)}
    )
    assert reconcile.base_status(rt, KEY, UID, older) is written
    assert reconcile.base_status(rt, KEY, UID, models.SendGroupStatus()) is written
    assert KEY in rt.written

    stored = _as_stored(written)
    assert reconcile.base_status(rt, KEY, UID, stored) is stored
    assert KEY not in rt.written  # one status model per group from now on
    assert reconcile.base_status(rt, KEY, UID, stored) is stored


def test_the_record_stays_when_the_body_differs() -> None:
    written = _written()
    rt = _runtime(written)
    # the same second, other content (e.g. two writes within a second): not ours yet
    same_second = _as_stored(written).model_copy(update={"phase": models.Phase.PENDING})
    assert reconcile.base_status(rt, KEY, UID, same_second) is written
    assert KEY in rt.written
    # newer (another replica wrote since): the body's, the record kept as before
    newer = _as_stored(written).model_copy(update={"last_refresh": T1 + timedelta(seconds=5)})
    assert reconcile.base_status(rt, KEY, UID, newer) is newer
    # another object of the same name (re-created): its own status
    assert reconcile.base_status(rt, KEY, "uid-2", models.SendGroupStatus()) is not written
