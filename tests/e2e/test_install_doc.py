"""docs/install.md, run as written: the user's path to their own cluster.

The blocks marked ``<!-- install-doc: NAME -->`` in the document are taken from it and run
with bash against the session's cluster (the local node, or with
``SENDGROUP_TEST_USE_EXISTING_CLUSTER=1`` the user's): ``helm package`` of the chart, ``helm
install`` of that package with the document's ``my-values.yaml`` (published image names; the
test's Redis and SMTP sink in place of the placeholders), the document's SendGroup,
``sendgroup-worker push`` of its CSV, then its upgrade and uninstall. On the local node the
images that ``hack/images/build load`` imported get the published names first (``ctr images
tag``: what ``kind load docker-image`` does on kind). Nothing of the e2e fixtures' install
shortcuts (fast reaper, test values) is used.

Placeholders replaced: ``registry.example.com/mail`` (kept on the local node, so the tags are
that name), ``-n mail`` (the test's namespace), ``redis://redis.mail.svc:6379/0``,
``smtp-relay.mail.svc`` and port 25 (the pod-reachable Redis and sink).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.cluster import wait_for
from tests.support.helm import helm_bin
from tests.support.node import OPERATOR_IMAGE, WORKER_IMAGE, NodeCluster, get_json
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "install.md"
REGISTRY = "registry.example.com/mail"
VERSION = "0.1.0"

# The first e2e test also waits for the session node (a cold machine builds images then).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]


def doc_blocks() -> dict[str, str]:
    """The fenced blocks that follow ``<!-- install-doc: NAME -->`` markers, by NAME."""
    text = DOC.read_text()
    found = re.findall(r"<!-- install-doc: (\S+) -->\n```\w*\n(.*?)\n```", text, re.S)
    return dict(found)


def test_doc_blocks_are_there() -> None:
    blocks = doc_blocks()
    assert set(blocks) == {"values", "install", "sendgroup", "push", "upgrade", "uninstall"}
    assert "helm package helm/sendgroup-operator -d dist/" in DOC.read_text()
    assert f"dist/sendgroup-operator-{VERSION}.tgz" in blocks["install"]


def publish_images_on_local_node(node: NodeCluster) -> None:
    """Give the images the local node runs their published names (``kind load`` on kind)."""
    assert node.state_dir is not None
    sock = node.state_dir / "node" / "containerd" / "containerd.sock"
    for image, name in ((WORKER_IMAGE, "sendgroup-worker"), (OPERATOR_IMAGE, "sendgroup-operator")):
        subprocess.run(
            [
                *("ctr", "--address", str(sock), "-n", "k8s.io", "images", "tag", "--force"),
                *(f"docker.io/library/{image}", f"{REGISTRY}/{name}:{VERSION}"),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )


def test_install_doc_end_to_end(
    node_cluster: NodeCluster,
    e2e_namespace: str,
    pod_redis: RedisServer,
    pod_smtp: SmtpSink,
    tmp_path: Path,
) -> None:
    blocks = doc_blocks()
    kube = node_cluster.kube
    if node_cluster.managed:
        publish_images_on_local_node(node_cluster)
    registry = REGISTRY if node_cluster.managed else os.environ.get("SENDGROUP_E2E_REGISTRY")
    if not registry:
        pytest.fail(
            "against an existing cluster this test needs SENDGROUP_E2E_REGISTRY: the registry "
            "part of the published image names (docs/install.md, step 1)",
            pytrace=False,
        )

    def fill(text: str) -> str:
        return (
            text.replace(REGISTRY, registry)
            .replace("-n mail", f"-n {e2e_namespace}")
            .replace("redis://redis.mail.svc:6379/0", pod_redis.url)
            .replace("smtp-relay.mail.svc", node_cluster.host_address)
            .replace("port: 25", f"port: {pod_smtp.port}")
        )

    (tmp_path / "helm").symlink_to(ROOT / "helm")
    (tmp_path / "my-values.yaml").write_text(fill(blocks["values"]) + "\n")
    (tmp_path / "welcome-example.yaml").write_text(blocks["sendgroup"] + "\n")
    env = {
        **os.environ,
        "KUBECONFIG": str(kube.kubeconfig),
        "PATH": os.pathsep.join(
            [
                *(str(helm_bin().parent), str(kube.kubectl_bin.parent)),
                *(str(ROOT / ".venv" / "bin"), os.environ.get("PATH", "")),
            ]
        ),
        "HELM_CACHE_HOME": str(tmp_path / "helm-home" / "cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "helm-home" / "config"),
        "HELM_DATA_HOME": str(tmp_path / "helm-home" / "data"),
    }

    def sh(script: str, timeout: float = 240) -> str:
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert proc.returncode == 0, (
            f"docs/install.md block failed (exit {proc.returncode}):\n{script}\n"
            f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
        )
        return proc.stdout

    sh("helm package helm/sendgroup-operator -d dist/")
    assert (tmp_path / "dist" / f"sendgroup-operator-{VERSION}.tgz").is_file()
    installed = False
    try:
        sh(fill(blocks["install"]))
        installed = True
        deployment = get_json(kube, "-n", e2e_namespace, "deployment", "sendgroup-operator")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == f"{registry}/sendgroup-operator:{VERSION}"

        sh(f"kubectl -n {e2e_namespace} apply -f welcome-example.yaml")
        sh(fill(blocks["push"]))
        pod_smtp.wait_until(
            lambda: pod_smtp.per_recipient() == {"ada@example.org": 1, "grace@example.org": 1},
            timeout=240,
            what=f"one mail each to ada@ and grace@example.org (got {pod_smtp.per_recipient()})",
        )
        workers = get_json(kube, "-n", e2e_namespace, "deployment", "sg-welcome-example")
        worker_image = workers["spec"]["template"]["spec"]["containers"][0]["image"]
        assert worker_image == f"{registry}/sendgroup-worker:{VERSION}"

        sh(fill(blocks["upgrade"]))
        values = sh(f"helm get values sendgroup-operator -n {e2e_namespace} -o json")
        assert '"maxTotalWorkers":200' in values.replace(" ", "")
        history = sh(f"helm history sendgroup-operator -n {e2e_namespace} -o json")
        assert '"revision":2' in history.replace(" ", "")

        sh(fill(blocks["uninstall"]))
        installed = False
        wait_for(
            lambda: (
                kube.kubectl(
                    "-n", e2e_namespace, "get", "deployment", "sendgroup-operator", check=False
                ).returncode
                != 0
            ),
            60,
            "the operator Deployment gone after helm uninstall",
        )
        # Kept on purpose (the document says so): the dumps claim.
        kube.kubectl("-n", e2e_namespace, "get", "pvc", "sendgroup-dumps")
    finally:
        if installed:  # a step failed: groups first (the operator removes its finalizer)
            kube.kubectl(
                *("-n", e2e_namespace, "delete", "sendgroup", "--all", "--timeout=120s"),
                check=False,
                timeout=150,
            )
            sh(f"helm uninstall sendgroup-operator -n {e2e_namespace} || true")
