"""Scenario 6: the operator at scale on the local control plane (no node: pods stay Pending).

Two mixes of N SendGroups (1,000; 100 with --quick), each in its own namespace, created
before the operator starts:

* idle: empty queues, so every group ends Pending with no children;
* busy: a few jobs in every queue, so every group gets its worker Deployment and ends Running
  (the controller manager makes the ReplicaSets and Pods, which stay Pending).

Per mix: time from a cold operator start (a new process under its ServiceAccount, production
defaults: reaper every 10 s, status refresh 60 s) until every group has
``status.observedGeneration == metadata.generation`` and the expected phase (and, busy, its
Deployment); then a window at rest: API requests per minute (the API server's APF counter of
the ServiceAccount flow schema, so everything the operator process sends, kopf included; and
the operator's own reconciler counter), SendGroup writes, Redis commands per minute
(``INFO commandstats``), CPU and RSS.

Peer, in the same run: the physical limit the API server sets, a minimal asyncio client (one
keep-alive pool, 16 requests in flight, same ServiceAccount and RBAC) that makes only the
necessary writes for the same N groups in a fresh namespace: one list, then per group one
status patch (the operator's own status body) and, busy, one Deployment create (the operator's
own Deployment, renamed).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections import Counter
from typing import Any

from bench.kubebench import (
    SA_FLOW_SCHEMA,
    RawApi,
    apf_dispatched,
    proc_stats,
    redis_calls,
    redis_calls_delta,
)
from bench.report import Context, Plot, Result, Scenario, Table
from sendgroup_worker.producer import make_mail_payload
from sendgroup_worker.queue.keys import QueueKeys
from tests.support import manifests
from tests.support.cluster import KubeCluster, apply_crds, start_cluster, stop_cluster
from tests.support.operator_proc import OperatorProcess, install_rbac
from tests.support.redis_server import RedisServer

GROUP, VERSION, PLURAL = "sendgroups.io", "v1alpha1", "sendgroups"
EXPECTED_PHASE = {"idle": "Pending", "busy": "Running"}
JOBS_PER_BUSY_GROUP = 3
PEER_CONCURRENCY = 16
REAPER_INTERVAL = 10  # the chart's default (api.md reaperInterval)


def _names(mix: str, n: int) -> list[str]:
    return [f"{mix}-{i:04d}" for i in range(n)]


def _create_groups(kube: KubeCluster, namespace: str, names: list[str]) -> float:
    """``kubectl create`` the SendGroups (one POST each); returns the seconds it took."""
    docs = [
        manifests.sendgroup(name, {"campaign": "bench", "host": f"{name}.example.com"}, namespace)
        for name in names
    ]
    started = time.monotonic()
    kube.kubectl("create", "-f", "-", input=manifests.stream(*docs), timeout=900)
    return time.monotonic() - started


def _push_jobs(server: RedisServer, names: list[str]) -> None:
    client = server.client()
    pipe = client.pipeline(transaction=False)
    for name in names:
        keys = QueueKeys(f"mail-{name}")
        payloads = [
            make_mail_payload(
                f"r{j}@{name}.example.com", from_="bench@sender.test", subject="x", text="x"
            )
            for j in range(JOBS_PER_BUSY_GROUP)
        ]
        pipe.rpush(keys.ready, *payloads)
        pipe.rpush(keys.notify, *(["1"] * len(payloads)))
    pipe.execute()


def _list_groups(kube: KubeCluster, namespace: str) -> list[dict[str, Any]]:
    from kubernetes import client

    api = client.CustomObjectsApi(kube.api_client())
    resp = api.list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, _preload_content=False
    )
    items: list[dict[str, Any]] = json.loads(resp.data)["items"]
    return items


def _count_deployments(kube: KubeCluster, namespace: str) -> int:
    from kubernetes import client

    resp = client.AppsV1Api(kube.api_client()).list_namespaced_deployment(
        namespace, limit=1, _preload_content=False
    )
    data = json.loads(resp.data)
    return len(data["items"]) + int(data["metadata"].get("remainingItemCount") or 0)


def _reconciled(item: dict[str, Any], phase: str) -> bool:
    status = item.get("status") or {}
    return (
        status.get("observedGeneration") == item["metadata"].get("generation")
        and status.get("phase") == phase
    )


def _kopf_handled(item: dict[str, Any]) -> bool:
    """Whether kopf has recorded the handled spec (its ``last-handled-configuration``
    annotation): its bookkeeping for the creation is written."""
    annotations = item["metadata"].get("annotations") or {}
    return any(k.endswith("/last-handled-configuration") for k in annotations)


def _run_mix(
    ctx: Context, kube: KubeCluster, server: RedisServer, mix: str, n: int, rest: float
) -> dict[str, Any]:
    ns = f"bench-{mix}"
    kube.kubectl("create", "namespace", ns)
    kubeconfig = install_rbac(kube, ns, ctx.work_dir / f"{mix}.kubeconfig")
    names = _names(mix, n)
    create_s = _create_groups(kube, ns, names)
    if mix == "busy":
        _push_jobs(server, names)
    ctx.log(f"{mix}: {n} SendGroups created in {create_s:.1f}s; starting the operator")
    phase = EXPECTED_PHASE[mix]
    rc = server.client()
    apf0, redis0 = apf_dispatched(kube), redis_calls(rc)
    op = OperatorProcess(
        kubeconfig,
        ns,
        server.url,
        ctx.artifact(f"operator-{mix}.log"),
        SENDGROUP_REAPER_INTERVAL=str(REAPER_INTERVAL),
        SENDGROUP_STATUS_REFRESH="60",
        SENDGROUP_DEFAULT_IMAGE="sendgroup-worker:dev",
    )
    log_from = op.log_path.stat().st_size if op.log_path.exists() else 0
    started = time.monotonic()
    op.start()
    try:
        assert op.proc is not None
        pid = op.proc.pid
        progress: list[tuple[float, float]] = [(0.0, 0.0)]
        preflight_s = reconcile_s = None
        cold: dict[str, float] = {}
        apf1: dict[str, float] = {}
        redis1: dict[str, int] = {}
        deadline = started + 120 + n * 0.6
        while True:
            if not op.running():
                raise RuntimeError(f"operator exited:\n{op.log()[-3000:]}")
            if preflight_s is None and "preflight ok" in op.log()[log_from:]:
                preflight_s = time.monotonic() - started
            items = _list_groups(kube, ns)
            done = sum(1 for i in items if _reconciled(i, phase))
            handled = sum(1 for i in items if _kopf_handled(i))
            deployments = _count_deployments(kube, ns) if mix == "busy" else n
            now = time.monotonic() - started
            if reconcile_s is None:
                progress.append((now, float(done)))
            if reconcile_s is None and done == n and deployments == n:
                reconcile_s = now
                cold = proc_stats(pid)
                apf1, redis1 = apf_dispatched(kube), redis_calls(rc)
                ctx.log(f"{mix}: all {n} reconciled after {reconcile_s:.1f}s")
            if reconcile_s is not None and handled == n:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{mix}: {done}/{n} groups reconciled, {handled} handled by kopf, "
                    f"{deployments} Deployments after {now:.0f}s"
                )
            time.sleep(1.0)
        settled_s = time.monotonic() - started
        cold_requests = apf1.get(SA_FLOW_SCHEMA, 0) - apf0.get(SA_FLOW_SCHEMA, 0)
        cold_redis = sum(redis_calls_delta(redis0, redis1).values())
        ctx.log(f"{mix}: kopf done with all after {settled_s:.1f}s; at rest for {rest:.0f}s")
        time.sleep(3)  # the last events and status patches land
        before = {i["metadata"]["name"]: i for i in _list_groups(kube, ns)}
        a_apf, a_redis, a_proc = apf_dispatched(kube), redis_calls(rc), proc_stats(pid)
        a_kube = _kube_counter(op)
        t_a = time.monotonic()
        time.sleep(rest)
        b_apf, b_redis, b_proc = apf_dispatched(kube), redis_calls(rc), proc_stats(pid)
        b_kube = _kube_counter(op)
        window = time.monotonic() - t_a
        later = _list_groups(kube, ns)
        changed = Counter[str]()
        writes = 0
        for i in later:
            old = before.get(i["metadata"]["name"])
            if (
                old is None
                or old["metadata"]["resourceVersion"] != i["metadata"]["resourceVersion"]
            ):
                writes += 1
                changed.update(_changed_fields(old or {}, i))
        per_min = 60 / window
        rest_redis = redis_calls_delta(a_redis, b_redis)
        sample = next(i for i in later if i["metadata"]["name"] == names[0])
        template = None
        if mix == "busy":
            from kubernetes import client

            resp = client.AppsV1Api(kube.api_client()).read_namespaced_deployment(
                f"sg-{names[0]}", ns, _preload_content=False
            )
            template = json.loads(resp.data)
    finally:
        op.stop()
    pool_full = op.log()[log_from:].count("Connection pool is full")
    return {
        "pool_full_warnings": pool_full,
        "groups": n,
        "create_s": create_s,
        "preflight_s": preflight_s,
        "reconcile_s": reconcile_s,
        "settled_s": settled_s,
        "progress": progress,
        "cold_api_requests": cold_requests,
        "cold_redis_commands": cold_redis,
        "cold_cpu_s": cold["cpu_s"],
        "rss_mib": b_proc["rss_mib"],
        "hwm_mib": b_proc["hwm_mib"],
        "rest_window_s": window,
        "rest_api_per_min": (b_apf.get(SA_FLOW_SCHEMA, 0) - a_apf.get(SA_FLOW_SCHEMA, 0)) * per_min,
        "rest_reconciler_per_min": (b_kube - a_kube) * per_min,
        "rest_writes": writes,
        "rest_redis_per_min": sum(rest_redis.values()) * per_min,
        "rest_redis_by_command": rest_redis,
        "rest_changed_fields": dict(changed.most_common(12)),
        "rest_reaper_passes_per_group_min": rest_redis.get("multi", 0) * per_min / n,
        "rest_cpu_pct": (b_proc["cpu_s"] - a_proc["cpu_s"]) / window * 100,
        "sample_status": sample.get("status") or {},
        "deployment": template,
    }


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


def _kube_counter(op: OperatorProcess) -> float:
    for line in op.metrics().splitlines():
        if line.startswith("sendgroup_kube_requests_total "):
            return float(line.split()[1])
    raise RuntimeError("sendgroup_kube_requests_total not in the operator's /metrics")


def _peer_deployment(template: dict[str, Any], old: str, new: str, ns: str, uid: str) -> Any:
    spec = json.loads(json.dumps(template["spec"]).replace(old, new))
    meta = template["metadata"]
    labels = json.loads(json.dumps(meta.get("labels", {})).replace(old, new))
    owner = copy.deepcopy(meta.get("ownerReferences", []))
    for ref in owner:
        ref["name"], ref["uid"] = new, uid
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": meta["name"].replace(old, new),
            "namespace": ns,
            "labels": labels,
            "annotations": meta.get("annotations", {}),
            "ownerReferences": owner,
        },
        "spec": spec,
    }


async def _peer_writes(
    kubeconfig: Any,
    ns: str,
    status: dict[str, Any],
    template: dict[str, Any] | None,
    old: str,
) -> tuple[float, int]:
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}"
    async with RawApi(kubeconfig) as api:
        sem = asyncio.Semaphore(PEER_CONCURRENCY)
        started = time.monotonic()
        items = (await api.call("GET", base))["items"]

        async def one(item: dict[str, Any]) -> None:
            meta = item["metadata"]
            async with sem:
                if template is not None:
                    body = _peer_deployment(template, old, meta["name"], ns, meta["uid"])
                    await api.call("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body)
                st = dict(status, observedGeneration=meta["generation"])
                await api.call(
                    "PATCH",
                    f"{base}/{meta['name']}/status",
                    {"status": st},
                    "application/merge-patch+json",
                )

        await asyncio.gather(*(one(i) for i in items))
        return time.monotonic() - started, api.requests


def _run_peer(
    ctx: Context, kube: KubeCluster, mix: str, n: int, measured: dict[str, Any]
) -> dict[str, Any]:
    ns = f"bench-{mix}-peer"
    kube.kubectl("create", "namespace", ns)
    kubeconfig = install_rbac(kube, ns, ctx.work_dir / f"{mix}-peer.kubeconfig")
    names = _names(mix, n)
    _create_groups(kube, ns, names)
    apf0 = apf_dispatched(kube)
    seconds, requests = asyncio.run(
        _peer_writes(kubeconfig, ns, measured["sample_status"], measured["deployment"], names[0])
    )
    apf1 = apf_dispatched(kube)
    items = _list_groups(kube, ns)
    done = sum(1 for i in items if _reconciled(i, EXPECTED_PHASE[mix]))
    if done != n:
        raise RuntimeError(f"peer {mix}: only {done}/{n} groups carry the status")
    if mix == "busy" and _count_deployments(kube, ns) != n:
        raise RuntimeError(f"peer {mix}: not every Deployment was created")
    ctx.log(f"{mix} peer: {n} groups written in {seconds:.1f}s ({requests} requests)")
    return {
        "seconds": seconds,
        "requests": requests,
        "api_requests_seen": apf1.get(SA_FLOW_SCHEMA, 0) - apf0.get(SA_FLOW_SCHEMA, 0),
    }


def run(ctx: Context) -> Result:
    """Start a control plane and Redis, run both mixes and their peers, take it all down."""
    n = 100 if ctx.quick else 1000
    rest = 20.0 if ctx.quick else 40.0
    state = ctx.work_dir / "cluster" / "state"
    started = time.monotonic()
    kube = start_cluster(state)
    ctx.log(f"control plane up in {time.monotonic() - started:.1f}s ({state})")
    server = RedisServer().start()
    raw: dict[str, Any] = {"groups": n, "rest_window_s": rest, "peer_concurrency": PEER_CONCURRENCY}
    try:
        apply_crds(kube)
        for mix in ("idle", "busy"):
            measured = _run_mix(ctx, kube, server, mix, n, rest)
            measured["peer"] = _run_peer(ctx, kube, mix, n, measured)
            measured.pop("deployment")
            raw[mix] = measured
        raw["control_plane_rss_mib"] = kube.rss_mib()
    finally:
        server.cleanup()
        stop_cluster(state)
    return _result(raw)


def _result(raw: dict[str, Any]) -> Result:
    n = raw["groups"]
    cold_rows: list[list[Any]] = []
    rest_rows: list[list[Any]] = []
    findings: list[str] = []
    for mix in ("idle", "busy"):
        m = raw[mix]
        peer = m["peer"]
        cold_rows.append(
            [
                f"{mix} ({EXPECTED_PHASE[mix]})",
                m["reconcile_s"],
                n / m["reconcile_s"],
                m["preflight_s"],
                m["settled_s"],
                m["cold_api_requests"] / n,
                m["cold_cpu_s"],
                peer["seconds"],
                n / peer["seconds"],
                peer["requests"] / n,
                m["reconcile_s"] / peer["seconds"],
            ]
        )
        rest_rows.append(
            [
                mix,
                m["rest_api_per_min"],
                m["rest_reconciler_per_min"],
                m["rest_writes"],
                m["rest_redis_per_min"],
                m["rest_redis_per_min"] / n,
                m["rest_reaper_passes_per_group_min"],
                m["rest_cpu_pct"],
                m["rss_mib"],
                m["hwm_mib"],
            ]
        )
    idle, busy = raw["idle"], raw["busy"]
    want = 60 / REAPER_INTERVAL
    idle_cpu = idle["cold_cpu_s"] / idle["reconcile_s"] * 100
    busy_cpu = busy["cold_cpu_s"] / busy["reconcile_s"] * 100
    cpu_verdict = (
        "much of the time is the operator's own Python work per request"
        if max(idle_cpu, busy_cpu) >= 50
        else "it waits on the API server more than it computes"
    )
    findings.append(
        f"Cold start of {n} groups: idle {idle['reconcile_s']:.0f} s vs "
        f"{idle['peer']['seconds']:.1f} s for the minimal client's one status patch per group "
        f"(x{idle['reconcile_s'] / idle['peer']['seconds']:.1f}); busy "
        f"{busy['reconcile_s']:.0f} s vs {busy['peer']['seconds']:.1f} s "
        f"(x{busy['reconcile_s'] / busy['peer']['seconds']:.1f}); kopf's own bookkeeping "
        f"annotation was on every group after {idle['settled_s']:.0f} s (idle) and "
        f"{busy['settled_s']:.0f} s (busy). The operator process sent "
        f"{idle['cold_api_requests'] / n:.1f} (idle) and {busy['cold_api_requests'] / n:.1f} "
        f"(busy) API requests per group against the peer's {idle['peer']['requests'] / n:.0f} "
        f"and {busy['peer']['requests'] / n:.0f} (kopf's own bookkeeping patches - "
        "finalizer, progress and handled-spec annotations - besides the status patch; busy: "
        "also the Deployment create, and a GET of it in passes within 15 s of that write), "
        "and used "
        f"{idle['cold_cpu_s']:.0f} and {busy['cold_cpu_s']:.0f} CPU seconds "
        f"({idle_cpu:.0f}% and {busy_cpu:.0f}% of one core: {cpu_verdict}). Fewer requests "
        "per group (finalizer, annotations and status in one patch) and "
        "less Python per request (one async client instead of the synchronous one in threads) "
        "would close the gap; the busy peer shows the API server and the controller manager's "
        f"ReplicaSet/Pod cascade cap that mix at {n / busy['peer']['seconds']:.0f} groups/s on "
        "this machine."
    )
    top = ", ".join(f"{k} {v:,}" for k, v in list(idle["rest_redis_by_command"].items())[:3])
    findings.append(
        f"Idle groups at rest cost no API requests ({idle['rest_api_per_min']:.0f}/min) and no "
        f"writes ({idle['rest_writes']}); the cost is the reaper's Redis measurement, one "
        f"MULTI/EXEC of ~13 commands per group every {REAPER_INTERVAL} s: "
        f"{idle['rest_redis_per_min'] / n:.0f} commands per group per minute "
        f"({idle['rest_redis_per_min']:,.0f}/min for {n} groups; top: {top}) and "
        f"{idle['rest_cpu_pct']:.0f}% of a core in the operator. A longer interval for groups "
        "that stay empty (Pending/Idle) would cut both in proportion."
    )
    kept = "kept" if busy["rest_reaper_passes_per_group_min"] >= 0.8 * want else "managed only"
    changed = ", ".join(f"{k} ({v})" for k, v in list(busy["rest_changed_fields"].items())[:4])
    if busy["rest_reconciler_per_min"] == 0:
        findings.append(
            f"Busy groups at rest: the reaper {kept} "
            f"{busy['rest_reaper_passes_per_group_min']:.2f} passes per group per minute of the "
            f"{want:.0f} its timer asks for (idle: "
            f"{idle['rest_reaper_passes_per_group_min']:.2f}) and they cost no API requests "
            f"either ({busy['rest_reconciler_per_min']:,.0f} reconciler requests/min, "
            f"{busy['rest_api_per_min']:,.0f}/min from the process in all): a pass reads the "
            "group's Deployment from the operator's watch-fed index (@kopf.index over the worker "
            "Deployments), not from the API server. The synchronous kubernetes client's "
            f"connection pool (10) overflowed {busy['pool_full_warnings']} times during the run "
            "(the cold start's burst of writes; 'Connection pool is full': connections dropped "
            "and re-opened): a bigger pool or an async client would avoid it. "
            f"SendGroup writes in the window: {busy['rest_writes']} (fields that changed: "
            f"{changed or 'none'})."
        )
    else:
        findings.append(
            f"Busy groups at rest: the reaper {kept} "
            f"{busy['rest_reaper_passes_per_group_min']:.2f} "
            f"passes per group per minute of the {want:.0f} its timer asks for (idle: "
            f"{idle['rest_reaper_passes_per_group_min']:.2f}); every busy pass GETs the group's "
            f"Deployment ({busy['rest_reconciler_per_min']:,.0f} reconciler requests/min, "
            f"{busy['rest_api_per_min']:,.0f}/min from the process in all) through the synchronous "
            "kubernetes client in threads, whose connection pool (10) overflowed "
            f"{busy['pool_full_warnings']} times ('Connection pool is full': connections dropped "
            "and re-opened). Reading Deployments from a watch (a kopf index or an informer cache) "
            "instead of a GET per pass would remove those requests (and the pass rate's "
            "dependence on API latency). "
            f"SendGroup writes in the window: {busy['rest_writes']} (fields that changed: "
            f"{changed or 'none'})."
        )
    return Result(
        tables=[
            Table(
                title=f"Operator cold start: {n} SendGroups until all reconciled",
                columns=[
                    "mix",
                    "operator s",
                    "groups/s",
                    "preflight s",
                    "kopf done s",
                    "API req/group",
                    "operator CPU s",
                    "peer s",
                    "peer groups/s",
                    "peer req/group",
                    "operator/peer",
                ],
                rows=cold_rows,
                note=(
                    "From a new operator process (production defaults) until every group has "
                    "observedGeneration == generation and the phase (busy: and its Deployment), "
                    "polled every 1 s (preflight: the process logged its CRD/RBAC check; "
                    "kopf done: every group also carries kopf's last-handled-configuration "
                    "annotation, its own bookkeeping, after which the rest window starts). "
                    "API requests: the API server's APF counter of the "
                    "ServiceAccount flow schema (kopf's watches, patches and events included). "
                    f"Peer: a minimal aiohttp client, {PEER_CONCURRENCY} in flight, same "
                    "ServiceAccount: one list, then per group one status patch (busy: plus one "
                    "Deployment create) - the writes the API server must take, as fast as it "
                    "takes them."
                ),
            ),
            Table(
                title=f"Operator at rest: {n} SendGroups, {raw['rest_window_s']:.0f} s window",
                columns=[
                    "mix",
                    "API req/min",
                    "reconciler req/min",
                    "SendGroup writes",
                    "Redis cmds/min",
                    "Redis cmds/min/group",
                    "reaper passes/group/min",
                    "operator CPU %",
                    "RSS MiB",
                    "peak RSS MiB",
                ],
                rows=rest_rows,
                note=(
                    "API req/min: everything the operator's ServiceAccount sent (APF counter); "
                    "reconciler req/min: the operator's own sendgroup_kube_requests_total. "
                    "Redis: INFO commandstats deltas (MULTI and EXEC count as commands); a reaper "
                    "pass is one MULTI/EXEC measurement, so passes = MULTI calls "
                    f"(the timer asks for {60 / REAPER_INTERVAL:.0f} per group per minute). "
                    "CPU %: of one core."
                ),
            ),
        ],
        plots=[
            Plot(
                filename="operator-scale-progress.png",
                title=f"Cold start: groups reconciled over time ({n} per mix)",
                ylabel="groups reconciled",
                xlabel="seconds since the operator process started",
                kind="line",
                series={mix: raw[mix]["progress"] for mix in ("idle", "busy")},
            )
        ],
        findings=findings,
        raw=raw,
    )


SCENARIO = Scenario(
    key="operator",
    number=6,
    title="Operator scale on the local control plane (idle and busy mixes)",
    run=run,
)
