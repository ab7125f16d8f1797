"""End to end on the local node: the worker's probes mean something. A worker pod becomes Ready
only once its /readyz reached Redis and the SMTP relay; a worker frozen with SIGSTOP (a hung
process: it answers nothing, sends nothing) is killed by the kubelet on its liveness probe and
restarted, and the group goes on delivering.

SIGSTOP is sent from the host to the container's process (found by its environment in /proc),
so this test needs the local node: against a remote cluster it fails saying so.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import wait_for
from tests.support.e2e import (
    InstalledOperator,
    install_operator,
    push_mails,
    sendgroup_manifest,
    uninstall_operator,
    worker_pods,
)
from tests.support.node import NodeCluster, get_json
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink

pytestmark = [pytest.mark.e2e]

GROUP = "probed"
QUEUE = f"mail-{GROUP}"
#: Pod knobs the local node can honour: a label it has, a toleration, a spread constraint, extra
#: pod metadata (and a pull secret that is never needed: the image is already on the node).
POD_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "probes"}, "annotations": {"example.com/owner": "e2e"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "example.com/mail", "operator": "Exists", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
        }
    ],
}


@pytest.fixture
def operator(
    node_cluster: NodeCluster, e2e_namespace: str, pod_redis: RedisServer, pod_smtp: SmtpSink
) -> Iterator[InstalledOperator]:
    installed = install_operator(
        node_cluster.kube, e2e_namespace, pod_redis.url, pod_smtp.host, pod_smtp.port
    )
    yield installed
    print(f"operator log (tail):\n{installed.logs()}")
    node_cluster.kube.kubectl(
        "-n", e2e_namespace, "delete", "sendgroups", "--all", "--timeout=90s", check=False
    )
    uninstall_operator(node_cluster.kube, e2e_namespace, check=False)


def worker_pids(namespace: str) -> list[int]:
    """Host PIDs of ``sendgroup-worker work`` processes whose environment says they belong to
    ``namespace`` (SENDGROUP_NAMESPACE, set by the operator)."""
    wanted = f"SENDGROUP_NAMESPACE={namespace}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sendgroup-worker\0work" in cmd and wanted in environ:
            found.append(int(entry))
    return found


def delivered(sink: SmtpSink) -> int:
    with sink.lock:
        return sum(1 for m in sink.received if m.recipient.endswith("@probe.test"))


def container(pod: dict[str, Any]) -> dict[str, Any]:
    statuses: list[dict[str, Any]] = pod["status"].get("containerStatuses", [])
    return statuses[0] if statuses else {}


@pytest.mark.timeout(600)
def test_a_hung_worker_is_restarted_by_its_liveness_probe(
    node_cluster: NodeCluster,
    e2e_namespace: str,
    operator: InstalledOperator,
    pod_redis: RedisServer,
    pod_smtp: SmtpSink,
) -> None:
    if os.environ.get("SENDGROUP_TEST_USE_EXISTING_CLUSTER") == "1":
        pytest.fail(
            "this test freezes the worker process with SIGSTOP from the host: it needs the "
            "local node (hack/cluster/cluster up --node), not a remote cluster",
            pytrace=False,
        )
    kube = node_cluster.kube
    ns = e2e_namespace
    client = pod_redis.client()
    push_mails(client, QUEUE, [f"r{i}@probe.test" for i in range(5)])
    probe = {"periodSeconds": 2, "timeoutSeconds": 1, "failureThreshold": 2}
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input=sendgroup_manifest(
            GROUP,
            ns,
            campaign="probes",
            host="probe.test",
            workers=1,
            worker={"probes": {"stallAfter": 5, "liveness": probe, "readiness": probe}},
            podTemplate=POD_TEMPLATE,
            disruptionBudget={"maxUnavailable": 1},
        ),
    )

    def describe() -> str:
        return kube.kubectl("-n", ns, "get", "pods,events", check=False).stdout

    def ready_pod() -> dict[str, Any] | None:
        for pod in worker_pods(kube, ns, GROUP):
            if container(pod).get("ready"):
                return pod
        return None

    pod = wait_for(
        ready_pod, 180, "a Ready worker pod (its /readyz reached Redis and SMTP)", describe=describe
    )
    name = pod["metadata"]["name"]
    assert container(pod).get("restartCount", 0) == 0
    # the pod knobs reached the running pod, and the group's PodDisruptionBudget covers it
    assert pod["metadata"]["labels"]["team"] == "probes"
    assert pod["metadata"]["annotations"]["example.com/owner"] == "e2e"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert {"key": "example.com/mail", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"][
        "tolerations"
    ]
    spread = pod["spec"]["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]
    assert spread == {"sendgroups.io/group": GROUP, "app.kubernetes.io/component": "worker"}
    budget = wait_for(
        lambda: (
            (get_json(kube, "-n", ns, "pdb", f"sg-{GROUP}").get("status") or {}).get(
                "currentHealthy"
            )
            == 1
            or None
        ),
        60,
        "the group's PodDisruptionBudget counting its one healthy worker",
        describe=describe,
    )
    assert budget
    wait_for(lambda: delivered(pod_smtp) >= 5, 60, "the 5 first mails delivered", describe=describe)

    pids = wait_for(lambda: worker_pids(ns) or None, 30, "the worker's process on the host")
    assert len(pids) == 1, pids
    frozen_at = time.monotonic()
    os.kill(pids[0], signal.SIGSTOP)

    def restarted() -> dict[str, Any] | None:
        current = get_json(kube, "-n", ns, "pod", name)
        return current if container(current).get("restartCount", 0) >= 1 else None

    after = wait_for(
        restarted, 120, "the frozen worker restarted by the kubelet", describe=describe
    )
    seconds = time.monotonic() - frozen_at
    status = container(after)
    terminated = status.get("lastState", {}).get("terminated", {})
    assert terminated.get("exitCode") == 137, status  # SIGKILL: the frozen process never exited
    events = kube.kubectl(
        "-n", ns, "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json"
    ).stdout
    assert "Liveness probe failed" in events
    # periodSeconds 2 x failureThreshold 2, then at most the probe's 10 s grace period
    assert seconds < 60, f"restart took {seconds:.1f}s"
    print(f"frozen worker restarted {seconds:.1f}s after SIGSTOP")

    # the new process is Ready again and the group goes on sending
    wait_for(ready_pod, 120, "the restarted worker Ready again", describe=describe)
    push_mails(client, QUEUE, [f"s{i}@probe.test" for i in range(5)])
    wait_for(
        lambda: delivered(pod_smtp) >= 10,
        90,
        "the 5 next mails delivered by the restarted worker",
        describe=describe,
    )
