"""Scenario 7: time to first mail on the local node.

The local node (``hack/cluster/cluster up --node``: control plane, kubelet + containerd, the
images of ``hack/images/build``, as tests/e2e and hack/demo use it), Redis and an SMTP sink
(aiosmtpd) on the pod network's gateway, and the operator installed with the Helm chart (a pod
under its ServiceAccount, chart defaults but for the images, Redis and SMTP).

Repeated R times (5; 2 with --quick), a new group each time: push 5 mail jobs into the
group's queue, ``kubectl apply`` its SendGroup, wait for the first mail at the sink. The
breakdown comes from watches of SendGroups, Deployments and Pods running in this process
(client clock at the moment each change arrives, so milliseconds rather than the 1 s
resolution of object timestamps): operator's first write to the SendGroup (kopf's finalizer),
Deployment created, Pod created, Pod bound to the node, container running as reported by the
kubelet, first mail.

Peers in the same run, R times each:

* a bare Pod with the operator's own worker pod spec (same image, env, security context),
  applied with kubectl: apply -> container running, and apply -> first mail (what is left when
  the operator, the Deployment and the ReplicaSet are taken away);
* the worker process started directly on the host with the same environment: start -> first
  mail (what is left when Kubernetes is taken away).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.kubebench import median_max, poll
from bench.report import Context, Plot, Result, Scenario, Table
from tests.support.cluster import REPO
from tests.support.e2e import RELEASE, chart_values, push_mails, sendgroup_manifest
from tests.support.helm import CHART, helm, values_args
from tests.support.node import NodeCluster, start_node, stop_node
from tests.support.redis_server import RedisServer, free_port
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess

NS = "bench-first-mail"
JOBS = 5
LABEL_GROUP = "sendgroups.io/group"
IMAGES_SCRIPT = str(REPO / "hack" / "images" / "build")

#: milestones of the operator path, in order, with their column names
STEPS = [
    ("operator", "operator first write"),
    ("deployment", "Deployment created"),
    ("pod", "Pod created"),
    ("scheduled", "Pod scheduled"),
    ("running", "container running"),
    ("mail", "first mail"),
]


class Watcher:
    """Watches SendGroups, Deployments and Pods of one namespace in daemon threads; records,
    per group (label ``sendgroups.io/group`` or the object name) and milestone, the unix time
    the change first arrived here."""

    def __init__(self, node: NodeCluster, namespace: str) -> None:
        self.node = node
        self.namespace = namespace
        self.seen: dict[str, dict[str, float]] = {}
        self.lock = threading.Lock()
        self.watches: list[Any] = []

    def _mark(self, group: str, step: str, at: float) -> None:
        with self.lock:
            self.seen.setdefault(group, {}).setdefault(step, at)

    def _stream(self, lister: Callable[..., Any], handle: Callable[[dict[str, Any]], None]) -> None:
        from kubernetes import watch

        w = watch.Watch()
        self.watches.append(w)
        try:
            for event in w.stream(lister, self.namespace, timeout_seconds=900):
                obj = event["object"]
                handle(obj if isinstance(obj, dict) else obj.to_dict())
        except Exception:  # the cluster went down under the watch: nothing more to see
            return

    def start(self) -> Watcher:
        from kubernetes import client, config

        def api() -> Any:
            return config.new_client_from_config(config_file=str(self.node.kube.kubeconfig))

        custom = client.CustomObjectsApi(api())
        apps = client.AppsV1Api(api())
        core = client.CoreV1Api(api())

        def on_group(obj: dict[str, Any]) -> None:
            meta = obj["metadata"]
            if meta.get("finalizers") or obj.get("status"):
                self._mark(meta["name"], "operator", time.time())

        def on_deployment(obj: dict[str, Any]) -> None:
            labels = obj["metadata"].get("labels") or {}
            if LABEL_GROUP in labels:
                self._mark(labels[LABEL_GROUP], "deployment", time.time())

        def on_pod(obj: dict[str, Any]) -> None:
            now = time.time()
            meta = obj["metadata"]
            group = (meta.get("labels") or {}).get(LABEL_GROUP) or meta["name"]
            self._mark(group, "pod", now)
            if (obj.get("spec") or {}).get("node_name"):
                self._mark(group, "scheduled", now)
            for cs in (obj.get("status") or {}).get("container_statuses") or []:
                running = (cs.get("state") or {}).get("running")
                if running:
                    self._mark(group, "running", now)

        def lister_groups(namespace: str, **kw: Any) -> Any:
            return custom.list_namespaced_custom_object(
                "sendgroups.io", "v1alpha1", namespace, "sendgroups", **kw
            )

        for lister, handle in (
            (lister_groups, on_group),
            (apps.list_namespaced_deployment, on_deployment),
            (core.list_namespaced_pod, on_pod),
        ):
            threading.Thread(target=self._stream, args=(lister, handle), daemon=True).start()
        return self

    def stop(self) -> None:
        for w in self.watches:
            w.stop()


def _first_mail(sink: SmtpSink, domain: str, timeout: float) -> float:
    def found() -> float | None:
        with sink.lock:
            times = [m.at for m in sink.received if m.recipient.endswith(domain)]
        return min(times) if times else None

    value: float = poll(found, timeout, f"first mail to *{domain}", interval=0.02)
    return value


def _install_operator(node: NodeCluster, redis_url: str, smtp: SmtpSink) -> float:
    """helm install with the chart's defaults (reaper 10 s, status refresh 60 s) but for the
    local images, Redis and SMTP; waits until the operator logged its preflight. Returns the
    seconds it took."""
    kube = node.kube
    values = chart_values(redis_url, smtp.host, smtp.port)
    for key in ("reaperInterval", "extraEnv"):  # the e2e tier's fast loops: not for a bench
        values.pop(key, None)
    started = time.monotonic()
    helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NS,
        *values_args(values),
        kubeconfig=kube.kubeconfig,
    )
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"

    def preflight() -> bool:
        logs = kube.kubectl("-n", NS, "logs", "-l", selector, "--tail=-1", check=False)
        return "preflight ok" in logs.stdout

    poll(preflight, 240, "the operator pod's preflight", interval=0.5)
    return time.monotonic() - started


def _worker_pod_spec(kube: Any, group: str) -> dict[str, Any]:
    dep = json.loads(
        kube.kubectl("-n", NS, "get", "deployment", f"sg-{group}", "-o", "json").stdout
    )
    spec: dict[str, Any] = dep["spec"]["template"]["spec"]
    return spec


def _with_queue(spec: dict[str, Any], queue: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(spec))
    for var in out["containers"][0]["env"]:
        if var["name"] == "SENDGROUP_QUEUE":
            var["value"] = queue
        elif var["name"] == "SENDGROUP_NAME":
            var["value"] = name
    return out


def _images_daemons_running() -> bool:
    """Whether ``hack/images/build``'s own dockerd or containerd runs (the node start may
    start them to import the images; the scenario stops them again if it did)."""
    proc = subprocess.run([IMAGES_SCRIPT, "status"], capture_output=True, text=True, check=False)
    out = proc.stdout + proc.stderr
    return "dockerd: running" in out or "containerd: running" in out


def run(ctx: Context) -> Result:
    """Bring the node up, measure the three paths R times each, take everything down."""
    repeats = 2 if ctx.quick else 5
    state = ctx.work_dir / "node" / "state"
    daemons_before = _images_daemons_running()
    started = time.monotonic()
    node = start_node(state)
    raw: dict[str, Any] = {"repeats": repeats, "node_up_s": time.monotonic() - started}
    ctx.log(f"node up in {raw['node_up_s']:.1f}s")
    server = sink = watcher = None
    try:
        kube = node.kube
        server = RedisServer(host=node.host_address).start()
        sink = SmtpSink(host=node.host_address, keep_data=False).start()
        rc = server.client()
        kube.kubectl("create", "namespace", NS)
        raw["operator_install_s"] = _install_operator(node, server.url, sink)
        ctx.log(f"operator installed and watching in {raw['operator_install_s']:.1f}s")
        watcher = Watcher(node, NS).start()
        time.sleep(1)  # the watches' initial lists are done

        groups: list[dict[str, float]] = []
        for i in range(repeats):
            name = f"fm-{i}"
            push_mails(rc, f"mail-{name}", [f"r{j}@{name}.test" for j in range(JOBS)])
            t0 = time.time()
            kube.kubectl(
                "apply",
                "-f",
                "-",
                input=sendgroup_manifest(name, NS, campaign="bench", host=f"{name}.test"),
            )
            applied = time.time() - t0
            mail = _first_mail(sink, f"@{name}.test", 180)
            time.sleep(0.2)
            with watcher.lock:
                seen = dict(watcher.seen.get(name, {}))
            row = {"apply": applied, **{k: v - t0 for k, v in seen.items()}, "mail": mail - t0}
            groups.append(row)
            ctx.log(f"{name}: first mail after {row['mail']:.2f}s ({_fmt_row(row)})")
        raw["operator_path"] = groups

        spec = _worker_pod_spec(kube, "fm-0")
        bare: list[dict[str, float]] = []
        for i in range(repeats):
            name = f"bare-{i}"
            push_mails(rc, f"mail-{name}", [f"r{j}@{name}.test" for j in range(JOBS)])
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NS, "labels": {"bench": "bare"}},
                "spec": _with_queue(spec, f"mail-{name}", name),
            }
            t0 = time.time()
            kube.kubectl("apply", "-f", "-", input=json.dumps(pod))
            applied = time.time() - t0
            mail = _first_mail(sink, f"@{name}.test", 180)
            time.sleep(0.2)
            with watcher.lock:
                seen = dict(watcher.seen.get(name, {}))
            row = {"apply": applied, **{k: v - t0 for k, v in seen.items()}, "mail": mail - t0}
            bare.append(row)
            ctx.log(f"{name}: first mail after {row['mail']:.2f}s ({_fmt_row(row)})")
            kube.kubectl("-n", NS, "delete", "pod", name, "--wait=false")
        raw["bare_pod"] = bare

        env = {
            v["name"]: str(v.get("value", ""))
            for v in spec["containers"][0]["env"]
            if "valueFrom" not in v
        }
        host: list[dict[str, float]] = []
        for i in range(repeats):
            name = f"host-{i}"
            push_mails(rc, f"mail-{name}", [f"r{j}@{name}.test" for j in range(JOBS)])
            worker_env = {
                **env,
                "SENDGROUP_QUEUE": f"mail-{name}",
                "SENDGROUP_NAME": name,
                "SENDGROUP_METRICS_PORT": str(free_port()),
            }
            t0 = time.time()
            worker = WorkerProcess(worker_env, name=name)
            try:
                mail = _first_mail(sink, f"@{name}.test", 60)
            finally:
                worker.stop()
            host.append({"mail": mail - t0})
            ctx.log(f"{name}: first mail after {mail - t0:.2f}s")
        raw["host_worker"] = host
    finally:
        if watcher is not None:
            watcher.stop()
        logs = node.kube.kubectl(
            "-n", NS, "logs", "-l", "app.kubernetes.io/component=operator", "--tail=-1", check=False
        )
        ctx.artifact("first-mail-operator.log").write_text(logs.stdout + logs.stderr)
        if sink is not None:
            sink.stop()
        if server is not None:
            server.cleanup()
        stop_node(state)
        if not daemons_before and _images_daemons_running():
            subprocess.run([IMAGES_SCRIPT, "stop"], capture_output=True, check=False)
    return _result(raw)


def _fmt_row(row: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in row.items())


def _col(rows: list[dict[str, float]], key: str) -> list[float]:
    return [r[key] for r in rows if key in r]


def _result(raw: dict[str, Any]) -> Result:
    op, bare, host = raw["operator_path"], raw["bare_pod"], raw["host_worker"]
    steps = [("apply", "kubectl apply returned"), *STEPS]
    rows: list[list[Any]] = []
    for key, label in steps:
        med_op, max_op = median_max(_col(op, key))
        med_bare, max_bare = median_max(_col(bare, key)) if key != "operator" else (None, None)
        if key == "deployment":
            med_bare = max_bare = None
        rows.append([label, med_op, max_op, med_bare, max_bare])
    med_host, max_host = median_max(_col(host, "mail"))
    rows.append(["worker on the host: start -> first mail", med_host, max_host, None, None])
    med = {k: median_max(_col(op, k))[0] for k, _ in steps}
    gaps = [
        ("operator reacts", med["operator"]),
        ("operator -> Deployment", med["deployment"] - med["operator"]),
        ("Deployment -> Pod (ReplicaSet)", med["pod"] - med["deployment"]),
        ("Pod -> scheduled", med["scheduled"] - med["pod"]),
        ("scheduled -> running (kubelet, containerd)", med["running"] - med["scheduled"]),
        ("running -> first mail (worker start, SMTP)", med["mail"] - med["running"]),
    ]
    bare_mail = median_max(_col(bare, "mail"))[0]
    bare_run = median_max(_col(bare, "running"))[0]
    findings = [
        f"Median apply -> first mail: {med['mail']:.2f} s through the operator, "
        f"{bare_mail:.2f} s for a bare Pod with the same spec, {med_host:.2f} s for the worker "
        f"process on the host; the operator's own share (apply -> Deployment) is "
        f"{med['deployment']:.2f} s.",
        "Where the time goes (medians): "
        + "; ".join(f"{name} {value:.2f} s" for name, value in gaps)
        + f". A bare Pod takes {bare_run:.2f} s from apply to running: scheduling, sandbox and "
        "container start are the node's fixed cost.",
        f"What would shorten it: not the operator ({med['deployment']:.2f} s of "
        f"{med['mail']:.2f} s). The pod start (sandbox, CNI, runc) is the floor for a group "
        "without workers; below it only a worker that is already running helps (the reaper "
        "keeps a group's workers for reaper.idleAfter after its queue empties, so a group that "
        "gets new jobs within that time mails at once). The worker's own start-up (Python "
        f"imports, Redis and SMTP connections: {med_host:.2f} s on the host) is the rest.",
    ]
    table = Table(
        title=f"Time to first mail: kubectl apply -> first mail at the sink ({raw['repeats']} "
        "groups)",
        columns=[
            "milestone (s after apply)",
            "operator median",
            "operator max",
            "bare Pod median",
            "bare Pod max",
        ],
        rows=rows,
        note=(
            "Times are seconds after `kubectl apply` started, seen by watches in the benchmark "
            "process (kubelet-reported container state arrives after the container started). "
            f"Node up (images cached) took {raw['node_up_s']:.0f} s, operator install "
            f"{raw['operator_install_s']:.0f} s (not included). Bare Pod: the operator's "
            "worker pod spec applied as a plain Pod. Last row: the worker process started on "
            "the host with the same environment."
        ),
    )
    plot = Plot(
        filename="first-mail.png",
        title="Time to first mail (median, s)",
        ylabel="seconds",
        bars={
            "SendGroup (operator)": med["mail"],
            "bare Pod": bare_mail,
            "worker on host": med_host,
        },
    )
    return Result(tables=[table], plots=[plot], findings=findings, raw=raw)


SCENARIO = Scenario(
    key="first-mail",
    number=7,
    title="Time to first mail on the local node",
    run=run,
)
