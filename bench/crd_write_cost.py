"""What one SendGroup write costs the API server, with and without the CRD's CEL rules
(issue 15: at 2,000 groups the cold start is bound by the API server's CPU, ~15 ms per
SendGroup write; ``bench/scale``). Not a test.

On a fresh local control plane (``hack/cluster/cluster``): the project's CRDs, ``--objects``
SendGroups, then ``--writes`` metadata PATCHes (an annotation, as kopf's bookkeeping writes)
and as many status PATCHes (``/status``), spread over the objects, sent by ``--threads``
threads. Measured: kube-apiserver's CPU seconds (``/proc``) per write. Then the CRD is
replaced by the same schema with every ``x-kubernetes-validations`` removed and the writes
repeat on new objects; the two variants alternate for ``--rounds`` rounds.

Usage: ``.venv/bin/python -m bench.crd_write_cost [--objects 200] [--writes 2000] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from bench.kubebench import proc_stats
from sendgroup_operator import models
from tests.support import manifests
from tests.support.cluster import KubeCluster, apply_crds, start_cluster, stop_cluster

CRD = Path(__file__).resolve().parents[1] / "crds" / "sendgroups.yaml"


def _strip(node: Any) -> int:
    """Remove every ``x-kubernetes-validations`` under ``node``; the rules removed."""
    removed = 0
    if isinstance(node, dict):
        rules = node.pop("x-kubernetes-validations", None)
        removed += len(rules or [])
        for value in node.values():
            removed += _strip(value)
    elif isinstance(node, list):
        for value in node:
            removed += _strip(value)
    return removed


def _round(
    kube: KubeCluster, pid: int, tag: str, objects: int, writes: int, threads: int
) -> dict[str, float]:
    from kubernetes import client

    api = client.CustomObjectsApi(kube.api_client())
    ns = f"w-{tag}"
    kube.kubectl("create", "namespace", ns)
    docs = [
        manifests.sendgroup(f"g-{i:04d}", {"campaign": "c", "host": f"h{i}.example.com"}, ns)
        for i in range(objects)
    ]
    kube.kubectl("create", "-f", "-", input=manifests.stream(*docs), timeout=300)
    group, version, plural = models.GROUP, models.VERSION, models.PLURAL

    def meta(i: int) -> None:
        body = {"metadata": {"annotations": {"bench/n": str(i)}}}
        api.patch_namespaced_custom_object(group, version, ns, plural, f"g-{i % objects:04d}", body)

    def status(i: int) -> None:
        body = {
            "status": {
                "phase": "Pending",
                "observedGeneration": 1,
                "lastRefresh": f"2026-12-03T00:00:{i % 60:02d}Z",
            }
        }
        api.patch_namespaced_custom_object_status(
            group, version, ns, plural, f"g-{i % objects:04d}", body
        )

    out: dict[str, float] = {}
    for kind, fn in (("meta", meta), ("status", status)):
        c0, t0 = proc_stats(pid)["cpu_s"], time.monotonic()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(fn, range(writes)))
        out[f"{kind}_cpu_ms"] = (proc_stats(pid)["cpu_s"] - c0) / writes * 1000
        out[f"{kind}_per_s"] = writes / (time.monotonic() - t0)
    kube.kubectl("delete", "namespace", ns, "--wait=false")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-crdcost-"))
    state = work / "state"
    kube = start_cluster(state)
    try:
        pid = kube.pids()["kube-apiserver"]
        apply_crds(kube)
        docs = list(yaml.safe_load_all(CRD.read_text()))
        stripped = copy.deepcopy(docs)
        removed = sum(_strip(d) for d in stripped)
        crd_with = work / "with.yaml"
        crd_without = work / "without.yaml"
        crd_with.write_text(yaml.safe_dump_all(docs))
        crd_without.write_text(yaml.safe_dump_all(stripped))
        results: dict[str, list[dict[str, float]]] = {"with": [], "without": []}
        for r in range(args.rounds):
            for variant, path in (("with", crd_with), ("without", crd_without)):
                kube.kubectl("replace", "-f", str(path))
                time.sleep(3.0)  # the new schema in the API server's handlers
                res = _round(kube, pid, f"{variant}-{r}", args.objects, args.writes, args.threads)
                results[variant].append(res)
                print(f"round {r} {variant}: {res}", file=sys.stderr)
        summary = {
            v: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for v, rs in results.items()
        }
        print(
            json.dumps(
                {
                    "rules_removed": removed,
                    "args": vars(args),
                    "median": summary,
                    "rounds": results,
                },
                indent=2,
            )
        )
    finally:
        stop_cluster(state)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
