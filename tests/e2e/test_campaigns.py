"""End to end: the operator runs as a pod under its own ServiceAccount; SendGroups get worker
pods that send through the SMTP sink; pause/dump/restore Jobs run as pods on the dumps volume.

Runs against the local node (``hack/cluster/cluster up --node``) or, unchanged, against the
cluster ``KUBECONFIG`` names (``SENDGROUP_TEST_USE_EXISTING_CLUSTER=1`` and
``SENDGROUP_E2E_HOST_ADDRESS``, with the images loaded there).
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

from sendgroup_worker.queue.keys import QueueKeys
from tests.support import e2e
from tests.support.cluster import wait_for
from tests.support.e2e import (
    InstalledOperator,
    operator_for_test,
    patch_spec,
    push_mails,
    sendgroup_manifest,
    sendgroup_status,
    worker_pods,
)
from tests.support.node import NodeCluster, get_json
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink

pytestmark = [pytest.mark.e2e]


@dataclass
class Env:
    node: NodeCluster
    namespace: str
    operator: InstalledOperator
    redis: RedisServer
    smtp: SmtpSink
    report: list[str] = field(default_factory=list)

    def apply(self, manifest: str) -> float:
        """``kubectl apply`` a manifest; returns the time.time() just before."""
        at = time.time()
        self.node.kube.kubectl("apply", "-f", "-", input=manifest)
        return at

    def delivered(self, domain: str) -> list[tuple[str, float]]:
        """(recipient, unix time) of mails received for addresses ending in ``domain``."""
        with self.smtp.lock:
            return [(m.recipient, m.at) for m in self.smtp.received if m.recipient.endswith(domain)]

    def count(self, domain: str) -> int:
        return len(self.delivered(domain))

    def status(self, name: str) -> dict[str, Any]:
        return sendgroup_status(self.node.kube, self.namespace, name)


@pytest.fixture
def env(
    node_cluster: NodeCluster,
    e2e_namespace: str,
    pod_redis: RedisServer,
    pod_smtp: SmtpSink,
    request: pytest.FixtureRequest,
) -> Iterator[Env]:
    with operator_for_test(
        node_cluster,
        e2e_namespace,
        pod_redis.url,
        pod_smtp.host,
        pod_smtp.port,
        request,
        check_cluster_rbac=True,
    ) as (operator, report):
        yield Env(node_cluster, e2e_namespace, operator, pod_redis, pod_smtp, report)


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def pod_start_seconds(pods: list[dict[str, Any]]) -> list[float]:
    """Per pod: seconds from creation to its first container running (1 s resolution)."""
    out = []
    for p in pods:
        for s in p["status"].get("containerStatuses", []):
            started = s.get("state", {}).get("running", {}).get("startedAt")
            if started:
                out.append(_ts(started) - _ts(p["metadata"]["creationTimestamp"]))
    return out


def _proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds used, RSS MiB) of a process."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    return cpu, rss


def node_overhead(node: NodeCluster) -> dict[str, tuple[float, float]]:
    """kubelet, containerd and the containerd shims of the local node: (CPU s, RSS MiB)."""
    import os

    out: dict[str, tuple[float, float]] = {}
    if node.state_dir is None:
        return out
    for name in ("kubelet", "containerd"):
        pid = node.pids().get(name)
        if pid is not None and Path(f"/proc/{pid}").exists():
            out[name] = _proc_stats(pid)
    sock = str(node.state_dir / "node" / "containerd")
    cpu = rss = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if "containerd-shim" in cmd and sock in cmd:
                c, r = _proc_stats(int(entry))
                cpu, rss = cpu + c, rss + r
        except OSError:
            continue
    out["shims"] = (cpu, rss)
    return out


def dump_files(e: Env, group: str) -> list[Path]:
    """Segment files of ``group`` on the dumps volume, read on the host (local node only)."""
    return e2e.dump_files(e.node, e.namespace, group)


BIG, OUTLOOK, URGENT = "spring-gmail", "spring-outlook", "alert-urgent"
# The big group's pod knobs (issue 20): where its worker and Job pods run and the Jobs' size.
# The local node carries kubernetes.io/os=linux (set by the kubelet) and no taint: the pods
# must still schedule, run and finish with these set.
BIG_POD_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "spring"}, "annotations": {"example.com/owner": "mail"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "example.com/mail", "operator": "Exists", "effect": "NoSchedule"}],
}
BIG_JOB_RESOURCES = {
    "requests": {"cpu": "40m", "memory": "48Mi"},
    "limits": {"cpu": "700m", "memory": "300Mi"},
}


def assert_pod_knobs(pod: dict[str, Any], resources: dict[str, Any] | None) -> None:
    """The big group's podTemplate reached ``pod`` (and, for a Job pod, its resources)."""
    name = pod["metadata"]["name"]
    assert pod["metadata"]["labels"].get("team") == "spring", name
    assert pod["metadata"]["annotations"].get("example.com/owner") == "mail", name
    assert pod["spec"].get("nodeSelector") == BIG_POD_TEMPLATE["nodeSelector"], name
    assert BIG_POD_TEMPLATE["tolerations"][0] in pod["spec"].get("tolerations", []), name
    if resources is not None:
        assert pod["spec"]["containers"][0]["resources"] == resources, name


@pytest.mark.timeout(900)
def test_two_campaigns_pause_dump_restart_resume_and_a_force_killed_worker(env: Env) -> None:
    """Campaign spring-sale: gmail.com (5,000 jobs, 3 workers, paced) and outlook.com (1,000,
    2 workers); campaign alerts: 100 urgent jobs created last. One outlook worker is killed with
    --grace-period=0 --force while sending; the gmail group is paused mid-way, dumped to the
    volume, Redis restarted, resumed and restored. Every recipient gets exactly one mail."""
    kube = env.node.kube
    ns = env.namespace
    client = env.redis.client()
    big_rcpts = [f"g{i}@big.gmail.test" for i in range(5000)]
    out_rcpts = [f"o{i}@outlook.test" for i in range(1000)]
    urg_rcpts = [f"u{i}@urgent.gmail.test" for i in range(100)]
    push_mails(client, f"mail-{BIG}", big_rcpts)
    push_mails(client, f"mail-{OUTLOOK}", out_rcpts)
    push_mails(client, f"mail-{URGENT}", urg_rcpts)
    overhead_before = node_overhead(env.node)
    t_start = time.time()

    worker = {"timeout": 10, "retryAfter": 20}
    applied = {
        BIG: env.apply(
            sendgroup_manifest(
                BIG,
                ns,
                campaign="spring-sale",
                host="gmail.com",
                workers=3,
                worker=worker,
                rate={"perMinute": 6000},
                reaper={"dumpAfter": "5s"},
                podTemplate=BIG_POD_TEMPLATE,
                jobs={"resources": BIG_JOB_RESOURCES},
                disruptionBudget={"minAvailable": 1},
            )
        ),
        OUTLOOK: env.apply(
            sendgroup_manifest(
                OUTLOOK, ns, campaign="spring-sale", host="outlook.com", workers=2, worker=worker
            )
        ),
    }

    def first_mail(domain: str) -> float | None:
        got = env.delivered(domain)
        return min(t for _, t in got) if got else None

    first = {
        BIG: wait_for(lambda: first_mail("@big.gmail.test"), 120, "first gmail mail"),
        OUTLOOK: wait_for(lambda: first_mail("@outlook.test"), 120, "first outlook mail"),
    }

    # The big group's pod knobs on its running workers, and its PodDisruptionBudget.
    for pod in worker_pods(kube, ns, BIG):
        assert_pod_knobs(pod, None)
    pdb = get_json(kube, "-n", ns, "pdb", f"sg-{BIG}")
    assert pdb["spec"]["minAvailable"] == 1, pdb["spec"]

    # A worker killed without grace while it sends: its reserved jobs come back after
    # retryAfter; the sent-marks keep them from going out twice.
    wait_for(lambda: env.count("@outlook.test") >= 150, 120, "150 outlook mails")
    victim = worker_pods(kube, ns, OUTLOOK)[0]["metadata"]["name"]
    kube.kubectl("-n", ns, "delete", "pod", victim, "--grace-period=0", "--force")
    killed_at_count = env.count("@outlook.test")
    assert killed_at_count < 1000, "outlook finished before the kill: nothing was tested"

    # The urgent group, created last, finishes while the big one still sends.
    wait_for(lambda: env.count("@big.gmail.test") >= 300, 120, "300 gmail mails")
    applied[URGENT] = env.apply(
        sendgroup_manifest(URGENT, ns, campaign="alerts", host="gmail.com", workers=1)
    )
    first[URGENT] = wait_for(lambda: first_mail("@urgent.gmail.test"), 120, "first urgent mail")
    wait_for(lambda: env.count("@urgent.gmail.test") >= 100, 120, "100 urgent mails")
    urgent_done = max(t for _, t in env.delivered("@urgent.gmail.test"))
    big_at_urgent_done = env.count("@big.gmail.test")
    assert big_at_urgent_done < 5000, "the big group finished before the urgent one"

    # Pause the big group mid-way.
    wait_for(lambda: env.count("@big.gmail.test") >= 1500, 180, "1500 gmail mails")
    patch_spec(kube, ns, BIG, {"paused": True})
    paused_at = time.time()
    wait_for(lambda: not worker_pods(kube, ns, BIG), 90, "gmail worker pods gone after pause")
    pods_gone_at = time.time()
    big_keys = QueueKeys(f"mail-{BIG}")
    delivered_paused = env.count("@big.gmail.test")
    assert 1500 <= delivered_paused < 5000
    # Graceful: nothing stayed reserved (in-flight mails were finished, not abandoned) and
    # delivered + queued accounts for every job.
    assert client.zcard(big_keys.reserved) == 0
    queued = client.llen(big_keys.ready) + client.zcard(big_keys.delayed)
    assert delivered_paused + queued == 5000, (delivered_paused, queued)

    dump_pods: dict[str, str] = {}  # pod name -> last phase seen
    job_pods: dict[str, dict[str, Any]] = {}  # dump and restore pods, as last seen

    def dumped() -> dict[str, Any] | None:
        for p in get_json(kube, "-n", ns, "pods", "-l", "app.kubernetes.io/component=dump")[
            "items"
        ]:
            dump_pods[p["metadata"]["name"]] = p["status"].get("phase", "")
            job_pods[p["metadata"]["name"]] = p
        s = env.status(BIG)
        return s if s.get("phase") == "Dumped" else None

    status = wait_for(
        dumped,
        120,
        "gmail group Dumped",
        interval=0.2,
        describe=lambda: (env.status(BIG), env.operator.logs()[-2000:]),
    )
    dumped_at = time.time()
    assert env.count("@big.gmail.test") == delivered_paused, "mail sent while paused"
    assert status["dump"]["totalJobs"] == queued
    segments = status["dump"]["segments"]
    assert segments and sum(s["jobs"] for s in segments) == queued
    # What status says lies on the volume is checked at the end (the rest of the scenario
    # still runs when it is wrong).
    problems: list[str] = []
    if not all(isinstance(s.get("bytes"), int) and s["bytes"] > 0 for s in segments):
        problems.append(f"status.dump.segments without bytes: {segments}")
    assert not client.exists(*big_keys.laravel_keys), "queue keys left in Redis after the dump"
    assert dump_pods, "no dump Job pod was seen"
    assert any(phase in ("Running", "Succeeded") for phase in dump_pods.values()), dump_pods
    files: list[Path] = []
    on_volume = 0
    if env.node.managed:
        files = dump_files(env, BIG)
        assert files and all(f.stat().st_size > 0 for f in files), files
        on_volume = sum(f.stat().st_size for f in files)
        if on_volume != sum(s.get("bytes") or 0 for s in segments):
            problems.append(f"{on_volume} bytes on the volume, status says {segments}")

    # Redis restarts (appendonly: the other queues survive); the dump is on the volume.
    env.redis.restart()
    client = env.redis.client()
    if env.node.managed:
        assert dump_files(env, BIG) == files
    assert not client.exists(*big_keys.laravel_keys)
    assert env.count("@big.gmail.test") == delivered_paused, "mail sent while paused"

    # Resume: the restore Job first, then the workers; every remaining mail goes out once.
    patch_spec(kube, ns, BIG, {"paused": False})
    resumed_at = time.time()

    restore_pods: dict[str, str] = {}

    def workers_back() -> list[dict[str, Any]] | None:
        for p in get_json(kube, "-n", ns, "pods", "-l", "app.kubernetes.io/component=restore")[
            "items"
        ]:
            restore_pods[p["metadata"]["name"]] = p["status"].get("phase", "")
            job_pods[p["metadata"]["name"]] = p
        return worker_pods(kube, ns, BIG) or None

    pods = wait_for(
        workers_back, 120, "gmail workers back", interval=0.2, describe=env.operator.logs
    )
    assert restore_pods, "no restore Job pod was seen"
    # The dump and restore pods ran with the group's podTemplate and spec.jobs.resources.
    for pod in job_pods.values():
        assert_pod_knobs(pod, BIG_JOB_RESOURCES)
    events = get_json(kube, "-n", ns, "events", "--field-selector", f"involvedObject.name={BIG}")[
        "items"
    ]
    restored = [
        _ts(e.get("eventTime") or e.get("lastTimestamp") or e["firstTimestamp"])
        for e in events
        if e.get("reason") == "Restored"
    ]
    assert restored, f"no Restored event: {[e.get('reason') for e in events]}"
    restore_completed = min(restored)
    first_new_pod = min(_ts(p["metadata"]["creationTimestamp"]) for p in pods)
    assert first_new_pod >= restore_completed - 1, "workers started before the restore finished"

    wait_for(
        lambda: env.count("@big.gmail.test") >= 5000 and env.count("@outlook.test") >= 1000,
        300,
        "every gmail and outlook mail",
        describe=lambda: (env.count("@big.gmail.test"), env.count("@outlook.test")),
    )
    # A moment for late duplicates to show up (a reservation expired after a force kill).
    time.sleep(3)
    counts = Counter(r for r, _ in env.delivered(""))
    expected = set(big_rcpts) | set(out_rcpts) | set(urg_rcpts)
    assert set(counts) == expected, f"missing {len(expected - set(counts))}"
    duplicates = {r: n for r, n in counts.items() if n != 1}
    assert not duplicates, f"recipients with more than one mail: {list(duplicates.items())[:10]}"
    big_done = max(t for _, t in env.delivered("@big.gmail.test"))
    assert urgent_done < big_done
    overhead_after = node_overhead(env.node)

    pod_starts = pod_start_seconds(
        get_json(kube, "-n", ns, "pods", "-l", "app.kubernetes.io/component=worker")["items"]
    )
    duration = time.time() - t_start
    env.report += [
        "apply -> first delivered mail: "
        + ", ".join(f"{g} {first[g] - applied[g]:.1f}s" for g in (BIG, OUTLOOK, URGENT)),
        f"worker pod creation -> container running: max {max(pod_starts):.0f}s over "
        f"{len(pod_starts)} pods (1 s resolution)",
        f"urgent done {urgent_done - applied[URGENT]:.1f}s after its apply, big at "
        f"{big_at_urgent_done}/5000 then",
        f"pause -> gmail pods gone {pods_gone_at - paused_at:.1f}s; pause -> Dumped "
        f"{dumped_at - paused_at:.1f}s ({queued} jobs, {on_volume} bytes on the volume);"
        f" resume -> restore done {restore_completed - resumed_at:.1f}s",
        f"force kill at {killed_at_count}/1000 outlook mails: 0 duplicates, 0 missing",
        f"6100 mails in {duration:.0f}s",
    ]
    if overhead_before and overhead_after:
        parts = []
        for name, (cpu, rss) in overhead_after.items():
            cpu0 = overhead_before.get(name, (0.0, 0.0))[0]
            parts.append(f"{name} {100 * (cpu - cpu0) / duration:.1f}% CPU, {rss:.0f} MiB")
        env.report.append("node overhead during the run: " + "; ".join(parts))
    assert not problems, problems


@pytest.mark.timeout(600)
def test_cancel_stops_mail_after_its_pods_are_gone_and_purges(env: Env) -> None:
    kube = env.node.kube
    ns = env.namespace
    client = env.redis.client()
    name = "cancel-me"
    rcpts = [f"c{i}@cancel.test" for i in range(3000)]
    push_mails(client, f"mail-{name}", rcpts)
    env.apply(
        sendgroup_manifest(
            name, ns, campaign="winter", host="cancel.test", workers=2, rate={"perMinute": 3000}
        )
    )
    wait_for(lambda: env.count("@cancel.test") >= 100, 120, "100 mails of the group")
    patch_spec(kube, ns, name, {"state": "Cancelled"})
    wait_for(lambda: not worker_pods(kube, ns, name), 90, "worker pods gone after cancel")
    at_gone = env.count("@cancel.test")
    assert at_gone < 3000, "the group finished before the cancel: nothing was tested"
    keys = QueueKeys(f"mail-{name}")
    wait_for(
        lambda: not client.exists(*keys.all_keys),
        60,
        "the group's keys purged",
        describe=lambda: [k for k in keys.all_keys if client.exists(k)],
    )
    wait_for(lambda: env.status(name).get("phase") == "Cancelled", 30, "phase Cancelled")
    assert env.count("@cancel.test") == at_gone, "mail sent after the workers were gone"
    if env.node.managed:
        assert dump_files(env, name) == []
    env.report.append(f"cancel at {at_gone}/3000: no mail after the pods were gone, keys purged")
