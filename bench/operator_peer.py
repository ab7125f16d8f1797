"""Scenario 6's peer, the API server's floor, as its own process (clocked spawn -> exit by the
scenario, as the operator is clocked from its spawn):

``python -m bench.operator_peer KUBECONFIG --namespaces a,b,... --status FILE [--template FILE
--old NAME]``: one LIST of the SendGroups per namespace (all at once), then per group the
operator's own status body as one merge PATCH of ``/status`` and, with ``--template`` (busy), one
POST of the operator's own worker Deployment renamed (``--old``: the group name the template was
taken from), ``--concurrency`` requests in flight on one keep-alive pool.

``python -m bench.operator_peer KUBECONFIG --list-only``: one cluster-wide LIST of the SendGroups
(a restarted operator's floor: it must at least list them).

Prints one JSON line: ``work_s`` (from the first request to the last response: the time after
set-up), ``setup_s`` (from the module's first line to the first request: imports, kubeconfig,
TLS context), ``requests``, ``items``. Kept to aiohttp + PyYAML + the standard library (not the
bench helpers, which import redis-py and the cluster support) so its start-up is a floor too.
"""

from __future__ import annotations

import time

LOADED = time.monotonic()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import base64  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import ssl  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402
import yaml  # noqa: E402

GROUP, VERSION, PLURAL = "sendgroups.io", "v1alpha1", "sendgroups"


class Client:
    """Bearer-token requests of a ServiceAccount kubeconfig on one aiohttp pool."""

    def __init__(self, kubeconfig: Path) -> None:
        cfg = yaml.safe_load(kubeconfig.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        self.server: str = cluster["server"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {cfg['users'][0]['user']['token']}"},
            connector=aiohttp.TCPConnector(ssl=ssl.create_default_context(cadata=ca), limit=64),
        )
        self.requests = 0

    async def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        self.requests += 1
        data = None if body is None else json.dumps(body)
        async with self.session.request(
            method, self.server + path, data=data, headers={"Content-Type": content_type}
        ) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise RuntimeError(f"{method} {path}: {resp.status} {text[:300]}")
            out: dict[str, Any] = json.loads(text)
            return out


def deployment(template: dict[str, Any], old: str, item: dict[str, Any]) -> dict[str, Any]:
    """The operator's Deployment for group ``old`` (``template``), renamed for ``item``."""
    meta, new = template["metadata"], item["metadata"]["name"]
    owner = copy.deepcopy(meta.get("ownerReferences", []))
    for ref in owner:
        ref["name"], ref["uid"] = new, item["metadata"]["uid"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": meta["name"].replace(old, new),
            "namespace": item["metadata"]["namespace"],
            "labels": json.loads(json.dumps(meta.get("labels", {})).replace(old, new)),
            "annotations": meta.get("annotations", {}),
            "ownerReferences": owner,
        },
        "spec": json.loads(json.dumps(template["spec"]).replace(old, new)),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    status = json.loads(args.status.read_text()) if args.status else {}
    template = json.loads(args.template.read_text()) if args.template else None
    api = Client(args.kubeconfig)
    try:
        started = time.monotonic()
        if args.list_only:
            items = (await api.call("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}"))["items"]
            return {"setup_s": started - LOADED, "work_s": time.monotonic() - started,
                    "requests": api.requests, "items": len(items)}  # fmt: skip
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{PLURAL}"
        lists = await asyncio.gather(
            *(api.call("GET", base.format(ns=ns)) for ns in args.namespaces.split(","))
        )
        items = [i for listing in lists for i in listing["items"]]
        sem = asyncio.Semaphore(args.concurrency)

        async def one(item: dict[str, Any]) -> None:
            meta = item["metadata"]
            async with sem:
                if template is not None:
                    await api.call(
                        "POST",
                        f"/apis/apps/v1/namespaces/{meta['namespace']}/deployments",
                        deployment(template, args.old, item),
                    )
                await api.call(
                    "PATCH",
                    f"{base.format(ns=meta['namespace'])}/{meta['name']}/status",
                    {"status": dict(status, observedGeneration=meta["generation"])},
                    "application/merge-patch+json",
                )

        await asyncio.gather(*(one(i) for i in items))
        return {
            "setup_s": started - LOADED,
            "work_s": time.monotonic() - started,
            "requests": api.requests,
            "items": len(items),
        }
    finally:
        await api.session.close()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.operator_peer")
    parser.add_argument("kubeconfig", type=Path)
    parser.add_argument("--namespaces", default="")
    parser.add_argument("--status", type=Path)
    parser.add_argument("--template", type=Path)
    parser.add_argument("--old", default="")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--list-only", action="store_true")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(parse()))))
    sys.stdout.flush()
