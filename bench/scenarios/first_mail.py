"""Scenario 7: time to first mail on the local node.

The local node (``hack/cluster/cluster up --node``: control plane, kubelet + containerd, the
images of ``hack/images/build``, as tests/e2e and hack/demo use it), Redis and an SMTP sink
(aiosmtpd) on the pod network's gateway, and the operator installed with the Helm chart (a pod
under its ServiceAccount, chart defaults but for the images, Redis and SMTP).

R interleaved rounds (5; 2 with --quick), a new group each time: push 5 mail jobs into the
group's queue, ``kubectl apply`` its SendGroup, wait for the first mail at the sink. The
breakdown comes from watches of SendGroups, Deployments and Pods running in this process
(client clock at the moment each change arrives, so milliseconds rather than the 1 s
resolution of object timestamps): operator's first write to the SendGroup (kopf's finalizer),
Deployment created, Pod created, Pod bound to the node, container running as reported by the
kubelet, first mail.

Peers in the same rounds (order rotated by one each round; each side's SendGroup or Pod is
deleted, its worker pods gone, before the next side starts, so every side starts on the same
node):

* a bare Pod with the operator's own worker pod spec (same image, env, security context),
  applied with kubectl: apply -> container running, and apply -> first mail (what is left when
  the operator, the Deployment and the ReplicaSet are taken away);
* the worker process started directly on the host with the same environment: start -> first
  mail (what is left when Kubernetes is taken away).

Then the case that matters most to a user: jobs arriving at a SendGroup that exists, was
reconciled and is **Idle**. R groups are created with one job each (``reaper.idleAfter`` 5 s,
the rest chart defaults), deliver it, are reaped by the operator (Deployment deleted, phase
Idle) and given two more reaper passes, after which they rest under the operator's idle check
(``operator/sendgroup_operator/observer.py``: with Redis' client tracking, the default on a
standalone Redis as here, Redis names the pushed key and the check answers at once; one EXISTS
and one PING per Redis every 60 s as a safety check; polled every 0.5 s where tracking is
refused). Per round, a
producer pushes 5 mail jobs exactly as the project's producer does (RPUSH ready + RPUSH notify
in one MULTI, ``tests/support/e2e.py`` push_mails) and the same watches time push -> Deployment
created -> Pod created -> bound -> container running -> first mail at the sink. Peers, in the
same rounds (interleaved, order rotated each round), every clock started just before the push:

* the same group pushed again right after, while its worker is still up (within
  ``reaper.idleAfter``);
* workers kept running (the classic always-on setup), started before the rounds and each warmed
  by one untimed round: our worker process on the host with the worker pod's environment
  (BLPOP on the notify list, ``WORKER_BLOCK_FOR`` 5 s); Laravel's own ``php artisan queue:work
  redis --tries=3`` (``bench/laravel/artisan``, ``BENCH_PLAIN_LARAVEL=1``, as in scenario 3),
  its jobs the example app's queued Mailable made by Laravel's own producer, three ways: as
  documented (the redis connection's ``block_for`` 5, "Queues > Blocking", and ``--sleep=3``,
  the Supervisor example: scenario 1's settings), as shipped (``block_for`` null, Laravel's
  default: the worker polls and sleeps ``--sleep`` seconds after each empty pop; scenario 3's)
  and tuned for pickup (``block_for`` 5, ``--sleep=0`` and the mailer's ``tcp_nodelay``: the
  worker sleeps after an empty pop even when it blocked first, Illuminate\\Queue\\Worker).

KEDA's Redis list scaler, what a user would otherwise reach for, cannot run here (no image can
be pulled): its documented default ``pollingInterval`` (30 s) is cited as context, not measured.
Last, a rest window with the groups Idle again: CPU and RSS of the kept-running workers and of
the operator pod (what each side costs while nothing arrives).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import stop_process
from bench.kubebench import median_max, poll, redis_calls
from bench.report import Context, Plot, Result, Scenario, Table, fmt
from bench.scenarios.pause import oncpu_seconds
from bench.scenarios.worker import LARAVEL_ARTISAN, Setup, laravel_env
from sendgroup_worker.queue.keys import QueueKeys
from tests.support import dumps
from tests.support.cluster import REPO
from tests.support.e2e import (
    RELEASE,
    chart_values,
    push_mails,
    sendgroup_manifest,
    sendgroup_status,
)
from tests.support.helm import CHART, helm, values_args
from tests.support.node import NodeCluster, start_node, stop_node
from tests.support.php import php_bin
from tests.support.redis_server import RedisServer, free_port
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess

NS = "bench-first-mail"
JOBS = 5
LABEL_GROUP = "sendgroups.io/group"
IMAGES_SCRIPT = str(REPO / "hack" / "images" / "build")
OPERATOR_SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"
#: the chart's default reaperInterval (s): the install keeps it
REAPER_INTERVAL = 10
#: the idle groups' reaper.idleAfter: how soon their workers go after the queue empties (the
#: default, 30m, does not fit a benchmark; it plays no part once the group is Idle)
IDLE_AFTER = "5s"
#: seconds waited once the groups are Idle with no workers left: two more reaper passes (the
#: first after the reaping one hands the group to the observer's idle check) and a margin
SETTLE_S = 2 * REAPER_INTERVAL + 5
#: seconds of the at-rest window (full, --quick)
REST_S, REST_S_QUICK = 30.0, 10.0
#: the kept-running Laravel workers: queue (= side) -> (the redis connection's block_for,
#: queue:work --sleep, the smtp mailer's tcp_nodelay stream option): tuned for pickup (no
#: sleep between two blocking pops), as documented (scenario 1's) and as shipped (scenario 3's)
LARAVEL_SIDES = {
    "laravel-tuned": ("5", "0", "1"),
    "laravel-docs": ("5", "3", "0"),
    "laravel-shipped": ("null", "3", "0"),
}
#: Laravel's worker as scenario 3 runs it (the documentation's Supervisor example), its
#: --sleep and queue appended
LARAVEL_ARGV = ["queue:work", "redis", "--tries=3", "--quiet"]
ALWAYS_ON = ("host", *LARAVEL_SIDES)
IDLE_SIDES = ("wake", "up", *ALWAYS_ON)

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

    def forget(self, group: str) -> None:
        """Drop what was seen of ``group`` (its objects are gone: the next round starts)."""
        with self.lock:
            self.seen.pop(group, None)

    def _stream(self, lister: Callable[..., Any], handle: Callable[[dict[str, Any]], None]) -> None:
        from kubernetes import watch

        w = watch.Watch()
        self.watches.append(w)
        try:
            for event in w.stream(lister, self.namespace, timeout_seconds=3600):
                if event["type"] == "DELETED":  # a removed object is no milestone
                    continue
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

    def preflight() -> bool:
        logs = kube.kubectl("-n", NS, "logs", "-l", OPERATOR_SELECTOR, "--tail=-1", check=False)
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


def _host_env(env: dict[str, str], name: str) -> dict[str, str]:
    """The worker pod's environment (``env``) for a worker process on the host on queue
    ``mail-<name>``, its metrics on a free port."""
    return {
        **env,
        "SENDGROUP_QUEUE": f"mail-{name}",
        "SENDGROUP_NAME": name,
        "SENDGROUP_METRICS_PORT": str(free_port()),
    }


def _mails(sink: SmtpSink, domain: str, n: int, timeout: float) -> tuple[float, float]:
    """(first, last) arrival at the sink of the ``n`` mails to ``*domain``."""

    def found() -> tuple[float, float] | None:
        with sink.lock:
            times = sorted(m.at for m in sink.received if m.recipient.endswith(domain))
        return (times[0], times[-1]) if len(times) >= n else None

    value: tuple[float, float] = poll(found, timeout, f"{n} mails to *{domain}", interval=0.01)
    return value


def _group_objects(kube: Any, names: list[str]) -> str:
    """The Deployments and Pods (``kind/name`` lines) of the groups ``names``."""
    selector = f"{LABEL_GROUP} in ({','.join(names)})"
    out: str = kube.kubectl(
        "-n", NS, "get", "deployments,pods", "-l", selector, "-o", "name"
    ).stdout
    return out.strip()


def _wait_idle(kube: Any, names: list[str], timeout: float) -> None:
    """Until every group of ``names`` shows phase Idle and has no Deployment and no Pod left."""

    def idle() -> bool:
        phases = [sendgroup_status(kube, NS, n).get("phase") for n in names]
        return all(p == "Idle" for p in phases) and not _group_objects(kube, names)

    poll(idle, timeout, f"{names} Idle with no workers left", interval=0.5)


def _make_idle(kube: Any, rc: Any, sink: SmtpSink, names: list[str]) -> float:
    """Create the groups ``names`` (``reaper.idleAfter`` IDLE_AFTER, the rest defaults), one
    job each (delivered: each group has sent mail before), then wait until the operator
    removed their workers (phase Idle, no Deployment, no Pod) and one more reaper pass found
    them at rest (that pass hands an idle group to the observer's idle check). Returns the
    seconds it took."""
    started = time.monotonic()
    for name in names:
        push_mails(rc, f"mail-{name}", [f"first@pre-{name}.test"])
        manifest = sendgroup_manifest(
            name, NS, campaign="bench", host=f"{name}.test", reaper={"idleAfter": IDLE_AFTER}
        )
        kube.kubectl("apply", "-f", "-", input=manifest)
    for name in names:
        _mails(sink, f"@pre-{name}.test", 1, 180)
    _wait_idle(kube, names, 240)
    time.sleep(SETTLE_S)
    return time.monotonic() - started


def _laravel_env(
    ctx: Context, server: RedisServer, sink: SmtpSink, block_for: str, nodelay: str
) -> dict[str, str]:
    """Laravel's worker environment (scenario 3's, bench/scenarios/isolation.py): this Redis
    (on the pod network's gateway), no key prefix, the plain app (BENCH_PLAIN_LARAVEL=1), its
    smtp mailer to the sink (``nodelay`` "1": with PHP's ``tcp_nodelay`` socket option), the
    redis connection's ``block_for`` = ``block_for``."""
    env = {**os.environ, **laravel_env(Setup(server, ctx.peers_python, ctx.work_dir))}
    for k in [k for k in env if k.startswith(("MAIL_", "REDIS_URL"))]:
        del env[k]
    env.update(
        REDIS_HOST=server.host,
        BENCH_BLOCK_FOR=block_for,
        BENCH_PLAIN_LARAVEL="1",
        BENCH_MAIL_TCP_NODELAY=nodelay,
        MAIL_MAILER="smtp",
        MAIL_HOST=sink.host,
        MAIL_PORT=str(sink.port),
    )
    return env


def _laravel_payloads(env: dict[str, str], path: Path, queue: str, domain: str) -> list[bytes]:
    """JOBS queued-Mailable payloads to ``user<i>@<domain>``, made by Laravel's own producer
    (``bench:mail-payloads``, scenario 3's), outside the timed part."""
    subprocess.run(
        [php_bin(), str(LARAVEL_ARTISAN), "bench:mail-payloads", queue, str(JOBS), domain,
         str(path)],
        env=env, check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    return [line.rstrip(b"\n") for line in path.read_bytes().splitlines() if line.strip()]


def _rss_mib(pids: list[int]) -> float:
    import psutil

    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


def _pod_pids(kube: Any, selector: str) -> list[int]:
    """Host pids of the processes in the cgroups of the pods ``selector`` matches (the local
    node runs containers as host processes; a pod's cgroup path carries its UID)."""
    pods = json.loads(kube.kubectl("-n", NS, "get", "pods", "-l", selector, "-o", "json").stdout)
    uids = {p["metadata"]["uid"] for p in pods["items"]}
    keys = uids | {u.replace("-", "_") for u in uids}
    pids: list[int] = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cgroup = (d / "cgroup").read_text()
        except OSError:
            continue
        if any(k in cgroup for k in keys):
            pids.append(int(d.name))
    return pids


def _gone(kube: Any, what: str, name: str, selector: str, timeout: float) -> float:
    """Delete ``what``/``name`` and wait until it and every Deployment and Pod that
    ``selector`` matches are gone; returns the seconds it took (not timed in any round)."""
    started = time.monotonic()
    kube.kubectl("-n", NS, "delete", what, name, "--wait=false")

    def gone() -> bool:
        kinds = f"{what},deployments,pods"
        left = kube.kubectl("-n", NS, "get", kinds, "-l", selector, "-o", "name").stdout
        own = kube.kubectl("-n", NS, "get", what, name, "-o", "name", "--ignore-not-found")
        return not left.strip() and not own.stdout.strip()

    poll(gone, timeout, f"{what}/{name} and its workers gone", interval=0.5)
    return time.monotonic() - started


def _apply_section(
    ctx: Context, kube: Any, rc: Any, sink: SmtpSink, watcher: Watcher, repeats: int
) -> tuple[dict[str, list[dict[str, float]]], dict[str, str]]:
    """``kubectl apply`` of a SendGroup whose queue has jobs, a bare Pod of its worker spec and
    the worker started on the host, R rounds interleaved (order rotated by one each round, the
    operator path first in round 1: its Deployment gives the others their spec). Each side's
    objects are deleted, and gone, before the next side starts, so every side starts on the
    same node: no worker pod of an earlier side running or terminating beside it. Returns the
    raw rows (``operator_path``, ``bare_pod``, ``host_worker``) and the worker pod's plain
    environment (its ``valueFrom`` entries left out)."""
    rows: dict[str, list[dict[str, float]]] = {"operator_path": [], "bare_pod": [],
                                               "host_worker": []}  # fmt: skip
    spec: dict[str, Any] = {}
    env: dict[str, str] = {}
    order = list(rows)
    for i in range(repeats):
        shift = i % len(order)
        for side in order[shift:] + order[:shift]:
            if side == "operator_path":
                name = f"fm-{i}"
                push_mails(rc, f"mail-{name}", [f"r{j}@{name}.test" for j in range(JOBS)])
                t0 = time.time()
                kube.kubectl(
                    "apply",
                    "-f",
                    "-",
                    input=sendgroup_manifest(name, NS, campaign="bench", host=f"{name}.test"),
                )
            elif side == "bare_pod":
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
            else:
                name = f"host-{i}"
                push_mails(rc, f"mail-{name}", [f"r{j}@{name}.test" for j in range(JOBS)])
                worker_env = _host_env(env, name)
                t0 = time.time()
                worker = WorkerProcess(worker_env, name=name)
                try:
                    mail = _first_mail(sink, f"@{name}.test", 60)
                finally:
                    worker.stop()
                rows[side].append({"mail": mail - t0})
                ctx.log(f"{name}: first mail after {mail - t0:.2f}s")
                continue
            applied = time.time() - t0
            mail = _first_mail(sink, f"@{name}.test", 180)
            time.sleep(0.2)
            with watcher.lock:
                seen = dict(watcher.seen.get(name, {}))
            row = {"apply": applied, **{k: v - t0 for k, v in seen.items()}, "mail": mail - t0}
            rows[side].append(row)
            ctx.log(f"{name}: first mail after {row['mail']:.2f}s ({_fmt_row(row)})")
            if side == "operator_path" and not spec:
                spec = _worker_pod_spec(kube, name)
                env = {
                    v["name"]: str(v.get("value", ""))
                    for v in spec["containers"][0]["env"]
                    if "valueFrom" not in v
                }
            if side == "operator_path":
                took = _gone(kube, "sendgroup", name, f"{LABEL_GROUP}={name}", 240)
            else:
                took = _gone(kube, "pod", name, f"{LABEL_GROUP}={name}", 240)
            ctx.log(f"{name}: removed in {took:.1f}s")
    return rows, env


def _idle_section(
    ctx: Context,
    node: NodeCluster,
    server: RedisServer,
    sink: SmtpSink,
    watcher: Watcher,
    env: dict[str, str],
    repeats: int,
) -> dict[str, Any]:
    """Jobs arriving at an existing idle group, against workers kept running (module
    docstring). Returns the raw figures."""
    kube = node.kube
    rc = server.client()
    rng = random.Random(7)
    out: dict[str, Any] = {"idle_after": IDLE_AFTER, "rest_window_s": REST_S_QUICK if ctx.quick
                           else REST_S}  # fmt: skip
    names = [f"wake-{i}" for i in range(repeats)]
    out["setup_s"] = _make_idle(kube, rc, sink, names)
    ctx.log(f"{len(names)} groups idle after {out['setup_s']:.0f}s (workers reaped, settled)")

    procs: dict[str, list[int]] = {}
    laravel: list[subprocess.Popen[bytes]] = []
    host_worker = WorkerProcess(_host_env(env, "on-host"), name="on-host")
    try:
        procs["host"] = [host_worker.pid]
        payloads: dict[tuple[str, int], list[bytes]] = {}
        log = (ctx.work_dir / "laravel-always-on.log").open("wb")
        for side, (block_for, sleep, nodelay) in LARAVEL_SIDES.items():
            lenv = _laravel_env(ctx, server, sink, block_for, nodelay)
            for i in range(-1, repeats):  # -1: the untimed first job
                path = ctx.work_dir / f"{side}-{i}.jsonl"
                payloads[side, i] = _laravel_payloads(lenv, path, side, f"kept-{side}-{i}.test")
            argv = [php_bin(), str(LARAVEL_ARTISAN), *LARAVEL_ARGV, f"--sleep={sleep}",
                    f"--queue={side}"]  # fmt: skip
            proc = subprocess.Popen(argv, env=lenv, stdout=log, stderr=subprocess.STDOUT)
            laravel.append(proc)
            procs[side] = [proc.pid]

        def push(side: str, i: int) -> tuple[float, str]:
            """Push round ``i``'s JOBS jobs to ``side``'s queue; (push time, mail domain)."""
            domain = f"kept-{side}-{i}.test"
            if side.startswith("laravel"):
                keys = QueueKeys(side)
                t0 = time.time()
                dumps.push(rc, keys, payloads[side, i])
            else:
                recipients = [f"r{j}@{domain}" for j in range(JOBS)]
                t0 = time.time()
                push_mails(rc, "mail-on-host", recipients)
            return t0, domain

        # each kept-running worker delivers one round before the timed ones (a worker that has
        # been running has sent mail before: PHP's autoloaded classes, the script cache)
        for side in ALWAYS_ON:
            _, domain = push(side, -1)
            _mails(sink, f"@{domain}", JOBS, 120)
        ctx.log("kept-running workers warm: " + ", ".join(ALWAYS_ON))

        rounds: dict[str, list[dict[str, float]]] = {s: [] for s in IDLE_SIDES}
        order = ["wake", *ALWAYS_ON]
        for i in range(repeats):
            shift = i % len(order)
            for side in order[shift:] + order[:shift]:
                time.sleep(rng.uniform(0.5, 1.5))  # not in step with any poll
                if side != "wake":
                    if any(p.poll() is not None for p in [host_worker.proc, *laravel]):
                        raise RuntimeError("a kept-running worker exited (see the logs)")
                    t0, domain = push(side, i)
                    first, last = _mails(sink, f"@{domain}", JOBS, 120)
                    rounds[side].append({"mail": first - t0, "all": last - t0})
                    ctx.log(f"{side} round {i}: first mail after {first - t0:.3f}s")
                    continue
                name = names[i]
                if _group_objects(kube, [name]):
                    raise RuntimeError(f"{name} has workers before the push: not idle")
                watcher.forget(name)
                # the operator's idle check runs (some group of this Redis is watched): its
                # EXISTS calls over the second before the push
                calls0, c0 = redis_calls(rc).get("exists", 0), time.monotonic()
                time.sleep(1.0)
                exists_per_s = (redis_calls(rc).get("exists", 0) - calls0) / (time.monotonic() - c0)
                recipients = [f"r{j}@{name}.test" for j in range(JOBS)]
                t0 = time.time()
                push_mails(rc, f"mail-{name}", recipients)
                first, last = _mails(sink, f"@{name}.test", JOBS, 180)
                time.sleep(0.2)
                with watcher.lock:
                    seen = dict(watcher.seen.get(name, {}))
                seen.pop("operator", None)  # status writes: not a step of this path
                row = {**{k: v - t0 for k, v in seen.items()}, "mail": first - t0,
                       "all": last - t0, "pushed_at": t0,
                       "idle_check_exists_per_s": exists_per_s}  # fmt: skip
                rounds["wake"].append(row)
                ctx.log(f"{name}: first mail after {row['mail']:.2f}s ({_fmt_row(row)})")
                # the same group again while its worker is up (within reaper.idleAfter)
                time.sleep(rng.uniform(0.3, 0.8))
                if not _group_objects(kube, [name]):
                    ctx.log(f"{name}: workers already reaped, no kept-up round")
                    continue
                domain = f"up-{name}.test"
                t0 = time.time()
                push_mails(rc, f"mail-{name}", [f"r{j}@{domain}" for j in range(JOBS)])
                first, last = _mails(sink, f"@{domain}", JOBS, 60)
                rounds["up"].append({"mail": first - t0, "all": last - t0})
                ctx.log(f"{name} (workers up): first mail after {first - t0:.3f}s")
        out["rounds"] = rounds

        # at rest: the groups idle again (0 workers), the kept-running workers waiting
        _wait_idle(kube, names, 240)
        time.sleep(SETTLE_S)
        procs["operator"] = _pod_pids(kube, OPERATOR_SELECTOR)
        window = out["rest_window_s"]
        before = {side: oncpu_seconds(pids) for side, pids in procs.items()}
        t = time.monotonic()
        time.sleep(window)
        after = {side: oncpu_seconds(pids) for side, pids in procs.items()}
        elapsed = time.monotonic() - t
        out["rest"] = {
            side: {
                "cpu_ms_per_s": (after[side] - before[side]) * 1000 / elapsed,
                "rss_mib": _rss_mib(pids),
                "processes": len(pids),
            }
            for side, pids in procs.items()
        }
        out["rest"]["operator"]["groups"] = len(names)
        ctx.log(f"at rest ({elapsed:.0f}s): {json.dumps(out['rest'])}")
    finally:
        host_worker.stop()
        for proc in laravel:
            stop_process(proc)
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

        apply_rounds, env = _apply_section(ctx, kube, rc, sink, watcher, repeats)
        raw.update(apply_rounds)

        raw["idle"] = _idle_section(ctx, node, server, sink, watcher, env, repeats)
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
    return ", ".join(f"{k} {v:.2f}" for k, v in row.items() if k != "pushed_at")


def _col(rows: list[dict[str, float]], key: str) -> list[float]:
    return [r[key] for r in rows if key in r]


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _span(values: list[float]) -> str:
    """``min-max`` of ``values`` (cells as :func:`bench.report.fmt` writes them)."""
    return f"{fmt(min(values))}-{fmt(max(values))}" if values else "-"


def _t(seconds: float) -> str:
    """A duration for a sentence: milliseconds below 0.1 s, else seconds."""
    return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds:.2f} s"


def _x(ratio: float) -> str:
    return f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.1f}x"


def _paired(a: list[dict[str, float]], b: list[dict[str, float]], key: str) -> list[float]:
    """Per round, ``a``'s ``key`` over ``b``'s (the same round of the interleaved order)."""
    return [x[key] / y[key] for x, y in zip(a, b, strict=False) if y.get(key)]


def _result(raw: dict[str, Any]) -> Result:
    op, bare, host = raw["operator_path"], raw["bare_pod"], raw["host_worker"]
    steps = [("apply", "kubectl apply returned"), *STEPS]
    rows: list[list[Any]] = []
    for key, label in steps:
        bare_vals = [] if key in ("operator", "deployment") else _col(bare, key)
        rows.append(
            [label, _med(_col(op, key)), _span(_col(op, key)), _med(bare_vals), _span(bare_vals)]
        )
    med_host = _med(_col(host, "mail"))
    rows.append(
        ["worker on the host: start -> first mail", med_host, _span(_col(host, "mail")), None, None]
    )
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
    behind = [x["mail"] - y["mail"] for x, y in zip(op, bare, strict=False)]
    findings = [
        f"Median apply -> first mail: {med['mail']:.2f} s through the operator, "
        f"{bare_mail:.2f} s for a bare Pod with the same spec, {med_host:.2f} s for the worker "
        f"process on the host; the operator's own share (apply -> Deployment) is "
        f"{med['deployment']:.2f} s. Per round, the SendGroup's first mail minus the bare "
        f"Pod's: {statistics.median(behind):+.2f} s ({min(behind):+.2f} to "
        f"{max(behind):+.2f}).",
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
        "interleaved rounds, median and range)",
        columns=[
            "milestone (s after apply)",
            "operator median",
            "operator range",
            "bare Pod median",
            "bare Pod range",
        ],
        rows=rows,
        note=(
            "Times are seconds after `kubectl apply` started, seen by watches in the benchmark "
            "process (kubelet-reported container state arrives after the container started). "
            f"Node up (images cached) took {raw['node_up_s']:.0f} s, operator install "
            f"{raw['operator_install_s']:.0f} s (not included). Bare Pod: the operator's "
            "worker pod spec applied as a plain Pod. Last row: the worker process started on "
            "the host with the same environment. Rounds interleaved (SendGroup, bare Pod, host "
            "worker, the order rotated by one each round); each side's SendGroup or Pod was "
            "deleted and its worker pods gone before the next side started (not timed)."
        ),
    )
    tables = [table]
    bars = {
        "SendGroup (operator)": med["mail"],
        "bare Pod": bare_mail,
        "worker on host": med_host,
    }
    plots = [
        Plot(
            filename="first-mail.png",
            title="kubectl apply -> first mail (median, s)",
            ylabel="seconds",
            bars=bars,
        )
    ]
    if "idle" in raw:
        idle_tables, idle_plot, idle_findings = _idle_result(raw["idle"], raw["repeats"])
        tables += idle_tables
        plots.append(idle_plot)
        findings += idle_findings
    return Result(tables=tables, plots=plots, findings=findings, raw=raw)


IDLE_LABELS = {
    "wake": "SendGroup, Idle (0 workers): the operator wakes it",
    "up": "SendGroup, its worker still up (within reaper.idleAfter)",
    "host": "our worker kept running on the host (WORKER_BLOCK_FOR 5)",
    "laravel-tuned": "Laravel queue:work kept running, tuned (block_for 5, --sleep=0, tcp_nodelay)",
    "laravel-docs": "Laravel queue:work kept running, as documented (block_for 5, --sleep=3)",
    "laravel-shipped": "Laravel queue:work kept running, as shipped (block_for null, --sleep=3)",
}
KEDA_ROW = (
    "KEDA Redis list scaler, Deployment at 0 replicas (pollingInterval default 30 s): first mail"
)
KEDA = (
    "KEDA's Redis list scaler checks each trigger every `pollingInterval`, default 30 s "
    "(https://keda.sh/docs/latest/reference/scaledobject-spec/, `pollingInterval: 30 # "
    "Optional. Default: 30 seconds`); not measured here (no image can be pulled)"
)


def _idle_check_text(wake: list[dict[str, float]]) -> str:
    """What the idle check did in the second before each push (EXISTS calls per second on the
    groups' Redis: 2 while it polls every 0.5 s; about 0 with client tracking, which sends none
    between its 60 s checks)."""
    rates = [r["idle_check_exists_per_s"] for r in wake if "idle_check_exists_per_s" in r]
    if not rates:
        return ""
    text = (
        f" The operator's idle check polled before every push ({min(rates):.1f}-"
        f"{max(rates):.1f} EXISTS/s in the second before it)."
    )
    stopped = [str(i) for i, r in enumerate(rates) if r == 0]
    if stopped:
        text = (
            " The operator's idle check sent no EXISTS in the second before the push of "
            f"round(s) {', '.join(stopped)} (client tracking: Redis names the pushed key, no "
            "poll; or no group of that Redis watched yet)."
        )
    return text + " "


def _idle_result(idle: dict[str, Any], repeats: int) -> tuple[list[Table], Plot, list[str]]:
    rounds: dict[str, list[dict[str, float]]] = idle["rounds"]
    wake = rounds["wake"]
    rows: list[list[Any]] = []
    for key, label in STEPS[1:]:
        vals = _col(wake, key)
        rows.append([f"{IDLE_LABELS['wake']}: {label}", _med(vals), _span(vals),
                     _med(_col(wake, "all")) if key == "mail" else None, None])  # fmt: skip
    for side in IDLE_SIDES[1:]:
        vals = _col(rounds[side], "mail")
        ratios = _paired(wake, rounds[side], "mail")
        ratio = f"{_x(_med(ratios))} ({_span(ratios)})" if ratios else "-"
        rows.append([f"{IDLE_LABELS[side]}: first mail", _med(vals), _span(vals),
                     _med(_col(rounds[side], "all")), ratio])  # fmt: skip
    rows.append([KEDA_ROW, "not measured", "-", None, None])
    table = Table(
        title=f"Jobs arriving at an existing idle group: push of {JOBS} mail jobs -> first mail "
        f"at the sink ({repeats} interleaved rounds, median and range)",
        columns=[
            "side: milestone (s after the push)",
            "median",
            "range",
            f"all {JOBS} mails, median",
            "idle group over it, per round",
        ],
        rows=rows,
        note=(
            "Every clock starts just before the push (ours: the producer's RPUSH ready + RPUSH "
            "notify in one MULTI, tests/support/e2e.py push_mails, the payloads built inside the "
            "clock; Laravel: its own payloads, made beforehand by its producer, pushed with its "
            "push script). Milestones are seen by the same watches as above, first mail by the "
            "sink. Idle group: created with one job, delivered, then reaped by the operator "
            f"(reaper.idleAfter {idle['idle_after']}, reaperInterval {REAPER_INTERVAL} s: "
            "Deployment deleted, phase Idle), then given two more reaper passes and 5 s (the "
            "first pass after the reaping one hands it to the operator's idle check, which "
            "wakes it when jobs arrive: Redis' client tracking names the pushed key, polled "
            "with one EXISTS per Redis every 0.5 s where tracking is refused); "
            f"{idle['setup_s']:.0f} s of setup, not timed. Workers still up: the same group "
            "pushed again once its round's mails arrived. Kept-running workers: started before "
            "the rounds, each sent one untimed round first; ours with the worker pod's "
            "environment; Laravel: Debian's Laravel 8.83, `php artisan queue:work redis "
            "--queue=Q --sleep=S --tries=3 --quiet`, the plain app (BENCH_PLAIN_LARAVEL=1), its "
            "queued Mailable sent by SwiftMailer; as documented: block_for 5 "
            "(https://laravel.com/docs/8.x/queues#blocking) and --sleep=3 "
            "(https://laravel.com/docs/8.x/queues#supervisor-configuration), scenario 1's "
            "settings; as shipped: block_for null (Laravel's default config/queue.php: the "
            "worker polls, sleeping 3 s after each empty pop), scenario 3's; tuned: block_for 5, "
            "--sleep=0 (no sleep between two blocking pops) and the smtp mailer's `stream` option "
            "set to PHP's tcp_nodelay (scenario 3's strongest Laravel peer: without it "
            "SwiftMailer's end of DATA waits ~40 ms for the sink's delayed ACK), the strongest "
            "Laravel peer for this case we could set up. "
            "Rounds interleaved, the order rotated by one each round; a random 0.5-1.5 s pause "
            f"before each push. {KEDA}."
        ),
    )
    rest: dict[str, dict[str, float]] = idle["rest"]
    op = rest["operator"]
    rest_rows: list[list[Any]] = [
        ["SendGroup Idle: worker processes", 0, 0.0, 0.0, "-"],
        [
            f"operator pod (every container of it; here {int(op['groups'])} idle groups)",
            int(op["processes"]),
            op["cpu_ms_per_s"],
            op["rss_mib"],
            "one per cluster, shared by every group",
        ],
    ]
    for side in ALWAYS_ON:
        r = rest[side]
        rest_rows.append([IDLE_LABELS[side], int(r["processes"]), r["cpu_ms_per_s"],
                          r["rss_mib"], "one per queue, at least"])  # fmt: skip
    rest_table = Table(
        title=f"At rest, after the rounds ({idle['rest_window_s']:.0f} s window, the groups "
        "Idle again, the kept-running workers waiting)",
        columns=["side", "processes", "CPU ms/s", "RSS MiB", "how many"],
        rows=rest_rows,
        note=(
            "CPU: on-CPU time of the processes over the window (/proc/PID/task/*/schedstat, "
            "every thread, nanoseconds), milliseconds per second (1000 = one core). Operator "
            "pod: every process of the pod's cgroups on the node (the operator and the pod's "
            "pause process); its idle check does not grow with the idle groups of one Redis "
            "(per Redis, up to 500 groups each: with client tracking one EXISTS and one PING "
            "every 60 s, polled one EXISTS every 0.5 s; observer.py). "
            "redis-server's share is not split per client here."
        ),
    )
    m = {side: _med(_col(rounds[side], "mail")) for side in IDLE_SIDES}
    wm = {key: _med(_col(wake, key)) for key, _ in STEPS[1:]}
    ratio = {side: _med(_paired(wake, rounds[side], "mail")) for side in ALWAYS_ON}
    short = {
        "host": "ours on the host",
        "laravel-tuned": "Laravel tuned",
        "laravel-docs": "Laravel as documented",
        "laravel-shipped": "Laravel as shipped",
    }
    rh = rest["host"]
    findings = [
        f"Jobs pushed to an existing idle group (0 workers), median over {repeats} rounds: first "
        f"mail {m['wake']:.2f} s ({_span(_col(wake, 'mail'))}) after the push. A worker kept "
        "running mails after "
        + ", ".join(f"{_t(m[side])} ({short[side]})" for side in ALWAYS_ON)
        + "; the group whose worker is still up (within reaper.idleAfter) after "
        f"{_t(m['up'])}. **We lose** to every kept-running worker: scale-to-zero adds "
        f"{m['wake'] - m['host']:.2f} s to the first mail ("
        + ", ".join(f"{_x(ratio[side])} {short[side]}" for side in ALWAYS_ON)
        + "; the idle group's time over the other's, per round, medians). Laravel as documented "
        "and as shipped sleep 3 s whenever a pop finds nothing (Illuminate\\Queue\\Worker: "
        "--sleep after an empty pop, also after block_for's 5 s wait), so a push may wait up to "
        "3 s there.",
        "Where the idle group's time goes (medians): push -> Deployment created "
        f"{wm['deployment']:.2f} s (the operator's idle check: Redis' client tracking names "
        "the pushed key, then one reconcile pass); "
        f"-> Pod {wm['pod'] - wm['deployment']:.2f} s; -> scheduled "
        f"{wm['scheduled'] - wm['pod']:.2f} s; -> container running "
        f"{wm['running'] - wm['scheduled']:.2f} s; -> first mail "
        f"{wm['mail'] - wm['running']:.2f} s (the worker's start-up)."
        + _idle_check_text(wake)
        + "Before issue 15's observer, push -> Deployment took ~5.75 s on average (the "
        "reaper's 10 s pass; bench/scale, control plane without a node).",
        f"What the always-on side costs at rest: our worker {rh['cpu_ms_per_s']:.2f} ms CPU/s "
        f"and {rh['rss_mib']:.0f} MiB; Laravel's "
        + ", ".join(
            f"{rest[side]['cpu_ms_per_s']:.2f} ms/s and {rest[side]['rss_mib']:.0f} MiB "
            f"({short[side].removeprefix('Laravel ')})"
            for side in ALWAYS_ON[1:]
        )
        + "; per queue, for as long as it waits (on Kubernetes also the pod's requests, "
        "reserved on a node). An Idle SendGroup has no process; the operator pod "
        f"({op['cpu_ms_per_s']:.2f} ms/s, {op['rss_mib']:.0f} MiB here with "
        f"{int(op['groups'])} idle groups) runs once for every group. A group that must answer "
        "in milliseconds can keep its workers: reaper.idleAfter (default 30m) is how long they "
        "stay after the queue empties, at the kept-running cost.",
        f"Context, not measured: {KEDA}. A Deployment that KEDA keeps at 0 replicas sees the "
        "push at its next poll, up to 30 s later (15 s on average) with the default, before "
        "the same pod start; a lower pollingInterval shortens that at the cost of more "
        "polling.",
    ]
    plot = Plot(
        filename="first-mail-idle.png",
        title="Push to an idle queue -> first mail (median, s, log scale)",
        ylabel="seconds",
        bars={
            "SendGroup Idle": m["wake"],
            "SendGroup, worker up": m["up"],
            "ours kept running": m["host"],
            "Laravel tuned": m["laravel-tuned"],
            "Laravel as documented": m["laravel-docs"],
            "Laravel as shipped": m["laravel-shipped"],
        },
        log_y=True,
    )
    return [table, rest_table], plot, findings


SCENARIO = Scenario(
    key="first-mail",
    number=7,
    title="Time to first mail on the local node",
    run=run,
    needs_cluster=True,
)
