"""The demo: the whole product end to end on this machine, with progress on the terminal.

Run through ``hack/demo`` (which installs what is missing first). Steps:

1. the local cluster with a node (``hack/cluster/cluster up --node``: etcd, kube-apiserver,
   controller manager, scheduler, kubelet + containerd, the pod network, images built here);
2. redis-server and an SMTP sink (aiosmtpd) listening on the pod network's gateway address;
3. the Helm chart (CRDs, RBAC, the operator as a pod under its own ServiceAccount);
4. the SendGroups in ``examples/demo/`` (two campaigns, three groups) and their mail jobs,
   pushed with the producer client;
5. ``kubectl get sendgroups`` and the mails the sink received, every few seconds, until every
   mail is delivered; then a summary (and the cluster is taken down unless ``--keep``).

Nothing leaves the machine: the sink accepts and counts mail, it relays nothing.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from sendgroup_worker import producer  # noqa: E402
from sendgroup_worker.queue.client import Queue  # noqa: E402
from sendgroup_worker.queue.keys import QueueKeys  # noqa: E402
from tests.support.e2e import install_operator  # noqa: E402
from tests.support.node import NodeCluster, start_node, stop_node  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402
from tests.support.smtp_sink import SmtpSink  # noqa: E402

NAMESPACE = "sendgroups-demo"
#: group name -> (recipient domain, jobs to push)
GROUPS: dict[str, tuple[str, int]] = {
    "spring-sale-gmail": ("gmail.com", 3000),
    "spring-sale-outlook": ("outlook.com", 1000),
    "password-reset-urgent": ("example.org", 100),
}


def say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def push_jobs(client: redis.Redis, group: str, domain: str, count: int) -> None:
    """Push ``count`` mail jobs for ``group`` (queue ``mail-<group>``, the CRD's default)."""
    queue = Queue(client, QueueKeys(f"mail-{group}"), retry_after=60)
    rows = (
        {
            "to": f"user{i}@{domain}",
            "from": "news@shop.example",
            "subject": f"{group}: mail {i}",
            "text": "Hello from the sendgroup-operator demo.",
        }
        for i in range(count)
    )
    producer.push_recipients(queue, rows, batch_size=100, progress=False, total=count)


def show_progress(node: NodeCluster, sink: SmtpSink, started: float) -> Counter[str]:
    """Print ``kubectl get sg`` and the sink's counts; return mails per recipient domain."""
    table = node.kube.kubectl("-n", NAMESPACE, "get", "sendgroups", check=False).stdout
    per_domain: Counter[str] = Counter()
    for rcpt, n in sink.per_recipient().items():
        per_domain[rcpt.rsplit("@", 1)[-1]] += n
    received = ", ".join(f"{d} {per_domain[d]}/{n}" for d, n in GROUPS.values())
    print(f"\n--- {time.monotonic() - started:5.0f}s  mails at the SMTP sink: {received}")
    print(table.rstrip(), flush=True)
    return per_domain


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave everything running")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for mail")
    parser.add_argument(
        "--state-dir", type=Path, default=ROOT / ".state" / "demo", help="cluster state dir"
    )
    args = parser.parse_args()

    state_dir: Path = args.state_dir
    if (state_dir / "cluster.env").exists():
        say(f"taking down the previous demo cluster in {state_dir}")
        stop_node(state_dir)
    shutil.rmtree(state_dir, ignore_errors=True)

    say("starting the local cluster with a node (a cold machine builds images first)")
    t0 = time.monotonic()
    node = start_node(state_dir)
    say(
        f"cluster + node ready in {time.monotonic() - t0:.0f}s; pods reach the host at "
        f"{node.host_address}"
    )
    server = sink = None
    try:
        server = RedisServer(host=node.host_address, config={"appendonly": "yes"}).start()
        sink = SmtpSink(host=node.host_address, keep_data=False).start()
        say(f"redis-server at {server.url}, SMTP sink at {node.host_address}:{sink.port}")

        node.kube.kubectl("create", "namespace", NAMESPACE)
        say("helm install the chart: CRDs, RBAC and the operator (a pod under its ServiceAccount)")
        install_operator(node.kube, NAMESPACE, server.url, node.host_address, sink.port)

        say("pushing mail jobs: " + ", ".join(f"{g} {n}" for g, (_, n) in GROUPS.items()))
        client = server.client()
        for group, (domain, count) in GROUPS.items():
            push_jobs(client, group, domain, count)
        started = time.monotonic()
        say("kubectl apply -f examples/demo/  (the urgent group is created last)")
        for group in GROUPS:
            node.kube.kubectl(
                "-n", NAMESPACE, "apply", "-f", str(ROOT / "examples" / "demo" / f"{group}.yaml")
            )

        done_at: dict[str, float] = {}
        deadline = started + args.timeout
        while True:
            per_domain = show_progress(node, sink, started)
            for group, (domain, count) in GROUPS.items():
                if per_domain[domain] >= count and group not in done_at:
                    done_at[group] = time.monotonic() - started
            if len(done_at) == len(GROUPS) or time.monotonic() > deadline:
                break
            time.sleep(3)

        dupes = sum(n - 1 for n in sink.per_recipient().values() if n > 1)
        say("summary:")
        for group, (domain, count) in GROUPS.items():
            when = f"all delivered after {done_at[group]:.0f}s" if group in done_at else "NOT done"
            print(f"  {group:24} {per_domain[domain]:5}/{count} to {domain:12} {when}")
        print(f"  recipients that got more than one mail: {dupes}")
        ok = len(done_at) == len(GROUPS) and dupes == 0
        say("demo finished: every recipient got exactly one mail" if ok else "demo FAILED")
        if args.keep:
            say(
                f"left running. export KUBECONFIG={state_dir / 'kubeconfig'}; "
                f"kubectl -n {NAMESPACE} get sg; stop with: hack/cluster/cluster "
                f"--state-dir {state_dir} down  (Redis/SMTP stop with this process)"
            )
            input("press Enter to stop Redis and the SMTP sink and take the cluster down...")
        return 0 if ok else 1
    finally:
        if sink is not None:
            sink.stop()
        if server is not None:
            server.cleanup()
        say("taking the cluster down")
        stop_node(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as exc:
        print(f"demo: {exc}\n{exc.stderr or ''}", file=sys.stderr)
        sys.exit(1)
