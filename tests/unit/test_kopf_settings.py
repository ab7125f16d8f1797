"""The operator's settings reach kopf's: SENDGROUP_WORKER_LIMIT caps kopf's per-object workers
(and shortens how long an idle one holds its slot); 0, kopf keeps its own defaults. kopf's diff
base lives in status (one write less per new group), read from the annotation of older
releases."""

from __future__ import annotations

import json
from typing import Any

import kopf
import pytest
import yaml

from sendgroup_operator import crdgen, models
from sendgroup_operator.settings import Settings, SettingsError
from sendgroup_operator.startup import IDLE_WORKER_TIMEOUT, configure_kopf


def _kopf(env: dict[str, str]) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    configure_kopf(settings, Settings.from_env(env))
    return settings


def test_handler_retries_back_off_to_30_s_through_kopfs_current_settings() -> None:
    """kopf's retry delays of a failed handler (1, 2, 5, 10, then every 30 s), set through
    ``settings.queueing``: the old name (``batching``) printed a DeprecationWarning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        settings = _kopf({})
    assert list(settings.queueing.error_delays) == [1, 2, 5, 10, 30]


def test_worker_limit_caps_kopfs_workers_and_frees_idle_slots_sooner() -> None:
    settings = _kopf({"SENDGROUP_WORKER_LIMIT": "150"})
    assert settings.queueing.worker_limit == 150
    assert settings.queueing.idle_timeout == IDLE_WORKER_TIMEOUT < 5


def test_zero_leaves_kopfs_queueing_as_it_is() -> None:
    default = kopf.OperatorSettings().queueing
    queueing = _kopf({"SENDGROUP_WORKER_LIMIT": "0"}).queueing
    assert queueing.worker_limit is None
    assert queueing.idle_timeout == default.idle_timeout


def test_the_default_caps_a_cold_start() -> None:
    assert _kopf({}).queueing.worker_limit == Settings().worker_limit > 0


def test_a_negative_limit_is_refused_at_start_naming_the_variable() -> None:
    with pytest.raises(SettingsError, match="SENDGROUP_WORKER_LIMIT='-3': expected >= 0"):
        Settings.from_env({"SENDGROUP_WORKER_LIMIT": "-3"})


def _group(annotations: dict[str, str] | None = None, status: dict[str, Any] | None = None) -> Any:
    meta: dict[str, Any] = {"name": "gmail", "namespace": "t1", "labels": {"team": "a"}}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": models.API_VERSION,
        "kind": models.KIND,
        "metadata": meta,
        "spec": {"campaign": "c", "host": "gmail.com", "workers": 2},
        "status": status or {"phase": "Running"},
    }


def _stored(patch: Any) -> str:
    value: str = patch["status"][models.KOPF_STATUS_FIELD]["last-handled-configuration"]
    return value


def _with_diff_base(stored: str) -> Any:
    return _group(status={models.KOPF_STATUS_FIELD: {"last-handled-configuration": stored}})


def test_a_handled_change_patches_status_only() -> None:
    """What kopf writes after a change handler that succeeded at once: its progress record
    (stored, then purged), its diff base; all of it in the status request, nothing in metadata
    (that would be a separate write of the object)."""
    persistence = _kopf({}).persistence
    body = kopf.Body(_group())
    patch = kopf.Patch()
    record = {"started": "2026-12-03T12:00:00.000000+00:00", "success": True}
    persistence.progress_storage.store(key="on_change", record=record, body=body, patch=patch)
    persistence.progress_storage.purge(key="on_change", body=body, patch=patch)
    diffbase = persistence.diffbase_storage
    diffbase.store(body=body, patch=patch, essence=diffbase.build(body=body))
    assert set(patch) == {"status"}, f"a write of the object besides status: {dict(patch)}"
    stored = json.loads(_stored(patch))
    assert stored["spec"] == body["spec"] and stored["metadata"]["labels"] == {"team": "a"}
    again = kopf.Body(_with_diff_base(_stored(patch)))
    assert diffbase.fetch(body=again) == diffbase.build(body=again)  # no change seen
    changed = _with_diff_base(_stored(patch))
    changed["spec"]["workers"] = 5
    assert diffbase.fetch(body=kopf.Body(changed)) != diffbase.build(body=kopf.Body(changed))


def test_a_retried_handlers_progress_is_kept_in_status_and_read_back() -> None:
    progress = _kopf({}).persistence.progress_storage
    patch = kopf.Patch()
    record = {"started": "2026-12-03T12:00:00.000000+00:00", "retries": 2}
    progress.store(key="on_change", record=record, body=kopf.Body(_group()), patch=patch)
    assert set(patch) == {"status"}
    body = kopf.Body(_group(status=dict(patch["status"])))
    assert progress.fetch(key="on_change", body=body) == record


def test_a_retry_an_older_operator_left_in_an_annotation_is_read_and_cleared() -> None:
    legacy = kopf.AnnotationsProgressStorage(prefix=models.GROUP)
    old = kopf.Body(_group())
    patch = kopf.Patch()
    record = {"started": "2026-12-03T12:00:00.000000+00:00", "retries": 2}
    legacy.store(key="on_change", record=record, body=old, patch=patch)
    upgraded = kopf.Body(_group(annotations=dict(patch["metadata"]["annotations"])))
    progress = _kopf({}).persistence.progress_storage
    assert progress.fetch(key="on_change", body=upgraded) == record
    cleanup = kopf.Patch()
    progress.purge(key="on_change", body=upgraded, patch=cleanup)
    cleared = [k for k, v in cleanup["metadata"]["annotations"].items() if v is None]
    assert cleared, "the older operator's progress annotation stays behind"


def test_a_group_handled_by_an_older_operator_is_read_from_the_annotation_unchanged() -> None:
    # the diff base as the annotation storage of earlier releases wrote it
    legacy = kopf.AnnotationsDiffBaseStorage(prefix=models.GROUP, key="last-handled-configuration")
    old = kopf.Body(_group())
    patch = kopf.Patch()
    legacy.store(body=old, patch=patch, essence=legacy.build(body=old))
    annotations = dict(patch["metadata"]["annotations"])
    assert models.LEGACY_DIFFBASE_ANNOTATION in annotations  # beside kopf's own marker

    storage = _kopf({}).persistence.diffbase_storage
    upgraded = kopf.Body(_group(annotations=annotations))
    assert storage.fetch(body=upgraded) is not None
    # neither a replayed change nor a change in the annotations after the upgrade
    assert storage.fetch(body=upgraded) == storage.build(body=upgraded)
    # a new object has no diff base at all (kopf's "create")
    assert storage.fetch(body=kopf.Body(_group())) is None


def _busy_group() -> Any:
    """A group as a restart lists it: labels, annotations (kubectl's and kopf's own), a full
    status with kopf's diff base and a progress record."""
    group = _group(
        annotations={
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            "team.example/owner": "mail",
        },
        status={
            "phase": "Idle",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Idle"}],
            "queue": {"ready": 0, "failed": 2},
            models.KOPF_STATUS_FIELD: {
                "last-handled-configuration": '{"spec":{"workers":2}}',
                "progress": {"on_change": {"retries": 1}},
            },
        },
    )
    group["spec"]["worker"] = {"resources": {"limits": {"cpu": "1"}}}
    return group


def test_the_essence_and_its_cleared_form_are_kopfs_own_without_copying_the_status() -> None:
    """kopf's diff base and what it compares (issue 15: built and cleared without deep copies
    of the status, the bulk of a group): the same as kopf's own storages give, for the
    extra field of our ``field="spec"`` handler, for none, and for a status field."""
    ours = _kopf({}).persistence
    theirs_diffbase = kopf.StatusDiffBaseStorage(name=models.KOPF_STATUS_FIELD)
    theirs_progress = kopf.StatusProgressStorage(name=models.KOPF_STATUS_FIELD)
    body = kopf.Body(_busy_group())
    for fields in (None, [("spec",)], ["status.phase"]):
        built = ours.diffbase_storage.build(body=body, extra_fields=fields)
        expected = theirs_diffbase.build(body=body, extra_fields=fields)
        assert built == expected
        assert ours.progress_storage.clear(essence=built) == theirs_progress.clear(essence=expected)
    essence = ours.diffbase_storage.build(body=body, extra_fields=[("spec",)])
    assert "status" not in essence and essence["spec"] == body["spec"]
    assert essence["spec"] is not body["spec"]  # a copy: the body may change later
    # an essence with empty stanzas loses them, as with kopf's clear; the input is untouched
    bare: Any = {"metadata": {"labels": {}, "annotations": {}}, "spec": {"workers": 1}}
    assert ours.progress_storage.clear(essence=bare) == {"spec": {"workers": 1}}
    assert bare["metadata"] == {"labels": {}, "annotations": {}}
    # an essence with kopf's progress record in it (a status field watched): dropped
    with_status: Any = {"spec": {}, "status": {models.KOPF_STATUS_FIELD: {"progress": {"h": 1}}}}
    assert ours.progress_storage.clear(essence=with_status) == theirs_progress.clear(
        essence=with_status
    )


def test_the_crd_keeps_the_diff_base_field_of_every_kind() -> None:
    for plural in crdgen.CRDS:
        version = yaml.safe_load(crdgen.render(plural))["spec"]["versions"][0]
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        field = status["properties"][models.KOPF_STATUS_FIELD]
        assert field["x-kubernetes-preserve-unknown-fields"] is True, plural
