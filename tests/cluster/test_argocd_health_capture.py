"""ArgoCD's health check (gitops/argocd/.../health.lua, run by Debian's lua5.4) on SendGroups
whose status a real operator wrote: the operator runs as a process against the real control
plane and a real redis-server, the test drives groups through their phases (jobs, workers
starting, provider pushback, pause, dump, restore, idle, completed, cancel with a purge Job,
unreachable Redis, a failing apply, spec.workers 0, a spec change the operator has not seen)
and waits for the health each one must map to.

``SENDGROUP_ARGOCD_CAPTURE=1`` also writes the objects as seen to the health check's
``testdata/`` (the fixtures the unit test checks against health_test.yaml): that is how the
captured testdata were made. Without a node no pod becomes ready, so "all workers ready" with
work is not among them (tests/unit/test_argocd_health.py derives it).

The second test checks, at the API level, the field ownership docs/gitops.md promises ArgoCD
users (no sync fights, ad hoc patches of fields Git leaves out)."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from sendgroup_worker.queue.keys import QueueKeys
from tests.cluster.conftest import Objects
from tests.cluster.test_operator import (
    foreign_deployment,
    push,
    remove_job,
    run_job_locally,
    sendgroup,
)
from tests.support import manifests
from tests.support.argocd import HEALTH_DIR, run_health
from tests.support.cluster import KubeCluster, wait_for
from tests.support.operator_proc import OperatorProcess
from tests.support.redis_server import free_port

pytestmark = pytest.mark.cluster

CAPTURE_ENV = "SENDGROUP_ARGOCD_CAPTURE"
CAPTURE_HEADER = (
    "# Captured from a real operator run by tests/cluster/test_argocd_health_capture.py\n"
    f"# ({CAPTURE_ENV}=1); managedFields, uid, resourceVersion and annotations removed,\n"
    "# the test's namespace renamed to mail.\n"
)


def sanitized(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without server bookkeeping that says nothing about health."""
    namespace = obj["metadata"]["namespace"]
    out: dict[str, Any] = json.loads(json.dumps(obj).replace(namespace, "mail"))
    meta = out["metadata"]
    for key in ("managedFields", "uid", "resourceVersion"):
        meta.pop(key, None)
    meta.pop("annotations", None)  # kopf's bookkeeping and kubectl's last-applied copy
    return out


class Health:
    """Waits for a group's health and remembers the objects it saw, by testdata name."""

    def __init__(self, objects: Objects) -> None:
        self.objects = objects
        self.captured: dict[str, dict[str, Any]] = {}

    def expect(
        self, name: str, status: str, message: str, testdata: str | None, timeout: float = 30
    ) -> dict[str, Any]:
        """Wait until health.lua gives ``status`` and a message matching the regex
        ``message`` for SendGroup ``name``; keep the object as ``testdata`` (None: a step
        whose object adds nothing to the fixtures)."""
        seen: list[tuple[str, str]] = []

        def check() -> dict[str, Any] | None:
            obj = self.objects.get("sendgroup", name)
            assert obj is not None, f"SendGroup {name} is gone"
            result = run_health(obj)
            seen[:] = [result]
            if result[0] == status and re.search(message, result[1]):
                return obj
            return None

        obj = wait_for(
            check,
            timeout,
            f"health of {name}: {status} /{message}/",
            describe=lambda: {"health": seen, "status": self.objects.status(name)},
        )
        if testdata is not None:
            self.captured[testdata] = sanitized(obj)
        return obj

    def write(self, directory: Path) -> None:
        """Write the captured objects as ``directory/<testdata>.yaml``."""
        for testdata, obj in self.captured.items():
            text = CAPTURE_HEADER + yaml.safe_dump(obj, sort_keys=False, width=100)
            (directory / f"{testdata}.yaml").write_text(text)


def test_health_of_groups_the_operator_drives_through_their_phases(
    operator_factory: Callable[..., OperatorProcess],
    objects: Objects,
    redis_client: redis.Redis,
    kube_cluster: KubeCluster,
    tmp_path: Path,
) -> None:
    health = Health(objects)
    dumps = tmp_path / "dumps"
    long = {"idleAfter": "1h", "dumpAfter": "1h"}

    # Before any operator saw it: no status.
    objects.apply(sendgroup("fresh", reaper=long))
    health.expect("fresh", "Progressing", "^Waiting for the operator to report status$",
                  "progressing_no_status", timeout=5)  # fmt: skip
    operator = operator_factory()
    health.expect("fresh", "Healthy", "^Waiting for jobs", "healthy_pending")

    # Jobs: workers start (their pods stay Pending without a node).
    push(redis_client, "mail-run", 7)
    objects.apply(sendgroup("run", workers=3, reaper=long))
    health.expect("run", "Progressing", r"^0/3 workers ready; 7 jobs queued, 0% delivered$",
                  "progressing_workers_starting")  # fmt: skip
    # A worker's backpressure record (hash field `until`, unix ms): provider pushback.
    keys = QueueKeys("mail-run")
    redis_client.hset(keys.backpressure, "until", str(int((time.time() + 600) * 1000)))
    health.expect("run", "Suspended", "^Provider pushback: 20 temporary failures",
                  "suspended_provider_pushback")  # fmt: skip
    redis_client.delete(keys.backpressure)
    health.expect("run", "Progressing", "^0/3 workers ready", None)
    # Queue drained, workers kept until idleAfter: ready for more.
    redis_client.delete(keys.ready, keys.notify)
    health.expect("run", "Healthy", "^queue empty, workers waiting; 0 jobs queued",
                  "healthy_running_queue_empty")  # fmt: skip

    # Idle: workers reaped after idleAfter.
    push(redis_client, "mail-idle", 1)
    objects.apply(sendgroup("idle", reaper={"idleAfter": "2s"}))
    health.expect("idle", "Progressing", "^0/1 workers ready", None)
    redis_client.delete("queues:mail-idle", "queues:mail-idle:notify")
    health.expect("idle", "Healthy", "^Idle: queue empty, workers removed", "healthy_idle")

    # spec.workers 0 with work: nothing sends, on purpose.
    push(redis_client, "mail-zero", 2)
    objects.apply(sendgroup("zero", workers=0, reaper=long))
    health.expect("zero", "Suspended", "^spec.workers is 0: 2 jobs wait$", "suspended_no_workers")

    # Paused: nothing sends; then dumped to the volume; then resumed: restore first.
    push(redis_client, "mail-pause", 4)
    objects.apply(sendgroup("pause", paused=True, reaper=long))
    health.expect("pause", "Suspended", r"^Paused \(spec.paused\): 4 jobs wait in Redis$",
                  "suspended_paused")  # fmt: skip
    push(redis_client, "mail-dump", 5)
    objects.apply(sendgroup("dump", paused=True, reaper={"dumpAfter": "2s", "idleAfter": "1h"}))
    health.expect("dump", "Suspended", "^Paused: dumping the queue", "suspended_dumping")
    job = wait_for(lambda: objects.get("job", "sg-dump-dump-1"), 20, "dump Job sg-dump-dump-1")
    run_job_locally(job, dumps)
    remove_job(objects, job)
    health.expect("dump", "Suspended", "^Paused: 5 jobs dumped to the volume", "suspended_dumped")
    objects.patch_sg("dump", {"paused": False})
    health.expect("dump", "Progressing", "^Restoring 5 dumped jobs", "progressing_restoring")
    restore = wait_for(lambda: objects.get("job", "sg-dump-restore-2"), 20, "restore Job")
    run_job_locally(restore, dumps)
    health.expect("dump", "Progressing", "^0/1 workers ready; 5 jobs queued",
                  None)  # fmt: skip

    # Cancelled with dump segments: a purge Job must run before it is done.
    push(redis_client, "mail-cancel", 3)
    objects.apply(sendgroup("cancel", paused=True, reaper={"dumpAfter": "2s", "idleAfter": "1h"}))
    job = wait_for(lambda: objects.get("job", "sg-cancel-dump-1"), 30, "dump Job")
    run_job_locally(job, dumps)
    remove_job(objects, job)
    health.expect("cancel", "Suspended", "^Paused: 3 jobs dumped", None)
    objects.patch_sg("cancel", {"state": "Cancelled"})
    health.expect("cancel", "Progressing", "^Cancelling: purging the queue",
                  "progressing_cancelling")  # fmt: skip
    purge = wait_for(lambda: objects.get("job", "sg-cancel-purge-2"), 20, "purge Job")
    run_job_locally(purge, dumps)
    health.expect("cancel", "Healthy", "^Cancelled: workers stopped; queue purged$",
                  "healthy_cancelled")  # fmt: skip

    # Completed: drained, workers removed at once.
    push(redis_client, "mail-done", 2)
    objects.apply(sendgroup("done", state="Completed", reaper=long))
    health.expect("done", "Progressing", "^0/1 workers ready; 2 jobs", None)
    redis_client.delete("queues:mail-done", "queues:mail-done:notify")
    health.expect("done", "Healthy", "^Completed: all jobs done", "healthy_completed")

    # Redis unreachable.
    port = free_port()
    objects.apply(sendgroup("unreachable", redis={"url": f"redis://127.0.0.1:{port}/0"}))
    health.expect("unreachable", "Degraded", f"^Queue unreachable: Redis at 127.0.0.1:{port}",
                  "degraded_queue_unreachable")  # fmt: skip

    # A foreign Deployment under the workers' name (immutable selector): every apply fails.
    objects.apply(foreign_deployment("sg-clash"))
    push(redis_client, "mail-clash", 1)
    objects.apply(sendgroup("clash", reaper=long))
    health.expect("clash", "Degraded", "^ApplyFailed: .*HTTP 422", "degraded_apply_failed")

    # A spec change the operator has not acted on yet (it is stopped).
    operator.stop()
    objects.patch_sg("run", {"workers": 4})
    health.expect("run", "Progressing", "^Waiting for the operator to act on generation 2$",
                  "progressing_generation_behind", timeout=5)  # fmt: skip

    if os.environ.get(CAPTURE_ENV):
        health.write(HEALTH_DIR / "testdata")
    # Every captured state is a fixture of the unit test (or was left out on purpose).
    committed = {p.stem for p in (HEALTH_DIR / "testdata").glob("*.yaml")}
    assert set(health.captured) <= committed, sorted(set(health.captured) - committed)


def test_git_owned_fields_and_the_operator_never_collide(
    operator: OperatorProcess,
    objects: Objects,
    redis_client: redis.Redis,
    kube_cluster: KubeCluster,
) -> None:
    """What ArgoCD relies on, at the API level: the SendGroup applied server-side by ArgoCD's
    field manager; the operator owns no field of spec (managedFields), re-applying the same
    manifest changes nothing (no sync fight); a field Git leaves out can be patched ad hoc and
    survives the next apply, while a field Git sets is taken back by a forced apply (what
    ArgoCD's self-heal does)."""
    ns = objects.namespace
    git = manifests.sendgroup(
        "git", {"campaign": "spring-sale", "host": "gmail.com", "workers": 2}, ns
    )

    def apply(manifest: dict[str, Any], *extra: str) -> None:
        kube_cluster.kubectl(
            "apply", "--server-side", "--field-manager=argocd-controller", *extra, "-f", "-",
            input=json.dumps(manifest),
        )  # fmt: skip

    push(redis_client, "mail-git", 3)
    apply(git)
    health = Health(objects)
    health.expect("git", "Progressing", "^0/2 workers ready; 3 jobs queued", None)
    before = json.loads(
        kube_cluster.kubectl(
            "get", "sendgroup", "git", "-n", ns, "-o", "json", "--show-managed-fields"
        ).stdout
    )
    assert before["metadata"]["finalizers"] == ["sendgroups.io/finalizer"]
    spec_owners = {
        entry["manager"]
        for entry in before["metadata"]["managedFields"]
        if "f:spec" in (entry.get("fieldsV1") or {})
    }
    assert spec_owners == {"argocd-controller"}, before["metadata"]["managedFields"]
    assert git["spec"].items() <= before["spec"].items()  # ArgoCD's diff: in sync

    apply(git)  # the next sync: no conflict, nothing changes
    after = objects.get("sendgroup", "git")
    assert after is not None
    assert after["metadata"]["generation"] == before["metadata"]["generation"] == 1
    assert after["spec"] == before["spec"]

    # Ad hoc pause of a field Git leaves out: it stays through the next sync.
    objects.patch_sg("git", {"paused": True})
    apply(git)
    assert (objects.get("sendgroup", "git") or {})["spec"]["paused"] is True
    health.expect("git", "Suspended", r"^Paused \(spec.paused\): 3 jobs wait", None)
    # Git sets the field: a forced apply (ArgoCD's self-heal) takes it back.
    apply({**git, "spec": {**git["spec"], "paused": False}}, "--force-conflicts")
    assert (objects.get("sendgroup", "git") or {})["spec"]["paused"] is False
    health.expect("git", "Progressing", "^0/2 workers ready", None)
