"""Install the operator in a cluster as users will: the Helm chart ``helm/sendgroup-operator``
(CRDs, ServiceAccounts, RBAC, KopfPeering, the dumps PersistentVolumeClaim on the cluster's
default StorageClass, and the operator Deployment running the operator image as a pod under its
own ServiceAccount), released in the test's namespace. Plus helpers the end-to-end tests share
(pushing mail jobs, SendGroups, reading the SMTP sink).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from sendgroup_worker.producer import make_mail_payload
from sendgroup_worker.queue.keys import QueueKeys
from tests.support import manifests
from tests.support.cluster import KubeCluster, wait_for
from tests.support.helm import CHART, helm, values_args
from tests.support.node import OPERATOR_IMAGE, WORKER_IMAGE, NodeCluster, get_json

RELEASE = "sendgroup-operator"
CHART_ENV = "SENDGROUP_E2E_CHART"
DUMPS_CLAIM = "sendgroup-dumps"


def chart_values(redis_url: str, smtp_host: str, smtp_port: int) -> dict[str, Any]:
    """Chart values (dotted paths) of an end-to-end install: the locally built images
    (``OPERATOR_IMAGE``, ``WORKER_IMAGE``), the test's Redis and SMTP sink, fast reconcile
    loops (reaper every 2 s, status refresh every 5 s, preflight retried every 2 s), and no
    cluster-wide aggregated roles (several releases may coexist in one cluster)."""
    repository, _, tag = OPERATOR_IMAGE.rpartition(":")
    return {
        "image.repository": repository,
        "image.tag": tag,
        "defaultImage": WORKER_IMAGE,
        "defaultRedisUrl": redis_url,
        "defaultSmtp.host": smtp_host,
        "defaultSmtp.port": smtp_port,
        "dumpsClaimName": DUMPS_CLAIM,
        "dumps.size": "1Gi",
        "reaperInterval": 2,
        "rbac.aggregatedRoles": False,
        # the campaigns keep their own pace: no default ClusterSendProviders (gmail.com would
        # resolve to google's); tests/e2e/test_provider_node.py brings its own SendProvider
        "defaultProviders.enabled": False,
        "extraEnv": [
            {"name": "SENDGROUP_STATUS_REFRESH", "value": "5"},
            {"name": "SENDGROUP_PREFLIGHT_RETRY", "value": "2"},
            {"name": "SENDGROUP_DNS_SERVERS", "value": "none"},
        ],
    }


@dataclass
class InstalledOperator:
    """The operator installed in ``namespace`` (its pod name once running)."""

    kube: KubeCluster
    namespace: str
    pod: str

    def logs(self) -> str:
        """The last 200 lines of the operator pod's log (or kubectl's error)."""
        proc = self.kube.kubectl("-n", self.namespace, "logs", self.pod, "--tail=200", check=False)
        return proc.stdout + proc.stderr


def install_operator(
    kube: KubeCluster,
    namespace: str,
    redis_url: str,
    smtp_host: str,
    smtp_port: int,
    timeout: float = 180,
    values: dict[str, Any] | None = None,
) -> InstalledOperator:
    """``helm install`` the chart as release ``sendgroup-operator`` in ``namespace`` (which
    must exist) with :func:`chart_values`; waits until the operator pod is Running. Undo it
    with :func:`uninstall_operator`. ``values``: more chart values (dotted paths) over those.
    Raises AssertionError when helm fails or on timeout (with the pods and events of the
    namespace)."""
    helm(
        "install",
        RELEASE,
        # SENDGROUP_E2E_CHART: a packaged chart (`helm package` output, docs/install.md)
        os.environ.get(CHART_ENV) or str(CHART),
        "--namespace",
        namespace,
        *values_args({**chart_values(redis_url, smtp_host, smtp_port), **(values or {})}),
        kubeconfig=kube.kubeconfig,
    )
    kube.kubectl(
        "wait", "--for=condition=Established", "crd/sendgroups.sendgroups.io", "--timeout=60s"
    )

    def running_pod() -> str | None:
        pods = get_json(
            kube,
            "-n",
            namespace,
            "pods",
            "-l",
            f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator",
        )["items"]
        for p in pods:
            statuses = p["status"].get("containerStatuses", [])
            if statuses and all(s.get("ready") or "running" in s["state"] for s in statuses):
                return str(p["metadata"]["name"])
        return None

    try:
        pod = wait_for(
            running_pod,
            timeout,
            "the operator pod Running",
            describe=lambda: (
                kube.kubectl("-n", namespace, "get", "pods,pvc,events", check=False).stdout
            ),
        )
    except AssertionError:
        uninstall_operator(kube, namespace, check=False)  # no cluster-scoped leftovers
        raise
    return InstalledOperator(kube=kube, namespace=namespace, pod=pod)


def uninstall_operator(kube: KubeCluster, namespace: str, check: bool = True) -> None:
    """``helm uninstall`` the release in ``namespace``: its cluster-scoped RBAC (ClusterRole/
    Binding named after the namespace) goes with it; the dumps claim stays (resource policy
    keep) until the namespace is deleted. ``check``: raise AssertionError when helm fails."""
    helm("uninstall", RELEASE, "--namespace", namespace, kubeconfig=kube.kubeconfig, check=check)


# ---------------------------------------------------------------- campaigns


def push_mails(client: redis.Redis, queue: str, recipients: list[str], batch: int = 500) -> None:
    """Push one mail job per recipient (producer payloads, ready list + notify tokens)."""
    keys = QueueKeys(queue)
    for i in range(0, len(recipients), batch):
        payloads = [
            make_mail_payload(
                to,
                from_="news@sender.test",
                subject="hello",
                text=f"hello {to}",
                uuid=str(uuid.uuid4()),
            )
            for to in recipients[i : i + batch]
        ]
        pipe = client.pipeline(transaction=True)
        pipe.rpush(keys.ready, *payloads)
        pipe.rpush(keys.notify, *(["1"] * len(payloads)))
        pipe.execute()


def sendgroup_manifest(name: str, namespace: str, **spec: Any) -> str:
    """A SendGroup as JSON for ``kubectl apply``."""
    return manifests.stream(manifests.sendgroup(name, spec, namespace))


def sendgroup_status(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = get_json(kube, "-n", namespace, "sendgroup", name).get("status", {})
    return status


def patch_spec(kube: KubeCluster, namespace: str, name: str, spec: dict[str, Any]) -> None:
    kube.kubectl(
        "-n",
        namespace,
        "patch",
        "sendgroup",
        name,
        "--type=merge",
        "-p",
        json.dumps({"spec": spec}),
    )


def worker_pods(kube: KubeCluster, namespace: str, group: str) -> list[dict[str, Any]]:
    """Worker pods of a group (any phase), from its labels."""
    items: list[dict[str, Any]] = get_json(
        kube,
        "-n",
        namespace,
        "pods",
        "-l",
        f"sendgroups.io/group={group},app.kubernetes.io/component=worker",
    )["items"]
    return items


def dump_files(node: NodeCluster, namespace: str, group: str) -> list[Path]:
    """Segment files of ``group`` on the dumps volume, read on the host (local node only)."""
    pvc = get_json(node.kube, "-n", namespace, "pvc", DUMPS_CLAIM)
    pv = get_json(node.kube, "pv", pvc["spec"]["volumeName"])
    root = Path(pv["spec"]["hostPath"]["path"]) / namespace / group
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def monotonic_now() -> float:
    return time.monotonic()


@contextlib.contextmanager
def operator_for_test(
    node: NodeCluster,
    namespace: str,
    redis_url: str,
    smtp_host: str,
    smtp_port: int,
    request: pytest.FixtureRequest,
    values: dict[str, Any] | None = None,
    check_cluster_rbac: bool = False,
) -> Iterator[tuple[InstalledOperator, list[str]]]:
    """An end-to-end test's operator: :func:`install_operator` in ``namespace``; yields it and
    the test's report lines (the install time is the first). Afterwards: the operator's log
    tail (pytest shows it when the test failed), the report lines on the terminal, every
    SendGroup deleted while the operator still runs (their finalizers would keep the namespace
    Terminating; 90 s), and the release uninstalled. ``check_cluster_rbac``: also assert that
    the release created its cluster-scoped RBAC and that ``helm uninstall`` removed it."""
    started = time.monotonic()
    operator = install_operator(
        node.kube, namespace, redis_url, smtp_host, smtp_port, values=values
    )
    report = [f"operator installed and running in {time.monotonic() - started:.1f}s"]
    yield operator, report
    print(f"operator log (tail):\n{operator.logs()}")  # shown by pytest when the test failed
    terminal = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if terminal is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            for line in report:
                terminal.write_line(f"e2e report ({request.node.name}): {line}")
    # The release's cluster-scoped RBAC is named after the namespace; helm uninstall removes it.
    cluster_rbac = [
        f"clusterrole.rbac.authorization.k8s.io/sendgroup-operator-{namespace}",
        f"clusterrolebinding.rbac.authorization.k8s.io/sendgroup-operator-{namespace}",
    ]

    def cluster_rbac_left() -> list[str]:
        names = node.kube.kubectl("get", "clusterrole,clusterrolebinding", "-o", "name")
        return [n for n in cluster_rbac if n in names.stdout.split()]

    installed = cluster_rbac_left() if check_cluster_rbac else cluster_rbac
    deleted = node.kube.kubectl(
        "-n", namespace, "delete", "sendgroups", "--all", "--timeout=90s", check=False
    )
    uninstall_operator(node.kube, namespace, check=check_cluster_rbac)
    assert deleted.returncode == 0, f"SendGroups not deleted in 90 s: {deleted.stderr}"
    if check_cluster_rbac:
        assert installed == cluster_rbac, "the chart did not create its cluster RBAC"
        assert cluster_rbac_left() == [], "helm uninstall left the release's cluster-scoped RBAC"


class PodLogs:
    """Follow the logs of every pod matching ``selector`` in ``namespace`` while it lives
    (``kubectl logs -f --timestamps``, one process per pod, a new pod picked up within
    ``poll`` seconds), so what a pod printed survives the pod: a worker's last lines before it
    went (a pause, a stop) are what a CI failure needs and are gone with the pod otherwise.
    Use as a context manager; :meth:`text` gives the lines seen so far, per pod."""

    def __init__(self, kube: KubeCluster, namespace: str, selector: str, poll: float = 0.5):
        self.kube, self.namespace, self.selector, self.poll = kube, namespace, selector, poll
        self._procs: dict[str, subprocess.Popen[str]] = {}
        self._files: dict[str, Any] = {}
        self._dir = tempfile.TemporaryDirectory(prefix="sg-podlogs-")
        #: pod -> container restarts last seen (a restart's earlier log is not followed)
        self.restarts: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="pod-logs", daemon=True)

    def __enter__(self) -> PodLogs:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for proc in self._procs.values():
            proc.terminate()
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for f in self._files.values():
            f.close()
        self._dir.cleanup()

    def _watch(self) -> None:
        kubectl = [str(self.kube.kubectl_bin), f"--kubeconfig={self.kube.kubeconfig}"]
        while not self._stop.wait(self.poll):
            got = self.kube.kubectl(
                "-n",
                self.namespace,
                "get",
                "pods",
                "-l",
                self.selector,
                "-o",
                "json",
                check=False,
            )
            try:
                pods = json.loads(got.stdout)["items"] if got.returncode == 0 else []
            except ValueError:
                pods = []
            for pod in pods:
                name = pod["metadata"]["name"]
                statuses = pod.get("status", {}).get("containerStatuses") or []
                self.restarts[name] = sum(int(c.get("restartCount", 0)) for c in statuses)
                proc = self._procs.get(name)
                # kubectl logs -f fails until the container started: try again at the next poll
                if proc is not None and (proc.poll() is None or self._seen(name)):
                    continue
                if name not in self._files:
                    self._files[name] = open(Path(self._dir.name) / name, "w")  # noqa: SIM115
                self._procs[name] = subprocess.Popen(
                    [*kubectl, "-n", self.namespace, "logs", "-f", "--timestamps", name],
                    stdout=self._files[name],
                    stderr=subprocess.DEVNULL,
                    text=True,
                )

    def _seen(self, name: str) -> bool:
        """The pod's log file has lines (its follower ran and ended with the pod)."""
        return (Path(self._dir.name) / name).stat().st_size > 0

    def text(self, tail: int = 60) -> str:
        """The last ``tail`` lines of each followed pod's log."""
        out = []
        for name in sorted(self._files):
            self._files[name].flush()
            lines = (Path(self._dir.name) / name).read_text(errors="replace").splitlines()
            out.append(
                f"--- log of pod {name} ({len(lines)} lines, the last {tail}; container "
                f"restarts seen: {self.restarts.get(name, '?')})"
            )
            out.extend(lines[-tail:])
        return "\n".join(out)
