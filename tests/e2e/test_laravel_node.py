"""End to end with a Laravel shop's own worker: the example app (``examples/laravel-app``, Laravel
8.83 from Debian's packages) built into an image (``hack/images/build load-laravel``) runs as a
``spec.worker.runtime: laravel`` group's pods (``php artisan queue:work``) on the local node.
Laravel's own producer queues Mailables, Notifications and job classes; the group is paused
while sending (nothing leaves while paused, the pause marker in Redis), the app keeps queueing,
the group is resumed: every mail arrives exactly once."""

from __future__ import annotations

import email
import email.policy
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sendgroup_worker.queue.keys import QueueKeys
from tests.support.cluster import wait_for
from tests.support.e2e import (
    InstalledOperator,
    install_operator,
    patch_spec,
    sendgroup_manifest,
    sendgroup_status,
    uninstall_operator,
    worker_pods,
)
from tests.support.node import IMAGE_TAG, NodeCluster
from tests.support.php import run_artisan
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
#: the app image (``hack/images/build laravel`` tags it SENDGROUP_IMAGE_TAG); on an existing
#: cluster it must be loaded there already
LARAVEL_IMAGE = os.environ.get("SENDGROUP_E2E_LARAVEL_IMAGE", f"sendgroup-laravel-app:{IMAGE_TAG}")
PREFIX = "laravel_database_"  # the app's Redis prefix, and the operator's keyPrefix
GROUP, QUEUE = "shop", "mail-shop"
SUBJECTS = {"mailable": "Your order has shipped", "notification": "Invoice paid", "job": "Welcome"}


@pytest.fixture(scope="session")
def laravel_image(node_cluster: NodeCluster) -> str:
    """The example app's image in the node's containerd: built from Debian packages
    (debootstrap, cached) and imported by ``hack/images/build load-laravel``."""
    if node_cluster.state_dir is None:
        return LARAVEL_IMAGE
    sock = node_cluster.state_dir / "node" / "containerd" / "containerd.sock"
    started = time.monotonic()
    proc = subprocess.run(
        [str(ROOT / "hack/images/build"), "load-laravel"],
        env={**os.environ, "SENDGROUP_CONTAINERD_ADDRESS": str(sock)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"hack/images/build load-laravel failed:\n{proc.stderr[-3000:]}"
    print(f"laravel image built and loaded in {time.monotonic() - started:.0f}s")
    return LARAVEL_IMAGE


@dataclass
class Shop:
    node: NodeCluster
    namespace: str
    operator: InstalledOperator
    redis: RedisServer
    smtp: SmtpSink
    storage: Path
    log: list[str] = field(default_factory=list)

    def push(self, recipients: list[str]) -> Counter[str]:
        """Laravel's own producer (Mail::queue, notify, dispatch) onto the group's queue."""
        env = {"REDIS_HOST": self.redis.host, "REDIS_PORT": str(self.redis.port),
               "REDIS_PREFIX": PREFIX}  # fmt: skip
        out = run_artisan("sendgroups:push", QUEUE, *recipients, env=env, storage=self.storage)
        return Counter(line.split()[0] for line in out.stdout.splitlines())

    def received(self) -> list[tuple[str, float, bytes]]:
        with self.smtp.lock:
            return [(m.recipient, m.at, m.data) for m in self.smtp.received]

    def count(self) -> int:
        return len(self.received())


@pytest.fixture
def shop(
    node_cluster: NodeCluster,
    e2e_namespace: str,
    pod_redis: RedisServer,
    laravel_image: str,
    tmp_path: Path,
) -> Iterator[Shop]:
    # a sink of its own that keeps the messages (the subjects are checked)
    sink = SmtpSink(host=node_cluster.host_address).start()
    operator = install_operator(
        node_cluster.kube, e2e_namespace, pod_redis.url, sink.host, sink.port,
        values={"allowImageOverride": True, "keyPrefix": PREFIX},
    )  # fmt: skip
    s = Shop(node_cluster, e2e_namespace, operator, pod_redis, sink, tmp_path / "storage")
    yield s
    print("steps:\n" + "\n".join(s.log))
    print(f"operator log (tail):\n{operator.logs()}")
    for pod in worker_pods(node_cluster.kube, e2e_namespace, GROUP):
        name = pod["metadata"]["name"]
        logs = node_cluster.kube.kubectl("-n", e2e_namespace, "logs", name, check=False)
        print(f"worker {name} log (tail):\n{logs.stdout[-3000:]}{logs.stderr[-1000:]}")
    node_cluster.kube.kubectl(
        "-n", e2e_namespace, "delete", "sendgroups", "--all", "--timeout=90s", check=False
    )
    uninstall_operator(node_cluster.kube, e2e_namespace, check=False)
    sink.stop()


@pytest.mark.timeout(900)
def test_laravel_runtime_group_sends_the_app_s_mail_once_through_pause_and_resume(
    shop: Shop,
) -> None:
    kube, ns = shop.node.kube, shop.namespace
    first = [f"a{i}@shop.test" for i in range(150)]
    assert shop.push(first) == {"mailable": 50, "notification": 50, "job": 50}
    worker = {
        "runtime": "laravel",
        "image": LARAVEL_IMAGE,
        "tries": 3,
        "timeout": 30,
        "retryAfter": 60,
        "laravel": {"artisan": ["php", "/app/artisan"], "sleep": 1},
    }
    applied = time.time()
    kube.kubectl(
        "apply", "-f", "-",
        input=sendgroup_manifest(GROUP, ns, campaign="spring", host="gmail.com", queue=QUEUE,
                                 workers=1, worker=worker),
    )  # fmt: skip

    def pods() -> str:
        return kube.kubectl("-n", ns, "get", "pods,events", check=False).stdout

    wait_for(shop.count, 180, "the first mail from queue:work", describe=pods)
    first_at = min(at for _, at, _ in shop.received())
    shop.log.append(f"apply -> first mail {first_at - applied:.1f}s")

    # paused while sending: the marker first, then the pods go (queue:work ends its job)
    patch_spec(kube, ns, GROUP, {"paused": True})
    patched = time.time()
    wait_for(lambda: sendgroup_status(kube, ns, GROUP).get("phase") == "Paused", 60, "Paused")
    wait_for(lambda: not worker_pods(kube, ns, GROUP), 90, "the worker pods gone after pause")
    gone = time.time()
    sent_before = shop.count()
    marker = QueueKeys(QUEUE, prefix=PREFIX).paused
    client = shop.redis.client()
    assert client.exists(marker) == 1, "the operator set no pause marker"
    # the app keeps queueing while the group is paused
    later = [f"b{i}@shop.test" for i in range(30)]
    shop.push(later)
    time.sleep(10)
    assert shop.count() == sent_before, "mail sent while the group was paused"
    shop.log.append(
        f"pause -> pods gone {gone - patched:.1f}s; {sent_before} of 150 sent before the pause"
    )

    patch_spec(kube, ns, GROUP, {"paused": False})
    resumed = time.time()
    wait_for(lambda: shop.count() >= 180, 240, "all 180 mails after the resume",
             describe=lambda: (shop.count(), sendgroup_status(kube, ns, GROUP)))  # fmt: skip
    done = time.time()
    wait_for(lambda: client.exists(marker) == 0, 30, "the pause marker cleared")
    time.sleep(5)  # a doubled mail would arrive now
    received = shop.received()
    assert Counter(r for r, _, _ in received) == Counter({r: 1 for r in first + later})
    subjects = Counter(
        str(email.message_from_bytes(data, policy=email.policy.default)["Subject"])
        for _, _, data in received
    )
    assert subjects == Counter({SUBJECTS["mailable"]: 60, SUBJECTS["notification"]: 60,
                                SUBJECTS["job"]: 60})  # fmt: skip
    status = sendgroup_status(kube, ns, GROUP)
    assert status["queue"]["total"] == 0, status
    shop.log.append(f"resume -> 180 mails {done - resumed:.1f}s")
    print("\n".join(shop.log))
