"""Install the operator in a cluster as users will: the CRDs from ``crds/``, its ServiceAccount
and RBAC from ``helm/sendgroup-operator/files/rbac-rules.yaml`` (what the Helm chart renders),
the dumps PersistentVolumeClaim, and a Deployment running the operator image as a pod under that
ServiceAccount. Plus helpers the end-to-end tests share (pushing mail jobs, SendGroups,
reading the SMTP sink).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import yaml

from sendgroup_worker.producer import make_mail_payload
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.cluster import KubeCluster, wait_for
from tests.support.node import OPERATOR_IMAGE, WORKER_IMAGE, get_json
from tests.support.operator_proc import SA_NAME, rbac_objects

REPO = Path(__file__).resolve().parents[2]
CRDS = [REPO / "crds" / "sendgroups.yaml", REPO / "crds" / "kopf-peering.yaml"]
DUMPS_CLAIM = "sendgroup-dumps"


def operator_deployment(namespace: str, env: dict[str, str]) -> dict[str, Any]:
    """The operator's Deployment (one replica, restricted pod security, liveness on
    ``/healthz``), with ``SENDGROUP_*`` settings ``env``."""
    container_env: list[dict[str, Any]] = [
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        *({"name": k, "value": v} for k, v in sorted(env.items())),
    ]
    labels = {"app.kubernetes.io/name": "sendgroup-operator"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "sendgroup-operator", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": SA_NAME,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 10001,
                        "runAsGroup": 10001,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "operator",
                            "image": OPERATOR_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "env": container_env,
                            "ports": [
                                {"name": "metrics", "containerPort": 8080},
                                {"name": "health", "containerPort": 8081},
                            ],
                            "livenessProbe": {
                                "httpGet": {"path": "/healthz", "port": "health"},
                                "initialDelaySeconds": 30,
                                "periodSeconds": 20,
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                        }
                    ],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                },
            },
        },
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
) -> InstalledOperator:
    """CRDs, RBAC, the dumps claim and the operator Deployment in ``namespace``; waits until
    the operator pod is Running and its CRD is established. Raises AssertionError on timeout
    (with the pod's state)."""
    for crd in CRDS:
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    kube.kubectl(
        "wait", "--for=condition=Established", "crd/sendgroups.sendgroups.io", "--timeout=60s"
    )
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": DUMPS_CLAIM, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    env = {
        "SENDGROUP_WATCH_NAMESPACES": namespace,
        "SENDGROUP_DEFAULT_REDIS_URL": redis_url,
        "SENDGROUP_DEFAULT_IMAGE": WORKER_IMAGE,
        "SENDGROUP_DEFAULT_SMTP_HOST": smtp_host,
        "SENDGROUP_DEFAULT_SMTP_PORT": str(smtp_port),
        "SENDGROUP_DUMPS_CLAIM_NAME": DUMPS_CLAIM,
        "SENDGROUP_REAPER_INTERVAL": "2",
        "SENDGROUP_STATUS_REFRESH": "5",
        "SENDGROUP_STANDALONE": "true",
        "SENDGROUP_PREFLIGHT_RETRY": "2",
    }
    objects = [*rbac_objects(namespace), claim, operator_deployment(namespace, env)]
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))

    def running_pod() -> str | None:
        pods = get_json(
            kube, "-n", namespace, "pods", "-l", "app.kubernetes.io/name=sendgroup-operator"
        )["items"]
        for p in pods:
            statuses = p["status"].get("containerStatuses", [])
            if statuses and all(s.get("ready") or "running" in s["state"] for s in statuses):
                return str(p["metadata"]["name"])
        return None

    pod = wait_for(
        running_pod,
        timeout,
        "the operator pod Running",
        describe=lambda: kube.kubectl("-n", namespace, "get", "pods,events", check=False).stdout,
    )
    return InstalledOperator(kube=kube, namespace=namespace, pod=pod)


def uninstall_cluster_rbac(kube: KubeCluster, namespace: str) -> None:
    """Delete the cluster-scoped RBAC of an operator installed in ``namespace``."""
    name = f"sendgroup-operator-{namespace}"
    kube.kubectl("delete", "clusterrolebinding", name, "--ignore-not-found", check=False)
    kube.kubectl("delete", "clusterrole", name, "--ignore-not-found", check=False)


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
    return json.dumps(
        {
            "apiVersion": "sendgroups.io/v1alpha1",
            "kind": "SendGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


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


def monotonic_now() -> float:
    return time.monotonic()
