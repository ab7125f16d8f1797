"""A Kubernetes cluster that runs pods, for the end-to-end tier.

Either the local node (``hack/cluster/cluster up --node`` in a temporary state dir: the control
plane, a kubelet with its own containerd, the CNI bridge pod network, images from
``hack/images``), or, with ``SENDGROUP_TEST_USE_EXISTING_CLUSTER=1``, the cluster ``KUBECONFIG``
names (kind, k3d) with the images already loaded there.

Pods reach servers the tests start on the host (Redis, the SMTP sink) at ``host_address``: on
the local node the pod network's gateway (the bridge's address, e.g. 10.244.0.1), elsewhere the
address given in ``SENDGROUP_E2E_HOST_ADDRESS`` (for kind: the docker network's gateway). The
servers bind that address only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.cluster import (
    CLUSTER_SCRIPT,
    USE_EXISTING_ENV,
    ClusterError,
    KubeCluster,
    built_bin_dir,
    existing_cluster,
    wait_for,
)

HOST_ADDRESS_ENV = "SENDGROUP_E2E_HOST_ADDRESS"
#: the images the local node has (hack/images/build tags them SENDGROUP_IMAGE_TAG, default dev)
IMAGE_TAG = os.environ.get("SENDGROUP_IMAGE_TAG", "dev")
WORKER_IMAGE = os.environ.get("SENDGROUP_E2E_WORKER_IMAGE", f"sendgroup-worker:{IMAGE_TAG}")
OPERATOR_IMAGE = os.environ.get("SENDGROUP_E2E_OPERATOR_IMAGE", f"sendgroup-operator:{IMAGE_TAG}")


@dataclass
class NodeCluster:
    """A cluster whose pods run: ``kube`` (kubectl etc.), ``host_address`` where pods reach
    the host's test servers; for the local node also its ``state_dir`` and ``env``
    (``cluster.env``: ports, bridge, gateway) and start-up times in seconds."""

    kube: KubeCluster
    host_address: str
    state_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    startup_seconds: float | None = None
    node_startup_seconds: float | None = None

    @property
    def managed(self) -> bool:
        return self.state_dir is not None

    def recycle_released_volumes(self, namespace_prefix: str = "e2e-") -> list[str]:
        """Make the local node's hostPath PersistentVolumes that claims of deleted test
        namespaces (``namespace_prefix``) left ``Released`` available again, the way
        Kubernetes' old ``Recycle`` policy did: empty the directory, then drop ``claimRef``.
        Returns the recycled volumes' names. The node has a fixed set of volumes with the
        ``Retain`` policy (hack/cluster/node.sh), so without this the node tier's later
        tests found none left: their dumps claim stayed Pending and the dump Job never
        started (CI: a Redis Cluster group stuck in Dumping). Nothing on an unmanaged
        cluster."""
        if not self.managed:
            return []
        out = self.kube.kubectl(
            "get", "pv", "-l", "sendgroups.io/local-node=true", "-o", "json"
        ).stdout
        recycled: list[str] = []
        for pv in json.loads(out)["items"]:
            claim = pv["spec"].get("claimRef") or {}
            if (pv.get("status") or {}).get("phase") != "Released":
                continue
            if not str(claim.get("namespace", "")).startswith(namespace_prefix):
                continue
            root = Path(pv["spec"]["hostPath"]["path"])
            for child in root.iterdir() if root.is_dir() else []:
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
            name = pv["metadata"]["name"]
            self.kube.kubectl(
                "patch",
                "pv",
                name,
                "--type=json",
                "-p",
                '[{"op":"remove","path":"/spec/claimRef"}]',
            )
            recycled.append(name)
        return recycled

    def pids(self) -> dict[str, int]:
        """Component name -> pid of the local cluster's processes (empty when not managed)."""
        out: dict[str, int] = {}
        if self.state_dir is None:
            return out
        for pid_file in (self.state_dir / "pids").glob("*.pid"):
            try:
                out[pid_file.stem] = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
        return out


def read_cluster_env(state_dir: Path) -> dict[str, str]:
    """``STATE_DIR/cluster.env`` as a dict (written by ``hack/cluster/cluster up``)."""
    return dict(
        line.split("=", 1)
        for line in (state_dir / "cluster.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )


def cluster_script(
    *args: str, timeout: float, env: dict[str, str] | None = None, stream: bool = False
) -> str:
    """Run ``hack/cluster/cluster ARGS``; return its stderr (the log). Raises ClusterError
    with the log's tail on a non-zero exit or after ``timeout`` seconds.

    ``stream``: the log goes to this process's stderr as it is written (progress on a
    terminal) instead of being captured; the return value and the error then carry no log."""
    try:
        proc = subprocess.run(
            [str(CLUSTER_SCRIPT), *args],
            stdout=subprocess.PIPE,
            stderr=None if stream else subprocess.PIPE,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"hack/cluster/cluster {' '.join(args)} took over {timeout}s") from exc
    log = proc.stderr or ""
    if proc.returncode != 0:
        raise ClusterError(
            f"hack/cluster/cluster {' '.join(args)} failed (exit {proc.returncode})"
            + (f":\n{log[-6000:]}" if log else " (its log is above)")
        )
    return log


def start_node(
    state_dir: Path, timeout: float = 1500, env: dict[str, str] | None = None, stream: bool = False
) -> NodeCluster:
    """``hack/cluster/cluster --state-dir STATE_DIR up --node`` (cold: builds images, minutes).

    ``env``: extra environment (``SENDGROUP_NODE_BRIDGE``, ``SENDGROUP_POD_SUBNET``,
    ``SENDGROUP_NODE_IMAGES``); ``stream``: see :func:`cluster_script`. Raises ClusterError
    when it fails, after ``down --keep-logs``: everything stopped, ``STATE_DIR/logs`` kept (the
    error names the log to read; it must still be there when the user looks).
    """
    started = time.monotonic()
    try:
        cluster_script(
            "--state-dir", str(state_dir), "up", "--node", timeout=timeout, env=env, stream=stream
        )
    except ClusterError as exc:
        stop_node(state_dir, keep_logs=True)
        raise ClusterError(f"{exc}\n(logs kept in {state_dir / 'logs'})") from exc
    elapsed = time.monotonic() - started
    cenv = read_cluster_env(state_dir)
    node_seconds = state_dir / "node-startup-seconds"
    return NodeCluster(
        kube=KubeCluster(
            kubeconfig=state_dir / "kubeconfig",
            kubectl_bin=Path(cenv["BIN_DIR"]) / "kubectl",
            state_dir=state_dir,
            startup_seconds=elapsed,
        ),
        host_address=cenv["NODE_GATEWAY"],
        state_dir=state_dir,
        env=cenv,
        startup_seconds=elapsed,
        node_startup_seconds=float(node_seconds.read_text()) if node_seconds.exists() else None,
    )


def stop_node(state_dir: Path, env: dict[str, str] | None = None, keep_logs: bool = False) -> str:
    """``hack/cluster/cluster --state-dir STATE_DIR down`` (``--keep-logs``: everything but
    ``STATE_DIR/logs`` goes); returns its log."""
    args = ["--state-dir", str(state_dir), "down", *(["--keep-logs"] if keep_logs else [])]
    return cluster_script(*args, timeout=180, env=env)


def session_node() -> tuple[NodeCluster, Callable[[], None]]:
    """The cluster for an e2e session and the function that releases it.

    Raises ClusterError saying what is missing (binaries not built, host address unset).
    """
    if os.environ.get(USE_EXISTING_ENV) == "1":
        address = os.environ.get(HOST_ADDRESS_ENV, "")
        if not address:
            raise ClusterError(
                f"{USE_EXISTING_ENV}=1 for the e2e tier also needs {HOST_ADDRESS_ENV}: an address"
                " of this machine that the cluster's pods reach (kind: the docker network's"
                " gateway), where the tests start Redis and the SMTP sink"
            )
        return NodeCluster(kube=existing_cluster(), host_address=address), lambda: None
    if os.geteuid() != 0:
        raise ClusterError("the local node (kubelet, containerd, bridge) needs root")
    if not (built_bin_dir() / ".complete").exists():
        raise ClusterError(
            "the Kubernetes binaries are not built: run hack/cluster/cluster build "
            "(hack/test does this before pytest)"
        )
    state_dir = Path(tempfile.mkdtemp(prefix="sg-node-")) / "state"
    node = start_node(state_dir)

    def release() -> None:
        stop_node(state_dir)
        shutil.rmtree(state_dir.parent, ignore_errors=True)

    return node, release


# ---------------------------------------------------------------- pods and jobs


def get_json(kube: KubeCluster, *args: str) -> Any:
    """``kubectl get ARGS -o json``, parsed."""
    return json.loads(kube.kubectl("get", *args, "-o", "json").stdout)


def restricted_container(name: str, image: str, args: list[str], **extra: Any) -> dict[str, Any]:
    """A container meeting the restricted Pod Security Standard (uid 10001, read-only root)."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        **extra,
    }


def job_manifest(
    name: str,
    namespace: str,
    containers: list[dict[str, Any]],
    volumes: list[dict[str, Any]] | None = None,
    automount: bool = False,
    deadline: int = 300,
) -> dict[str, Any]:
    """A one-pod Job (no retries) with a restricted pod security context."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            "template": {
                "metadata": {"labels": {"sendgroup.test/job": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": automount,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 10001,
                        "runAsGroup": 10001,
                        "fsGroup": 10001,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": containers,
                    "volumes": volumes or [],
                },
            },
        },
    }


def run_job(kube: KubeCluster, manifest: dict[str, Any], timeout: float = 180) -> str:
    """Create the Job, wait until it succeeded, return its pod's log.

    Raises AssertionError with the pod's state and log when it failed or did not finish.
    """
    import yaml

    name = manifest["metadata"]["name"]
    ns = manifest["metadata"]["namespace"]
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))

    def finished() -> str | None:
        job = get_json(kube, "-n", ns, "job", name)
        for cond in job.get("status", {}).get("conditions", []):
            if cond["status"] == "True" and cond["type"] in ("Complete", "Failed"):
                return str(cond["type"])
        return None

    def describe() -> str:
        pods = kube.kubectl("-n", ns, "get", "pods", "-l", f"job-name={name}", "-o", "wide")
        events = kube.kubectl("-n", ns, "get", "events", "--sort-by=.lastTimestamp", check=False)
        return f"{pods.stdout}\n{events.stdout[-3000:]}"

    outcome = wait_for(finished, timeout, f"Job {ns}/{name} to finish", describe=describe)
    log = kube.kubectl("-n", ns, "logs", f"job/{name}", check=False).stdout
    assert outcome == "Complete", f"Job {ns}/{name} failed:\n{describe()}\nlog:\n{log}"
    return log


__all__ = [
    "HOST_ADDRESS_ENV",
    "OPERATOR_IMAGE",
    "WORKER_IMAGE",
    "NodeCluster",
    "get_json",
    "job_manifest",
    "read_cluster_env",
    "restricted_container",
    "run_job",
    "session_node",
    "start_node",
    "stop_node",
]
