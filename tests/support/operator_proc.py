"""The operator as a real process under its ServiceAccount, for the cluster tier.

:func:`install_rbac` builds Role/RoleBinding and ClusterRole/ClusterRoleBinding from
``helm/sendgroup-operator/files/rbac-rules.yaml`` (the same rules the Helm chart uses);
:class:`OperatorProcess` runs ``python -m sendgroup_operator`` with a kubeconfig holding that
ServiceAccount's token.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tests.support.cluster import KubeCluster, service_account_kubeconfig
from tests.support.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "helm" / "sendgroup-operator" / "files" / "rbac-rules.yaml"
SA_NAME = "sendgroup-operator"


def rbac_objects(namespace: str, sa: str = SA_NAME) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding, ClusterRole and ClusterRoleBinding for one
    namespaced operator in ``namespace``."""
    rules = yaml.safe_load(RULES.read_text())
    subject = [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]
    cluster_name = f"sendgroup-operator-{namespace}"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": sa, "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": sa, "namespace": namespace},
            # the operator's own namespace is watched here: its shard Lease rules too
            "rules": rules["namespaced"] + rules["shard"],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": sa, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
            "subjects": subject,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": cluster_name},
            "rules": rules["cluster"],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": cluster_name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_name,
            },
            "subjects": subject,
        },
    ]


def apply_objects(cluster: KubeCluster, objects: list[dict[str, Any]]) -> None:
    """``kubectl apply`` a list of objects."""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))


def install_rbac(cluster: KubeCluster, namespace: str, path: Path) -> Path:
    """Create the operator's ServiceAccount and RBAC in ``namespace``; write its kubeconfig
    to ``path`` and return it."""
    apply_objects(cluster, rbac_objects(namespace))
    return service_account_kubeconfig(cluster, namespace, SA_NAME, path)


class OperatorProcess:
    """``python -m sendgroup_operator`` watching one namespace, logging to ``log_path``."""

    def __init__(
        self, kubeconfig: Path, namespace: str, redis_url: str, log_path: Path, **env: str
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.log_path = log_path
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "POD_NAMESPACE": namespace,
            "SENDGROUP_WATCH_NAMESPACES": namespace,
            "SENDGROUP_DEFAULT_REDIS_URL": redis_url,
            "SENDGROUP_DEFAULT_IMAGE": "sendgroup-worker:test",
            "SENDGROUP_REAPER_INTERVAL": "1",
            "SENDGROUP_STATUS_REFRESH": "5",
            "SENDGROUP_METRICS_PORT": str(self.metrics_port),
            "SENDGROUP_HEALTH_PORT": str(self.health_port),
            "SENDGROUP_LISTEN_HOST": "127.0.0.1",
            "SENDGROUP_STANDALONE": "true",
            "SENDGROUP_PREFLIGHT_RETRY": "1",
            # no MX lookup leaves the machine: providers resolve by domain only here
            "SENDGROUP_DNS_SERVERS": "none",
            # every Redis of the tests listens on loopback (other ports: unreachable-Redis
            # tests); the operator's default allows only the default Redis (issue 16)
            "SENDGROUP_ALLOWED_REDIS_HOSTS": "127.0.0.1",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        """Start the process (appending to the log)."""
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sendgroup_operator"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        return self

    def running(self) -> bool:
        """Whether the process is alive."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        """Stop it with ``sig`` (SIGKILL for a crash), waiting up to ``timeout`` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def log(self) -> str:
        """The log so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics(self) -> str:
        """The text of ``/metrics``."""
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())

    def wait_started(self, timeout: float = 60) -> None:
        """Until the log says the preflight passed (or the process died)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise AssertionError(f"operator exited:\n{self.log()[-4000:]}")
            if "preflight ok" in self.log():
                return
            time.sleep(0.3)
        raise AssertionError(f"operator did not start in {timeout}s:\n{self.log()[-4000:]}")
