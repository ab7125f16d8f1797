"""End to end with a Laravel shop's own worker: the example app (``examples/laravel-app``, Laravel
8.83 from Debian's packages) built into an image (``hack/images/build load-laravel``) runs as
``spec.worker.runtime: laravel`` groups' pods (``php artisan queue:work``) on the local node.
Laravel's own producer queues Mailables, Notifications and job classes. One group is paused
while sending (nothing leaves while paused, the pause marker in Redis), the app keeps queueing,
the group is resumed: every mail arrives exactly once. Another goes through a force-killed
worker, a dump while paused, the restore on resume, and a cancel."""

from __future__ import annotations

import email
import email.policy
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from sendgroup_worker.queue.keys import QueueKeys
from tests.support.cluster import wait_for
from tests.support.e2e import (
    InstalledOperator,
    dump_files,
    operator_for_test,
    patch_spec,
    sendgroup_manifest,
    sendgroup_status,
    worker_pods,
)
from tests.support.node import IMAGE_TAG, WORKER_IMAGE, NodeCluster, get_json
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

    def push(self, recipients: list[str], queue: str = QUEUE) -> Counter[str]:
        """Laravel's own producer (Mail::queue, notify, dispatch) onto ``queue``."""
        env = {"REDIS_HOST": self.redis.host, "REDIS_PORT": str(self.redis.port),
               "REDIS_PREFIX": PREFIX}  # fmt: skip
        out = run_artisan("sendgroups:push", queue, *recipients, env=env, storage=self.storage)
        return Counter(line.split()[0] for line in out.stdout.splitlines())

    def received(self) -> list[tuple[str, float, bytes]]:
        with self.smtp.lock:
            return [(m.recipient, m.at, m.data) for m in self.smtp.received]

    def count(self, domain: str = "") -> int:
        """Mails received for recipients ending in ``domain``."""
        return sum(1 for r, _, _ in self.received() if r.endswith(domain))


@pytest.fixture
def shop(
    node_cluster: NodeCluster,
    e2e_namespace: str,
    pod_redis: RedisServer,
    laravel_image: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Shop]:
    # a sink of its own that keeps the messages (the subjects are checked)
    sink = SmtpSink(host=node_cluster.host_address).start()
    kube = node_cluster.kube
    try:
        with operator_for_test(
            node_cluster, e2e_namespace, pod_redis.url, sink.host, sink.port, request,
            # the app image allowed for this namespace only (allowedImages, issue 18)
            values={"allowedImages": [f"{e2e_namespace}={laravel_image.rsplit(':', 1)[0]}:"],
                    "keyPrefix": PREFIX},
        ) as (operator, report):  # fmt: skip
            s = Shop(node_cluster, e2e_namespace, operator, pod_redis, sink, tmp_path / "storage",
                     report)  # fmt: skip
            yield s
            for pod in get_json(
                kube, "-n", e2e_namespace, "pods", "-l", "app.kubernetes.io/component=worker"
            )["items"]:
                name = pod["metadata"]["name"]
                logs = kube.kubectl("-n", e2e_namespace, "logs", name, check=False)
                print(f"worker {name} log (tail):\n{logs.stdout[-3000:]}{logs.stderr[-1000:]}")
    finally:
        sink.stop()


def laravel_worker(**over: Any) -> dict[str, Any]:
    """``spec.worker`` of a runtime: laravel group running the example app's image."""
    return {
        "runtime": "laravel",
        "image": LARAVEL_IMAGE,
        "tries": 3,
        "timeout": 30,
        "retryAfter": 60,
        "laravel": {"artisan": ["php", "/app/artisan"], "sleep": 1},
        **over,
    }


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.mark.timeout(900)
def test_laravel_runtime_group_sends_the_app_s_mail_once_through_pause_and_resume(
    shop: Shop,
) -> None:
    kube, ns = shop.node.kube, shop.namespace
    first = [f"a{i}@shop.test" for i in range(150)]
    assert shop.push(first) == {"mailable": 50, "notification": 50, "job": 50}
    worker = laravel_worker()
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


DUMPED_GROUP, DUMPED_QUEUE = "shop-dumped", "mail-shop-dumped"


@pytest.mark.timeout(900)
def test_laravel_runtime_group_through_a_killed_pod_dump_restore_and_cancel(shop: Shop) -> None:
    """A runtime: laravel group with 2 workers: one worker pod is killed with
    ``--grace-period=0 --force`` while sending; the group is paused mid-way and dumped (the
    dump Job, running the operator's image, moves the queue to the dumps volume: status says
    Dumped, Redis holds none of its jobs); the app queues more; resumed, the restore Job brings
    the jobs back before the workers start and ``queue:work`` sends the rest; then a third batch
    is cancelled while sending (its pods go, nothing more is sent, its keys are purged).

    Laravel's worker has no exactly-once fence (our Python worker's sent-marks): a mail in
    flight when its pod is killed may have been sent while its job stays reserved, and is sent
    again after ``retryAfter``. So no recipient of the first two batches may be missing, at most
    one (1 killed pod x 1 job in flight per queue:work) may get two mails, every other exactly
    one; of the cancelled batch none more than once and none after its pods were gone."""
    kube, ns = shop.node.kube, shop.namespace
    client = shop.redis.client()
    keys = QueueKeys(DUMPED_QUEUE, prefix=PREFIX)
    first = [f"a{i}@dumped.test" for i in range(300)]
    assert sum(shop.push(first, DUMPED_QUEUE).values()) == 300
    applied = time.time()
    kube.kubectl(
        "apply", "-f", "-",
        input=sendgroup_manifest(
            DUMPED_GROUP, ns, campaign="autumn", host="gmail.com", queue=DUMPED_QUEUE, workers=2,
            worker=laravel_worker(timeout=10, retryAfter=20), reaper={"dumpAfter": "5s"},
        ),
    )  # fmt: skip

    def status() -> dict[str, Any]:
        return sendgroup_status(kube, ns, DUMPED_GROUP)

    def pods() -> str:
        return kube.kubectl("-n", ns, "get", "pods,jobs,events", check=False).stdout

    # --- a worker force-killed while sending ----------------------------------------------
    wait_for(lambda: len(worker_pods(kube, ns, DUMPED_GROUP)) == 2 and shop.count() >= 20,
             180, "2 workers and 20 mails", describe=pods)  # fmt: skip
    shop.log.append(f"apply -> 20 mails {time.time() - applied:.1f}s")
    victim = worker_pods(kube, ns, DUMPED_GROUP)[0]["metadata"]["name"]
    kube.kubectl("-n", ns, "delete", "pod", victim, "--grace-period=0", "--force")
    at_kill = shop.count()
    assert at_kill < 300, "the group finished before the kill: nothing was tested"

    # --- paused mid-way, then dumped ------------------------------------------------------
    wait_for(lambda: shop.count() >= at_kill + 60, 120, "60 more mails after the kill",
             describe=pods)  # fmt: skip
    patch_spec(kube, ns, DUMPED_GROUP, {"paused": True})
    paused = time.time()
    wait_for(lambda: not worker_pods(kube, ns, DUMPED_GROUP), 90, "worker pods gone after pause",
             describe=pods)  # fmt: skip
    sent_paused = shop.count()
    queued = client.llen(keys.ready) + client.zcard(keys.delayed) + client.zcard(keys.reserved)
    assert sent_paused < 300, "the group finished before the pause: nothing was tested"
    # the killed pod's job may be both sent and still reserved (or sent twice already)
    assert 300 <= sent_paused + queued <= 301, (sent_paused, queued)

    dump_pods: dict[str, dict[str, Any]] = {}

    def dumped() -> dict[str, Any] | None:
        for p in get_json(kube, "-n", ns, "pods", "-l", "app.kubernetes.io/component=dump")[
            "items"
        ]:
            dump_pods[p["metadata"]["name"]] = p
        s = status()
        return s if s.get("phase") == "Dumped" else None

    st = wait_for(dumped, 120, "the group Dumped", interval=0.5,
                  describe=lambda: (status(), pods()))  # fmt: skip
    dumped_at = time.time()
    assert st["dump"]["totalJobs"] == queued, st["dump"]
    assert sum(s["jobs"] for s in st["dump"]["segments"]) == queued, st["dump"]
    assert not client.exists(*keys.laravel_keys), "the group's jobs left in Redis by the dump"
    assert dump_pods, "no dump Job pod was seen"
    for p in dump_pods.values():  # our CLI's image: the app image has no sendgroup-worker
        assert [c["image"] for c in p["spec"]["containers"]] == [WORKER_IMAGE], p["spec"]
    if shop.node.managed:
        files = dump_files(shop.node, ns, DUMPED_GROUP)
        assert files and all(f.stat().st_size > 0 for f in files), files
    assert shop.count() == sent_paused, "mail sent while paused"
    shop.log.append(
        f"kill at {at_kill}/300; pause at {sent_paused}/300 -> Dumped {dumped_at - paused:.1f}s"
        f" ({queued} jobs)"
    )

    # the app keeps queueing while the group is dumped
    later = [f"b{i}@dumped.test" for i in range(30)]
    shop.push(later, DUMPED_QUEUE)

    # --- resume: the restore Job, then the workers send the rest ----------------------------
    patch_spec(kube, ns, DUMPED_GROUP, {"paused": False})
    resumed = time.time()
    restore_pods: set[str] = set()

    def workers_back() -> list[dict[str, Any]] | None:
        for p in get_json(kube, "-n", ns, "pods", "-l", "app.kubernetes.io/component=restore")[
            "items"
        ]:
            restore_pods.add(p["metadata"]["name"])
        return worker_pods(kube, ns, DUMPED_GROUP) or None

    back = wait_for(workers_back, 120, "workers back after the resume", interval=0.5,
                    describe=lambda: (status(), pods()))  # fmt: skip
    assert restore_pods, "no restore Job pod was seen"
    events = get_json(
        kube, "-n", ns, "events", "--field-selector", f"involvedObject.name={DUMPED_GROUP}"
    )["items"]
    restored = [
        _ts(e.get("eventTime") or e.get("lastTimestamp") or e["firstTimestamp"])
        for e in events
        if e.get("reason") == "Restored"
    ]
    assert restored, f"no Restored event: {[e.get('reason') for e in events]}"
    first_new_pod = min(_ts(p["metadata"]["creationTimestamp"]) for p in back)
    assert first_new_pod >= min(restored) - 1, "workers started before the restore finished"
    expected = set(first + later)

    def missing() -> set[str]:
        return expected - {r for r, _, _ in shop.received()}

    wait_for(lambda: not missing(), 180, "every mail of the first two batches",
             describe=lambda: (len(missing()), status()))  # fmt: skip
    drained = time.time()
    shop.log.append(
        f"resume -> restore done {min(restored) - resumed:.1f}s -> 330 recipients served "
        f"{drained - resumed:.1f}s"
    )

    # --- cancelled while sending --------------------------------------------------------------
    doomed = [f"c{i}@cancelled.test" for i in range(600)]
    shop.push(doomed, DUMPED_QUEUE)
    wait_for(lambda: shop.count("@cancelled.test") >= 30, 120, "30 mails of the last batch",
             describe=pods)  # fmt: skip
    patch_spec(kube, ns, DUMPED_GROUP, {"state": "Cancelled"})
    cancelled = time.time()
    wait_for(lambda: not worker_pods(kube, ns, DUMPED_GROUP), 90, "worker pods gone after cancel",
             describe=pods)  # fmt: skip
    at_gone = shop.count("@cancelled.test")
    assert at_gone < 600, "the batch finished before the cancel: nothing was tested"
    wait_for(lambda: not client.exists(*keys.all_keys), 60, "the group's keys purged",
             describe=lambda: [k for k in keys.all_keys if client.exists(k)])  # fmt: skip
    wait_for(lambda: status().get("phase") == "Cancelled", 30, "phase Cancelled",
             describe=status)  # fmt: skip
    time.sleep(3)  # a mail still on its way would arrive now
    assert shop.count("@cancelled.test") == at_gone, "mail sent after the workers were gone"
    shop.log.append(
        f"cancel at {at_gone}/600 -> pods gone and keys purged {time.time() - cancelled:.1f}s"
    )

    counts = Counter(r for r, _, _ in shop.received())
    assert set(first + later) <= set(counts)
    assert set(counts) - expected <= set(doomed), "mail to a recipient never queued"
    assert all(counts[r] == 1 for r in doomed if r in counts), "a cancelled-batch duplicate"
    doubled = {r: n for r, n in counts.items() if r in expected and n != 1}
    assert len(doubled) <= 1 and all(n == 2 for n in doubled.values()), doubled
    subjects = Counter(
        str(email.message_from_bytes(data, policy=email.policy.default)["Subject"])
        for r, _, data in shop.received()
        if r in expected
    )
    assert set(subjects) == set(SUBJECTS.values()), subjects
    shop.log.append(f"{len(doubled)} recipient(s) doubled by the kill, 0 missing")
