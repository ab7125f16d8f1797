"""The operator against the real control plane, as a real process under its ServiceAccount,
with a real redis-server. No node runs pods here: Deployments get (Pending) pods from the
controllers; a dump/restore Job's command is run by the test itself against the same Redis
and a local dumps directory, and the operator must see the outcome from Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from sendgroup_worker.queue.keys import QueueKeys
from tests.cluster.conftest import Objects
from tests.support import manifests
from tests.support.cluster import KubeCluster, wait_for
from tests.support.operator_proc import OperatorProcess, apply_objects, rbac_objects
from tests.support.redis_server import RedisServer, free_port

pytestmark = pytest.mark.cluster

WORKER_BIN = Path(sys.executable).parent / "sendgroup-worker"


def push(client: redis.Redis, queue: str, n: int) -> None:
    """Push ``n`` Laravel-shaped jobs (ready list + notify tokens)."""
    keys = QueueKeys(queue)
    now = time.time()
    payloads = [
        json.dumps(
            {
                "uuid": str(uuid.uuid4()),
                "displayName": "sendgroups.SendMail",
                "job": "sendgroups.SendMail",
                "attempts": 0,
                "pushedAt": f"{now:.4f}",
                "data": {"to": f"u{i}@gmail.com", "subject": "hi", "text": "hello"},
            }
        )
        for i in range(n)
    ]
    if payloads:
        client.rpush(keys.ready, *payloads)
        client.rpush(keys.notify, *(["1"] * n))


def sendgroup(name: str, **spec: Any) -> str:
    body = {"campaign": "spring-sale", "host": "gmail.com", **spec}
    return manifests.stream(manifests.sendgroup(name, body))


def replicas(objects: Objects, name: str) -> int | None:
    dep = objects.get("deployment", f"sg-{name}")
    return None if dep is None else int(dep["spec"].get("replicas", 0))


def ghost_worker_deployment() -> str:
    """A worker Deployment of ours (our labels) for group "ghost", which has no SendGroup:
    what the orphan count must find."""
    labels = {"sendgroups.io/group": "ghost"}
    ours = {
        "app.kubernetes.io/managed-by": "sendgroup-operator",
        "app.kubernetes.io/component": "worker",
        **labels,
    }
    return json.dumps(manifests.deployment("sg-ghost", ours, labels))


def foreign_deployment(name: str) -> str:
    """Someone else's Deployment under ``name`` with its own (immutable) selector: adopting it
    as a group's workers fails with 422 on every attempt."""
    labels = {"app": "someone-else"}
    return json.dumps(manifests.deployment(name, {}, labels, image="registry.invalid/x:1"))


def run_job_locally(job: dict[str, Any], dumps_root: Path) -> dict[str, Any]:
    """Run a dump/restore/forget Job's container command here (no node to run the pod):
    same command, same env, the PVC mount ``/dumps`` replaced by ``dumps_root``."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "dumps"]
    # only the group's directory of the claim is mounted, where the command looks for it
    assert mount["mountPath"] == "/dumps/" + mount["subPath"]
    command = [
        str(dumps_root) + a[len("/dumps") :] if a.startswith("/dumps/") else a
        for a in container["command"]
    ]
    assert command[0] == "sendgroup-worker"
    env = {**os.environ, **{e["name"]: e["value"] for e in container["env"] if "value" in e}}
    proc = subprocess.run(
        [str(WORKER_BIN), *command[1:]], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"{command}: {proc.stderr}"
    summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return summary


def remove_job(objects: Objects, job: dict[str, Any]) -> None:
    """Delete a Job whose command ``run_job_locally`` ran, as its TTL would after its pod
    succeeded. Without a node the Job stays active (until activeDeadlineSeconds), and the
    operator waits for a still-running dump Job to record its summary (plan.lifecycle.job_outcome);
    with the Job gone, Redis alone decides the outcome, as for a Job removed by its TTL."""
    name = job["metadata"]["name"]
    objects.cluster.kubectl("delete", "job", name, "-n", objects.namespace, "--wait=false")


# ---------------------------------------------------------------------------------------------


def test_sendgroup_with_jobs_gets_its_workers_and_status(
    operator: OperatorProcess,
    objects: Objects,
    redis_client: redis.Redis,
    kube_cluster: KubeCluster,
) -> None:
    push(redis_client, "mail-gmail", 7)
    redis_client.zadd(QueueKeys("mail-gmail").delayed, {'{"uuid":"d1"}': time.time() + 3600})
    objects.apply(sendgroup("gmail", workers=3, worker={"timeout": 45, "retryAfter": 120}))

    dep = wait_for(lambda: objects.get("deployment", "sg-gmail"), 20, "Deployment sg-gmail")
    sg = objects.get("sendgroup", "gmail")
    assert sg is not None
    assert dep["spec"]["replicas"] == 3
    owner = dep["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "SendGroup",
        "gmail",
        sg["metadata"]["uid"],
    )
    labels = dep["metadata"]["labels"]
    assert labels["sendgroups.io/campaign"] == "spring-sale"
    assert labels["sendgroups.io/host"] == "gmail.com"
    assert labels["app.kubernetes.io/managed-by"] == "sendgroup-operator"
    pod = dep["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > 45
    assert pod["automountServiceAccountToken"] is False
    ctr = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["SENDGROUP_QUEUE"] == "mail-gmail"
    assert env["WORKER_TIMEOUT"] == "45" and env["WORKER_RETRY_AFTER"] == "120"
    sc = ctr["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"]
    assert sc["capabilities"]["drop"] == ["ALL"] and not sc["allowPrivilegeEscalation"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"

    status = wait_for(
        lambda: (s := objects.status("gmail")).get("queue", {}).get("total") == 8 and s,
        20,
        "status.queue.total == 8",
        describe=lambda: objects.status("gmail"),
    )
    assert status["queue"]["ready"] == redis_client.llen("queues:mail-gmail") == 7
    assert status["queue"]["delayed"] == redis_client.zcard("queues:mail-gmail:delayed") == 1
    assert status["phase"] == "Running" and status["observedGeneration"] == 1
    assert status["workers"] == {"desired": 3, "ready": 0, "allowed": 3, "summary": "0/3"}
    # The controllers made (Pending) pods for the Deployment.
    wait_for(
        lambda: len(objects.list("pods", "sendgroups.io/group=gmail")) == 3, 30, "3 worker pods"
    )

    table = kube_cluster.kubectl("get", "sg", "-n", objects.namespace).stdout.splitlines()
    header = table[0].split()
    assert header == [
        "NAME",
        "CAMPAIGN",
        "HOST",
        "WORKERS",
        "PHASE",
        "QUEUE",
        "PROGRESS",
        "OLDEST",
        "AGE",
    ]
    row = table[1].split()
    assert row[:6] == ["gmail", "spring-sale", "gmail.com", "0/3", "Running", "8"]
    wide = kube_cluster.kubectl("get", "sendgroups", "-n", objects.namespace, "-o", "wide").stdout
    assert wide.splitlines()[0].split()[-3:] == ["FAILED", "PAUSED", "DUMPED"]
    assert "gmail" in kube_cluster.kubectl("get", "mail", "-n", objects.namespace).stdout

    # kopf's bookkeeping: its finalizer under our API group's prefix, the rest in status.kopf
    # (written in the same request as the group's status, issue 15), no annotation of ours
    meta = objects.get("sendgroup", "gmail")["metadata"]  # type: ignore[index]
    assert meta["finalizers"] == ["sendgroups.io/finalizer"]
    ours = [k for k in meta.get("annotations", {}) if k.startswith("sendgroups.io/")]
    assert not ours, ours
    kopf_status = objects.status("gmail")["kopf"]
    handled = json.loads(kopf_status["last-handled-configuration"])
    assert handled["spec"]["host"] == "gmail.com"
    assert set(objects.status("gmail")) <= {
        "kopf",
        "observedGeneration",
        "phase",
        "workers",
        "queue",
        "progress",
        "idleSince",
        "unchangedSince",
        "dump",
        "operation",
        "operationsStarted",
        "finishedAt",
        "lastRefresh",
        "conditions",
    }

    # Steady state: no writes to the SendGroup at all.
    rv = objects.get("sendgroup", "gmail")["metadata"]["resourceVersion"]  # type: ignore[index]
    time.sleep(4)
    assert objects.get("sendgroup", "gmail")["metadata"]["resourceVersion"] == rv  # type: ignore[index]


BAD_SPECS = [
    ({"worker": {"timeout": 90, "retryAfter": 90}}, "timeout < retryAfter"),
    ({"workers": 51}, "spec.workers"),
    ({"state": "Paused"}, 'Unsupported value: "Paused"'),
    ({"reaper": {"idleAfter": "30 minutes"}}, "duration well-formed"),
    ({"redis": {"url": "redis://:hunter2@redis:6379/0"}}, "redis.secretRef"),
    ({"redis": {"url": "redis://redis:6379/0?Password=hunter2"}}, "no password in redis.url"),
    # issue 16: a percent-encoded query key and a password-only user info (redis-py reads
    # both as the password) are refused too
    ({"redis": {"url": "redis://redis:6379/0?pass%77ord=hunter2"}}, "no password in redis.url"),
    ({"redis": {"url": "redis://hunter2@redis:6379/0"}}, "no password in redis.url"),
    ({"redis": {"url": "redis://:hun/ter2@redis:6379/0"}}, "no password in redis.url"),
]


@pytest.mark.parametrize(("spec", "message"), BAD_SPECS, ids=[m for _, m in BAD_SPECS])
def test_bad_specs_are_rejected_naming_the_rule(
    sendgroup_crd: str,
    objects: Objects,
    kube_cluster: KubeCluster,
    spec: dict[str, Any],
    message: str,
) -> None:
    proc = kube_cluster.kubectl(
        "apply", "-n", objects.namespace, "-f", "-", input=sendgroup("bad", **spec), check=False
    )
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_queue_is_immutable_and_cancelled_is_final(
    sendgroup_crd: str, objects: Objects, kube_cluster: KubeCluster
) -> None:
    objects.apply(sendgroup("g", queue="mail-one"))
    proc = kube_cluster.kubectl(
        "patch",
        "sg",
        "g",
        "-n",
        objects.namespace,
        "--type=merge",
        "-p",
        '{"spec":{"queue":"mail-two"}}',
        check=False,
    )
    assert proc.returncode != 0 and "queue is immutable" in proc.stderr
    objects.patch_sg("g", {"state": "Cancelled"})
    proc = kube_cluster.kubectl(
        "patch",
        "sg",
        "g",
        "-n",
        objects.namespace,
        "--type=merge",
        "-p",
        '{"spec":{"state":"Active"}}',
        check=False,
    )
    assert proc.returncode != 0 and "no way back from Cancelled" in proc.stderr


def test_pause_dump_resume_restore(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis, tmp_path: Path
) -> None:
    push(redis_client, "mail-p", 5)
    objects.apply(sendgroup("p", workers=2, reaper={"dumpAfter": "3s"}))
    wait_for(lambda: replicas(objects, "p") == 2, 20, "2 replicas")

    paused_at = time.monotonic()
    objects.patch_sg("p", {"paused": True})
    wait_for(lambda: replicas(objects, "p") == 0, 10, "replicas 0 after pause")
    assert time.monotonic() - paused_at < 5
    wait_for(lambda: objects.status("p").get("phase") in ("Paused", "Dumping"), 10, "phase Paused")
    assert redis_client.llen("queues:mail-p") == 5  # nothing popped while paused

    job = wait_for(lambda: objects.get("job", "sg-p-dump-1"), 20, "dump Job sg-p-dump-1")
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert {"name": "dumps", "persistentVolumeClaim": {"claimName": "sendgroup-dumps"}} in volumes
    assert job["spec"]["backoffLimit"] >= 1 and job["spec"]["activeDeadlineSeconds"] > 0
    assert objects.status("p")["phase"] == "Dumping"
    # This tier has no node: the Job's pod is never scheduled, and the group says why.
    waiting = wait_for(
        lambda: (c := objects.condition("p", "Dumped")) and "not scheduled" in c["message"] and c,
        20,
        "the Dumped condition saying why the dump pod waits",
        describe=lambda: (objects.condition("p", "Dumped"), objects.list("pods")),
    )
    assert waiting["message"].startswith("Job sg-p-dump-1: pod sg-p-dump-1-"), waiting
    assert waiting["reason"] == "Dumping", waiting
    warned = wait_for(
        lambda: [e for e in objects.events("p") if e["reason"] == "JobPodWaiting"],
        10,
        "a JobPodWaiting event",
    )
    time.sleep(3)  # a pass or two later: still one event, posted once
    warned = [e for e in objects.events("p") if e["reason"] == "JobPodWaiting"]
    assert len(warned) == 1 and warned[0]["type"] == "Warning", warned
    assert warned[0].get("count", 1) == 1, warned
    summary = run_job_locally(job, tmp_path / "dumps")
    assert summary.get("jobs", summary.get("ready")) == 5, summary
    remove_job(objects, job)
    segments = list((tmp_path / "dumps").rglob("*.sgdump"))
    assert len(segments) == 1 and segments[0].stat().st_size > 0
    status = wait_for(
        lambda: (s := objects.status("p")).get("phase") == "Dumped" and s,
        20,
        "phase Dumped",
        describe=lambda: objects.status("p"),
    )
    assert status["dump"]["totalJobs"] == 5
    assert not redis_client.exists(
        "queues:mail-p", "queues:mail-p:delayed", "queues:mail-p:reserved"
    )
    dumped = objects.condition("p", "Dumped")
    assert dumped is not None and dumped["status"] == "True"

    objects.patch_sg("p", {"paused": False})
    restore = wait_for(lambda: objects.get("job", "sg-p-restore-2"), 20, "restore Job")
    time.sleep(2)
    assert replicas(objects, "p") == 0, "workers must wait for the restore"
    assert objects.status("p")["phase"] == "Restoring"
    run_job_locally(restore, tmp_path / "dumps")
    assert redis_client.llen("queues:mail-p") == 5
    wait_for(lambda: replicas(objects, "p") == 2, 20, "replicas back after restore")
    wait_for(lambda: objects.status("p").get("phase") == "Running", 20, "phase Running")
    assert objects.status("p")["dump"]["totalJobs"] == 0
    reasons = {e["reason"] for e in objects.events("p")}
    assert {"Paused", "Dumping", "Dumped", "Restoring", "Restored"} <= reasons


def test_idle_group_is_reaped_and_work_brings_workers_back(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis
) -> None:
    push(redis_client, "mail-i", 1)
    objects.apply(sendgroup("i", workers=2, reaper={"idleAfter": "4s"}))
    wait_for(lambda: replicas(objects, "i") == 2, 20, "workers for the job")
    redis_client.delete("queues:mail-i", "queues:mail-i:notify")
    emptied = time.monotonic()
    wait_for(lambda: objects.get("deployment", "sg-i") is None, 20, "Deployment reaped")
    assert time.monotonic() - emptied >= 3
    wait_for(lambda: objects.status("i").get("phase") == "Idle", 10, "phase Idle")
    assert "Reaped" in {e["reason"] for e in objects.events("i")}
    push(redis_client, "mail-i", 3)
    wait_for(lambda: replicas(objects, "i") == 2, 20, "workers back with work")
    wait_for(lambda: objects.status("i").get("phase") == "Running", 10, "phase Running")


def test_operator_restart_keeps_the_reaper_deadline(
    operator_factory: Any, objects: Objects, redis_client: redis.Redis
) -> None:
    first = operator_factory()
    push(redis_client, "mail-r", 1)
    objects.apply(sendgroup("r", workers=1, reaper={"idleAfter": "20s"}))
    wait_for(lambda: replicas(objects, "r") == 1, 20, "workers")
    redis_client.delete("queues:mail-r", "queues:mail-r:notify")
    idle_since = wait_for(lambda: objects.status("r").get("idleSince"), 20, "idleSince set")
    first.stop(signal.SIGKILL)
    # Down for 15 s: an operator that counted idleAfter from its restart would reap at the
    # deadline + 15 s or later; one that kept the deadline reaps at it, plus its start-up and
    # one reaper pass (up to 10 s on a loaded 2-core runner).
    time.sleep(15)
    operator_factory()
    wait_for(lambda: objects.get("deployment", "sg-r") is None, 40, "Deployment reaped")
    reaped_at = time.time()
    from datetime import datetime

    deadline = datetime.fromisoformat(idle_since.replace("Z", "+00:00")).timestamp() + 20
    # Acted at the original deadline (give or take the reaper interval), not 20 s after restart.
    assert reaped_at < deadline + 10, (reaped_at, deadline)
    assert objects.status("r")["idleSince"] == idle_since


def test_a_spec_changed_while_the_operator_was_down_is_applied_at_its_start(
    operator_factory: Any, objects: Objects, redis_client: redis.Redis
) -> None:
    """A spec changed while the operator was down (SIGKILL, no clean stop) reaches the
    Deployment and observedGeneration at its start (kopf's diff base in status differs), and a
    group left unchanged gets its pass too (its queue emptied meanwhile: idleSince); both
    within seconds of the start."""
    first = operator_factory()
    push(redis_client, "mail-down", 2)
    push(redis_client, "mail-same", 2)
    objects.apply(sendgroup("down", workers=1))
    objects.apply(sendgroup("same", workers=1))
    wait_for(lambda: replicas(objects, "down") == 1, 20, "workers of 'down'")
    wait_for(lambda: replicas(objects, "same") == 1, 20, "workers of 'same'")
    first.stop(signal.SIGKILL)
    objects.apply(sendgroup("down", workers=3))
    generation = objects.get("sendgroup", "down")["metadata"]["generation"]
    redis_client.delete("queues:mail-same", "queues:mail-same:notify")
    operator_factory()
    wait_for(lambda: replicas(objects, "down") == 3, 20, "the change made while down")
    wait_for(
        lambda: objects.status("down").get("observedGeneration") == generation,
        20,
        "observedGeneration of the change made while down",
    )
    # the unchanged group is passed too: its queue emptied while the operator was down
    wait_for(lambda: objects.status("same").get("idleSince"), 20, "idleSince of 'same'")


def test_a_deleted_deployment_comes_back_and_a_restart_sees_the_existing_ones(
    operator_factory: Any, objects: Objects, redis_client: redis.Redis
) -> None:
    """The worker Deployments come from a watch (and one LIST at start-up), not a kopf index:
    a Deployment deleted by hand is created again, and after a restart each group finds its
    own Deployment (scaled, not created twice, no ApplyFailed)."""
    first = operator_factory()
    push(redis_client, "mail-wd", 2)
    objects.apply(sendgroup("wd", workers=2))
    wait_for(lambda: replicas(objects, "wd") == 2, 20, "workers")
    first_uid = objects.get("deployment", "sg-wd")["metadata"]["uid"]
    objects.cluster.kubectl("delete", "deployment", "sg-wd", "-n", objects.namespace)
    back = wait_for(lambda: objects.get("deployment", "sg-wd"), 30, "the Deployment back")
    assert back["metadata"]["uid"] != first_uid
    wait_for(lambda: replicas(objects, "wd") == 2, 20, "workers again")
    first.stop(signal.SIGKILL)
    restarted = operator_factory()
    objects.apply(sendgroup("wd", workers=3))
    wait_for(lambda: replicas(objects, "wd") == 3, 30, "the spec change after the restart")
    assert objects.get("deployment", "sg-wd")["metadata"]["uid"] == back["metadata"]["uid"]
    assert "SendGroup(s) and 1 worker Deployment(s) found" in restarted.log()
    reasons = {c.get("reason") for c in objects.status("wd").get("conditions", [])}
    assert "ApplyFailed" not in reasons


def test_cancel_stops_workers_then_purges(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis
) -> None:
    push(redis_client, "mail-c", 4)
    redis_client.zadd("queues:mail-c:failed", {"f1": 1})
    redis_client.rpush("queues:mail-c1", "neighbour")
    objects.apply(sendgroup("c", workers=2))
    wait_for(lambda: len(objects.list("pods", "sendgroups.io/group=c")) == 2, 30, "worker pods")
    objects.patch_sg("c", {"state": "Cancelled"})
    wait_for(lambda: objects.get("deployment", "sg-c") is None, 20, "workers removed")
    wait_for(lambda: objects.status("c").get("phase") == "Cancelled", 20, "phase Cancelled")
    wait_for(
        lambda: not redis_client.exists("queues:mail-c", "queues:mail-c:failed"), 20, "keys purged"
    )
    assert objects.list("pods", "sendgroups.io/group=c,app.kubernetes.io/component=worker") == []
    assert redis_client.llen("queues:mail-c1") == 1  # a neighbour queue is untouched
    assert "Purged" in {e["reason"] for e in objects.events("c")}


def test_delete_retain_leaves_keys_and_purge_removes_them(
    operator: OperatorProcess,
    objects: Objects,
    redis_client: redis.Redis,
    kube_cluster: KubeCluster,
) -> None:
    push(redis_client, "mail-keep", 3)
    push(redis_client, "mail-drop", 3)
    objects.apply(sendgroup("keep", deletionPolicy="Retain"))
    objects.apply(sendgroup("drop"))
    wait_for(
        lambda: replicas(objects, "keep") == 1 and replicas(objects, "drop") == 1, 20, "workers"
    )
    kube_cluster.kubectl(
        "delete", "sg", "keep", "drop", "-n", objects.namespace, "--timeout=60s", timeout=90
    )
    assert objects.get("sendgroup", "keep") is None and objects.get("sendgroup", "drop") is None
    assert redis_client.llen("queues:mail-keep") == 3
    assert not redis_client.exists("queues:mail-drop")


def test_global_cap_is_shared_fairly(
    operator_factory: Any, objects: Objects, redis_client: redis.Redis
) -> None:
    operator_factory(SENDGROUP_MAX_TOTAL_WORKERS="20")
    names = [f"g{i}" for i in range(10)]
    for name in names:
        push(redis_client, f"mail-{name}", 10)
    objects.apply("\n---\n".join(sendgroup(n, workers=5) for n in names))

    def settled() -> dict[str, int] | None:
        counts = {n: replicas(objects, n) or 0 for n in names}
        return counts if sum(counts.values()) == 20 and min(counts.values()) == 2 else None

    counts = wait_for(
        settled,
        60,
        "10 groups sharing 20 workers",
        describe=lambda: {n: replicas(objects, n) for n in names},
    )
    assert all(c == 2 for c in counts.values())
    throttled = objects.condition("g0", "Throttled")
    assert throttled is not None and throttled["status"] == "True"
    assert objects.status("g0")["workers"]["allowed"] == 2
    # One group finishing its work frees its share for the others, never exceeding the cap.
    for _ in range(10):
        total = sum((replicas(objects, n) or 0) for n in names)
        assert total <= 20
        time.sleep(0.3)


def test_unreachable_redis_is_a_condition_and_recovers(
    operator: OperatorProcess, objects: Objects, tmp_path: Path
) -> None:
    port = free_port()
    objects.apply(sendgroup("u", redis={"url": f"redis://127.0.0.1:{port}/0"}))
    cond = wait_for(
        lambda: (c := objects.condition("u", "QueueReachable")) and c["status"] == "False" and c,
        20,
        "QueueReachable=False",
    )
    assert f"127.0.0.1:{port}" in cond["message"]
    assert "QueueUnreachable" in {e["reason"] for e in objects.events("u")}
    time.sleep(3)
    assert operator.running()
    server = RedisServer(port=port).start()
    try:
        push(server.client(), "mail-u", 2)
        wait_for(
            lambda: (c := objects.condition("u", "QueueReachable")) and c["status"] == "True",
            20,
            "QueueReachable=True after Redis came up",
        )
        wait_for(lambda: replicas(objects, "u") == 1, 20, "workers once measured")
    finally:
        server.cleanup()


def test_narrow_rbac_is_reported_and_waited_for(
    operator_factory: Any, objects: Objects, kube_cluster: KubeCluster
) -> None:
    ns = objects.namespace
    kube_cluster.kubectl("delete", "rolebinding", "sendgroup-operator", "-n", ns)
    proc = operator_factory(wait=False)
    wait_for(
        lambda: f"RBAC: cannot create apps/deployments in namespace {ns}" in proc.log(),
        30,
        "the missing permission named in the log",
        describe=lambda: proc.log()[-2000:],
    )
    time.sleep(2)
    assert proc.running(), "waits instead of crash-looping"
    apply_objects(kube_cluster, [o for o in rbac_objects(ns) if o["kind"] == "RoleBinding"])
    proc.wait_started(30)


def test_cancel_of_a_dumped_group_forgets_its_segments(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis, tmp_path: Path
) -> None:
    dumps = tmp_path / "dumps"
    push(redis_client, "mail-cd", 3)
    objects.apply(sendgroup("cd", paused=True, reaper={"dumpAfter": "2s"}))
    job = wait_for(lambda: objects.get("job", "sg-cd-dump-1"), 30, "dump Job")
    run_job_locally(job, dumps)
    remove_job(objects, job)
    wait_for(lambda: objects.status("cd").get("phase") == "Dumped", 20, "phase Dumped")
    assert len(list(dumps.rglob("*.sgdump"))) == 1

    objects.patch_sg("cd", {"state": "Cancelled"})
    purge = wait_for(lambda: objects.get("job", "sg-cd-purge-2"), 20, "purge Job")
    assert purge["spec"]["template"]["spec"]["containers"][0]["command"][1] == "purge"
    assert redis_client.exists("queues:mail-cd:purge")  # the marker the purge removes
    time.sleep(2)
    assert objects.status("cd")["phase"] == "Cancelling", "Cancelled before the purge ran"
    assert objects.status("cd")["dump"]["totalJobs"] == 3, "not done before the Job ran"
    summary = run_job_locally(purge, dumps)
    assert summary["segmentsForgotten"] == 1
    assert list(dumps.rglob("*.sgdump")) == []
    wait_for(lambda: objects.status("cd")["dump"]["totalJobs"] == 0, 20, "dump forgotten in status")
    wait_for(lambda: objects.status("cd")["phase"] == "Cancelled", 20, "Cancelled once purged")
    assert not redis_client.exists("queues:mail-cd", "queues:mail-cd:purge")


def test_completed_group_drains_and_expires_after_ttl(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis
) -> None:
    push(redis_client, "mail-done", 2)
    objects.apply(sendgroup("done", state="Completed", ttlSecondsAfterFinished=3))
    wait_for(lambda: replicas(objects, "done") == 1, 20, "workers drain a Completed group")
    redis_client.delete("queues:mail-done", "queues:mail-done:notify")
    wait_for(lambda: objects.get("deployment", "sg-done") is None, 20, "workers removed at once")
    wait_for(lambda: objects.get("sendgroup", "done") is None, 30, "group deleted by its TTL")


def test_metrics_show_queue_and_workers(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis
) -> None:
    push(redis_client, "mail-m", 4)
    objects.apply(sendgroup("m", workers=2))
    wait_for(lambda: replicas(objects, "m") == 2, 20, "workers")
    ns = objects.namespace

    def metric(line_start: str) -> float | None:
        for line in operator.metrics().splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return None

    ready = f'sendgroup_queue_jobs{{namespace="{ns}",sendgroup="m",state="ready"}}'
    wait_for(lambda: metric(ready) == 4.0, 20, "queue gauge")
    desired = f'sendgroup_workers{{kind="desired",namespace="{ns}",sendgroup="m"}}'
    assert metric(desired) == 2.0
    assert metric('sendgroup_groups{phase="Running"}') == 1.0
    assert "redis://" not in operator.metrics()


def test_two_replicas_peer_and_only_the_higher_priority_acts(
    operator_factory: Any, objects: Objects, redis_client: redis.Redis
) -> None:
    objects.apply(
        json.dumps(
            {
                "apiVersion": "kopf.dev/v1",
                "kind": "KopfPeering",
                "metadata": {"name": "sendgroup-operator"},
            }
        )
    )
    low = operator_factory(SENDGROUP_STANDALONE="false", SENDGROUP_PEERING_PRIORITY="10")
    high = operator_factory(SENDGROUP_STANDALONE="false", SENDGROUP_PEERING_PRIORITY="20")
    wait_for(lambda: "Pausing operations" in low.log(), 30, "the low-priority replica pauses")
    push(redis_client, "mail-ha", 2)
    objects.apply(sendgroup("ha", workers=2))
    wait_for(lambda: replicas(objects, "ha") == 2, 30, "workers from the active replica")
    # the active replica logs the create after the API call returned: poll for the line
    wait_for(lambda: "deployment sg-ha" in high.log(), 15, "the active replica logs the create")
    assert "deployment sg-ha" not in low.log()
    high.stop()  # graceful: it leaves the peering, the other one takes over
    wait_for(lambda: "Resuming operations" in low.log(), 60, "the standby resumes")
    objects.patch_sg("ha", {"workers": 1})
    wait_for(lambda: replicas(objects, "ha") == 1, 30, "the former standby reconciles")


def test_liveness_endpoint_reports_the_reaper(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis
) -> None:
    import urllib.request

    objects.apply(sendgroup("live"))
    wait_for(lambda: objects.status("live").get("phase") == "Pending", 20, "phase Pending")
    url = f"http://127.0.0.1:{operator.health_port}/healthz"
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        body = json.loads(response.read())
    assert body["reaper"]["groups"] == 1


def test_orphans_are_counted_by_name(
    operator_factory: Any, objects: Objects, redis_client: redis.Redis
) -> None:
    op = operator_factory(SENDGROUP_ORPHAN_GRACE="2")
    push(redis_client, "mail-o", 2)
    objects.apply(sendgroup("o"))  # work, and (no node) never a ready worker
    objects.apply(ghost_worker_deployment())

    def gauge(kind: str) -> float | None:
        for line in op.metrics().splitlines():
            if line.startswith(f'sendgroup_orphans{{kind="{kind}"}}'):
                return float(line.split()[-1])
        return None

    wait_for(lambda: gauge("deployment_without_group") == 1.0, 20, "orphan Deployment counted")
    wait_for(lambda: gauge("group_without_workers") == 1.0, 20, "group without ready workers")


def test_redis_secret_ref_is_used_and_never_inlined(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis, redis_url: str
) -> None:
    objects.cluster.kubectl(
        "create",
        "secret",
        "generic",
        "redis-cred",
        "-n",
        objects.namespace,
        f"--from-literal=url={redis_url}",
    )
    push(redis_client, "mail-s", 3)
    objects.apply(sendgroup("s", redis={"secretRef": {"name": "redis-cred", "key": "url"}}))
    dep = wait_for(lambda: objects.get("deployment", "sg-s"), 20, "workers for the Secret's Redis")
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["REDIS_URL"]["valueFrom"] == {"secretKeyRef": {"name": "redis-cred", "key": "url"}}
    assert "value" not in env["REDIS_URL"]
    wait_for(lambda: objects.status("s").get("queue", {}).get("ready") == 3, 20, "measured")


def test_deletion_with_redis_down_is_bounded(
    operator_factory: Any, objects: Objects, kube_cluster: KubeCluster
) -> None:
    operator_factory(SENDGROUP_PURGE_TIMEOUT="4")
    port = free_port()
    objects.apply(sendgroup("down", redis={"url": f"redis://127.0.0.1:{port}/0"}))
    wait_for(lambda: objects.status("down").get("phase"), 20, "first status")
    started = time.monotonic()
    kube_cluster.kubectl("delete", "sg", "down", "-n", objects.namespace, "--wait=false")
    time.sleep(2)
    assert objects.get("sendgroup", "down") is not None, "the finalizer waits for Redis first"
    wait_for(
        lambda: objects.get("sendgroup", "down") is None, 40, "deletion proceeds after the timeout"
    )
    assert time.monotonic() - started >= 3
    assert "PurgeAbandoned" in {e["reason"] for e in objects.events("down")}


def test_examples_are_accepted_by_the_api_server(
    sendgroup_crd: str, objects: Objects, kube_cluster: KubeCluster
) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    proc = kube_cluster.kubectl(
        "apply", "--dry-run=server", "-n", objects.namespace, "-f", str(examples)
    )
    assert proc.stdout.count("created (server dry run)") == len(list(examples.glob("*.yaml")))


def test_a_failing_api_call_does_not_stop_the_reaper(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis
) -> None:
    # A foreign Deployment under the worker's name with another (immutable) selector: every
    # attempt to adopt it fails with 422. The group says so; the others carry on.
    objects.apply(foreign_deployment("sg-clash"))
    push(redis_client, "mail-clash", 1)
    push(redis_client, "mail-fine", 1)
    objects.apply(sendgroup("clash"))

    def errors() -> float:
        for line in operator.metrics().splitlines():
            if line.startswith("sendgroup_reconcile_errors_total{"):
                return float(line.split()[-1])
        return 0.0

    wait_for(lambda: errors() >= 3, 30, "repeated reconcile errors counted")
    objects.apply(sendgroup("fine"))
    wait_for(lambda: replicas(objects, "fine") == 1, 20, "another group still reconciled")
    before = errors()
    wait_for(lambda: errors() > before, 20, "the reaper keeps trying the failing group")
    assert operator.running()
    degraded = objects.condition("clash", "Degraded")
    assert degraded is not None and degraded["reason"] == "ApplyFailed"
    assert "EnsureDeployment: HTTP 422" in degraded["message"]
    assert "ApplyFailed" in {e["reason"] for e in objects.events("clash")}
    # The status still shows what waits in the queue (it kept an older, empty measurement,
    # and `kubectl sendgroup status --watch` called the group done)
    queue = objects.status("clash").get("queue") or {}
    assert queue.get("ready") == 1 and queue.get("measuredAt"), queue
    # Once the obstacle is gone, the group recovers by itself and the condition clears.
    objects.cluster.kubectl("delete", "deployment", "sg-clash", "-n", objects.namespace)
    wait_for(lambda: replicas(objects, "clash") == 1, 30, "workers once the clash is gone")
    wait_for(lambda: objects.condition("clash", "Degraded") is None, 20, "Degraded cleared")


@pytest.mark.parametrize(
    "head",
    [
        '{"uuid": "bad", "attempts": 0, "pushedAt": "1e400", "data": {}}',
        '{"uuid": "nan", "attempts": 0, "pushedAt": "NaN", "data": {}}',
        '{"uuid": "deep", "pushedAt": 1, "data": ' + "[" * 5000 + "]" * 5000 + "}",
        "not json at all",
    ],
    ids=["pushedAt-out-of-range", "pushedAt-NaN", "deeply-nested", "not-json"],
)
def test_a_bad_job_at_the_head_blocks_neither_workers_nor_cancel_nor_delete(
    operator: OperatorProcess,
    objects: Objects,
    redis_client: redis.Redis,
    kube_cluster: KubeCluster,
    head: str,
) -> None:
    """Issue 16, item 3, end to end on the control plane: such a head job made every pass of
    its group raise (no workers, ``kubectl delete`` hung on the finalizer, ``Cancelled`` never
    purged). Now the group gets its workers, a cancel purges, a delete finishes."""
    for name in ("hc", "hd"):
        keys = QueueKeys(f"mail-{name}")
        redis_client.rpush(keys.ready, head)
        push(redis_client, f"mail-{name}", 3)
        objects.apply(sendgroup(name, workers=2))
    wait_for(lambda: replicas(objects, "hc") == 2 and replicas(objects, "hd") == 2, 30, "workers")
    objects.patch_sg("hc", {"state": "Cancelled"})
    wait_for(lambda: objects.status("hc").get("phase") == "Cancelled", 30, "phase Cancelled")
    wait_for(lambda: not redis_client.exists("queues:mail-hc"), 20, "keys purged")
    kube_cluster.kubectl("delete", "sg", "hd", "-n", objects.namespace, "--timeout=60s", timeout=90)
    assert objects.get("sendgroup", "hd") is None
    assert not redis_client.exists("queues:mail-hd")
