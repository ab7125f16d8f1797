"""The node: pods run to completion, reach the API server, Redis and the SMTP sink, write to a
PersistentVolume that outlives them; and `down` leaves nothing of the local node behind."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.support.cluster import ClusterError, wait_for
from tests.support.node import (
    OPERATOR_IMAGE,
    WORKER_IMAGE,
    NodeCluster,
    get_json,
    job_manifest,
    restricted_container,
    run_job,
    start_node,
    stop_node,
)
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def test_worker_image_job_runs_to_completion_on_the_pod_network(
    node_cluster: NodeCluster, e2e_namespace: str
) -> None:
    kube = node_cluster.kube
    nodes = get_json(kube, "nodes")["items"]
    ready = [
        n["metadata"]["name"]
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
        and not n["spec"].get("unschedulable")
    ]
    assert ready, f"no Ready, schedulable node: {[n['metadata']['name'] for n in nodes]}"

    log = run_job(
        kube,
        job_manifest(
            "help", e2e_namespace, [restricted_container("worker", WORKER_IMAGE, ["--help"])]
        ),
        timeout=120,
    )
    assert "Usage: sendgroup-worker" in log
    pod = get_json(kube, "-n", e2e_namespace, "pods", "-l", "job-name=help")["items"][0]
    assert pod["status"]["phase"] == "Succeeded"
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == 0
    if node_cluster.managed:
        subnet = ipaddress.ip_network(node_cluster.env["POD_SUBNET"])
        assert ipaddress.ip_address(pod["status"]["podIP"]) in subnet
        # The node never forwards pod traffic off the bridge.
        assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "0"


POD_CHECK = r"""
import os, smtplib, sys, redis
from email.message import EmailMessage
from kubernetes import client, config
config.load_incluster_config()
version = client.VersionApi().get_code().git_version
r = redis.Redis.from_url(sys.argv[1])
r.set("from-pod", os.environ["POD_NAME"])
msg = EmailMessage()
msg["From"] = "e2e@sender.test"
msg["To"] = "someone@example.test"
msg["Subject"] = "from a pod"
msg["X-SendGroup-Job"] = "pod-check-1"
msg.set_content("hello")
with smtplib.SMTP(sys.argv[2], int(sys.argv[3]), timeout=20) as s:
    s.send_message(msg)
print("api", version, "redis", r.get("from-pod").decode(), "smtp sent")
routes = [line.split()[1] for line in open("/proc/net/route").read().splitlines()[1:]]
print("default route:", "00000000" in routes)
"""


def test_pod_reaches_the_api_server_redis_and_the_smtp_sink(
    node_cluster: NodeCluster, e2e_namespace: str, pod_redis: RedisServer, pod_smtp: SmtpSink
) -> None:
    kube = node_cluster.kube
    container = restricted_container(
        "check",
        OPERATOR_IMAGE,
        [POD_CHECK, pod_redis.url, pod_smtp.host, str(pod_smtp.port)],
        command=["/opt/venv/bin/python", "-c"],
        env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    )
    log = run_job(
        kube, job_manifest("reach", e2e_namespace, [container], automount=True), timeout=120
    )
    pod_name = get_json(kube, "-n", e2e_namespace, "pods", "-l", "job-name=reach")["items"][0][
        "metadata"
    ]["name"]
    server_version = json.loads(kube.kubectl("get", "--raw=/version").stdout)["gitVersion"]
    assert f"api {server_version} redis {pod_name} smtp sent" in log
    assert pod_redis.client().get("from-pod") == pod_name.encode()
    assert [(m.recipient, m.job) for m in pod_smtp.received] == [
        ("someone@example.test", "pod-check-1")
    ]
    if node_cluster.managed:
        # Nothing can leave the machine from a pod: it has no default route at all.
        assert "default route: False" in log


WRITE = "import sys; open('/dumps/' + sys.argv[1], 'w').write(sys.argv[2]); print('wrote')"
READ = "import os, sys; print(sorted(os.listdir('/dumps')), open('/dumps/' + sys.argv[1]).read())"


def test_dumps_volume_outlives_the_pod_that_wrote_it(
    node_cluster: NodeCluster, e2e_namespace: str
) -> None:
    """A claim on the default StorageClass binds; a non-root pod with a read-only root FS
    writes a file there; a second pod reads it; on the local node it is on the host."""
    kube = node_cluster.kube
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "dumps", "namespace": e2e_namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(claim))
    volumes = [{"name": "dumps", "persistentVolumeClaim": {"claimName": "dumps"}}]
    mounts = [{"name": "dumps", "mountPath": "/dumps"}]

    def job(name: str, script: str, *args: str) -> dict[str, object]:
        c = restricted_container(
            "c",
            WORKER_IMAGE,
            [script, *args],
            command=["/opt/venv/bin/python", "-c"],
            volumeMounts=mounts,
        )
        return job_manifest(name, e2e_namespace, [c], volumes=volumes)

    content = f"segment-{os.getpid()}"
    assert "wrote" in run_job(kube, job("write", WRITE, "seg-0001.bin", content), timeout=180)
    log = run_job(kube, job("read", READ, "seg-0001.bin"), timeout=120)
    assert f"['seg-0001.bin'] {content}" in log
    if node_cluster.managed:
        pvc = get_json(kube, "-n", e2e_namespace, "pvc", "dumps")
        pv = get_json(kube, "pv", pvc["spec"]["volumeName"])
        host_file = Path(pv["spec"]["hostPath"]["path"]) / "seg-0001.bin"
        assert host_file.read_text() == content
        assert host_file.stat().st_uid == 10001


# ---------------------------------------------------------------- lifecycle of a node


def _mounts_under(prefix: Path) -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(prefix) or point.startswith(f"{prefix}/"):
            out.append(point)
    return out


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmd:
            found.append(f"{entry}: {cmd}")
    return found


def _iptables_rules(table: str) -> str:
    return subprocess.run(
        ["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.timeout(900)
def test_local_node_down_removes_containers_namespaces_mounts_bridge_and_cgroups() -> None:
    """Its own local node (bridge sgt1, a pause pod running), then `down`: no container, shim,
    network namespace, mount, bridge, iptables chain or cgroup of it is left."""
    if os.environ.get("SENDGROUP_TEST_USE_EXISTING_CLUSTER") == "1":
        pytest.skip("tests the local node's `down`; this run uses an existing cluster")
    bridge, subnet = "sgt1", "10.244.9.0/24"
    env = {
        "SENDGROUP_NODE_BRIDGE": bridge,
        "SENDGROUP_POD_SUBNET": subnet,
        "SENDGROUP_NODE_IMAGES": "pause",
    }
    forward_before = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    state = Path(tempfile.mkdtemp(prefix="sg-node-life-")) / "state"
    try:
        node = start_node(state, env=env)
        kube = node.kube
        kube.kubectl("run", "sleeper", "--image=sendgroup-pause:3.10", "--restart=Never")
        wait_for(
            lambda: get_json(kube, "pod", "sleeper")["status"].get("phase") == "Running",
            120,
            "pod sleeper Running",
            describe=lambda: kube.kubectl("describe", "pod", "sleeper", check=False).stdout,
        )
        node_dir = state / "node"
        # What the node made while the pod runs (each must be there, or the checks below prove
        # nothing).
        runc = subprocess.run(
            ["runc", "--root", str(node_dir / "runc" / "k8s.io"), "list", "-q"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert len(runc) >= 2, f"runc containers (sandbox + app): {runc}"
        netns = list((node_dir / "containerd" / "state").rglob("cni-*"))
        assert netns, "no network namespace under the node's containerd state"
        assert _mounts_under(state), "no mount under the state dir"
        assert Path(f"/sys/class/net/{bridge}").exists()
        assert f"SG-{bridge.upper()}-NAT" in _iptables_rules("nat")
        cgroup = node.env["NODE_CGROUP"]
        assert list(Path("/sys/fs/cgroup/memory", cgroup).rglob("pod*")), "no pod cgroup"
        shims = _processes_mentioning(str(node_dir / "containerd"))
        assert any("containerd-shim" in s for s in shims), shims

        stop_node(state, env=env)

        assert not state.exists()
        assert not _mounts_under(state), _mounts_under(state)
        assert not Path(f"/sys/class/net/{bridge}").exists()
        assert f"SG-{bridge.upper()}" not in _iptables_rules("nat")
        assert f"SG-{bridge.upper()}" not in _iptables_rules("filter")
        left = [p for p in Path("/sys/fs/cgroup").glob(f"*/{cgroup}")]
        assert not left, f"cgroups left: {left}"
        assert not _processes_mentioning(str(state)), _processes_mentioning(str(state))
        for container_id in runc:
            assert not _processes_mentioning(container_id), f"container {container_id} left"
        assert Path("/proc/sys/net/ipv4/ip_forward").read_text() == forward_before
        results = Path("/var/lib/cni/results")
        cached = [f.name for f in results.iterdir()] if results.exists() else []
        assert not [n for n in cached for c in runc if c in n], "CNI results left"
    finally:
        if state.exists():
            stop_node(state, env=env)
        shutil.rmtree(state.parent, ignore_errors=True)


def test_a_node_killed_without_down_leaves_a_bridge_the_next_node_takes_over() -> None:
    """A node whose processes were SIGKILLed (no `down`: a killed test run, a reboot of the
    runner's container) leaves its bridge and iptables chains behind. The next node on the same
    bridge name takes them over and starts; it never takes the bridge of a node that runs."""
    if os.environ.get("SENDGROUP_TEST_USE_EXISTING_CLUSTER") == "1":
        pytest.skip("tests the local node's start-up; this run uses an existing cluster")
    bridge, subnet = "sgt2", "10.244.10.0/24"
    env = {
        "SENDGROUP_NODE_BRIDGE": bridge,
        "SENDGROUP_POD_SUBNET": subnet,
        "SENDGROUP_NODE_IMAGES": "pause",
    }
    first = Path(tempfile.mkdtemp(prefix="sg-node-killed-")) / "state"
    second = Path(tempfile.mkdtemp(prefix="sg-node-next-")) / "state"
    try:
        start_node(first, env=env)
        # A second node on the same bridge while the first runs is refused.
        with pytest.raises(ClusterError, match=f"bridge {bridge} exists already and its node runs"):
            start_node(second, env=env)
        # Kill every process of the first node, as a killed runner would.
        for pid_file in (first / "pids").glob("*.pid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        for line in _processes_mentioning(str(first / "node" / "containerd")):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
        time.sleep(1)
        assert Path(f"/sys/class/net/{bridge}").exists(), "the killed node's bridge is gone"

        node = start_node(second, env=env)
        assert node.kube.kubectl("get", "nodes").returncode == 0
        assert f"SG-{bridge.upper()}-NAT" in _iptables_rules("nat")
        stop_node(second, env=env)
        assert not Path(f"/sys/class/net/{bridge}").exists()
        assert f"SG-{bridge.upper()}" not in _iptables_rules("nat")
    finally:
        for state in (second, first):
            if state.exists():
                stop_node(state, env=env)
            shutil.rmtree(state.parent, ignore_errors=True)
