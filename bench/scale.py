"""``bench/scale [N] [--namespaces K] [--rest SECONDS] [--pushes P] [--clusterwide] [--providers]
[--replicas R [--lease-flowschema]] [--env NAME=VALUE ...]``: one operator (or R sharded
replicas), N SendGroups (default 1,000) on the local control plane (no node: worker pods stay
Pending), issue 15.
``--env``: an operator setting of every replica (recorded in the
report), e.g. ``SENDGROUP_WORKER_LIMIT=100``; ``--env SENDGROUP_TRACEMALLOC=PATH``: the operator
dumps its heap at the end of the rest window (``PATH.1.snap`` / ``.json``, read by
``python -m bench.memsites``). ``--clusterwide``: the operator watches every
namespace (``*``: one watch per resource) instead of the K namespaces by name (one watch per
resource per namespace). ``--providers``: the chart's default ClusterSendProviders exist too (as
a chart install has them) and every group's ``spec.host`` is one of their domains, round-robin
(a domain match: no DNS), so every provider's pass has its share of the groups.

The mix, spread round-robin over K namespaces (default 10), created before the operator starts:

* 70 % idle: empty queue, on the operator's default Redis (A) alone, so A's
  ``INFO commandstats`` is exactly what the idle groups cost;
* 20 % paused (``spec.paused: true``), empty queue, on Redis B (``spec.redis.url``);
* 10 % busy: 3 jobs each on Redis B, so each gets its worker Deployment (Running).

Measured, in order:

1. cold start: from the operator process' start until every group has
   ``status.observedGeneration == metadata.generation`` and its phase (busy: and its
   Deployment), polled every 1 s;
2. a rest window (``--rest``, default 60 s): operator RSS and peak RSS, CPU, Redis commands per
   idle group per minute (Redis A's commandstats delta, INFO excluded), API writes per idle
   group per hour (idle SendGroups whose ``resourceVersion`` moved, plus kopf peering objects,
   scaled to an hour), and all API requests of the operator's ServiceAccount (APF counter);
3. wake-up: ``--pushes`` (default 50) idle groups, one at a time, get one job (ready + notify,
   as the producer pushes); latency from the push until the group's worker Deployment exists
   (a GET every 20 ms), p50 / p99 / max;
4. restart (one replica only; ``--no-restart`` skips it): the operator stopped and started
   again, seconds until it has passed every group once more.

``--replicas R`` (R > 1): R operator processes with ``SENDGROUP_SHARDING=true`` and
``POD_ID`` ``r0`` .. ``r<R-1>``, otherwise the same settings (``--env`` included: e.g.
``SENDGROUP_SHARD_LEASE_DURATION``, default 15 s), all spawned at once; each owns the groups
whose uid's rendezvous hash it wins (``sendgroup_operator.sharding``). The figures above are
then totals (cold start from the first spawn; RSS, peak RSS and CPU summed over the replicas;
API writes count the replicas' shard Lease writes, the API server's PATCH / POST / DELETE
``leases`` in the window, instead of kopf peering) and a table gives each replica's: its
``sendgroup_operator_owned_groups`` gauge at the end of the cold start beside its share by the
hash, CPU seconds of the cold start, RSS / peak RSS (MiB) and CPU (% of a core) at rest, its
wake-ups (the pushes alternate between the replicas' groups). Instead of the restart:

4. handover: the last replica SIGKILLed; seconds until the survivors' owned-groups gauges
   (polled every 0.2 s) sum to N again, seconds until a job pushed at the kill to one of the
   killed replica's idle groups has its Deployment, then the wake-up (as in 3) of up to 10
   more of its idle groups; and, from the operators' logs (``deployment sg-<name>
   replicas=``), groups whose Deployment was written by two replicas before the kill, by two
   survivors after it, or by a replica that did not own the group by the hash.

``--lease-flowschema`` (with replicas): the chart's ``sharding.flowSchema`` FlowSchema, rendered
for the operator's ServiceAccount and namespace, is applied before the replicas start (their
Lease requests in the ``leader-election`` priority level); the APF request rate then adds its
requests to the ServiceAccount's. Each replica's log is read for the shard membership: how
often it became fenced after having owned groups (rule (a) of ``sharding.py``: its last
successful poll older than ``L - M``), its "cannot renew" streaks, and kopf's
``APITooManyRequests`` lines, over the cold start and over the whole run before the handover.

Writes ``bench/results/scale-<N>-<UTC stamp>.md`` (and ``.json``) and prints the markdown.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from itertools import zip_longest
from pathlib import Path
from typing import Any

import redis
import yaml

from bench.kubebench import SA_FLOW_SCHEMA, apf_dispatched, proc_stats, redis_calls
from sendgroup_operator import sharding
from sendgroup_operator.reconcile import CLAIM_RECHECK
from sendgroup_worker.producer import make_mail_payload
from sendgroup_worker.queue.keys import QueueKeys
from tests.support import manifests
from tests.support.cluster import KubeCluster, apply_crds, start_cluster, stop_cluster
from tests.support.operator_proc import SA_NAME, OperatorProcess, install_rbac, rbac_objects
from tests.support.redis_server import RedisServer

GROUP, VERSION, PLURAL = "sendgroups.io", "v1alpha1", "sendgroups"
RESULTS = Path(__file__).resolve().parent / "results"
PROVIDERS_FILE = (
    Path(__file__).resolve().parent.parent
    / "helm"
    / "sendgroup-operator"
    / "files"
    / "default-providers.yaml"
)
#: main's figures from issue 15 (1,000 groups in one namespace, separate idle and busy runs)
MAIN_1000 = {
    "cold start s (idle / busy)": "8.5 / 24.5",
    "RSS MiB (idle / busy)": "338 / 376",
    "Redis cmds per idle group per min": "78",
    "wake-up s (push -> Deployment requested)": "5.75 mean (10 s check)",
}


def _apply_lease_flowschema(kube: KubeCluster, home: str) -> str:
    """The chart's shard-Lease FlowSchema (``sharding.flowSchema``) for the ServiceAccount in
    ``home``, applied; its name."""
    from tests.support.helm import find, render

    objects = render(
        {"replicas": 2, "sharding.enabled": True, "serviceAccount.name": SA_NAME}, namespace=home
    )
    [schema] = find(objects, "FlowSchema")
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(schema))
    name: str = schema["metadata"]["name"]
    return name


FENCED = "acts on nothing yet"


def shard_log(text: str) -> dict[str, int]:
    """A replica's shard membership from its log: ``fenced`` (view changes to "acts on nothing
    yet" after it had owned groups: rule (a) fences and rejoins, not the first join wait),
    ``fenced_lines`` (every such view change, the join wait included), ``cannot_renew`` (failing
    poll streaks), ``stale_deleted`` (peers it dropped as dead), ``too_many`` (kopf's
    APITooManyRequests lines)."""
    out = {"fenced": 0, "fenced_lines": 0, "cannot_renew": 0, "stale_deleted": 0, "too_many": 0}
    owned = False
    for line in text.splitlines():
        if "shard: members" in line:
            if FENCED in line:
                out["fenced_lines"] += 1
                out["fenced"] += 1 if owned else 0
                owned = False
            elif " owns " in line:
                owned = True
        elif "shard: cannot renew Lease" in line:
            out["cannot_renew"] += 1
        elif "shard: deleted the stale Lease" in line:
            out["stale_deleted"] += 1
        if "APITooManyRequests" in line:
            out["too_many"] += 1
    return out


def _kind(i: int) -> str:
    r = i % 10
    return "busy" if r == 0 else "paused" if r in (1, 2) else "idle"


def _rbac(
    kube: KubeCluster, home: str, others: list[str], path: Path, clusterwide: bool = False
) -> Path:
    """The operator's ServiceAccount in ``home``; its Role bound in every other namespace, or
    (``clusterwide``) its Role's rules as a ClusterRole bound cluster-wide."""
    kubeconfig = install_rbac(kube, home, path)
    role = next(o for o in rbac_objects(home) if o["kind"] == "Role")
    docs: list[dict[str, Any]] = []
    if clusterwide:
        name = f"{SA_NAME}-all-namespaces"
        docs.append({**role, "kind": "ClusterRole", "metadata": {"name": name}})
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": home}],
            }
        )
        others = []
    docs += _role_bindings(role, home, others)
    if docs:
        kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), timeout=120)
    return kubeconfig


def _role_bindings(role: dict[str, Any], home: str, namespaces: list[str]) -> list[dict[str, Any]]:
    """The operator's Role and its binding to the ServiceAccount in ``home``, per namespace."""
    docs: list[dict[str, Any]] = []
    for ns in namespaces:
        docs.append({**role, "metadata": {"name": SA_NAME, "namespace": ns}})
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": SA_NAME, "namespace": ns},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": SA_NAME,
                },
                "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": home}],
            }
        )
    return docs


def _list(kube: KubeCluster, namespaces: list[str]) -> list[dict[str, Any]]:
    from kubernetes import client

    api = client.CustomObjectsApi(kube.api_client())
    items: list[dict[str, Any]] = []
    for ns in namespaces:
        resp = api.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _preload_content=False)
        items += json.loads(resp.data)["items"]
    return items


def _deployments(kube: KubeCluster, namespaces: list[str]) -> int:
    from kubernetes import client

    apps = client.AppsV1Api(kube.api_client())
    return sum(
        len(json.loads(apps.list_namespaced_deployment(ns, _preload_content=False).data)["items"])
        for ns in namespaces
    )


def _api_time(kube: KubeCluster) -> dict[str, list[float]]:
    """The API server's requests so far by ``verb resource[/subresource]``: [count, seconds]
    (``apiserver_request_duration_seconds_count`` / ``_sum``: time from receipt to response,
    any client), from its ``/metrics``."""
    text = kube.kubectl("get", "--raw=/metrics", timeout=60).stdout
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        for suffix, at in (("_count{", 0), ("_sum{", 1)):
            head = "apiserver_request_duration_seconds" + suffix
            if not line.startswith(head):
                continue
            labels, value = line[len(head) :].rsplit(" ", 1)
            fields = dict(
                item.split("=", 1) for item in labels.rstrip("}").split(",") if "=" in item
            )
            verb = fields.get("verb", "").strip('"')
            resource = fields.get("resource", "").strip('"')
            sub = fields.get("subresource", "").strip('"')
            key = f"{verb} {resource}" + (f"/{sub}" if sub else "")
            out.setdefault(key, [0.0, 0.0])[at] += float(value)
    return out


def _cold_text(out: dict[str, Any]) -> list[str]:
    """The cold start's own cost and shape: the measurement's LISTs, the control plane's CPU,
    and groups reconciled at each quarter of the run (empty for results written before)."""
    obs, plane = out.get("cold_observer"), out.get("cold_plane_cpu_s")
    prog = out.get("cold_progress")
    if not obs or not prog:
        return []
    end = prog[-1][0] or 1.0
    marks = []
    for share in (0.25, 0.5, 0.75, 1.0):
        done = max((d for at, d in prog if at <= share * end), default=0)
        marks.append(f"{done} by {share * end:.0f} s")
    cpu = ", ".join(f"{name} {sec:.1f}" for name, sec in (plane or {}).items())
    return [
        f"Cold start measured by a LIST of every group each {obs['poll_s']:g} s: {obs['polls']} "
        f"LISTs, {obs['listing_s']:.1f} s inside them, {obs['bench_cpu_s']:.1f} CPU s of the "
        f"measuring process; control plane CPU s over the cold start: {cpu}; operator CPU s "
        f"{out['cold']['cpu_s']:.1f}. Groups reconciled: {'; '.join(marks)}.",
        "",
        *(
            [
                "API server requests during the cold start (any client), by total time: "
                + "; ".join(
                    f"{k} {c} in {t:.1f} s"
                    for k, (c, t) in (out.get("cold_api_requests") or {}).items()
                )
                + ".",
                "",
            ]
            if out.get("cold_api_requests")
            else []
        ),
    ]


def _plane_cpu(kube: KubeCluster) -> dict[str, float]:
    """CPU seconds (user + system) so far of each running control-plane component, by name
    (:meth:`KubeCluster.pids`); empty for a cluster this run did not start."""
    out: dict[str, float] = {}
    for name, pid in kube.pids().items():
        try:
            out[name] = proc_stats(pid)["cpu_s"]
        except OSError:
            continue
    return out


def _peering_versions(kube: KubeCluster) -> dict[str, str]:
    out: dict[str, str] = {}
    for kind in ("kopfpeerings", "clusterkopfpeerings"):
        proc = kube.kubectl("get", kind, "-A", "-o", "json", check=False, timeout=60)
        if proc.returncode == 0:
            for item in json.loads(proc.stdout)["items"]:
                meta = item["metadata"]
                out[f"{kind}/{meta.get('namespace')}/{meta['name']}"] = meta["resourceVersion"]
    return out


def _job(name: str, j: int) -> str:
    return make_mail_payload(
        f"r{j}@{name}.example.com", from_="bench@sender.test", subject="x", text="x"
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _default_providers() -> tuple[list[str], list[str]]:
    """The chart's default ClusterSendProviders as manifests, and the first domain of each
    that has domains."""
    data = yaml.safe_load(PROVIDERS_FILE.read_text())["providers"]
    docs, domains = [], []
    for name, spec in data.items():
        docs.append(
            yaml.safe_dump(
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ClusterSendProvider",
                    "metadata": {"name": name},
                    "spec": spec,
                }
            )
        )
        if spec["match"].get("domains"):  # one matched by MX suffixes only gets no group
            domains.append(spec["match"]["domains"][0])
    return docs, domains


def run(
    n: int,
    k: int,
    rest: float,
    pushes: int,
    work: Path,
    clusterwide: bool = False,
    providers: bool = False,
    operator_env: dict[str, str] | None = None,
    poll: float = 1.0,
    tree: Path | None = None,
    restart: bool = True,
    floor: bool = True,
    replicas: int = 1,
    lease_flowschema: bool = False,
) -> dict[str, Any]:
    """The whole scenario (module docstring); ``tree``: run the operator, and apply the CRDs,
    from that checkout instead of this one (e.g. a worktree of an older main); ``replicas``:
    that many sharded operator processes (1: one, unsharded, as before)."""
    provider_docs, domains = _default_providers() if providers else ([], [])  # before any start
    state = work / "cluster" / "state"
    started = time.monotonic()
    kube = start_cluster(state)
    print(f"control plane up in {time.monotonic() - started:.1f}s", file=sys.stderr)
    idle_redis, other_redis = RedisServer().start(), RedisServer().start()
    namespaces = [f"scale-{i:02d}" for i in range(k)]
    out: dict[str, Any] = {"groups": n, "namespaces": k, "rest_s": rest, "clusterwide": clusterwide}
    out["providers"] = len(provider_docs)
    out["operator_env"] = dict(operator_env or {})
    # what ran: this checkout's commit (the benchmark's code, and the operator's unless
    # --operator-tree) and when the run started; the report's stamp is its end
    try:
        out["bench_tree"] = _tree_commit(RESULTS.parent.parent)
    except (OSError, subprocess.CalledProcessError):  # not a git checkout, or no git
        out["bench_tree"] = "unknown (not a git checkout)"
    out["started"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    tree_env: dict[str, str] = {}
    if tree is not None:
        out["operator_tree"] = _tree_commit(tree)
        tree_env["PYTHONPATH"] = ":".join(
            str(tree / d) for d in ("contract", "worker_image", "operator")
        )
    ops: list[OperatorProcess] = []
    try:
        if tree is None:
            apply_crds(kube)
        else:
            crds = sorted((tree / "crds").glob("*.yaml"))
            kube.kubectl("apply", *(a for c in crds for a in ("-f", str(c))), timeout=120)
            kube.kubectl(
                "wait", "--for=condition=Established", "crd/sendgroups.sendgroups.io", timeout=90
            )
        for ns in namespaces:
            kube.kubectl("create", "namespace", ns)
        kubeconfig = _rbac(
            kube, namespaces[0], namespaces[1:], work / "operator.kubeconfig", clusterwide
        )
        lease_schema = _apply_lease_flowschema(kube, namespaces[0]) if lease_flowschema else None
        out["lease_flowschema"] = lease_schema
        if provider_docs:
            kube.kubectl("apply", "-f", "-", input="---\n".join(provider_docs))
        kinds: dict[tuple[str, str], str] = {}
        docs = []
        for i in range(n):
            name, ns, kind = f"g-{i:05d}", namespaces[i % k], _kind(i)
            kinds[(ns, name)] = kind
            spec: dict[str, Any] = {
                "campaign": "scale",
                "host": domains[i % len(domains)] if domains else f"{name}.example.com",
                "queue": f"{ns}.mail-{name}",
            }
            if kind != "idle":  # idle ones on the default Redis (A)
                spec["redis"] = {"url": other_redis.url}
            if kind == "paused":
                spec["paused"] = True
            docs.append(manifests.sendgroup(name, spec, ns))
        t = time.monotonic()
        for chunk in range(0, n, 500):
            kube.kubectl(
                "create", "-f", "-", input=manifests.stream(*docs[chunk : chunk + 500]), timeout=900
            )
        out["create_s"] = time.monotonic() - t
        busy = [key for key, kind in kinds.items() if kind == "busy"]
        pipe = other_redis.client().pipeline(transaction=False)
        for ns, name in busy:
            keys = QueueKeys(f"{ns}.mail-{name}")
            pipe.rpush(keys.ready, *(_job(name, j) for j in range(3)))
        pipe.execute()
        print(f"{n} groups created in {out['create_s']:.1f}s; operator starts", file=sys.stderr)

        expected = {
            "idle": ("Pending", "Idle"),
            "paused": ("Paused", "Dumped"),
            "busy": ("Running",),
        }
        sharded = replicas > 1
        pod_ids = [f"r{i}" for i in range(replicas)] if sharded else []
        env = {
            "SENDGROUP_WATCH_NAMESPACES": "*" if clusterwide else ",".join(namespaces),
            "SENDGROUP_REAPER_INTERVAL": "10",
            "SENDGROUP_STATUS_REFRESH": "60",
            "SENDGROUP_DEFAULT_IMAGE": "sendgroup-worker:dev",
            "SENDGROUP_ALLOWED_REDIS_HOSTS": f"127.0.0.1:{other_redis.port}",
            **tree_env,
            **({"SENDGROUP_SHARDING": "true"} if sharded else {}),
            **(operator_env or {}),
        }
        lease_s = float(env.get("SENDGROUP_SHARD_LEASE_DURATION", "15"))
        ops += [
            OperatorProcess(
                kubeconfig,
                namespaces[0],
                idle_redis.url,
                work / f"operator-{pod}.log",
                **env,
                POD_ID=pod,
            )
            for pod in pod_ids
        ] or [
            OperatorProcess(kubeconfig, namespaces[0], idle_redis.url, work / "operator.log", **env)
        ]
        plane0 = _plane_cpu(kube)
        api0 = _api_time(kube)
        own0 = time.process_time()
        t = time.monotonic()
        for op in ops:
            op.start()
        pids = [_pid(op) for op in ops]
        phases: dict[str, int] = {}
        out["cold_start_99_s"] = out["cold_start_s"] = None
        missing: list[str] = []
        progress: list[tuple[float, int]] = []
        items: list[dict[str, Any]] = []
        polling = 0.0
        while True:
            for op in ops:
                if not op.running():
                    raise RuntimeError(f"operator exited:\n{op.log()[-3000:]}")
            asked = time.monotonic()
            items = _list(kube, namespaces)
            polling += time.monotonic() - asked
            phases = {}
            done = 0
            missing = []
            for item in items:
                meta, st = item["metadata"], item.get("status") or {}
                phase = st.get("phase")
                phases[str(phase)] = phases.get(str(phase), 0) + 1
                kind = kinds[(meta["namespace"], meta["name"])]
                if st.get("observedGeneration") == meta["generation"] and phase in expected[kind]:
                    done += 1
                else:
                    missing.append(f"{meta['namespace']}/{meta['name']} ({kind}: {phase})")
            progress.append((round(time.monotonic() - t, 2), done))
            if out["cold_start_99_s"] is None and done >= 0.99 * n:
                out["cold_start_99_s"] = time.monotonic() - t
            if done == n and _deployments(kube, namespaces) >= len(busy):
                out["cold_start_s"] = time.monotonic() - t
                break
            if time.monotonic() - t > 120 + n * 0.3:  # reported as such; the run goes on
                print(f"{done}/{n} reconciled; not: {missing[:20]}", file=sys.stderr)
                break
            time.sleep(poll)
        out["reconciled"] = n - len(missing)
        cold_logs = [op.log() for op in ops]
        out["not_reconciled"] = missing
        colds = [proc_stats(pid) for pid in pids]
        out["cold"] = _summed(colds)
        # with replicas: who owns what by the hash (the operators' own rule), beside each
        # replica's gauge
        uids = {
            (i["metadata"]["namespace"], i["metadata"]["name"]): i["metadata"]["uid"] for i in items
        }
        owners = {key: sharding.owner(uid, pod_ids) or "" for key, uid in uids.items()}
        per: list[dict[str, Any]] = [
            {
                "id": pod,
                "owned_cold": _gauge(op, OWNED),
                "owned_by_hash": sum(1 for o in owners.values() if o == pod),
                "cold_cpu_s": cold["cpu_s"],
                "shard_cold": shard_log(text),
            }
            for pod, op, cold, text in zip(pod_ids, ops, colds, cold_logs, strict=False)
        ]
        if per:
            out["replicas"] = per
            out["lease_duration_s"] = lease_s
            print(f"owned (gauge, by the hash): {per}", file=sys.stderr)
        # what the measurement itself cost (its LISTs of every group load the API server):
        # the poll interval, seconds inside the LISTs, this process' CPU, and the control
        # plane's CPU seconds per component over the cold start
        plane1 = _plane_cpu(kube)
        out["cold_observer"] = {
            "poll_s": poll,
            "polls": len(progress),
            "listing_s": round(polling, 2),
            "bench_cpu_s": round(time.process_time() - own0, 2),
        }
        out["cold_plane_cpu_s"] = {c: round(plane1[c] - plane0.get(c, 0.0), 2) for c in plane1}
        api1 = _api_time(kube)
        spent = {
            k: (v[0] - api0.get(k, [0.0, 0.0])[0], v[1] - api0.get(k, [0.0, 0.0])[1])
            for k, v in api1.items()
        }
        top = sorted(spent.items(), key=lambda kv: -kv[1][1])[:12]
        out["cold_api_requests"] = {k: [int(c), round(t, 2)] for k, (c, t) in top if c > 0}
        out["cold_progress"] = progress
        out["phases"] = phases
        print(
            f"cold start {out['cold_start_s']} s (99 %: {out['cold_start_99_s']}): {phases}",
            file=sys.stderr,
        )

        # kopf's own bookkeeping (its diff base: in status since issue 15, in an annotation
        # before, a write of its own) may land after the first status; the rest window starts
        # once it is on every group (up to 120 s more), plus 15 s for the last passes
        settle = time.monotonic()
        while time.monotonic() - settle < 120:
            handled = sum(1 for i in _list(kube, namespaces) if kopf_handled(i))
            if handled == n:
                break
            time.sleep(2.0)
        out["kopf_handled_s"] = time.monotonic() - t
        time.sleep(15)
        idle = {
            (i["metadata"]["namespace"], i["metadata"]["name"]): i for i in _list(kube, namespaces)
        }
        rv0 = {
            key: i["metadata"]["resourceVersion"] for key, i in idle.items() if kinds[key] == "idle"
        }
        peer0 = _peering_versions(kube)
        ra = idle_redis.client()
        a_redis, a_apf = redis_calls(ra), apf_dispatched(kube)
        a_procs, a_api = [proc_stats(pid) for pid in pids], _api_time(kube) if sharded else {}
        t = time.monotonic()
        time.sleep(rest)
        b_redis, b_apf = redis_calls(ra), apf_dispatched(kube)
        b_procs, b_api = [proc_stats(pid) for pid in pids], _api_time(kube) if sharded else {}
        window = time.monotonic() - t
        later = {
            (i["metadata"]["namespace"], i["metadata"]["name"]): i for i in _list(kube, namespaces)
        }
        writes = sum(
            1 for key, rv in rv0.items() if later[key]["metadata"]["resourceVersion"] != rv
        )
        peer1 = _peering_versions(kube)
        peer_writes = sum(1 for key, rv in peer1.items() if peer0.get(key) != rv)
        lease_writes = _lease_writes(a_api, b_api)
        n_idle = len(rv0)
        by_cmd = {c: b_redis.get(c, 0) - a_redis.get(c, 0) for c in b_redis if c != "info"}
        by_cmd = {c: v for c, v in sorted(by_cmd.items(), key=lambda kv: -kv[1]) if v}
        cpu_pct = [
            (b["cpu_s"] - a["cpu_s"]) / window * 100 for a, b in zip(a_procs, b_procs, strict=True)
        ]
        for rec, b, pct in zip(per, b_procs, cpu_pct, strict=False):
            rec.update(rss_mib=b["rss_mib"], hwm_mib=b["hwm_mib"], cpu_pct=pct)
        out["rest"] = {
            "window_s": window,
            "rss_mib": sum(b["rss_mib"] for b in b_procs),
            "hwm_mib": sum(b["hwm_mib"] for b in b_procs),
            "cpu_pct": sum(cpu_pct),
            "idle_groups": n_idle,
            "redis_cmds_per_idle_group_min": sum(by_cmd.values()) / n_idle * 60 / window,
            "redis_by_command": by_cmd,
            "idle_group_writes": writes,
            "peering_writes": peer_writes,
            "lease_writes": lease_writes,
            "api_writes_per_idle_group_hour": (writes + peer_writes + lease_writes)
            / n_idle
            * 3600
            / window,
            "api_requests_per_min": sum(
                b_apf.get(schema, 0) - a_apf.get(schema, 0)
                for schema in {SA_FLOW_SCHEMA, lease_schema or SA_FLOW_SCHEMA}
            )
            * 60
            / window,
        }
        print(json.dumps(out["rest"]), file=sys.stderr)
        if trace := (operator_env or {}).get("SENDGROUP_TRACEMALLOC"):
            out["memtrace"] = _memtrace(ops[0], trace)  # with replicas: the first one's
            # one whole body of each kind as the API server holds it at rest (managedFields
            # included), to size what a copy of it costs in the operator
            out["sample_bodies"] = {}
            for key, item in later.items():
                out["sample_bodies"].setdefault(kinds[key], item)

        from kubernetes import client

        apps = client.AppsV1Api(kube.api_client())
        rb = idle_redis.client()
        idle_keys = [key for key, kind in kinds.items() if kind == "idle"]
        if sharded:  # the pushes alternate between the replicas' groups
            lanes = [[key for key in idle_keys if owners[key] == pod] for pod in pod_ids]
            idle_keys = [key for row in zip_longest(*lanes) for key in row if key is not None]
        targets = idle_keys[:pushes]
        woken: dict[tuple[str, str], float | None] = {}
        rng = random.Random(15)
        for ns, name in targets:
            if list(woken.values()).count(None) >= 3:  # an operator this far behind: stop
                break  # waiting 30 s each
            time.sleep(rng.uniform(0.1, 0.6))  # not in step with the observer's poll
            woken[(ns, name)] = _push_and_wait(apps, rb, ns, name)  # None: reported as missed
        out["wakeup"] = _latencies(woken)
        for rec in per:
            rec["wakeup"] = _latencies({k: s for k, s in woken.items() if owners[k] == rec["id"]})
        print(json.dumps(out["wakeup"]), file=sys.stderr)

        if sharded:
            spare = [key for key in idle_keys if key not in woken]
            for rec, op in zip(per, ops, strict=True):
                rec["shard_run"] = shard_log(op.log())  # the whole run before the handover
            out["handover"] = _handover(ops, pod_ids, uids, owners, spare, n, lease_s, apps, rb)
            for rec, owned in zip(per, out["handover"]["survivors_owned"] + [None], strict=True):
                rec["owned_after"] = owned
            print(json.dumps(out["handover"]), file=sys.stderr)
        elif restart:
            out["restart"] = _restart(kube, ops[0], namespaces, n)
            print(f"restart: {out['restart']['seconds']} s", file=sys.stderr)
        for op in ops:
            op.stop()
        if floor:
            samples: dict[str, dict[str, Any]] = {}
            for key, item in later.items():
                phase = (item.get("status") or {}).get("phase")
                if kinds[key] not in samples and phase in expected[kinds[key]]:
                    samples[kinds[key]] = item["status"]
            ns0, name0 = busy[0]
            out["floor"] = _floor(
                kube,
                work,
                namespaces[0],
                kubeconfig,
                docs,
                kinds,
                k,
                clusterwide,
                samples,
                _deployment_template(kube, ns0, name0),
                name0,
            )
    finally:
        for op in ops:
            op.stop()
        idle_redis.cleanup()
        other_redis.cleanup()
        stop_cluster(state)
    return out


def _memtrace(op: OperatorProcess, path: str, timeout: float = 600) -> dict[str, Any]:
    """The operator's heap at the end of the rest window: SIGUSR2 makes it write
    ``path.1.snap`` and ``path.1.json`` (``sendgroup_operator.memtrace``); returns the JSON's
    figures (the snapshot is read offline by ``python -m bench.memsites``)."""
    import os
    import signal

    assert op.proc is not None
    done = Path(f"{path}.1.json")
    done.unlink(missing_ok=True)
    os.kill(op.proc.pid, signal.SIGUSR2)
    t = time.monotonic()
    while not done.exists():
        if time.monotonic() - t > timeout or not op.running():
            raise RuntimeError(f"no heap dump in {path} after {time.monotonic() - t:.0f} s")
        time.sleep(1)
    figures: dict[str, Any] = json.loads(done.read_text())
    print(f"heap dump after {time.monotonic() - t:.0f} s: {done}", file=sys.stderr)
    return {"path": path, **figures}


def kopf_handled(item: dict[str, Any]) -> bool:
    """kopf recorded its diff base: ``status.kopf.last-handled-configuration``, or the
    annotation an operator before issue 15 (``--operator-tree``) wrote."""
    if "last-handled-configuration" in ((item.get("status") or {}).get("kopf") or {}):
        return True
    annotations = item["metadata"].get("annotations") or {}
    return any(a.endswith("/last-handled-configuration") for a in annotations)


def _metric_sum(text: str, name: str) -> float:
    """The sum of every sample of metric ``name`` in a Prometheus text exposition."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + "{", name + " "))
    )


def _groups_gauge(op: OperatorProcess, name: str = "sendgroup_groups") -> str:
    """The operator's ``sendgroup_groups`` (or ``name``) samples only (``/metrics?name[]=``,
    prometheus_client's restricted registry): the whole page holds several samples per group,
    and rendering it every 0.5 s was a third of the operator's CPU during a 10,000-group restart
    (py-spy)."""
    import urllib.request

    url = f"http://127.0.0.1:{op.metrics_port}/metrics?name[]={name}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text: str = resp.read().decode()
    return text


def passed_groups(op: OperatorProcess) -> int:
    """The distinct groups the operator process has passed: the sum of its
    ``sendgroup_groups{phase=...}`` gauge (one entry per group passed, ``GroupTable``), read
    alone (:func:`_groups_gauge`); 0 while its /metrics does not answer yet."""
    try:
        return int(_metric_sum(_groups_gauge(op), "sendgroup_groups"))
    except OSError:
        return 0


#: the gauge of the groups a sharded replica acts on
OWNED = "sendgroup_operator_owned_groups"
#: an operator's log line for each worker Deployment it writes (reconcile.py)
WROTE = re.compile(rb"deployment sg-(\S+) replicas=")


def _pid(op: OperatorProcess) -> int:
    assert op.proc is not None
    return op.proc.pid


def _summed(stats: list[dict[str, float]]) -> dict[str, float]:
    """:func:`proc_stats` of several processes added up (CPU s, RSS and peak RSS MiB)."""
    return {f: sum(s[f] for s in stats) for f in ("cpu_s", "rss_mib", "hwm_mib")}


def _gauge(op: OperatorProcess, name: str) -> float | None:
    """The value of the operator's gauge ``name`` (summed over labels); None while its
    /metrics does not answer."""
    try:
        return _metric_sum(_groups_gauge(op, name), name)
    except OSError:
        return None


def _lease_writes(before: dict[str, list[float]], after: dict[str, list[float]]) -> int:
    """Lease writes between two :func:`_api_time` readings: PATCH, POST and DELETE ``leases``,
    the shard replicas' (the control plane renews its own Leases with PUT)."""
    return round(
        sum(
            after.get(f"{verb} leases", [0.0])[0] - before.get(f"{verb} leases", [0.0])[0]
            for verb in ("PATCH", "POST", "DELETE")
        )
    )


def _deployment_exists(apps: Any, ns: str, name: str) -> bool:
    """Whether group ``name``'s worker Deployment exists (one GET)."""
    from kubernetes.client.exceptions import ApiException

    try:
        apps.read_namespaced_deployment(f"sg-{name}", ns, _preload_content=False)
        return True
    except ApiException as exc:
        if exc.status != 404:
            raise
        return False


def _push(rb: redis.Redis[Any], ns: str, name: str) -> None:
    """One job for group ``name`` on Redis ``rb``, as the producer pushes it (ready + notify)."""
    keys = QueueKeys(f"{ns}.mail-{name}")
    rb.rpush(keys.ready, _job(name, 0))
    rb.rpush(keys.notify, "1")


def _push_and_wait(
    apps: Any, rb: redis.Redis[Any], ns: str, name: str, timeout: float = 30
) -> float | None:
    """Seconds from a :func:`_push` until the group's worker Deployment exists (a GET every
    20 ms); None when it does not within ``timeout`` seconds."""
    pushed = time.monotonic()
    _push(rb, ns, name)
    while time.monotonic() - pushed <= timeout:
        if _deployment_exists(apps, ns, name):
            return time.monotonic() - pushed
        time.sleep(0.02)
    return None


def _latencies(woken: dict[tuple[str, str], float | None]) -> dict[str, Any]:
    """Wake-up figures (seconds) of pushes by group (None: missed)."""
    latencies = [s for s in woken.values() if s is not None]
    return {
        "pushes": len(woken),
        "missed": [f"{ns}/{name}" for (ns, name), s in woken.items() if s is None],
        "p50_s": statistics.median(latencies) if latencies else None,
        "p99_s": _pct(latencies, 0.99) if latencies else None,
        "max_s": max(latencies) if latencies else None,
        "latencies_s": latencies,
    }


def _written(path: Path, start: int = 0, end: int | None = None) -> set[str]:
    """Groups whose worker Deployment the operator logging to ``path`` wrote (bytes ``start``
    to ``end`` of its log)."""
    return {m.decode() for m in WROTE.findall(path.read_bytes()[start:end])}


def _handover(
    ops: list[OperatorProcess],
    pod_ids: list[str],
    uids: dict[tuple[str, str], str],
    owners: dict[tuple[str, str], str],
    spare: list[tuple[str, str]],
    n: int,
    lease_s: float,
    apps: Any,
    rb: redis.Redis[Any],
    pushes: int = 10,
) -> dict[str, Any]:
    """The last replica SIGKILLed (module docstring, 4). ``spare``: idle groups not pushed yet;
    those the killed replica owned (``owners``, by the hash) get one job at the kill, and up to
    ``pushes`` more, one at a time, once the survivors' gauges (polled every 0.2 s, for up to
    4 lease durations + 60 s + 10 ms per group) sum to ``n``. Seconds from the kill."""
    victim, survivors, gone = ops[-1], ops[:-1], pod_ids[-1]
    its = [key for key in spare if owners[key] == gone]
    marks = [op.log_path.stat().st_size for op in ops]
    victim.stop(signal.SIGKILL)
    killed = time.monotonic()
    first = its[0] if its else None
    if first is not None:
        _push(rb, *first)
    taken = first_s = None
    owned: list[float | None] = []
    while time.monotonic() - killed < 4 * lease_s + 60 + 0.01 * n:
        now = time.monotonic() - killed
        for op in survivors:
            if not op.running():
                raise RuntimeError(f"operator exited after the handover:\n{op.log()[-3000:]}")
        if taken is None:
            owned = [_gauge(op, OWNED) for op in survivors]
            if sum(o or 0 for o in owned) >= n:
                taken = now
        if first is not None and first_s is None and _deployment_exists(apps, *first):
            first_s = now
        if taken is not None and (first is None or first_s is not None):
            break
        time.sleep(0.2)
    woken: dict[tuple[str, str], float | None] = {}
    rng = random.Random(16)
    for ns, name in its[1 : pushes + 1]:
        time.sleep(rng.uniform(0.1, 0.6))
        woken[(ns, name)] = _push_and_wait(apps, rb, ns, name)
    # who wrote which Deployment, by the logs: before the kill, after it (survivors only)
    key_of = {name: (ns, name) for ns, name in owners}
    before = [_written(op.log_path, 0, mark) for op, mark in zip(ops, marks, strict=True)]
    after = [_written(op.log_path, mark) for op, mark in zip(survivors, marks, strict=False)]
    new_owner = {key: sharding.owner(uid, pod_ids[:-1]) for key, uid in uids.items()}

    def twice(sets: list[set[str]]) -> list[str]:
        return sorted(g for g in set().union(*sets) if sum(g in s for s in sets) > 1)

    def foreign(sets: list[set[str]], owner_of: dict[tuple[str, str], str | None]) -> list[str]:
        return sorted(
            g
            for pod, s in zip(pod_ids, sets, strict=False)
            for g in s
            if owner_of.get(key_of.get(g, ("", g))) != pod
        )

    return {
        "killed": gone,
        "killed_owned_by_hash": sum(1 for o in owners.values() if o == gone),
        "lease_duration_s": lease_s,
        "owned_again_s": taken,
        "survivors_owned": owned,
        "pushed_at_kill": None if first is None else "/".join(first),
        "pushed_at_kill_s": first_s,
        "wakeup": _latencies(woken),
        "written_twice_before_kill": twice(before),
        "written_twice_after_kill": twice(after),
        "written_by_non_owner_before_kill": foreign(before, dict(owners)),
        "written_by_non_owner_after_kill": foreign(after, new_owner),
    }


def _versions(kube: KubeCluster, namespaces: list[str]) -> dict[tuple[str, str], str]:
    return {
        (i["metadata"]["namespace"], i["metadata"]["name"]): i["metadata"]["resourceVersion"]
        for i in _list(kube, namespaces)
    }


def _restart(
    kube: KubeCluster, op: OperatorProcess, namespaces: list[str], n: int
) -> dict[str, Any]:
    """The operator stopped (SIGTERM) and a new process started: seconds from its spawn until
    it has passed every group once (the sum of its ``sendgroup_groups`` gauge, one entry per
    group passed, reaches ``n``; that gauge alone polled every 0.5 s, :func:`passed_groups`),
    the API requests (any client) and the SendGroup writes the restart caused (groups whose
    ``resourceVersion`` moved, counted when all were passed and again 15 s later), its CPU."""
    op.stop()
    rv0 = _versions(kube, namespaces)
    plane0, api0 = _plane_cpu(kube), _api_time(kube)
    t = time.monotonic()
    op.start()
    assert op.proc is not None
    pid = op.proc.pid
    progress: list[tuple[float, int]] = []
    passed, done = 0, None
    while time.monotonic() - t < 120 + n * 0.3:
        if not op.running():
            raise RuntimeError(f"operator exited after the restart:\n{op.log()[-3000:]}")
        passed = passed_groups(op)
        progress.append((round(time.monotonic() - t, 2), passed))
        if passed >= n:
            done = time.monotonic() - t
            break
        time.sleep(0.5)
    cpu = proc_stats(pid)["cpu_s"]
    plane1, api1 = _plane_cpu(kube), _api_time(kube)
    moved = sum(1 for key, rv in _versions(kube, namespaces).items() if rv0.get(key) != rv)
    time.sleep(15)
    later = sum(1 for key, rv in _versions(kube, namespaces).items() if rv0.get(key) != rv)
    spent = {
        k: (v[0] - api0.get(k, [0.0, 0.0])[0], v[1] - api0.get(k, [0.0, 0.0])[1])
        for k, v in api1.items()
    }
    top = sorted(spent.items(), key=lambda kv: -kv[1][1])[:12]
    return {
        "seconds": done,
        "passed": passed,
        "operator_cpu_s": round(cpu, 2),
        "plane_cpu_s": {c: round(plane1[c] - plane0.get(c, 0.0), 2) for c in plane1},
        "api_requests": {k: [int(c), round(s, 2)] for k, (c, s) in top if c > 0},
        "group_writes": moved,
        "group_writes_15s_later": later,
        "progress": progress,
    }


def _floor(
    kube: KubeCluster,
    work: Path,
    home: str,
    kubeconfig: Path,
    docs: list[dict[str, Any]],
    kinds: dict[tuple[str, str], str],
    k: int,
    clusterwide: bool,
    samples: dict[str, dict[str, Any]],
    template: dict[str, Any] | None,
    template_group: str,
) -> dict[str, Any]:
    """The API server's floor, in the same run (the operator stopped): the same groups created
    again in K fresh namespaces, then ``bench.apifloor`` run as its own process, timed from
    spawn to exit as the operator is. (1) Cold start: the LISTs, the operator's own status body
    per group (``samples``, by kind) and, busy, the operator's own Deployment (``template``, the
    Deployment of group ``template_group``, renamed). (2) Restart: the LISTs only (a restart
    that finds every group as it left it needs nothing else)."""
    floor_ns = [f"floor-{i:02d}" for i in range(k)]
    for ns in floor_ns:
        kube.kubectl("create", "namespace", ns)
    if not clusterwide:
        role = next(o for o in rbac_objects(home) if o["kind"] == "Role")
        kube.kubectl(
            "apply",
            "-f",
            "-",
            input=yaml.safe_dump_all(_role_bindings(role, home, floor_ns)),
            timeout=120,
        )
    moved = []
    for doc in docs:
        i = int(doc["metadata"]["name"].split("-")[1])
        ns = floor_ns[i % k]
        old_ns = doc["metadata"]["namespace"]
        moved.append(
            json.loads(
                json.dumps(doc).replace(f'"{old_ns}"', f'"{ns}"').replace(f"{old_ns}.", f"{ns}.")
            )
        )
    for chunk in range(0, len(moved), 500):
        kube.kubectl(
            "create", "-f", "-", input=manifests.stream(*moved[chunk : chunk + 500]), timeout=900
        )
    statuses: dict[str, Any] = {}
    deployments: dict[str, Any] = {}
    for doc in moved:
        meta = doc["metadata"]
        ns, name = meta["namespace"], meta["name"]
        i = int(name.split("-")[1])
        kind = kinds[(f"scale-{i % k:02d}", name)]
        statuses[f"{ns}/{name}"] = samples[kind]
        if kind == "busy" and template is not None:
            old_ns = template["metadata"]["namespace"]
            text = json.dumps(template).replace(old_ns, ns).replace(template_group, name)
            deployments[f"{ns}/{name}"] = json.loads(text)
    out: dict[str, Any] = {"namespaces": k}
    for phase, plan in (
        ("cold", {"statuses": statuses, "deployments": deployments}),
        ("restart", {"list_only": True}),
    ):
        path = work / f"floor-{phase}.json"
        path.write_text(json.dumps({"kubeconfig": str(kubeconfig), "namespaces": floor_ns, **plan}))
        t = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "bench.apifloor", str(path)],
            capture_output=True,
            text=True,
            timeout=3600,
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        out[phase] = {"spawn_to_exit_s": time.monotonic() - t, **json.loads(proc.stdout)}
        print(f"floor {phase}: {out[phase]}", file=sys.stderr)
    done = sum(
        1
        for i in _list(kube, floor_ns)
        if (i.get("status") or {}).get("observedGeneration") == i["metadata"]["generation"]
    )
    if done != len(moved):
        raise RuntimeError(f"floor: only {done}/{len(moved)} groups carry their status")
    return out


def _deployment_template(kube: KubeCluster, ns: str, name: str) -> dict[str, Any] | None:
    """The operator's worker Deployment of group ``name``, as a body to create again."""
    proc = kube.kubectl(
        "get", "deployment", f"sg-{name}", "-n", ns, "-o", "json", check=False, timeout=60
    )
    if proc.returncode != 0:
        return None
    got = json.loads(proc.stdout)
    meta = got["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": meta.get("labels", {}),
            "annotations": {
                a: v
                for a, v in (meta.get("annotations") or {}).items()
                if not a.startswith("deployment.kubernetes.io/")
            },
            "ownerReferences": meta.get("ownerReferences", []),
        },
        "spec": got["spec"],
    }


def _tree_commit(tree: Path) -> str:
    proc = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %ad %s", "--date=iso"],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


def _restart_text(out: dict[str, Any]) -> list[str]:
    again = out.get("restart")
    if not again:
        return []
    cpu = ", ".join(f"{c} {v:.1f}" for c, v in again["plane_cpu_s"].items())
    calls = "; ".join(f"{k} {c} in {t:.1f} s" for k, (c, t) in again["api_requests"].items())
    return [
        "",
        f"Restart: the operator stopped (SIGTERM) and a new process started; every group "
        f"passed once more after {again['seconds']:.1f} s (the sum of its `sendgroup_groups` "
        f"gauge, polled every 0.5 s). Operator CPU s {again['operator_cpu_s']:.1f}; control "
        f"plane CPU s {cpu}. API server requests in that time (any client): {calls}.",
    ]


def _wake_text(wake: dict[str, Any]) -> str:
    missed = wake.get("missed") or []
    if not wake["latencies_s"]:
        return f"none within 30 s ({len(missed)} missed)"
    text = f"{wake['p50_s']:.2f} / {wake['p99_s']:.2f} / {wake['max_s']:.2f}"
    return text + (f"; {len(missed)} missed (no Deployment 30 s after)" if missed else "")


def _count(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"


def _replica_text(out: dict[str, Any]) -> list[str]:
    """With replicas: a table of each replica's figures and the handover; empty otherwise."""
    per, hand = out.get("replicas"), out.get("handover")
    if not per or not hand:
        return []
    n, rest, lease = out["groups"], out["rest"], hand["lease_duration_s"]

    def wake(w: dict[str, Any]) -> str:
        return "-" if not w["pushes"] else f"{w['pushes']}: {_wake_text(w)}"

    rows = [
        f"| {r['id']}{' (killed)' if r['id'] == hand['killed'] else ''} "
        f"| {_count(r['owned_cold'])} / {r['owned_by_hash']:,} | {r['cold_cpu_s']:.1f} "
        f"| {r['rss_mib']:.0f} ({r['hwm_mib']:.0f}) | {r['cpu_pct']:.1f} | {wake(r['wakeup'])} "
        f"| {'-' if r['id'] == hand['killed'] else _count(r['owned_after'])} |"
        for r in per
    ]
    owned_cold = [r["owned_cold"] for r in per]
    after = hand["survivors_owned"]
    rows.append(
        f"| all | {_count(sum(o or 0 for o in owned_cold))} / {n:,} | {out['cold']['cpu_s']:.1f} "
        f"| {rest['rss_mib']:.0f} ({rest['hwm_mib']:.0f}) | {rest['cpu_pct']:.1f} "
        f"| {wake(out['wakeup'])} | {_count(sum(o or 0 for o in after))} / {n:,} |"
    )
    taken = hand["owned_again_s"]
    first = hand["pushed_at_kill_s"]
    schema = out.get("lease_flowschema")
    membership = [
        "",
        "Shard membership from each replica's log ("
        + (
            f"the Leases' FlowSchema `{schema}` applied: their requests in the `leader-election` "
            "priority level"
            if schema
            else "no FlowSchema for the Leases: their requests share `service-accounts` / "
            "`workload-low` with kopf's"
        )
        + '); fenced: the view went to "acts on nothing yet" after the replica had owned groups '
        "(rule (a): its last successful poll older than L - M), not its first join wait; "
        "cold start / whole run before the handover.",
        "",
        '| replica | fenced | "cannot renew" streaks | peers dropped as dead '
        "| kopf APITooManyRequests lines |",
        "|---|---|---|---|---|",
        *(
            f"| {r['id']} | {r['shard_cold']['fenced']} / {r['shard_run']['fenced']} "
            f"| {r['shard_cold']['cannot_renew']} / {r['shard_run']['cannot_renew']} "
            f"| {r['shard_cold']['stale_deleted']} / {r['shard_run']['stale_deleted']} "
            f"| {r['shard_cold']['too_many']} / {r['shard_run']['too_many']} |"
            for r in per
            if "shard_cold" in r and "shard_run" in r
        ),
    ]
    checks = [
        ("written by two replicas before the kill", hand["written_twice_before_kill"]),
        ("by two survivors after it", hand["written_twice_after_kill"]),
        (
            "by a replica not their owner by the hash, before the kill",
            hand["written_by_non_owner_before_kill"],
        ),
        ("after it (owner among the survivors)", hand["written_by_non_owner_after_kill"]),
    ]
    return [
        "",
        f"Per replica ({len(per)} replicas, `SENDGROUP_SHARDING=true`, `POD_ID` r0 ..; lease "
        f"duration {lease:g} s, renewed every {lease / 3:g} s); the figures above are their "
        "totals: cold start from the first replica's spawn, RSS and CPU summed. Owned: the "
        "replica's `sendgroup_operator_owned_groups` gauge when the cold start ended / its share "
        "by the rendezvous hash of the uids; wake-ups: pushes, p50 / p99 / max s.",
        "",
        "| replica | owned after the cold start (gauge / hash) | cold-start CPU s "
        "| RSS at rest, MiB (peak) | CPU at rest, % of a core | wake-ups | owned after the "
        "handover |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Handover: {hand['killed']} (owning {hand['killed_owned_by_hash']:,} groups by the hash) "
        "SIGKILLed after the wake-ups; the survivors' gauges summed to "
        + (
            f"{n:,} again after {taken:.1f} s"
            if taken is not None
            else f"only {_count(sum(o or 0 for o in after))} of {n:,} within "
            f"{4 * lease + 60 + 0.01 * n:g} s"
        )
        + " (the gauge follows a replica's view of the members: it moves before the passes of "
        "the groups taken over have run)"
        + "; a job pushed at the kill to one of its idle groups had its Deployment "
        + (f"after {first:.1f} s" if first is not None else "never (within that time)")
        + f"; then {hand['wakeup']['pushes']} more of its idle groups, one at a time, woke in "
        f"{_wake_text(hand['wakeup'])} s (p50 / p99 / max). "
        "Worker Deployments (the operators' logs): "
        + "; ".join(
            f"{what}: {len(groups)}" + (f" ({', '.join(groups[:10])})" if groups else "")
            for what, groups in checks
        )
        + ".",
        *membership,
    ]


def _figures(out: dict[str, Any]) -> dict[str, str]:
    """The table's figures of one run, by row."""
    n, rest, wake = out["groups"], out["rest"], out["wakeup"]
    cold = out["cold_start_s"]
    c99 = out["cold_start_99_s"]
    again = out.get("restart")
    return {
        "cold": f"{cold:.1f}"
        if cold is not None
        else f"not all: {out['reconciled']}/{n} ({len(out['not_reconciled'])} never got a status)",
        "cold99": "-" if c99 is None else f"{c99:.1f}",
        "restart": "-"
        if not again
        else f"{again['seconds']:.1f}"
        if again["seconds"] is not None
        else f"not all: {again['passed']}/{n}",
        "restart_writes": "-"
        if not again
        else f"{again['group_writes']} ({again['group_writes_15s_later']} 15 s later)",
        "rss": f"{rest['rss_mib']:.0f} ({rest['hwm_mib']:.0f})",
        "cpu": f"{rest['cpu_pct']:.1f}",
        "redis": f"{rest['redis_cmds_per_idle_group_min']:.2f}",
        "writes": f"{rest['api_writes_per_idle_group_hour']:.2f}",
        "requests": f"{rest['api_requests_per_min']:.0f}",
        "wake": _wake_text(wake),
    }


#: the table's rows: key of :func:`_figures`, label, the issue's figure for main at 1,000 groups
ROWS = [
    ("cold", "cold start: all groups reconciled, s", "8.5 / 24.5"),
    ("cold99", "cold start: 99 % of groups reconciled, s", "-"),
    ("restart", "restart: every group passed again, s", "-"),
    ("restart_writes", "restart: SendGroups written", "-"),
    ("rss", "operator RSS at rest, MiB (peak)", "338 / 376"),
    ("cpu", "operator CPU at rest, % of a core", "11-19"),
    ("redis", "Redis commands per idle group per minute", "78"),
    (
        "writes",
        "API writes per idle group per hour (SendGroup + peering or shard Leases)",
        "~65 (ns per tenant)",
    ),
    ("requests", "API requests per minute, whole operator (APF)", "-"),
    ("wake", "wake-up: push -> Deployment, s (p50 / p99 / max)", "5.75 mean, up to 10"),
]


def _floor_figures(out: dict[str, Any]) -> dict[str, str]:
    floor = out.get("floor") or {}
    got: dict[str, str] = {}
    for key, phase in (("cold", "cold"), ("restart", "restart")):
        if phase in floor:
            f = floor[phase]
            got[key] = f"{f['spawn_to_exit_s']:.1f} ({f['requests']} requests)"
    if "restart" in floor:
        got["restart_writes"] = "0"
    return got


def markdown(out: dict[str, Any], compare: dict[str, Any] | None = None) -> str:
    """The report; ``compare``: another run's output (e.g. an older main at the same size)
    for the last column, else the issue's figures for main at 1,000 groups."""
    n, rest, wake = out["groups"], out["rest"], out["wakeup"]
    mine, floor = _figures(out), _floor_figures(out)
    other = _figures(compare) if compare is not None else {k: v for k, _, v in ROWS}
    head = (
        f"{compare.get('operator_tree') or 'compared run'} ({compare['groups']} groups)"
        if compare is not None
        else "main (issue 15, 1,000 groups, idle / busy runs)"
    )
    me = out.get("operator_tree") or "this branch"
    rows = [(label, mine[key], floor.get(key, "-"), other.get(key, "-")) for key, label, _ in ROWS]
    lines = [
        f"# Scale: {n} SendGroups on "
        + (
            f"{len(out['replicas'])} sharded operator replicas"
            if out.get("replicas")
            else "one operator"
        )
        + f" ({out['namespaces']} namespaces"
        + (", watched cluster-wide" if out.get("clusterwide") else "")
        + (
            f", the chart's {out['providers']} default ClusterSendProviders"
            if out.get("providers")
            else ""
        )
        + ")",
        "",
        *(
            [
                f"Run started {out['started']}; this checkout: {out['bench_tree']}"
                + (
                    f"; the operator's code from {out['operator_tree']}."
                    if out.get("operator_tree")
                    else " (the operator's code too)."
                ),
                "",
            ]
            if out.get("bench_tree")
            else []
        ),
        *(
            [f"Operator settings beyond the script's: `{out['operator_env']}`.", ""]
            if out.get("operator_env")
            else []
        ),
        f"Mix: 70 % idle, 20 % paused, 10 % busy (3 jobs each); created in {out['create_s']:.0f} s "
        f"before the operator started. Phases at first reconcile: {out['phases']}. Rest window "
        f"{rest['window_s']:.0f} s"
        + (
            f" (shorter than the operator's {CLAIM_RECHECK:.0f} s claim recheck per group: "
            "the Redis and CPU figures may leave out the idle groups' periodic work; "
            "`--rest 300` or more for those figures)"
            if rest["window_s"] < CLAIM_RECHECK
            else ""
        )
        + ". Idle groups on their own Redis, so its commandstats are theirs "
        + (
            "and the providers' (the default Redis also holds every provider's state, read and "
            "written by its pass every second)"
            if out.get("providers")
            else "alone"
        )
        + f": {rest['redis_by_command']}. Writes in the window: {rest['idle_group_writes']} "
        + (
            f"idle SendGroups, {rest['lease_writes']} shard Lease writes (the API server's "
            "PATCH / POST / DELETE leases; kopf peering off)."
            if out.get("replicas")
            else f"idle SendGroups, {rest['peering_writes']} peering objects (one replica: "
            "peering off)."
        ),
        "",
        f"Wake-up over {wake['pushes']} pushes. The API floor (`bench/apifloor.py`, same run, "
        "the operator stopped): a minimal client, its own process timed from spawn to exit as "
        "the operator is, making only the requests a reconciliation needs for the same groups in "
        "fresh namespaces; cold start: a LIST per namespace, the operator's own status body per "
        "group and, busy, its Deployment; restart: the LISTs only.",
        "",
        f"| figure | {me} | API floor (same run) | {head} |",
        "|---|---|---|---|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows),
        "",
        *_cold_text(out),
        *(
            [
                f"Not reconciled when the cold start gave up ({120 + n * 0.3:.0f} s): "
                f"{', '.join(out['not_reconciled'][:20])}.",
                "",
            ]
            if out["not_reconciled"]
            else []
        ),
        *(
            [
                "main's cold start and RSS were measured in separate all-idle and all-busy runs "
                "in one namespace; here one mixed run over several namespaces."
            ]
            if compare is None
            else []
        ),
        *_restart_text(out),
        *_replica_text(out),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("groups", nargs="?", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--rest", type=float, default=60.0)
    parser.add_argument("--pushes", type=int, default=50)
    parser.add_argument(
        "--clusterwide",
        action="store_true",
        help="the operator watches all namespaces (one watch per resource, not one per namespace)",
    )
    parser.add_argument(
        "--providers",
        action="store_true",
        help="the chart's default ClusterSendProviders exist, every group matches one",
    )
    parser.add_argument("--work", type=Path, default=None, help="scratch dir (default a temp dir)")
    parser.add_argument(
        "--poll",
        type=float,
        default=1.0,
        help="seconds between the cold start's LISTs of every group (each loads the API server)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an operator setting (e.g. SENDGROUP_WORKER_LIMIT=100), repeatable",
    )
    parser.add_argument(
        "--operator-tree",
        type=Path,
        default=None,
        help="run the operator and apply the CRDs from this checkout (e.g. a worktree of an "
        "older main) instead of this one",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        default=None,
        help="another run's .json (e.g. an older main at the same size) for the last column",
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="R > 1: R operator replicas sharding the groups (SENDGROUP_SHARDING), a per-replica "
        "table, and a handover (one replica SIGKILLed) instead of the restart",
    )
    parser.add_argument(
        "--lease-flowschema",
        action="store_true",
        help="with replicas: apply the chart's FlowSchema for the shard Leases (sharding."
        "flowSchema: their own API priority level) before the replicas start",
    )
    parser.add_argument("--no-restart", action="store_true", help="skip the restart phase")
    parser.add_argument("--no-floor", action="store_true", help="skip the API floor")
    args = parser.parse_args(argv)
    if bad := [e for e in args.env if "=" not in e]:
        parser.error(f"--env wants NAME=VALUE, got {bad}")
    if args.replicas < 1:
        parser.error("--replicas wants at least 1")
    import tempfile

    work = args.work or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    out = run(
        args.groups,
        args.namespaces,
        args.rest,
        args.pushes,
        work,
        args.clusterwide,
        args.providers,
        dict(e.split("=", 1) for e in args.env),
        args.poll,
        args.operator_tree,
        not args.no_restart,
        not args.no_floor,
        args.replicas,
        args.lease_flowschema,
    )
    compare = json.loads(args.compare.read_text()) if args.compare else None
    text = markdown(out, compare)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%MZ")
    base = RESULTS / f"scale-{args.groups}-{stamp}"
    base.with_suffix(".md").write_text(text)
    base.with_suffix(".json").write_text(json.dumps(out, indent=2) + "\n")
    print(text)
    print(f"written: {base}.md (operator logs: {work}/operator*.log)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
