"""Scenario 6: the operator at scale on the local control plane (no node: pods stay Pending).

Two mixes of N SendGroups (1,000; 100 with --quick), spread round-robin over K = 10 namespaces
and created before the operator starts; the operator watches every namespace
(``SENDGROUP_WATCH_NAMESPACES=*``, its ServiceAccount's Role rules bound cluster-wide, as a
many-tenant install runs it: ``bench.scale._rbac``):

* idle: empty queues, so every group ends Pending with no children;
* busy: a few jobs in every queue, so every group gets its worker Deployment and ends Running
  (the controller manager makes the ReplicaSets and Pods, which stay Pending).

Rounds: each (round, mix) on a fresh control plane and a fresh Redis, the mixes interleaved
(idle, busy, idle, busy, ...); 3 rounds (2 with --quick). ``BENCH_OPERATOR_GROUPS``,
``BENCH_OPERATOR_ROUNDS`` and ``BENCH_OPERATOR_REST`` (seconds) override N, the rounds and the
rest window (the report gives the values used). In each:

1. cold start: from the operator's process spawn (production defaults: reaper every 10 s,
   status refresh 60 s) until every group has ``status.observedGeneration ==
   metadata.generation`` and the expected phase (busy: and its Deployment exists), seen by one
   watch of the SendGroups (no LIST polling loading the API server during the run); the
   process' API requests (the API server's APF counter of the ServiceAccount flow schema:
   kopf's watches, patches and events included), its Redis commands and CPU;
2. round 1 only: a window at rest (300 s; 60 s with --quick), longer than every periodic
   request (kopf, the status refresh every 60 s, the reaper every 10 s): API requests per
   minute, the reconciler's own request counter, SendGroup writes, Redis commands per minute
   (``INFO commandstats``), CPU and RSS; other rounds wait 20 s after kopf's bookkeeping;
3. restart: SIGTERM to the operator, then a new process; from its spawn until the sum of its
   ``sendgroup_groups{phase=...}`` gauge (the distinct groups the new process has passed:
   ``GroupTable``, updated after every pass) reaches N, polled every 0.5 s; the API requests
   until then and in the 15 s after, and the SendGroups written from before the SIGTERM to
   the end of those 15 s;
4. the peers, after the operator stopped (it watches every namespace, so they cannot run beside
   it), each a separate process (``python -m bench.operator_peer``) clocked from spawn to exit
   as ours is clocked from spawn, same ServiceAccount: the restart's floor, one cluster-wide
   LIST of the same N groups (3 spawns); the cold start's floor, the API server's minimal
   client (one keep-alive pool, 16 requests in flight) on N new groups in K new namespaces: one
   LIST per namespace, then per group the operator's own status body as one status PATCH and,
   busy, the operator's own Deployment (renamed) as one POST.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.kubebench import (
    SA_FLOW_SCHEMA,
    apf_dispatched,
    proc_stats,
    redis_calls,
    redis_calls_delta,
)
from bench.report import Context, Plot, Result, Scenario, Table
from bench.scale import _deployments, _list, _rbac, kopf_handled, passed_groups
from bench.scenarios.memory import spread
from sendgroup_operator import tenancy
from sendgroup_worker.producer import make_mail_payload
from sendgroup_worker.queue.keys import QueueKeys
from tests.support import manifests
from tests.support.cluster import KubeCluster, apply_crds, start_cluster, stop_cluster
from tests.support.operator_proc import OperatorProcess
from tests.support.redis_server import RedisServer

GROUP, VERSION, PLURAL = "sendgroups.io", "v1alpha1", "sendgroups"
EXPECTED_PHASE = {"idle": "Pending", "busy": "Running"}
JOBS_PER_BUSY_GROUP = 3
PEER_CONCURRENCY = 16
REAPER_INTERVAL = 10  # the chart's default (api.md reaperInterval)
STATUS_REFRESH = 60  # the chart's default
NAMESPACES = 10
SETTLE_S = 20.0  # rounds without the rest window: after kopf's bookkeeping, before the restart
RESTART_TAIL_S = 15.0  # after the restarted process passed every group: its writes still count
LIST_SPAWNS = 3
REPO = Path(__file__).resolve().parents[2]


def _names(mix: str, n: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{mix}-{i:04d}" for i in range(n)]


def _create_groups(kube: KubeCluster, namespaces: list[str], names: list[str]) -> float:
    """``kubectl create`` the SendGroups round-robin over ``namespaces`` (one POST each);
    returns the seconds it took."""
    docs = [
        manifests.sendgroup(
            name,
            {"campaign": "bench", "host": f"{name}.example.com"},
            namespaces[i % len(namespaces)],
        )
        for i, name in enumerate(names)
    ]
    started = time.monotonic()
    for chunk in range(0, len(docs), 500):
        kube.kubectl(
            "create", "-f", "-", input=manifests.stream(*docs[chunk : chunk + 500]), timeout=900
        )
    return time.monotonic() - started


def _push_jobs(server: RedisServer, namespaces: list[str], names: list[str]) -> None:
    """A few jobs in every group's default queue (``<namespace>.mail-<name>``: the operator
    serves several namespaces, so its queue-name policy is on)."""
    client = server.client()
    pipe = client.pipeline(transaction=False)
    for i, name in enumerate(names):
        ns = namespaces[i % len(namespaces)]
        keys = QueueKeys(tenancy.default_queue(ns, name, policy_on=True))
        payloads = [
            make_mail_payload(
                f"r{j}@{name}.example.com", from_="bench@sender.test", subject="x", text="x"
            )
            for j in range(JOBS_PER_BUSY_GROUP)
        ]
        pipe.rpush(keys.ready, *payloads)
        pipe.rpush(keys.notify, *(["1"] * len(payloads)))
    pipe.execute()


def _key(item: dict[str, Any]) -> str:
    return f"{item['metadata']['namespace']}/{item['metadata']['name']}"


def _reconciled(item: dict[str, Any], phase: str) -> bool:
    status = item.get("status") or {}
    return (
        status.get("observedGeneration") == item["metadata"].get("generation")
        and status.get("phase") == phase
    )


class GroupWatch:
    """The SendGroups of ``namespaces`` as one cluster-wide watch (the bench's admin client)
    sees them: which are reconciled (``phase``), which kopf has handled, and when all ``n``
    first were (monotonic seconds), events read in short requests by :meth:`pump`."""

    def __init__(self, kube: KubeCluster, namespaces: list[str], phase: str, n: int) -> None:
        from kubernetes import client

        self.api = client.CustomObjectsApi(kube.api_client())
        self.namespaces, self.phase, self.n = set(namespaces), phase, n
        self.done: set[str] = set()
        self.handled: set[str] = set()
        self.t0: float | None = None
        self.progress: list[tuple[float, float]] = [(0.0, 0.0)]
        self.all_done_at: float | None = None
        self.all_handled_at: float | None = None
        self.rv = self._relist()

    def _relist(self) -> str:
        resp = self.api.list_cluster_custom_object(GROUP, VERSION, PLURAL, _preload_content=False)
        listing = json.loads(resp.data)
        for item in listing["items"]:
            self._put(item)
        return str(listing["metadata"]["resourceVersion"])

    def _put(self, item: dict[str, Any]) -> None:
        if item["metadata"]["namespace"] not in self.namespaces:
            return
        key, before = _key(item), len(self.done)
        (self.done.add if _reconciled(item, self.phase) else self.done.discard)(key)
        (self.handled.add if kopf_handled(item) else self.handled.discard)(key)
        now = time.monotonic()
        if self.t0 is not None and len(self.done) != before:
            self.progress.append((now - self.t0, float(len(self.done))))
        if self.all_done_at is None and len(self.done) == self.n:
            self.all_done_at = now
        if self.all_handled_at is None and len(self.handled) == self.n:
            self.all_handled_at = now

    def pump(self, seconds: int, until: Any) -> None:
        """Read watch events for up to ``seconds`` (whole seconds) or until ``until()``."""
        from kubernetes.watch.watch import iter_resp_lines

        resp = self.api.list_cluster_custom_object(
            GROUP,
            VERSION,
            PLURAL,
            watch=True,
            resource_version=self.rv,
            allow_watch_bookmarks=True,
            timeout_seconds=seconds,
            _preload_content=False,
        )
        try:
            for line in iter_resp_lines(resp):
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:  # too old: list again
                        self.rv = self._relist()
                        return
                    raise RuntimeError(f"watch error: {obj}")
                self.rv = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._put(obj)
                elif event["type"] == "DELETED":
                    self.done.discard(_key(obj))
                    self.handled.discard(_key(obj))
                if until():
                    return
        finally:
            resp.close()
            resp.release_conn()


def _operator(
    ctx: Context, kubeconfig: Path, home: str, server: RedisServer, log: str
) -> OperatorProcess:
    return OperatorProcess(
        kubeconfig,
        home,
        server.url,
        ctx.artifact(log),
        SENDGROUP_WATCH_NAMESPACES="*",
        SENDGROUP_REAPER_INTERVAL=str(REAPER_INTERVAL),
        SENDGROUP_STATUS_REFRESH=str(STATUS_REFRESH),
        SENDGROUP_DEFAULT_IMAGE="sendgroup-worker:dev",
    )


def _writes(
    before: dict[str, dict[str, Any]], later: list[dict[str, Any]]
) -> tuple[int, Counter[str]]:
    changed = Counter[str]()
    writes = 0
    for item in later:
        old = before.get(_key(item))
        if old is None or old["metadata"]["resourceVersion"] != item["metadata"]["resourceVersion"]:
            writes += 1
            changed.update(_changed_fields(old or {}, item))
    return writes, changed


def _peer(ctx: Context, *args: str) -> dict[str, Any]:
    """``python -m bench.operator_peer ARGS``: its JSON line plus ``spawn_s`` (spawn -> exit)."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.operator_peer", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    spawn_s = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"peer {args[1:]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["spawn_s"] = spawn_s
    return out


def _round(ctx: Context, mix: str, r: int, n: int, k: int, rest: float) -> dict[str, Any]:
    """One (round, mix) on its own control plane and Redis: cold start, [rest], restart,
    the peers."""
    state = ctx.work_dir / f"cluster-{r}-{mix}" / "state"
    t = time.monotonic()
    kube = start_cluster(state)
    out: dict[str, Any] = {"round": r + 1, "control_plane_up_s": time.monotonic() - t}
    server = RedisServer().start()
    ops: list[OperatorProcess] = []
    try:
        apply_crds(kube)
        namespaces = [f"op-{mix}-{i:02d}" for i in range(k)]
        peer_namespaces = [f"peer-{mix}-{i:02d}" for i in range(k)]
        for ns in namespaces + peer_namespaces:
            kube.kubectl("create", "namespace", ns)
        kubeconfig = _rbac(
            kube, namespaces[0], [], ctx.work_dir / f"{mix}-{r}.kubeconfig", clusterwide=True
        )
        names = _names(mix, n)
        out["create_s"] = _create_groups(kube, namespaces, names)
        if mix == "busy":
            _push_jobs(server, namespaces, names)
        ctx.log(
            f"round {r + 1} {mix}: control plane up in {out['control_plane_up_s']:.1f}s, "
            f"{n} SendGroups in {k} namespaces created in {out['create_s']:.1f}s"
        )
        out.update(_ours(ctx, kube, server, mix, r, n, namespaces, kubeconfig, rest, ops))
        for op in ops:
            op.stop()
        # the restart's floor: one cluster-wide LIST of the same N groups, from spawn
        out["peer_list"] = [_peer(ctx, str(kubeconfig), "--list-only") for _ in range(LIST_SPAWNS)]
        if any(p["items"] != n for p in out["peer_list"]):
            raise RuntimeError(f"peer LIST saw {[p['items'] for p in out['peer_list']]}, not {n}")
        out["peer"] = _cold_peer(ctx, kube, mix, n, peer_namespaces, kubeconfig, out)
        ctx.log(
            f"round {r + 1} {mix}: ours {out['reconcile_s']:.1f}s, peer "
            f"{out['peer']['spawn_s']:.1f}s from spawn "
            f"({out['peer']['work_s']:.1f}s after set-up); "
            f"restart {out['restart']['seconds']:.1f}s, peer LIST "
            f"{statistics.median(p['spawn_s'] for p in out['peer_list']):.2f}s"
        )
        out["control_plane_rss_mib"] = kube.rss_mib()
    finally:
        for op in ops:
            op.stop()
        server.cleanup()
        stop_cluster(state)
    out.pop("template", None)
    return out


def _ours(
    ctx: Context,
    kube: KubeCluster,
    server: RedisServer,
    mix: str,
    r: int,
    n: int,
    namespaces: list[str],
    kubeconfig: Path,
    rest: float,
    ops: list[OperatorProcess],
) -> dict[str, Any]:
    phase = EXPECTED_PHASE[mix]
    rc = server.client()
    watch = GroupWatch(kube, namespaces, phase, n)
    op = _operator(ctx, kubeconfig, namespaces[0], server, f"operator-{mix}-r{r + 1}.log")
    ops.append(op)
    apf0, redis0 = apf_dispatched(kube), redis_calls(rc)
    started = time.monotonic()
    op.start()
    watch.t0 = started
    assert op.proc is not None
    pid = op.proc.pid
    preflight_s: float | None = None
    deadline = started + 120 + n * 0.6

    def check() -> None:
        nonlocal preflight_s
        if not op.running():
            raise RuntimeError(f"operator exited:\n{op.log()[-3000:]}")
        if preflight_s is None and "preflight ok" in op.log():
            preflight_s = time.monotonic() - started
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{mix}: {len(watch.done)}/{n} groups reconciled, {len(watch.handled)} handled "
                f"by kopf after {time.monotonic() - started:.0f}s"
            )

    while watch.all_done_at is None:
        check()
        watch.pump(1, lambda: watch.all_done_at is not None)
    done_at = watch.all_done_at
    if mix == "busy":  # the Deployments are written before the status that says Running
        while _deployments(kube, namespaces) < n:
            check()
            time.sleep(0.5)
            done_at = time.monotonic()
    reconcile_s = done_at - started
    cold = proc_stats(pid)
    apf1, redis1 = apf_dispatched(kube), redis_calls(rc)
    ctx.log(f"round {r + 1} {mix}: all {n} reconciled after {reconcile_s:.1f}s")
    while watch.all_handled_at is None:
        check()
        watch.pump(1, lambda: watch.all_handled_at is not None)
    settled_s = watch.all_handled_at - started
    out: dict[str, Any] = {
        "groups": n,
        "namespaces": len(namespaces),
        "preflight_s": preflight_s,
        "reconcile_s": reconcile_s,
        "settled_s": settled_s,
        "progress": watch.progress,
        "cold_api_requests": apf1.get(SA_FLOW_SCHEMA, 0) - apf0.get(SA_FLOW_SCHEMA, 0),
        "cold_redis_commands": sum(redis_calls_delta(redis0, redis1).values()),
        "cold_cpu_s": cold["cpu_s"],
        "cold_rss_mib": cold["rss_mib"],
    }
    time.sleep(3)  # the last events and status patches land
    if rest:
        ctx.log(f"round {r + 1} {mix}: kopf done after {settled_s:.1f}s; at rest for {rest:.0f}s")
        out["rest"] = _rest(kube, rc, op, pid, namespaces, n, rest)
    else:
        time.sleep(SETTLE_S)
    sample = next(
        i for i in _list(kube, namespaces[:1]) if i["metadata"]["name"] == _names(mix, 1)[0]
    )
    out["sample_status"] = sample.get("status") or {}
    if mix == "busy":
        from kubernetes import client

        resp = client.AppsV1Api(kube.api_client()).read_namespaced_deployment(
            f"sg-{sample['metadata']['name']}", namespaces[0], _preload_content=False
        )
        out["template"] = json.loads(resp.data)
    out["pool_full_warnings"] = op.log().count("Connection pool is full")
    out["restart"] = _restart(ctx, kube, server, mix, r, n, namespaces, kubeconfig, op, ops)
    return out


def _rest(
    kube: KubeCluster,
    rc: Any,
    op: OperatorProcess,
    pid: int,
    namespaces: list[str],
    n: int,
    rest: float,
) -> dict[str, Any]:
    before = {_key(i): i for i in _list(kube, namespaces)}
    a_apf, a_redis, a_proc = apf_dispatched(kube), redis_calls(rc), proc_stats(pid)
    a_kube, a_pass = _kube_counter(op), _counter(op, "sendgroup_reconcile_seconds_count")
    t_a = time.monotonic()
    time.sleep(rest)
    b_apf, b_redis, b_proc = apf_dispatched(kube), redis_calls(rc), proc_stats(pid)
    b_kube, b_pass = _kube_counter(op), _counter(op, "sendgroup_reconcile_seconds_count")
    window = time.monotonic() - t_a
    writes, changed = _writes(before, _list(kube, namespaces))
    per_min = 60 / window
    rest_redis = redis_calls_delta(a_redis, b_redis)
    return {
        "window_s": window,
        "api_per_min": (b_apf.get(SA_FLOW_SCHEMA, 0) - a_apf.get(SA_FLOW_SCHEMA, 0)) * per_min,
        "reconciler_per_min": (b_kube - a_kube) * per_min,
        "writes": writes,
        "changed_fields": dict(changed.most_common(12)),
        "redis_per_min": sum(rest_redis.values()) * per_min,
        "redis_by_command": rest_redis,
        "passes_per_group_min": (b_pass - a_pass) * per_min / n,
        "cpu_pct": (b_proc["cpu_s"] - a_proc["cpu_s"]) / window * 100,
        "rss_mib": b_proc["rss_mib"],
        "hwm_mib": b_proc["hwm_mib"],
    }


def _restart(
    ctx: Context,
    kube: KubeCluster,
    server: RedisServer,
    mix: str,
    r: int,
    n: int,
    namespaces: list[str],
    kubeconfig: Path,
    old: OperatorProcess,
    ops: list[OperatorProcess],
) -> dict[str, Any]:
    """SIGTERM ``old``, spawn a new operator; until its ``sendgroup_groups`` sum is N."""
    before = {_key(i): i for i in _list(kube, namespaces)}
    apf_a = apf_dispatched(kube)
    t = time.monotonic()
    old.stop()
    stop_s = time.monotonic() - t
    apf_b = apf_dispatched(kube)
    op = _operator(ctx, kubeconfig, namespaces[0], server, f"operator-{mix}-r{r + 1}-restart.log")
    ops.append(op)
    started = time.monotonic()
    op.start()
    assert op.proc is not None
    series: list[tuple[float, float]] = []
    while True:
        if not op.running():
            raise RuntimeError(f"restarted operator exited:\n{op.log()[-3000:]}")
        passed = passed_groups(op)
        now = time.monotonic() - started
        series.append((round(now, 2), float(passed)))
        if passed >= n:
            break
        if now > 120 + n * 0.3:
            raise TimeoutError(f"restart {mix}: {passed}/{n} groups passed after {now:.0f}s")
        time.sleep(0.5)
    seconds = time.monotonic() - started
    cpu = proc_stats(op.proc.pid)
    apf_c = apf_dispatched(kube)
    time.sleep(RESTART_TAIL_S)
    apf_d = apf_dispatched(kube)
    writes, changed = _writes(before, _list(kube, namespaces))
    sa = SA_FLOW_SCHEMA
    out = {
        "seconds": seconds,
        "stop_s": stop_s,
        "stop_api_requests": apf_b.get(sa, 0) - apf_a.get(sa, 0),
        "api_requests": apf_c.get(sa, 0) - apf_b.get(sa, 0),
        "tail_api_requests": apf_d.get(sa, 0) - apf_c.get(sa, 0),
        "writes": writes,
        "changed_fields": dict(changed.most_common(12)),
        "cpu_s": cpu["cpu_s"],
        "rss_mib": cpu["rss_mib"],
        "passed_series": series,
    }
    ctx.log(
        f"round {r + 1} {mix}: restart passed all {n} after {seconds:.1f}s, "
        f"{out['api_requests']:.0f} API requests, {writes} SendGroup writes"
    )
    return out


def _cold_peer(
    ctx: Context,
    kube: KubeCluster,
    mix: str,
    n: int,
    namespaces: list[str],
    kubeconfig: Path,
    ours: dict[str, Any],
) -> dict[str, Any]:
    names = _names(mix, n, "peer-")
    _create_groups(kube, namespaces, names)
    status = ctx.work_dir / f"{mix}-status.json"
    status.write_text(json.dumps(ours["sample_status"]))
    args = [str(kubeconfig), "--namespaces", ",".join(namespaces), "--status", str(status)]
    args += ["--concurrency", str(PEER_CONCURRENCY)]
    if mix == "busy":
        template = ctx.work_dir / f"{mix}-deployment.json"
        template.write_text(json.dumps(ours["template"]))
        args += ["--template", str(template), "--old", _names(mix, 1)[0]]
    apf0 = apf_dispatched(kube)
    out = _peer(ctx, *args)
    apf1 = apf_dispatched(kube)
    out["api_requests_seen"] = apf1.get(SA_FLOW_SCHEMA, 0) - apf0.get(SA_FLOW_SCHEMA, 0)
    done = sum(1 for i in _list(kube, namespaces) if _reconciled(i, EXPECTED_PHASE[mix]))
    if done != n:
        raise RuntimeError(f"peer {mix}: only {done}/{n} groups carry the status")
    if mix == "busy" and _deployments(kube, namespaces) != n:
        raise RuntimeError(f"peer {mix}: not every Deployment was created")
    return out


def _changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two versions of a SendGroup: ``spec``, status fields by name
    (``queue.ready``), conditions as ``conditions.<type>.<field>``, metadata as
    ``metadata.<field>`` (annotations and labels by key; resourceVersion ignored)."""
    out = ["spec"] if old.get("spec") != new.get("spec") else []
    a, b = old.get("status") or {}, new.get("status") or {}
    for key in sorted(set(a) | set(b)):
        if key == "conditions":
            ca = {c["type"]: c for c in a.get(key) or []}
            cb = {c["type"]: c for c in b.get(key) or []}
            for t in sorted(set(ca) | set(cb)):
                x, y = ca.get(t) or {}, cb.get(t) or {}
                out += [
                    f"conditions.{t}.{f}" for f in sorted(set(x) | set(y)) if x.get(f) != y.get(f)
                ]
        elif a.get(key) != b.get(key):
            if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
                sub_a, sub_b = a[key], b[key]
                out += [
                    f"{key}.{f}"
                    for f in sorted(set(sub_a) | set(sub_b))
                    if sub_a.get(f) != sub_b.get(f)
                ]
            else:
                out.append(key)
    ma, mb = old.get("metadata") or {}, new.get("metadata") or {}
    for key in sorted((set(ma) | set(mb)) - {"resourceVersion"}):
        if ma.get(key) == mb.get(key):
            continue
        if key in ("annotations", "labels"):
            x, y = ma.get(key) or {}, mb.get(key) or {}
            out += [f"metadata.{key}.{k}" for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
        else:
            out.append(f"metadata.{key}")
    return out


def _counter(op: OperatorProcess, name: str) -> float:
    """A counter (or histogram ``_count``) without labels from the operator's /metrics."""
    for line in op.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise RuntimeError(f"{name} not in the operator's /metrics")


def _kube_counter(op: OperatorProcess) -> float:
    return _counter(op, "sendgroup_kube_requests_total")


def run(ctx: Context) -> Result:
    """Interleaved rounds of both mixes, each on a fresh control plane and Redis."""
    n = int(os.environ.get("BENCH_OPERATOR_GROUPS") or (100 if ctx.quick else 1000))
    rounds = int(os.environ.get("BENCH_OPERATOR_ROUNDS") or (2 if ctx.quick else 3))
    rest = float(os.environ.get("BENCH_OPERATOR_REST") or (60.0 if ctx.quick else 300.0))
    raw: dict[str, Any] = {
        "groups": n,
        "namespaces": NAMESPACES,
        "rounds": rounds,
        "rest_window_s": rest,
        "peer_concurrency": PEER_CONCURRENCY,
        "idle": [],
        "busy": [],
    }
    for r in range(rounds):
        for mix in ("idle", "busy"):
            raw[mix].append(_round(ctx, mix, r, n, NAMESPACES, rest if r == 0 else 0.0))
    return _result(raw)


def _col(rounds: list[dict[str, Any]], *path: str) -> list[float]:
    out = []
    for rd in rounds:
        value: Any = rd
        for p in path:
            value = value[p]
        out.append(float(value))
    return out


def _list_s(rd: dict[str, Any], field: str = "spawn_s") -> float:
    return statistics.median(p[field] for p in rd["peer_list"])


def _result(raw: dict[str, Any]) -> Result:
    n, k = raw["groups"], raw["namespaces"]
    cold_rows: list[list[Any]] = []
    restart_rows: list[list[Any]] = []
    rest_rows: list[list[Any]] = []
    round_rows: list[list[Any]] = []
    ratios: dict[str, list[float]] = {}
    fig: dict[str, dict[str, Any]] = {}
    for mix in ("idle", "busy"):
        rds = raw[mix]
        ours = _col(rds, "reconcile_s")
        after_pre = [rd["reconcile_s"] - (rd["preflight_s"] or 0.0) for rd in rds]
        peer = _col(rds, "peer", "spawn_s")
        peer_work = _col(rds, "peer", "work_s")
        ratio = [o / p for o, p in zip(ours, peer, strict=True)]
        ratio_work = [o / p for o, p in zip(after_pre, peer_work, strict=True)]
        restart = _col(rds, "restart", "seconds")
        lists = [_list_s(rd) for rd in rds]
        restart_ratio = [a / b for a, b in zip(restart, lists, strict=True)]
        ratios[mix] = ratio
        fig[mix] = {
            "ours": statistics.median(ours),
            "peer": statistics.median(peer),
            "ratio": statistics.median(ratio),
            "ratio_range": (min(ratio), max(ratio)),
            "ratio_work": statistics.median(ratio_work),
            "restart": statistics.median(restart),
            "restart_writes": [rd["restart"]["writes"] for rd in rds],
            "restart_api": statistics.median(_col(rds, "restart", "api_requests")),
            "list": statistics.median(lists),
            "restart_ratio": statistics.median(restart_ratio),
            "cold_api_per_group": statistics.median(_col(rds, "cold_api_requests")) / n,
            "peer_req_per_group": statistics.median(_col(rds, "peer", "requests")) / n,
            "cold_cpu": statistics.median(_col(rds, "cold_cpu_s")),
            "settled": statistics.median(_col(rds, "settled_s")),
            "preflight": statistics.median(rd["preflight_s"] or 0.0 for rd in rds),
            "peer_setup": statistics.median(_col(rds, "peer", "setup_s")),
        }
        cold_rows.append(
            [
                f"{mix} ({EXPECTED_PHASE[mix]})",
                spread(ours, digits=1),
                spread(after_pre, digits=1),
                spread(_col(rds, "settled_s"), digits=1),
                spread([v / n for v in _col(rds, "cold_api_requests")]),
                spread(_col(rds, "cold_cpu_s"), digits=1),
                spread(peer),
                spread(peer_work),
                spread([v / n for v in _col(rds, "peer", "requests")]),
                spread(ratio),
                spread(ratio_work),
            ]
        )
        restart_rows.append(
            [
                mix,
                spread(restart),
                spread(_col(rds, "restart", "stop_s")),
                spread(_col(rds, "restart", "api_requests"), digits=0),
                spread(_col(rds, "restart", "tail_api_requests"), digits=0),
                spread(_col(rds, "restart", "writes"), digits=0),
                spread(_col(rds, "restart", "cpu_s"), digits=1),
                spread(lists),
                spread([_list_s(rd, "work_s") for rd in rds], digits=3),
                spread(restart_ratio),
            ]
        )
        rest = rds[0]["rest"]
        rest_rows.append(
            [
                mix,
                rest["api_per_min"],
                rest["reconciler_per_min"],
                rest["writes"],
                rest["redis_per_min"],
                rest["redis_per_min"] / n,
                rest["passes_per_group_min"],
                rest["cpu_pct"],
                rest["rss_mib"],
                rest["hwm_mib"],
            ]
        )
        for rd in rds:
            round_rows.append(
                [
                    rd["round"],
                    mix,
                    rd["control_plane_up_s"],
                    rd["create_s"],
                    rd["reconcile_s"],
                    rd["peer"]["spawn_s"],
                    rd["reconcile_s"] / rd["peer"]["spawn_s"],
                    rd["restart"]["seconds"],
                    _list_s(rd),
                    rd["restart"]["writes"],
                ]
            )
    return Result(
        tables=_tables(raw, cold_rows, restart_rows, rest_rows, round_rows),
        plots=[
            Plot(
                filename="operator-scale-progress.png",
                title=f"Cold start: groups reconciled over time ({n} per mix, {k} namespaces)",
                ylabel="groups reconciled",
                xlabel="seconds since the operator process was spawned",
                kind="line",
                series={
                    f"{mix} r{rd['round']}": rd["progress"]
                    for mix in ("idle", "busy")
                    for rd in raw[mix]
                },
            )
        ],
        findings=_findings(raw, fig),
        raw=raw,
    )


def _tables(
    raw: dict[str, Any],
    cold_rows: list[list[Any]],
    restart_rows: list[list[Any]],
    rest_rows: list[list[Any]],
    round_rows: list[list[Any]],
) -> list[Table]:
    n, k, rounds = raw["groups"], raw["namespaces"], raw["rounds"]
    how = (
        f"{rounds} rounds, median (min-max); each (round, mix) on a fresh control plane and "
        "Redis, the mixes interleaved (idle, busy, idle, busy, ...)."
    )
    return [
        Table(
            title=f"Operator cold start: {n} SendGroups in {k} namespaces until all reconciled",
            columns=[
                "mix",
                "ours s (spawn)",
                "ours s after preflight",
                "kopf done s",
                "API req/group",
                "operator CPU s",
                "peer s (spawn -> exit)",
                "peer s after set-up",
                "peer req/group",
                "ours/peer (spawn)",
                "ours/peer after set-up",
            ],
            rows=cold_rows,
            note=(
                f"{how} Ours: from the operator's process spawn (production defaults, watching "
                "every namespace) until every group has observedGeneration == generation and "
                "the phase (busy: and its Deployment), seen by one watch of the SendGroups; "
                "after preflight: from the process' log line 'preflight ok' (its imports, "
                "CRD/RBAC checks behind it); kopf done: every group also carries kopf's "
                "last-handled-configuration annotation. API requests: the API server's APF "
                "counter of the ServiceAccount flow schema (kopf's watches, patches and events "
                "included), spawn -> all reconciled. Peer: `python -m bench.operator_peer`, "
                "a separate process clocked from spawn to exit (after set-up: its first request "
                f"to its last response), same ServiceAccount, aiohttp, {PEER_CONCURRENCY} in "
                f"flight, on {n} new groups in {k} new namespaces: one LIST per namespace, then "
                "per group the operator's own status body as one status PATCH (busy: plus the "
                "operator's own Deployment as one POST). It runs after the operator stopped "
                "(the operator watches every namespace), so always second on its control plane. "
                "Ratios per round, then median (min-max)."
            ),
        ),
        Table(
            title=f"Operator restart: {n} SendGroups, SIGTERM and a new process",
            columns=[
                "mix",
                "restart s (spawn -> all passed)",
                "old process stop s",
                "API requests to all passed",
                f"API requests in the {RESTART_TAIL_S:.0f} s after",
                "SendGroup writes",
                "new process CPU s",
                "peer LIST s (spawn -> exit)",
                "peer LIST s after set-up",
                "restart/peer LIST",
            ],
            rows=restart_rows,
            note=(
                f"{how} After the rest window (round 1) or {SETTLE_S:.0f} s after kopf's "
                "bookkeeping (other rounds): SIGTERM, then a new process; from its spawn until "
                "the sum of its sendgroup_groups{phase} gauge (the distinct groups this process "
                "has passed, updated after every pass) reaches N, polled every 0.5 s. API "
                "requests: APF counter of the ServiceAccount from the new spawn. SendGroup "
                "writes: groups whose resourceVersion moved between a LIST before the SIGTERM "
                f"and one {RESTART_TAIL_S:.0f} s after all passed. Peer: the restart's floor, "
                f"one cluster-wide LIST of the same {n} groups by a separate process "
                f"(`python -m bench.operator_peer --list-only`, {LIST_SPAWNS} spawns per round, "
                "median per round), same ServiceAccount."
            ),
        ),
        Table(
            title=(
                f"Operator at rest: {n} SendGroups in {k} namespaces, "
                f"{raw['rest_window_s']:.0f} s window (round 1)"
            ),
            columns=[
                "mix",
                "API req/min",
                "reconciler req/min",
                "SendGroup writes",
                "Redis cmds/min",
                "Redis cmds/min/group",
                "passes/group/min",
                "operator CPU %",
                "RSS MiB",
                "peak RSS MiB",
            ],
            rows=rest_rows,
            note=(
                "Round 1 only, starting 3 s after kopf's bookkeeping was on every group. "
                "API req/min: everything the operator's ServiceAccount sent (APF counter); "
                "reconciler req/min: the operator's own sendgroup_kube_requests_total. "
                f"The window holds every periodic request: the reaper every {REAPER_INTERVAL} s, "
                f"the status refresh every {STATUS_REFRESH} s, kopf's watches. "
                "Redis: INFO commandstats deltas. Passes: the operator's own "
                "sendgroup_reconcile_seconds_count (every reconciliation pass, reaper or event; "
                f"the reaper's timer is {REAPER_INTERVAL} s for groups with work, the status "
                f"refresh {STATUS_REFRESH} s for idle ones). "
                "CPU %: of one core."
            ),
        ),
        Table(
            title="Every round",
            columns=[
                "round",
                "mix",
                "control plane up s",
                "groups created s",
                "ours s",
                "peer s",
                "ours/peer",
                "restart s",
                "peer LIST s",
                "restart writes",
            ],
            rows=round_rows,
            note="Times from process spawn, as in the tables above.",
        ),
    ]


def _findings(raw: dict[str, Any], fig: dict[str, dict[str, Any]]) -> list[str]:
    n, k = raw["groups"], raw["namespaces"]
    idle, busy = fig["idle"], fig["busy"]
    idle_rest, busy_rest = raw["idle"][0]["rest"], raw["busy"][0]["rest"]
    out = []

    def verdict(f: dict[str, Any]) -> str:
        lo, hi = f["ratio_range"]
        where = (
            "slower in every round"
            if lo > 1
            else "faster in every round"
            if hi < 1
            else "either side ahead by round"
        )
        return f"range {lo:.1f}-{hi:.1f}, {where}"

    out.append(
        f"Cold start of {n} groups in {k} namespaces, both sides from process spawn "
        f"({raw['rounds']} rounds, median): idle {idle['ours']:.1f} s against the minimal "
        f"client's {idle['peer']:.2f} s (x{idle['ratio']:.1f}, {verdict(idle)}), busy "
        f"{busy['ours']:.1f} s against {busy['peer']:.2f} s (x{busy['ratio']:.1f}, "
        f"{verdict(busy)}); after set-up on both sides (ours from 'preflight ok', "
        f"{idle['preflight']:.1f} s / {busy['preflight']:.1f} s after spawn; the peer from its "
        f"first request, {idle['peer_setup']:.2f} s after its first line) x"
        f"{idle['ratio_work']:.1f} idle and x{busy['ratio_work']:.1f} busy. The operator process "
        f"sent {idle['cold_api_per_group']:.1f} (idle) and {busy['cold_api_per_group']:.1f} "
        f"(busy) API requests per group against the peer's {idle['peer_req_per_group']:.1f} and "
        f"{busy['peer_req_per_group']:.1f} (kopf's finalizer and last-handled-configuration "
        "patches and an event per group beside the status patch) and used "
        f"{idle['cold_cpu']:.0f} and {busy['cold_cpu']:.0f} CPU seconds; kopf's bookkeeping was "
        f"on every group after {idle['settled']:.0f} s (idle) and {busy['settled']:.0f} s "
        "(busy). "
        + (
            "We lose to the floor; what would close it: fewer writes per group (finalizer, "
            "annotation and status in one patch) and less Python per request."
            if min(idle["ratio"], busy["ratio"]) > 1
            else "The operator is at the floor for at least one mix."
        )
    )
    writes = idle["restart_writes"] + busy["restart_writes"]
    out.append(
        f"Restart (SIGTERM, new process) with {n} groups: every group passed again after "
        f"{idle['restart']:.1f} s (idle) and {busy['restart']:.1f} s (busy) from spawn, median, "
        f"against {idle['list']:.2f} s and {busy['list']:.2f} s for a process that only LISTs the "
        f"same groups (x{idle['restart_ratio']:.1f} and x{busy['restart_ratio']:.1f}); "
        f"{idle['restart_api']:.0f} and {busy['restart_api']:.0f} API requests until then; "
        + (
            "no SendGroup was written in any round (kopf's resume handlers and the passes found "
            "nothing to change)."
            if not any(writes)
            else f"SendGroup writes per round: idle {idle['restart_writes']}, busy "
            f"{busy['restart_writes']} (fields: "
            + ", ".join(
                f"{f} ({c})"
                for rd in raw["idle"] + raw["busy"]
                for f, c in list(rd["restart"]["changed_fields"].items())[:3]
            )[:400]
            + ")."
        )
    )
    top = ", ".join(f"{c} {v:,}" for c, v in list(idle_rest["redis_by_command"].items())[:3])
    out.append(
        f"At rest ({idle_rest['window_s']:.0f} s window, round 1, every periodic request inside "
        f"it): idle groups {idle_rest['api_per_min']:.1f} API requests/min from the process in "
        f"all, {idle_rest['writes']} SendGroup writes, {idle_rest['redis_per_min'] / n:.2f} "
        f"Redis commands per group per minute ({idle_rest['redis_per_min']:,.0f}/min; top: "
        f"{top or 'none'}), {idle_rest['cpu_pct']:.1f} % of a core, RSS "
        f"{idle_rest['rss_mib']:.0f} MiB; busy groups {busy_rest['api_per_min']:.1f} API "
        f"requests/min, {busy_rest['writes']} writes (fields: "
        + (
            ", ".join(f"{f} ({c})" for f, c in list(busy_rest["changed_fields"].items())[:4])
            or "none"
        )
        + f"), {busy_rest['redis_per_min'] / n:.2f} Redis commands per group per minute, "
        f"{busy_rest['passes_per_group_min']:.2f} passes per group per minute (idle "
        f"{idle_rest['passes_per_group_min']:.2f}; the reaper's timer is {REAPER_INTERVAL} s), "
        f"{busy_rest['cpu_pct']:.1f} % "
        f"of a core, RSS {busy_rest['rss_mib']:.0f} MiB."
    )
    return out


SCENARIO = Scenario(
    key="operator",
    number=6,
    title="Operator scale on the local control plane (idle and busy mixes, many namespaces)",
    run=run,
    needs_cluster=True,
)
