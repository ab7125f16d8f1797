"""End to end on the local node: a SendGroup whose queue lives on a Redis Cluster.

The cluster (3 primaries + 3 replicas, ``redis-server`` processes started by the test) listens
on the pod network's gateway and announces that address (``cluster-announce-ip``), so the slot
map the worker pods, the operator pod and the dump/restore Job pods read names nodes they
reach. The group names two seed nodes that do not own its slot (``redis+cluster://a,b/``);
its hash-tagged queue ``{mail-<name>}`` puts every key on one slot. The operator's own default
Redis is a separate standalone server, which must see none of the group's keys.

Scenario: 300 mails pushed with the producer library through the cluster client; the group
sends some at a paced rate, is paused (workers gone, nothing reserved), its status.queue is
compared with what the cluster holds, the dump Job moves the queue to the volume, the resume
restores it, the rest is sent: every recipient gets exactly one mail, and the final status
shows an empty queue and 300 delivered.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from sendgroup_worker import redisclient
from sendgroup_worker.producer import make_mail_payload
from sendgroup_worker.queue.client import Queue
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.cluster import wait_for
from tests.support.e2e import (
    DUMPS_CLAIM,
    InstalledOperator,
    PodLogs,
    operator_for_test,
    patch_spec,
    sendgroup_manifest,
    sendgroup_status,
    worker_pods,
)
from tests.support.node import NodeCluster, get_json
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink

pytestmark = [pytest.mark.e2e]

GROUP = "cl-spring"
QUEUE = "{mail-cl-spring}"
DOMAIN = "@cluster.test"
JOBS = 300


@pytest.fixture
def pod_cluster(node_cluster: NodeCluster) -> Iterator[RedisCluster]:
    """3 primaries + 3 replicas bound to and announcing the pod gateway address."""
    cluster = RedisCluster(replicas=1, host=node_cluster.host_address).start()
    yield cluster
    cluster.cleanup()


@dataclass
class Env:
    node: NodeCluster
    namespace: str
    operator: InstalledOperator
    cluster: RedisCluster
    default_redis: RedisServer
    smtp: SmtpSink
    report: list[str] = field(default_factory=list)
    #: the worker pods' logs, kept after the pods are gone (what a stop did)
    worker_logs: PodLogs | None = None

    def workers_said(self) -> str:
        return self.worker_logs.text() if self.worker_logs is not None else "(not followed)"

    def kubectl(self, *args: str) -> str:
        return self.node.kube.kubectl("-n", self.namespace, *args).stdout

    def delivered(self) -> list[tuple[str, float]]:
        """(recipient, unix time) of the group's mails the sink received."""
        with self.smtp.lock:
            return [(m.recipient, m.at) for m in self.smtp.received if m.recipient.endswith(DOMAIN)]

    def count(self) -> int:
        return len(self.delivered())

    def status(self) -> dict[str, Any]:
        return sendgroup_status(self.node.kube, self.namespace, GROUP)

    def children(self) -> str:
        """The namespace's Jobs and pods, its recent events and the Job pods' log tails: what
        a stuck dump or restore needs to be understood from a CI log."""
        kube = self.node.kube
        out = [
            kube.kubectl(
                "-n", self.namespace, "get", "jobs,pods", "-o", "wide", check=False
            ).stdout,
            kube.kubectl(
                "-n", self.namespace, "get", "events", "--sort-by=.lastTimestamp", check=False
            ).stdout[-4000:],
        ]
        for component in ("dump", "restore"):
            for pod in _pods(self, component):
                out.append(f"--- log of {pod}")
                out.append(
                    kube.kubectl("-n", self.namespace, "logs", pod, "--tail=30", check=False).stdout
                )
        return "\n".join(out)


@pytest.fixture
def env(
    node_cluster: NodeCluster,
    e2e_namespace: str,
    pod_cluster: RedisCluster,
    pod_redis: RedisServer,
    pod_smtp: SmtpSink,
    request: pytest.FixtureRequest,
) -> Iterator[Env]:
    # The operator's default Redis is the standalone one: the group's spec.redis.url must win.
    # The cluster's nodes are a Redis tenants may name (issue 16: any other is refused).
    # Deletion: deletionPolicy Purge runs a purge Job on the cluster.
    with operator_for_test(
        node_cluster,
        e2e_namespace,
        pod_redis.url,
        pod_smtp.host,
        pod_smtp.port,
        request,
        values={"allowedRedisHosts": [pod_cluster.host]},
    ) as (operator, report):
        selector = f"sendgroups.io/group={GROUP},app.kubernetes.io/component=worker"
        with PodLogs(node_cluster.kube, e2e_namespace, selector) as logs:
            yield Env(
                node_cluster,
                e2e_namespace,
                operator,
                pod_cluster,
                pod_redis,
                pod_smtp,
                report,
                logs,
            )


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _pods(e: Env, component: str) -> dict[str, str]:
    """Pod name -> phase of the namespace's pods of one component (dump, restore, ...)."""
    items = get_json(
        e.node.kube, "-n", e.namespace, "pods", "-l", f"app.kubernetes.io/component={component}"
    )["items"]
    return {p["metadata"]["name"]: p["status"].get("phase", "") for p in items}


@pytest.mark.timeout(900)
def test_group_on_a_redis_cluster_sends_pauses_dumps_restores_and_sends_each_mail_once(
    env: Env,
) -> None:
    kube = env.node.kube
    ns = env.namespace
    keys = QueueKeys(QUEUE)
    owner = env.cluster.primary_for(keys.ready)
    # Seeds that do not own the queue's slot: the clients must discover the owner.
    seeds = [s for s in env.cluster.servers if s.port != owner.port][:2]
    url = "redis+cluster://" + ",".join(f"{s.host}:{s.port}" for s in seeds) + "/"

    client = redisclient.connect(url)
    queue = Queue(client, keys)
    rcpts = [f"c{i}{DOMAIN}" for i in range(JOBS)]
    assert (
        queue.push_many(
            make_mail_payload(r, from_="news@sender.test", subject="hi", text=f"hello {r}")
            for r in rcpts
        )
        == JOBS
    )
    assert redisclient.is_cluster(client), "the seed URL did not give a cluster client"
    assert {key_slot(k.encode()) for k in keys.all_keys} == {key_slot(keys.ready.encode())}
    assert owner.client().llen(keys.ready) == JOBS, "the jobs are not on the slot's owner"

    t_start = time.time()
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input=sendgroup_manifest(
            GROUP,
            ns,
            campaign="cluster",
            host="cluster.test",
            queue=QUEUE,
            redis={"url": url},
            workers=2,
            worker={"timeout": 10, "retryAfter": 20},
            # paced so the pause lands mid-way (300 jobs at 10/s: about 30 s)
            rate={"perMinute": 600},
            # long enough for a status refresh (every 5 s) of the paused queue first
            reaper={"dumpAfter": "20s"},
        ),
    )
    first = wait_for(
        lambda: min((t for _, t in env.delivered()), default=None),
        120,
        "the first mail of the group",
        describe=lambda: (env.status(), env.operator.logs()[-3000:]),
    )

    # Pause mid-way: the workers finish what they hold and go; nothing stays reserved.
    wait_for(lambda: env.count() >= 60, 120, "60 mails", describe=env.count)
    patch_spec(kube, ns, GROUP, {"paused": True})
    paused_at = time.time()
    wait_for(lambda: not worker_pods(kube, ns, GROUP), 90, "worker pods gone after the pause")
    pods_gone_at = time.time()
    delivered_paused = env.count()
    assert delivered_paused < JOBS, "the group finished before the pause: nothing was tested"
    m = queue.measure()
    assert m.reserved == 0, (m, delivered_paused, pods_gone_at - paused_at, env.workers_said())
    queued = m.ready + m.delayed
    assert delivered_paused + queued == JOBS, (delivered_paused, queued, env.workers_said())
    assert m.delivered == delivered_paused, (m.delivered, delivered_paused, env.workers_said())
    # Nothing of the group went to the operator's default (standalone) Redis.
    assert list(env.default_redis.client().scan_iter(match="*mail-cl-spring*")) == []

    # The operator measured the paused queue on the cluster: its numbers are the cluster's.
    def measured_paused() -> dict[str, Any] | None:
        s = env.status()
        at = s.get("queue", {}).get("measuredAt")
        if s.get("phase") == "Dumped" or (at and _ts(at) > pods_gone_at):
            return s
        return None

    status = wait_for(measured_paused, 60, "status.queue measured after the pause")
    assert status.get("phase") != "Dumped", "dumped before any status of the paused queue"
    sq = status["queue"]
    assert (sq["ready"], sq["delayed"], sq["reserved"], sq["total"]) == (
        m.ready,
        m.delayed,
        0,
        queued,
    ), sq
    assert status["progress"]["delivered"] == delivered_paused, status["progress"]
    reachable = [c for c in status.get("conditions", []) if c["type"] == "QueueReachable"]
    assert reachable and reachable[0]["status"] == "True", reachable

    # The dump Job (a pod on the dumps volume) moves the queue off the cluster.
    dump_pods: dict[str, str] = {}

    def dumped() -> dict[str, Any] | None:
        dump_pods.update(_pods(env, "dump"))
        s = env.status()
        return s if s.get("phase") == "Dumped" else None

    status = wait_for(
        dumped,
        120,
        "the group Dumped",
        interval=0.5,
        describe=lambda: (env.status(), env.operator.logs()[-3000:], env.children()),
    )
    dumped_at = time.time()
    assert dump_pods, "no dump Job pod was seen"
    assert status["dump"]["totalJobs"] == queued, status["dump"]
    assert sum(seg["jobs"] for seg in status["dump"]["segments"]) == queued
    assert not any(client.exists(k) for k in keys.laravel_keys), "queue keys left on the cluster"
    assert env.count() == delivered_paused, "mail sent while paused"
    on_volume = 0
    if env.node.managed:
        pvc = get_json(kube, "-n", ns, "pvc", DUMPS_CLAIM)
        pv = get_json(kube, "pv", pvc["spec"]["volumeName"])
        root = Path(pv["spec"]["hostPath"]["path"]) / ns / GROUP
        files = [f for f in root.rglob("*") if f.is_file()] if root.exists() else []
        assert files, f"no dump segment under {root}"
        on_volume = sum(f.stat().st_size for f in files)

    # Resume: the restore Job puts the jobs back on the cluster, then the workers send them.
    patch_spec(kube, ns, GROUP, {"paused": False})
    resumed_at = time.time()
    restore_pods: dict[str, str] = {}

    def workers_back() -> list[dict[str, Any]] | None:
        restore_pods.update(_pods(env, "restore"))
        return worker_pods(kube, ns, GROUP) or None

    wait_for(
        workers_back,
        120,
        "workers back after the resume",
        describe=lambda: (env.operator.logs()[-3000:], env.children()),
    )
    assert restore_pods, "no restore Job pod was seen"
    events = get_json(kube, "-n", ns, "events", "--field-selector", f"involvedObject.name={GROUP}")
    restored = [e["message"] for e in events["items"] if e.get("reason") == "Restored"]
    assert restored == [f"{queued} jobs restored from the volume"], restored
    wait_for(
        lambda: env.count() >= JOBS,
        180,
        f"all {JOBS} mails",
        describe=lambda: (env.count(), env.status(), queue.measure()),
    )
    done_at = max(t for _, t in env.delivered())
    time.sleep(3)  # late duplicates would show up now
    counts = Counter(r for r, _ in env.delivered())
    assert set(counts) == set(rcpts), f"missing {len(set(rcpts) - set(counts))}"
    duplicates = {r: n for r, n in counts.items() if n != 1}
    assert not duplicates, f"recipients with more than one mail: {list(duplicates.items())[:10]}"

    # The operator's numbers: an empty queue, every job delivered, measured after the last mail.
    def measured_done() -> dict[str, Any] | None:
        s = env.status()
        at = s.get("queue", {}).get("measuredAt")
        return s if at and _ts(at) > done_at else None

    status = wait_for(measured_done, 60, "status.queue measured after the last mail")
    final = queue.measure()
    sq = status["queue"]
    assert (sq["ready"], sq["delayed"], sq["reserved"], sq["failed"], sq["total"]) == (
        0,
        0,
        0,
        0,
        0,
    ), sq
    assert (final.ready, final.delayed, final.reserved, final.failed) == (0, 0, 0, 0), final
    assert final.delivered == JOBS, final
    assert status["progress"]["delivered"] == JOBS, status["progress"]
    assert status["progress"]["percent"] == 100, status["progress"]
    assert status["dump"]["totalJobs"] == 0, status["dump"]
    client.close()

    env.report += [
        f"cluster: 3 primaries + 3 replicas on {env.node.host_address}, slot owner "
        f"{owner.port}, URL {url}",
        f"apply -> first mail {first - t_start:.1f}s; pause at {delivered_paused}/{JOBS}: "
        f"pods gone {pods_gone_at - paused_at:.1f}s, Dumped {dumped_at - paused_at:.1f}s "
        f"({queued} jobs, {on_volume} bytes on the volume)",
        f"resume -> last mail {done_at - resumed_at:.1f}s; {JOBS} mails, 0 missing, "
        f"0 duplicated; status.queue matched the cluster when paused and at the end",
        f"whole scenario {time.time() - t_start:.0f}s",
    ]
