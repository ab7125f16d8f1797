"""The local Kubernetes control plane for the cluster tier, and helpers to talk to it.

A session either starts its own cluster with ``hack/cluster/cluster up --state-dir <tmp>``
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler built from Go modules, on free
loopback ports) and stops it with ``down`` at the end, or, when the user opts in with
``SENDGROUP_TEST_USE_EXISTING_CLUSTER=1``, uses the cluster ``KUBECONFIG`` points at (kind, k3d,
a shared dev cluster). No part of Kubernetes is mocked.

Helpers:
- :class:`KubeCluster`: the kubeconfig and the ``kubectl`` to use, ``kubectl(...)`` runs it.
- :func:`wait_for`: poll a predicate until it returns a truthy value or a deadline passes.
- :func:`service_account_kubeconfig`: a kubeconfig for a ServiceAccount, with a token from the
  TokenRequest API, so a process (the operator) runs with exactly its RBAC.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO / "hack" / "cluster" / "cluster"
USE_EXISTING_ENV = "SENDGROUP_TEST_USE_EXISTING_CLUSTER"

T = TypeVar("T")


class ClusterError(RuntimeError):
    """The control plane could not be built or started; the message says why."""


def _cluster_script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLUSTER_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def built_bin_dir() -> Path:
    """The cached bin dir of the pinned versions (``hack/cluster/cluster versions``).

    Raises ClusterError when the script fails (e.g. Go missing).
    """
    proc = _cluster_script("versions", timeout=120)
    if proc.returncode != 0:
        raise ClusterError(f"hack/cluster/cluster versions failed:\n{proc.stderr}")
    for line in proc.stdout.splitlines():
        if line.startswith("bin "):
            return Path(line[4:].strip())
    raise ClusterError(f"no bin dir in hack/cluster/cluster versions output:\n{proc.stdout}")


@dataclass
class KubeCluster:
    """A reachable cluster: ``kubeconfig`` (admin) and the ``kubectl_bin`` to use.

    ``state_dir`` is set when this session started the cluster (``managed``); ``down`` then
    stops it.
    """

    kubeconfig: Path
    kubectl_bin: Path
    state_dir: Path | None = None
    startup_seconds: float | None = None
    _api_client: Any = field(default=None, repr=False)

    @property
    def managed(self) -> bool:
        return self.state_dir is not None

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig=... ARGS`` and return the finished process (text output).

        ``check``: raise AssertionError with stdout/stderr when the exit code is not 0.
        ``kubeconfig``: run as another user (e.g. a ServiceAccount kubeconfig).
        """
        cmd = [str(self.kubectl_bin), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        proc = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(cmd[1:])} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for the admin kubeconfig (made once)."""
        if self._api_client is None:
            from kubernetes import config

            self._api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        return self._api_client

    def pids(self) -> dict[str, int]:
        """The pid of each component of a managed cluster, by name (``STATE_DIR/pids``); empty
        for a cluster this session did not start."""
        if self.state_dir is None:
            return {}
        return {
            f.stem: int(f.read_text().strip())
            for f in sorted((self.state_dir / "pids").glob("*.pid"))
        }

    def rss_mib(self) -> dict[str, float]:
        """Resident memory (MiB) of each running component of a managed cluster, by name."""
        result: dict[str, float] = {}
        for name, pid in self.pids().items():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    result[name] = int(line.split()[1]) / 1024
        return result

    def server(self) -> tuple[str, str]:
        """(server URL, base64 CA data or "") of the kubeconfig's current context."""
        cfg = yaml.safe_load(self.kubeconfig.read_text())
        ctx_name = cfg["current-context"]
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        ca = cluster.get("certificate-authority-data", "")
        if not ca and cluster.get("certificate-authority"):
            import base64

            ca = base64.b64encode(Path(cluster["certificate-authority"]).read_bytes()).decode()
        return cluster["server"], ca


def start_cluster(state_dir: Path, timeout: float = 900) -> KubeCluster:
    """``hack/cluster/cluster --state-dir STATE_DIR up``: build if needed, start, wait ready.

    Raises ClusterError with the script's output when it fails or exceeds ``timeout`` seconds.
    """
    started = time.monotonic()
    try:
        proc = _cluster_script("--state-dir", str(state_dir), "up", timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        logs = _stop_keeping_logs(state_dir)
        raise ClusterError(f"hack/cluster/cluster up took longer than {timeout}s{logs}") from exc
    if proc.returncode != 0:
        logs = _stop_keeping_logs(state_dir)
        raise ClusterError(
            f"hack/cluster/cluster up failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-6000:]}{logs}"
        )
    elapsed = time.monotonic() - started
    env = dict(
        line.split("=", 1)
        for line in (state_dir / "cluster.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    return KubeCluster(
        kubeconfig=state_dir / "kubeconfig",
        kubectl_bin=Path(env["BIN_DIR"]) / "kubectl",
        state_dir=state_dir,
        startup_seconds=elapsed,
    )


def _stop_keeping_logs(state_dir: Path, lines: int = 15) -> str:
    """Stop a cluster that failed to start (``down --keep-logs``) and return the last ``lines``
    lines of each component's log, for the error: the script's own message only says where
    the logs were, and the state dir is temporary."""
    _cluster_script("--state-dir", str(state_dir), "down", "--keep-logs", timeout=120)
    tails = []
    for log in sorted((state_dir / "logs").glob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        tails.append(f"\n--- {log.name} (last {len(tail)} lines)\n" + "\n".join(tail))
    shutil.rmtree(state_dir, ignore_errors=True)
    return "".join(tails)


def stop_cluster(state_dir: Path) -> subprocess.CompletedProcess[str]:
    """``hack/cluster/cluster --state-dir STATE_DIR down`` (stops by pid, removes the dir)."""
    return _cluster_script("--state-dir", str(state_dir), "down", timeout=120)


def existing_cluster() -> KubeCluster:
    """The cluster ``KUBECONFIG`` names (opt-in: ``SENDGROUP_TEST_USE_EXISTING_CLUSTER=1``).

    kubectl: the built one if cached, else ``kubectl`` on PATH. Raises ClusterError if
    KUBECONFIG is unset or no kubectl is found.
    """
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if not kubeconfig:
        raise ClusterError(f"{USE_EXISTING_ENV}=1 needs KUBECONFIG pointing at the cluster")
    path = Path(kubeconfig.split(os.pathsep)[0])
    kubectl = built_bin_dir() / "kubectl"
    if not kubectl.exists():
        found = shutil.which("kubectl")
        if found is None:
            raise ClusterError("no kubectl: run hack/cluster/cluster build, or put one on PATH")
        kubectl = Path(found)
    return KubeCluster(kubeconfig=path, kubectl_bin=kubectl)


def session_cluster() -> tuple[KubeCluster, Callable[[], None]]:
    """The cluster for a test session and the function that releases it.

    Existing cluster when ``SENDGROUP_TEST_USE_EXISTING_CLUSTER=1`` (release does nothing),
    else a new local cluster in a temporary state dir (release runs ``down``).
    """
    if os.environ.get(USE_EXISTING_ENV) == "1":
        return existing_cluster(), lambda: None
    if not (built_bin_dir() / ".complete").exists():
        # A cold build takes minutes, longer than a test's timeout: hack/test builds first.
        raise ClusterError(
            "the control plane binaries are not built: run hack/cluster/cluster build "
            "(hack/test does this before pytest)"
        )
    state_dir = Path(tempfile.mkdtemp(prefix="sg-cluster-")) / "state"
    cluster = start_cluster(state_dir)

    def release() -> None:
        proc = stop_cluster(state_dir)
        if proc.returncode != 0:
            raise ClusterError(f"hack/cluster/cluster down failed:\n{proc.stderr}")
        shutil.rmtree(state_dir.parent, ignore_errors=True)

    return cluster, release


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.5,
    describe: Callable[[], object] | None = None,
) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns a truthy value; return it.

    After ``timeout`` seconds raise AssertionError naming ``what`` and the last value seen (or
    the last exception the predicate raised, or ``describe()`` if given).
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
        except Exception as exc:  # the state may not exist yet; keep polling, report at the end
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            seen = describe() if describe is not None else last
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}; last seen: {seen!r}"
            )
        time.sleep(interval)


def service_account_kubeconfig(
    cluster: KubeCluster,
    namespace: str,
    name: str,
    path: Path,
    expiration_seconds: int = 3600,
) -> Path:
    """Write a kubeconfig at ``path`` that authenticates as ServiceAccount NAMESPACE/NAME.

    The token comes from the TokenRequest API (``serviceaccounts/token``), valid for
    ``expiration_seconds`` (the API server's minimum is 600). Server and CA are those of
    ``cluster``. The ServiceAccount must exist. Returns ``path``.
    """
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
    )
    status = core.create_namespaced_service_account_token(name, namespace, request).status
    if status is None or not status.token:
        raise ClusterError(f"TokenRequest for {namespace}/{name} returned no token")
    token = status.token
    server, ca = cluster.server()
    cluster_entry: dict[str, str] = {"server": server}
    if ca:
        cluster_entry["certificate-authority-data"] = ca
    user = f"system:serviceaccount:{namespace}:{name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster_entry}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "sa",
                "context": {"cluster": "cluster", "user": user, "namespace": namespace},
            }
        ],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


#: The project's CRDs: SendGroup, SendProvider, ClusterSendProvider and kopf's peering CRDs.
CRD_FILES = (
    "sendgroups.yaml",
    "sendproviders.yaml",
    "clustersendproviders.yaml",
    "kopf-peering.yaml",
)


def apply_crds(kube: KubeCluster) -> None:
    """``kubectl apply`` the project's CRDs (crds/) and wait until the SendGroup and provider
    CRDs are Established (60 s)."""
    files = [arg for name in CRD_FILES for arg in ("-f", str(REPO / "crds" / name))]
    kube.kubectl("apply", *files)
    kube.kubectl(
        "wait",
        "--for=condition=Established",
        "crd/sendgroups.sendgroups.io",
        "crd/sendproviders.sendgroups.io",
        "crd/clustersendproviders.sendgroups.io",
        "--timeout=60s",
        timeout=90,
    )
