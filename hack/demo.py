"""The demo: the whole product end to end on this machine, with progress on the terminal.

Run through ``hack/demo`` (which installs what is missing first). Steps:

1. the local cluster with a node (``hack/cluster/cluster up --node``: etcd, kube-apiserver,
   controller manager, scheduler, kubelet + containerd, the pod network, images built here);
2. redis-server and an SMTP sink (aiosmtpd) listening on the pod network's gateway address;
3. the Helm chart (CRDs, RBAC, the operator as a pod under its own ServiceAccount);
4. the SendGroups in ``examples/demo/`` (two campaigns, three groups) and their mail jobs:
   each campaign's recipients file (``*-recipients.csv``) is split by receiving provider
   (a row goes to the group whose ``spec.host`` is its domain) and pushed with the producer
   client, the mail rendered by the workers from the campaign's ``*.template.json``;
5. ``kubectl get sendgroups`` and the mails the sink received, every few seconds, until every
   mail is delivered; then a summary (and the cluster is taken down unless ``--keep``).

Nothing leaves the machine: the sink accepts and counts mail, it relays nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import yaml  # noqa: E402

from sendgroup_worker import producer  # noqa: E402
from sendgroup_worker.queue.client import Queue  # noqa: E402
from sendgroup_worker.queue.keys import QueueKeys  # noqa: E402
from tests.support.e2e import install_operator  # noqa: E402
from tests.support.node import NodeCluster, start_node, stop_node  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402
from tests.support.smtp_sink import SmtpSink  # noqa: E402

NAMESPACE = "sendgroups-demo"
DEMO_DIR = ROOT / "examples" / "demo"
#: campaign -> (recipients file, template file), both in examples/demo/
CAMPAIGNS: dict[str, tuple[str, str]] = {
    "spring-sale": ("spring-sale-recipients.csv", "spring-sale.template.json"),
    "password-reset": ("password-reset-recipients.csv", "password-reset.template.json"),
}
#: the SendGroups, in the order they are applied (the urgent one last)
GROUP_ORDER = ("spring-sale-gmail", "spring-sale-outlook", "password-reset-urgent")


@dataclass
class DemoGroup:
    """One SendGroup of examples/demo/ and the jobs the demo routed to it."""

    name: str
    campaign: str
    host: str
    queue: str
    payloads: list[bytes] = field(default_factory=list)


def say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def load_groups() -> dict[str, DemoGroup]:
    """The demo's SendGroups from their manifests (campaign, host, queue = ``mail-<name>``,
    the CRD's default, unless the manifest sets ``spec.queue``)."""
    groups = {}
    for name in GROUP_ORDER:
        spec = yaml.safe_load((DEMO_DIR / f"{name}.yaml").read_text())["spec"]
        groups[name] = DemoGroup(
            name, spec["campaign"], spec["host"], spec.get("queue", f"mail-{name}")
        )
    return groups


def route_recipients(groups: dict[str, DemoGroup]) -> None:
    """Split each campaign's recipients file by receiving provider, as a mailing platform does:
    a row goes to the campaign's group whose ``spec.host`` is the recipient's domain. Rows are
    read and turned into payloads by the producer (address and template checks included)."""
    for campaign, (recipients, template_file) in CAMPAIGNS.items():
        template = json.loads((DEMO_DIR / template_file).read_text())
        defaults = producer.MailDefaults(from_="news@shop.example", template=template)
        by_host = {g.host: g for g in groups.values() if g.campaign == campaign}
        with (DEMO_DIR / recipients).open(newline="") as stream:
            for line, row in producer.read_rows(stream, "csv"):
                domain = row["to"].rsplit("@", 1)[-1].lower()
                if domain not in by_host:
                    raise SystemExit(f"{recipients}:{line}: no {campaign} group for {domain}")
                by_host[domain].payloads.append(producer.payload_from_row(row, defaults))


def push_jobs(client: redis.Redis, group: DemoGroup) -> None:
    """Push the group's jobs into its queue, 100 per Redis round trip."""
    queue = Queue(client, QueueKeys(group.queue), retry_after=60)
    producer.push_recipients(queue, group.payloads, batch_size=100, progress=False)


def show_progress(
    node: NodeCluster, sink: SmtpSink, started: float, groups: dict[str, DemoGroup]
) -> Counter[str]:
    """Print ``kubectl get sg`` and the sink's counts; return mails per recipient domain."""
    table = node.kube.kubectl("-n", NAMESPACE, "get", "sendgroups", check=False).stdout
    per_domain: Counter[str] = Counter()
    for rcpt, n in sink.per_recipient().items():
        per_domain[rcpt.rsplit("@", 1)[-1]] += n
    received = ", ".join(
        f"{g.host} {per_domain[g.host]}/{len(g.payloads)}" for g in groups.values()
    )
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

    server = sink = None
    try:
        say("starting the local cluster with a node (a cold machine builds images first)")
        t0 = time.monotonic()
        node = start_node(state_dir)  # inside the try: Ctrl-C here still takes it down
        say(
            f"cluster + node ready in {time.monotonic() - t0:.0f}s; pods reach the host at "
            f"{node.host_address}"
        )
        server = RedisServer(host=node.host_address, config={"appendonly": "yes"}).start()
        sink = SmtpSink(host=node.host_address, keep_data=False).start()
        say(f"redis-server at {server.url}, SMTP sink at {node.host_address}:{sink.port}")

        node.kube.kubectl("create", "namespace", NAMESPACE)
        say("helm install the chart: CRDs, RBAC and the operator (a pod under its ServiceAccount)")
        install_operator(node.kube, NAMESPACE, server.url, node.host_address, sink.port)

        groups = load_groups()
        route_recipients(groups)
        say(
            "pushing mail jobs from examples/demo/*-recipients.csv, split by provider: "
            + ", ".join(f"{g.name} {len(g.payloads)}" for g in groups.values())
        )
        client = server.client()
        for group in groups.values():
            push_jobs(client, group)
        started = time.monotonic()
        say("kubectl apply -f examples/demo/  (the urgent group is created last)")
        for name in groups:
            node.kube.kubectl("-n", NAMESPACE, "apply", "-f", str(DEMO_DIR / f"{name}.yaml"))

        done_at: dict[str, float] = {}
        deadline = started + args.timeout
        while True:
            per_domain = show_progress(node, sink, started, groups)
            for g in groups.values():
                if per_domain[g.host] >= len(g.payloads) and g.name not in done_at:
                    done_at[g.name] = time.monotonic() - started
            if len(done_at) == len(groups) or time.monotonic() > deadline:
                break
            time.sleep(3)

        dupes = sum(n - 1 for n in sink.per_recipient().values() if n > 1)
        say("summary:")
        for g in groups.values():
            when = (
                f"all delivered after {done_at[g.name]:.0f}s" if g.name in done_at else "NOT done"
            )
            print(f"  {g.name:24} {per_domain[g.host]:5}/{len(g.payloads)} to {g.host:12} {when}")
        print(f"  recipients that got more than one mail: {dupes}")
        ok = len(done_at) == len(groups) and dupes == 0
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
    except KeyboardInterrupt:
        print("demo: interrupted; everything it started was taken down", file=sys.stderr)
        sys.exit(130)
