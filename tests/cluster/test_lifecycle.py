"""A group's lifecycle under real traffic and timing (issue: spec changes always applied, a
trickle is not idle, transitions do not wait for the next reaper tick, Cancelling until purged,
failed jobs visible, a killed operator is replaced without a minute of silence).

The real control plane, the operator as a real process under its ServiceAccount, a real
redis-server and SMTP sink. No node runs pods here: real ``sendgroup-worker work`` processes
on the host drain the queue in place of the worker pods (what a pod would run), so the traffic,
its timing and the counters the operator reads are the real ones.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from sendgroup_worker.queue.keys import QueueKeys
from tests.cluster.conftest import Objects
from tests.cluster.test_operator import push, replicas, sendgroup
from tests.support.cluster import wait_for
from tests.support.operator_proc import OperatorProcess
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess, mail_payload, sync_queue, worker_env

pytestmark = pytest.mark.cluster


class Trickle:
    """A producer pushing one mail job every ``every`` seconds to ``queue`` from a thread."""

    def __init__(self, redis_url: str, queue: str, every: float) -> None:
        self.queue = sync_queue(redis_url, queue)
        self.every = every
        self.pushed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            self.queue.push(mail_payload(f"t{self.pushed}@x.example"))
            self.pushed += 1

    def __enter__(self) -> Trickle:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(5)


@pytest.fixture
def host_worker(redis_url: str, smtp_sink: SmtpSink) -> Iterator[Callable[[str], WorkerProcess]]:
    """Start ``sendgroup-worker work`` processes for a queue (stopped after the test)."""
    started: list[WorkerProcess] = []

    def start(queue: str) -> WorkerProcess:
        proc = WorkerProcess(worker_env(redis_url, queue, smtp_sink.port), f"host-{queue}")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def container_env(objects: Objects, name: str) -> dict[str, str]:
    dep = objects.get("deployment", f"sg-{name}") or {}
    containers = dep.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    env = containers[0].get("env", []) if containers else []
    return {e["name"]: e.get("value", "") for e in env}


def test_a_trickle_keeps_its_workers_and_spec_changes_reach_the_deployment(
    operator: OperatorProcess,
    objects: Objects,
    redis_url: str,
    host_worker: Callable[[str], WorkerProcess],
) -> None:
    """1 job every 0.5 s, drained in milliseconds: every measurement reads an empty queue.

    The group starts with 5 jobs queued and the host worker starts once its Deployment is
    there: a group that has never seen a job starts no workers, and with the host worker
    draining from the first second the operator's first measurements could miss every job
    (the test then waited for workers that a quiet machine never asked for: 7 of 9 runs)."""
    push(redis.Redis.from_url(redis_url), "mail-trickle", 5)
    objects.apply(
        sendgroup(
            "trickle",
            workers=2,
            reaper={"idleAfter": "10s"},
            worker={"timeout": 60, "retryAfter": 90},
        )
    )
    wait_for(lambda: replicas(objects, "trickle") == 2, 30, "workers for the queued jobs")
    host_worker("mail-trickle")
    with Trickle(redis_url, "mail-trickle", 0.5) as trickle:
        objects.patch_sg("trickle", {"workers": 3, "worker": {"timeout": 50, "retryAfter": 90}})
        wait_for(
            lambda: (
                replicas(objects, "trickle") == 3
                and container_env(objects, "trickle").get("WORKER_TIMEOUT") == "50"
            ),
            15,
            "workers 2 -> 3 and timeout 60 -> 50 on the Deployment while the queue reads empty",
        )
        sg = objects.get("sendgroup", "trickle") or {}
        wait_for(
            lambda: (
                objects.status("trickle").get("observedGeneration") == sg["metadata"]["generation"]
            ),
            15,
            "observedGeneration once the Deployment converged",
        )
        # Three idleAfter windows of steady traffic: the workers stay, idleSince stays unset.
        end = time.monotonic() + 30
        while time.monotonic() < end:
            assert replicas(objects, "trickle") == 3, "a busy trickle was reaped as idle"
            assert objects.status("trickle").get("idleSince") is None
            time.sleep(1.0)
        assert trickle.pushed >= 50
    stopped = time.monotonic()
    # Quiet from now on: reaped once nothing was queued or delivered for idleAfter (10 s),
    # within the status refresh (5 s in these tests) and a few passes.
    wait_for(lambda: objects.get("deployment", "sg-trickle") is None, 40, "the quiet group reaped")
    assert time.monotonic() - stopped >= 10
    wait_for(lambda: objects.status("trickle").get("phase") == "Idle", 10, "phase Idle")


def test_cancel_shows_cancelling_until_purged_and_does_not_wait_for_the_reaper(
    operator_factory: Callable[..., OperatorProcess], objects: Objects, redis_client: redis.Redis
) -> None:
    """With a 30 s reaper interval, cancel -> workers gone -> purge -> Cancelled proceeds at
    the planner's own pace (2 s steps); Cancelled appears only once the keys are gone."""
    operator_factory(SENDGROUP_REAPER_INTERVAL="30")
    push(redis_client, "mail-cx", 5)
    objects.apply(sendgroup("cx", workers=1))
    wait_for(lambda: replicas(objects, "cx") == 1, 30, "workers")
    keys = QueueKeys("mail-cx")
    objects.patch_sg("cx", {"state": "Cancelled"})
    started = time.monotonic()
    seen: list[tuple[str | None, int]] = []
    while time.monotonic() - started < 60:
        phase = objects.status("cx").get("phase")
        seen.append((phase, int(redis_client.exists(*keys.laravel_keys))))
        if phase == "Cancelled":
            break
        time.sleep(0.2)
    elapsed = time.monotonic() - started
    phases = [p for p, _ in seen]
    assert phases[-1] == "Cancelled", seen
    assert "Cancelling" in phases, seen
    assert all(left == 0 for p, left in seen if p == "Cancelled"), "Cancelled before the purge"
    assert redis_client.exists(*keys.all_keys) == 0
    assert elapsed < 20, f"cancel took {elapsed:.1f}s: steps waited for the 30 s reaper"
    assert objects.get("deployment", "sg-cx") is None


def test_a_failed_job_is_an_event_and_a_condition(
    operator: OperatorProcess,
    objects: Objects,
    redis_url: str,
    smtp_sink: SmtpSink,
    host_worker: Callable[[str], WorkerProcess],
) -> None:
    smtp_sink.script("gone@x.example", "550 5.1.1 no such user")
    q = sync_queue(redis_url, "mail-fj")
    q.push_many([mail_payload("ok@x.example"), mail_payload("gone@x.example")])
    objects.apply(sendgroup("fj"))
    host_worker("mail-fj")

    def failed_events() -> list[dict[str, Any]]:
        return [e for e in objects.events("fj") if e.get("reason") == "JobsFailed"]

    wait_for(lambda: failed_events() != [], 30, "a JobsFailed event")
    event = failed_events()[0]
    assert event["type"] == "Warning" and "1 job(s) failed" in event["message"]
    cond = objects.condition("fj", "FailedJobs")
    assert cond is not None and cond["status"] == "True" and "1 job(s)" in cond["message"]
    time.sleep(4)  # more passes: the same failure is not announced again
    assert sum(int(e.get("count") or 1) for e in failed_events()) == 1


def peering(objects: Objects) -> None:
    objects.apply(
        json.dumps(
            {
                "apiVersion": "kopf.dev/v1",
                "kind": "KopfPeering",
                "metadata": {"name": "sendgroup-operator"},
            }
        )
    )


def test_killed_operators_are_replaced_without_a_minute_of_silence(
    operator_factory: Callable[..., OperatorProcess], objects: Objects, redis_client: redis.Redis
) -> None:
    """Two instances as the chart runs them (stable POD_ID per instance, priorities 100/99,
    peering lifetime 10 s). SIGKILL of the active one: its restart acts at once (its stale
    record is its own); killed for good, the standby takes over within the lifetime."""
    peering(objects)
    common = {"SENDGROUP_STANDALONE": "false", "SENDGROUP_PEERING_LIFETIME": "10"}
    active = operator_factory(POD_ID="sg-op", SENDGROUP_PEERING_PRIORITY="100", **common)
    standby = operator_factory(POD_ID="sg-op-1", SENDGROUP_PEERING_PRIORITY="99", **common)
    wait_for(lambda: "Pausing operations" in standby.log(), 30, "the standby pauses")
    push(redis_client, "mail-ha2", 3)
    objects.apply(sendgroup("ha2", workers=1))
    wait_for(lambda: replicas(objects, "ha2") == 1, 30, "workers from the active instance")

    active.stop(signal.SIGKILL)
    restarted = operator_factory(POD_ID="sg-op", SENDGROUP_PEERING_PRIORITY="100", **common)
    objects.patch_sg("ha2", {"workers": 2})
    changed = time.monotonic()
    wait_for(lambda: replicas(objects, "ha2") == 2, 20, "the restarted instance acts")
    assert time.monotonic() - changed < 15
    assert "Pausing all operators, including self" not in restarted.log()

    restarted.stop(signal.SIGKILL)
    killed = time.monotonic()
    objects.patch_sg("ha2", {"workers": 3})
    wait_for(lambda: replicas(objects, "ha2") == 3, 45, "the standby takes over")
    took = time.monotonic() - killed
    assert took < 30, f"the standby needed {took:.0f}s"


def test_a_hand_edited_worker_deployment_is_put_back_and_an_untouched_one_left_alone(
    kube_cluster: Any, operator: OperatorProcess, objects: Objects, redis_client: redis.Redis
) -> None:
    """Security review (issue 16): the operator compared only the Deployment's template-hash
    annotation, so a namespace admin's edit of ``sg-<name>`` (workers pointed at another
    tenant's queue) stayed. Now what the operator owns in the template is compared as read
    back from the real API server: the edit is put back within a few passes, and the API
    server's own defaults are not taken for an edit (no rewrite loop: the Deployment's
    ``metadata.generation`` stands still while nothing changes)."""
    push(redis_client, "mail-edited", 50)  # jobs: the group keeps its workers
    objects.apply(sendgroup("edited", workers=2))
    wait_for(lambda: replicas(objects, "edited") == 2, 60, "the worker Deployment")

    def generation() -> int:
        dep = objects.get("deployment", "sg-edited") or {}
        return int(dep["metadata"]["generation"])

    before = generation()
    time.sleep(8)  # several passes
    assert generation() == before, "the operator rewrote a Deployment nobody had changed"
    env = (objects.get("deployment", "sg-edited") or {})["spec"]["template"]["spec"]["containers"][
        0
    ]["env"]
    index = next(i for i, e in enumerate(env) if e["name"] == "SENDGROUP_QUEUE")
    names = [
        c["name"]
        for c in (objects.get("deployment", "sg-edited") or {})["spec"]["template"]["spec"][
            "containers"
        ]
    ]
    patched = kube_cluster.kubectl(
        "patch",
        "deployment",
        "sg-edited",
        "-n",
        objects.namespace,
        "-o",
        "json",
        "--type=json",
        "-p",
        json.dumps(
            [
                {
                    "op": "replace",
                    "path": f"/spec/template/spec/containers/0/env/{index}/value",
                    "value": "team-b.newsletter",
                },
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/-",
                    "value": {"name": "sidecar", "image": "registry.invalid/sidecar:1"},
                },
                {  # a key the operator's template leaves out: the merge patch must delete it
                    "op": "add",
                    "path": "/spec/template/spec/initContainers",
                    "value": [{"name": "setup", "image": "registry.invalid/setup:1"}],
                },
            ]
        ),
    )
    # the edit as the API server stored it (reading it back races the operator, which can put
    # it back within 0.2 s)
    stored = json.loads(patched.stdout)["spec"]["template"]["spec"]
    assert {"name": "SENDGROUP_QUEUE", "value": "team-b.newsletter"} in stored["containers"][0][
        "env"
    ]
    assert stored["initContainers"][0]["name"] == "setup"
    edited_at = time.monotonic()
    wait_for(
        lambda: container_env(objects, "edited")["SENDGROUP_QUEUE"] == "mail-edited",
        30,
        "the edit put back",
    )
    print(f"hand edit put back after {time.monotonic() - edited_at:.1f}s")
    template = (objects.get("deployment", "sg-edited") or {})["spec"]["template"]["spec"]
    assert [c["name"] for c in template["containers"]] == names, "the added sidecar stayed"
    assert "initContainers" not in template, "the added init container stayed"
    settled = generation()
    time.sleep(8)
    assert generation() == settled, "the operator kept rewriting the Deployment"
