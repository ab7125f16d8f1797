"""``python -m bench.apifloor PLAN.json``: the API server's floor for reconciling SendGroups, a
minimal client making only the requests a reconciliation needs, as fast as the API server
answers (issue 15: "the API server's floor, a minimal client making only the necessary
requests, measured in the same run").

Run as its own process so that its figure is timed from process spawn to exit, the same basis
as the operator's cold start (``bench/scale``). One keep-alive pool (``bench.operator_peer.Client``,
kept to aiohttp and PyYAML so that the floor's own start-up is lean too),
``concurrency`` requests in flight (default 16). PLAN.json::

    {"kubeconfig": "/path/sa.kubeconfig",
     "namespaces": ["ns-a", ...],          # one LIST of SendGroups per namespace
     "statuses": {"ns-a/g-1": {...}, ...}, # per group: the status to merge-patch (the
                                           # operator's own body; observedGeneration is
                                           # set from the LIST)
     "deployments": {"ns-a/g-1": {...}},   # per busy group: a Deployment to create
                                           # (ownerReferences[].uid set from the LIST)
     "list_only": false,                   # true: the LISTs only (the floor of a restart,
                                           # where a reconciliation writes nothing)
     "concurrency": 16}

Prints one JSON line: ``{"seconds": <from the first request to the last answer, s>,
"requests": <count>, "groups": <listed>}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.operator_peer import Client

GROUP, VERSION, PLURAL = "sendgroups.io", "v1alpha1", "sendgroups"


async def reconcile_all(plan: dict[str, Any]) -> dict[str, Any]:
    """The LISTs, then every status patch and Deployment create, ``concurrency`` in flight."""
    statuses: dict[str, Any] = plan.get("statuses") or {}
    deployments: dict[str, Any] = plan.get("deployments") or {}
    api = Client(Path(plan["kubeconfig"]))
    try:
        sem = asyncio.Semaphore(int(plan.get("concurrency", 16)))
        started = time.monotonic()

        async def listing(ns: str) -> list[dict[str, Any]]:
            async with sem:
                got = await api.call("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}")
                items: list[dict[str, Any]] = got["items"]
                return items

        listed = [
            i for part in await asyncio.gather(*map(listing, plan["namespaces"])) for i in part
        ]

        async def one(item: dict[str, Any]) -> None:
            meta = item["metadata"]
            ns, name = meta["namespace"], meta["name"]
            key = f"{ns}/{name}"
            async with sem:
                if key in deployments:
                    body = json.loads(json.dumps(deployments[key]))
                    for ref in body["metadata"].get("ownerReferences", []):
                        ref["uid"] = meta["uid"]
                    await api.call("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body)
                if key in statuses:
                    status = dict(statuses[key], observedGeneration=meta["generation"])
                    await api.call(
                        "PATCH",
                        f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/{name}/status",
                        {"status": status},
                        "application/merge-patch+json",
                    )

        if not plan.get("list_only"):
            await asyncio.gather(*map(one, listed))
        return {
            "seconds": time.monotonic() - started,
            "requests": api.requests,
            "groups": len(listed),
        }
    finally:
        await api.session.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    plan = json.loads(Path(args[0]).read_text())
    print(json.dumps(asyncio.run(reconcile_all(plan))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
