"""A group's lifecycle on the real node (operator pod, worker pods, the SMTP sink): a pause
issued the moment the worker container starts is a pause, and a random walk of spec edits,
pauses, resumes, traffic bursts and operator kills always converges, never sends while paused
and never sends a mail twice."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sendgroup_contract.keys import QueueKeys
from tests.support.cluster import wait_for
from tests.support.e2e import (
    InstalledOperator,
    install_operator,
    patch_spec,
    push_mails,
    sendgroup_manifest,
    sendgroup_status,
    uninstall_operator,
    worker_pods,
)
from tests.support.node import NodeCluster, get_json
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink

pytestmark = [pytest.mark.e2e]

#: the random walk's pause marker (its queue is ``mail-walk``)
WALK_PAUSED = QueueKeys("mail-walk").paused


@dataclass
class Node:
    node: NodeCluster
    namespace: str
    operator: InstalledOperator
    redis: RedisServer
    smtp: SmtpSink
    log: list[str] = field(default_factory=list)

    def kubectl(self, *args: str, check: bool = True) -> str:
        return self.node.kube.kubectl("-n", self.namespace, *args, check=check).stdout

    def mails(self, domain: str) -> list[tuple[str, float]]:
        with self.smtp.lock:
            return [(m.recipient, m.at) for m in self.smtp.received if m.recipient.endswith(domain)]

    def status(self, name: str) -> dict[str, Any]:
        return sendgroup_status(self.node.kube, self.namespace, name)

    def deployment(self, name: str) -> dict[str, Any] | None:
        proc = self.node.kube.kubectl(
            "-n", self.namespace, "get", "deployment", f"sg-{name}", "-o", "json", check=False
        )
        if proc.returncode != 0:
            return None
        import json

        data: dict[str, Any] = json.loads(proc.stdout)
        return data


def _workers_now(node: Node) -> str:
    """What a convergence timeout reports: the Deployment's replicas and each worker pod's
    phase, deletion time and container states, with the tail of its log."""
    kube, ns = node.node.kube, node.namespace
    dep = node.deployment("walk") or {}
    marker = node.redis.client().exists(WALK_PAUSED)
    lines = [f"deployment replicas={dep.get('spec', {}).get('replicas')} pause marker={marker}"]
    for pod in worker_pods(kube, ns, "walk"):
        meta, status = pod["metadata"], pod.get("status", {})
        states = [
            f"{c['name']}: {next(iter(c.get('state') or {'?': 0}))}"
            for c in status.get("containerStatuses", [])
        ]
        lines.append(
            f"pod {meta['name']} phase={status.get('phase')} "
            f"deleting={meta.get('deletionTimestamp')} {', '.join(states)}"
        )
        logs = kube.kubectl("-n", ns, "logs", meta["name"], "--tail=15", check=False)
        lines.append(logs.stdout + logs.stderr)
    return "\n".join(lines)


@pytest.fixture
def node(
    node_cluster: NodeCluster, e2e_namespace: str, pod_redis: RedisServer, pod_smtp: SmtpSink
) -> Iterator[Node]:
    operator = install_operator(
        node_cluster.kube, e2e_namespace, pod_redis.url, pod_smtp.host, pod_smtp.port
    )
    n = Node(node_cluster, e2e_namespace, operator, pod_redis, pod_smtp)
    yield n
    print("steps:\n" + "\n".join(n.log))
    print(f"operator log (tail):\n{n.operator.logs()}")
    n.kubectl("delete", "sendgroups", "--all", "--timeout=90s", check=False)
    uninstall_operator(node_cluster.kube, e2e_namespace, check=False)


def container_running(pod: dict[str, Any]) -> bool:
    return any("running" in s.get("state", {}) for s in pod["status"].get("containerStatuses", []))


@pytest.mark.timeout(600)
def test_a_pause_as_the_worker_container_starts_sends_nothing_after_paused(node: Node) -> None:
    """200 jobs, 1 worker at 30/min (one mail every 2 s). The pause is patched the moment the
    worker container runs, i.e. before Python has installed its handlers: no mail may leave
    once the group shows Paused, and the pod must stop on SIGTERM, not after its grace."""
    kube, ns = node.node.kube, node.namespace
    push_mails(node.redis.client(), "mail-pz", [f"p{i}@pz.test" for i in range(200)])
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input=sendgroup_manifest(
            "pz", ns, campaign="c", host="gmail.com", workers=1, rate={"perMinute": 30}
        ),
    )

    def running() -> bool:
        return any(container_running(p) for p in worker_pods(kube, ns, "pz"))

    wait_for(running, 180, "the worker container running")
    patch_spec(kube, ns, "pz", {"paused": True})
    patched = time.time()
    wait_for(lambda: node.status("pz").get("phase") == "Paused", 30, "phase Paused")
    paused_shown = time.time()
    wait_for(lambda: not worker_pods(kube, ns, "pz"), 45, "the worker pod gone (SIGTERM honoured)")
    stopped = time.time() - patched
    time.sleep(3)
    late = [m for m in node.mails("@pz.test") if m[1] > paused_shown]
    node.log.append(
        f"paused {paused_shown - patched:.1f}s after the patch, pod gone after {stopped:.1f}s, "
        f"{len(node.mails('@pz.test'))} mails before, {len(late)} after Paused"
    )
    assert late == [], f"{len(late)} mails sent after the group showed Paused"
    status = node.status("pz")
    assert status["queue"]["total"] + status["progress"]["delivered"] == 200


@pytest.mark.timeout(1200)
def test_random_walk_converges_never_sends_paused_and_never_twice(node: Node) -> None:
    """A seeded random walk (``SENDGROUP_WALK_SEED`` replays one) over spec edits, pauses,
    resumes, bursts and operator-pod kills. After each step, within 60 s: a running group's
    Deployment has the spec's replicas and timeout; a paused one has no pods and sends
    nothing. At the end every pushed recipient got exactly one mail. The pause marker in Redis
    is part of it: set while paused, gone while running (workers that see it take nothing)."""
    seed = int(os.environ.get("SENDGROUP_WALK_SEED") or time.time())
    rng = random.Random(seed)
    node.log.append(f"seed {seed}")
    kube, ns, client = node.node.kube, node.namespace, node.redis.client()
    spec: dict[str, Any] = {"workers": 1, "paused": False, "timeout": 30}
    pushed = 0

    def burst(n: int) -> None:
        nonlocal pushed
        push_mails(client, "mail-walk", [f"w{pushed + i}@walk.test" for i in range(n)])
        pushed += n

    burst(50)
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input=sendgroup_manifest(
            "walk",
            ns,
            campaign="c",
            host="gmail.com",
            workers=1,
            rate={"perMinute": 1200},
            worker={"timeout": 30, "retryAfter": 60},
            reaper={"idleAfter": "1h", "dumpAfter": "1h"},
        ),
    )

    def converged() -> bool:
        dep = node.deployment("walk")
        if spec["paused"]:
            return bool(client.exists(WALK_PAUSED)) and not worker_pods(kube, ns, "walk")
        if dep is None or client.exists(WALK_PAUSED):  # a running group's workers take jobs
            return False
        env = {
            e["name"]: e.get("value")
            for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        return bool(
            dep["spec"]["replicas"] == spec["workers"]
            and env.get("WORKER_TIMEOUT") == str(spec["timeout"])
        )

    kinds = ["workers", "timeout", "pause", "resume", "burst", "kill-operator"]
    walk = kinds + [rng.choice(kinds) for _ in range(4)]  # every kind at least once
    rng.shuffle(walk)
    for i, step in enumerate(walk):
        if step == "workers":
            spec["workers"] = rng.choice([n for n in (1, 2, 3) if n != spec["workers"]])
            patch_spec(kube, ns, "walk", {"workers": spec["workers"]})
        elif step == "timeout":
            spec["timeout"] = rng.choice([t for t in (20, 30, 45) if t != spec["timeout"]])
            patch_spec(kube, ns, "walk", {"worker": {"timeout": spec["timeout"], "retryAfter": 60}})
        elif step == "pause":
            spec["paused"] = True
            patch_spec(kube, ns, "walk", {"paused": True})
        elif step == "resume":
            spec["paused"] = False
            patch_spec(kube, ns, "walk", {"paused": False})
        elif step == "burst":
            burst(rng.randint(20, 80))
        else:
            pods = get_json(kube, "-n", ns, "pods", "-l", "app.kubernetes.io/component=operator")[
                "items"
            ]
            for p in pods:
                node.kubectl("delete", "pod", p["metadata"]["name"], "--grace-period=0", "--force")
        at = time.time()
        wait_for(
            converged,
            60,
            f"step {i} ({step}, spec {spec}) converged",
            describe=lambda: _workers_now(node),
        )
        if spec["paused"]:
            settled = time.time()
            time.sleep(3)
            late = [m for m in node.mails("@walk.test") if m[1] > settled]
            assert late == [], f"step {i}: {len(late)} mails while paused"
        node.log.append(f"step {i}: {step} {spec} converged in {time.time() - at:.1f}s")
    spec["paused"] = False
    patch_spec(kube, ns, "walk", {"paused": False})
    wait_for(lambda: len(node.mails("@walk.test")) >= pushed, 300, f"all {pushed} mails")
    time.sleep(3)
    got = [r for r, _ in node.mails("@walk.test")]
    assert len(got) == len(set(got)) == pushed, "a mail was lost or sent twice"
