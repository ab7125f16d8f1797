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
import math
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STATE_DIR = ROOT / ".state" / "demo"
DEFAULT_TIMEOUT = 900.0
#: written into its state dir by ``hack/cluster/cluster up`` (the demo's cluster makes the
#: demo's state dir) and kept by ``down --keep-logs``: a dir the demo may delete
STATE_MARKER = ".sendgroup-state-dir"
#: the first line of the cluster.env ``up`` writes (a state dir made before the marker existed)
CLUSTER_ENV_HEADER = "# written by hack/cluster/cluster up"


def _seconds(text: str) -> float:
    """``--timeout``: a finite number of seconds above 0 (``nan`` would never time out, a
    negative one would fail only after the whole cluster was built)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0: {text!r}")
    return value


def state_dir_deletable(path: Path) -> bool:
    """Whether the demo may delete ``path`` (it does at its start): missing, an empty
    directory, or a state dir ``hack/cluster/cluster up`` made (its marker, or its cluster.env
    from before the marker). ``--state-dir .`` or ``~`` would otherwise lose the checkout or
    the home directory."""
    if not path.exists() and not path.is_symlink():
        return True
    if not path.is_dir():
        return False
    if (path / STATE_MARKER).is_file():
        return True
    try:
        if next(path.iterdir(), None) is None:
            return True
        with (path / "cluster.env").open() as env:
            return env.readline().rstrip("\n") == CLUSTER_ENV_HEADER
    except (OSError, UnicodeDecodeError):
        return False


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The demo's options, the one list of them: ``hack/demo`` checks its arguments with this
    parser (system python3, standard library only) before it installs anything."""
    parser = argparse.ArgumentParser(
        prog="hack/demo",
        description=(__doc__ or "").split("\n\n")[0],
        epilog="exit code: 0 every recipient got exactly one mail; 1 a step failed (its logs are "
        "kept in STATE_DIR/logs) or mail is missing or duplicated; 2 bad arguments; "
        "130 interrupted. Before the demo itself, hack/demo installs what is missing "
        "(hack/bootstrap, hack/cluster/cluster build, hack/helm/build); see README.md, Quick start",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the cluster, Redis and the SMTP sink running until Enter (default: off, "
        "everything is stopped at the end)",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="seconds to wait for every mail at the SMTP sink (default: %(default).0f)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        metavar="DIR",
        help="the demo cluster's state dir, logs in DIR/logs; deleted at the start, so it must "
        "be missing, empty or a state dir hack/demo or hack/cluster/cluster made (with the "
        f"marker file {STATE_MARKER}): any other DIR is refused (default: "
        f"{DEFAULT_STATE_DIR.relative_to(ROOT)} in the checkout)",
    )
    args = parser.parse_args(argv)
    if not state_dir_deletable(args.state_dir):
        parser.error(
            f"--state-dir {args.state_dir}: not empty and not a state dir hack/demo or "
            f"hack/cluster/cluster made (no {STATE_MARKER} in it); refusing to delete it: "
            "name a new or empty dir"
        )
    return args


if __name__ == "__main__":
    # Parsed before the imports below (third-party and the project's): `hack/demo` runs this
    # file with SENDGROUP_DEMO_PARSE_ONLY=1 and the system python3 before installing anything,
    # so a bad option is refused (exit 2, usage) and --help printed on a machine with nothing
    # installed yet.
    ARGS = parse_args()
    if os.environ.get("SENDGROUP_DEMO_PARSE_ONLY") == "1":
        sys.exit(0)

sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import yaml  # noqa: E402

from sendgroup_worker import producer  # noqa: E402
from sendgroup_worker.queue.client import Queue  # noqa: E402
from sendgroup_worker.queue.keys import QueueKeys  # noqa: E402
from tests.support.cluster import ClusterError  # noqa: E402
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


IMAGES_BUILD = ROOT / "hack" / "images" / "build"


def say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def image_builder_dockerd_running() -> bool:
    """Whether ``hack/images/build``'s own dockerd runs (``status``)."""
    proc = subprocess.run(
        [str(IMAGES_BUILD), "status"], capture_output=True, text=True, timeout=60, check=False
    )
    return "dockerd: running" in proc.stdout


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


#: printed under the first table: why WORKERS can say 0/3 while mail already flows
WORKERS_LEGEND = (
    "(WORKERS = ready/desired worker pods from the group's status, which the operator refreshes "
    "every few seconds; a worker sends as soon as it runs and is counted ready only after its "
    "readiness probe passed (every 10 s), so WORKERS can lag the mail. The line under the table "
    "counts the pods themselves.)"
)


def worker_pods(pods: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per group: its worker pods (``kubectl get pods -o json`` items) that run and that are
    ready, from the pods' own phase and Ready condition; pods being deleted do not count."""
    counts: dict[str, tuple[int, int]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        group = labels.get("sendgroups.io/group")
        if labels.get("app.kubernetes.io/component") != "worker" or group is None:
            continue
        if meta.get("deletionTimestamp"):
            continue
        status = pod.get("status") or {}
        running = status.get("phase") == "Running"
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        n_running, n_ready = counts.get(group, (0, 0))
        counts[group] = (n_running + running, n_ready + (running and ready))
    return counts


def pods_line(groups: dict[str, DemoGroup], counts: dict[str, tuple[int, int]]) -> str:
    """``worker pods now: <group> <running> running (<ready> ready), ...``"""
    parts = []
    for name in groups:
        running, ready = counts.get(name, (0, 0))
        parts.append(f"{name} {running} running ({ready} ready)")
    return "worker pods now: " + ", ".join(parts)


def show_progress(
    node: NodeCluster,
    sink: SmtpSink,
    started: float,
    groups: dict[str, DemoGroup],
    legend: bool = False,
) -> Counter[str]:
    """Print ``kubectl get sg``, the worker pods' own counts and the sink's counts (with
    ``legend``: what the WORKERS column counts); return mails per recipient domain."""
    table = node.kube.kubectl("-n", NAMESPACE, "get", "sendgroups", check=False).stdout
    pods = node.kube.kubectl(
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/component=worker",
        "-o",
        "json",
        check=False,
    )
    try:
        counts = worker_pods(json.loads(pods.stdout).get("items") or [])
    except ValueError:
        counts = {}
    per_domain: Counter[str] = Counter()
    for rcpt, n in sink.per_recipient().items():
        per_domain[rcpt.rsplit("@", 1)[-1]] += n
    received = ", ".join(
        f"{g.host} {per_domain[g.host]}/{len(g.payloads)}" for g in groups.values()
    )
    print(f"\n--- {time.monotonic() - started:5.0f}s  mails at the SMTP sink: {received}")
    print(table.rstrip())
    print(pods_line(groups, counts))
    if legend:
        print(WORKERS_LEGEND)
    sys.stdout.flush()
    return per_domain


def main(args: argparse.Namespace) -> int:
    """The demo; returns the exit code (0 every recipient got exactly one mail, 1 otherwise)."""
    state_dir: Path = args.state_dir
    if (state_dir / "cluster.env").exists():
        say(f"taking down the previous demo cluster in {state_dir}")
        stop_node(state_dir)
    shutil.rmtree(state_dir, ignore_errors=True)
    dockerd_before = image_builder_dockerd_running()

    server = sink = None
    ok = False
    step = "start the local cluster with a node (hack/cluster/cluster up --node)"
    try:
        say("starting the local cluster with a node (a cold machine builds images first)")
        t0 = time.monotonic()
        # inside the try: Ctrl-C here still takes it down; its progress goes to the terminal
        node = start_node(state_dir, stream=True)
        say(
            f"cluster + node ready in {time.monotonic() - t0:.0f}s; pods reach the host at "
            f"{node.host_address}"
        )
        step = "start redis-server and the SMTP sink on the pod network's gateway"
        server = RedisServer(host=node.host_address, config={"appendonly": "yes"}).start()
        sink = SmtpSink(host=node.host_address, keep_data=False).start()
        say(
            f"redis-server at {server.url}, SMTP sink at {node.host_address}:{sink.port} "
            "(it accepts and counts every mail and relays nothing: no mail leaves this machine)"
        )

        step = "helm install the chart (operator pod Running)"
        node.kube.kubectl("create", "namespace", NAMESPACE)
        say("helm install the chart: CRDs, RBAC and the operator (a pod under its ServiceAccount)")
        install_operator(node.kube, NAMESPACE, server.url, node.host_address, sink.port)

        step = "push the mail jobs and apply the SendGroups"
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

        step = "wait for every mail at the SMTP sink"
        done_at: dict[str, float] = {}
        deadline = started + args.timeout
        first = True
        while True:
            per_domain = show_progress(node, sink, started, groups, legend=first)
            first = False
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
        if ok:
            say("demo finished: every recipient got exactly one mail")
        else:
            say(f"demo FAILED: mail missing or duplicated (timeout {args.timeout:.0f}s)")
        if args.keep:
            say(
                f"left running. export KUBECONFIG={state_dir / 'kubeconfig'}; "
                f"kubectl -n {NAMESPACE} get sg; stop with: hack/cluster/cluster "
                f"--state-dir {state_dir} down  (Redis/SMTP stop with this process)"
            )
            input("press Enter to stop Redis and the SMTP sink and take the cluster down...")
    except (
        ClusterError,
        subprocess.CalledProcessError,
        subprocess.TimeoutExpired,
        AssertionError,
        OSError,
        redis.RedisError,
    ) as exc:
        report_failure(step, exc)
    finally:
        if sink is not None:
            sink.stop()
        if server is not None:
            server.cleanup()
        say("taking the cluster down" + ("" if ok else f" (keeping its logs in {state_dir}/logs)"))
        down = True
        try:
            stop_node(state_dir, keep_logs=not ok)
        except ClusterError as exc:
            down = False
            print(f"demo: taking the cluster down failed: {exc}", file=sys.stderr)
        if ok:
            shutil.rmtree(state_dir, ignore_errors=True)
        if not dockerd_before and image_builder_dockerd_running():
            say("stopping the image builder's dockerd (this demo started it)")
            subprocess.run([str(IMAGES_BUILD), "stop-docker"], timeout=120, check=False)
    if ok and down:
        say(
            "done: the cluster, node, redis-server, SMTP sink and every process this demo "
            "started are stopped; nothing is left running"
        )
    else:
        print(
            f"demo: FAILED at: {step}; logs kept in {state_dir}/logs "
            "(cluster, node and images-load.log)",
            file=sys.stderr,
        )
    return 0 if ok else 1


def report_failure(step: str, exc: BaseException) -> None:
    """What a failed step said, shortened: the last lines of the message (a command's output
    or a log's tail), never a traceback."""
    if isinstance(exc, subprocess.CalledProcessError):
        text = f"{exc}\n{exc.stderr or ''}"
    else:
        text = str(exc)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    print(f"\ndemo: step failed: {step}", file=sys.stderr)
    for line in lines[-20:]:
        print(f"    {line}", file=sys.stderr)


if __name__ == "__main__":
    try:
        sys.exit(main(ARGS))
    except KeyboardInterrupt:
        print("demo: interrupted; everything it started was taken down", file=sys.stderr)
        sys.exit(130)
