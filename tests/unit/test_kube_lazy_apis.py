"""An operator's start imports none of the Kubernetes client's heavy API classes (issue 15):
each imports the pydantic models of all its operations (apps, batch, core: ~0.8 s of CPU
together in kubernetes 37), and a restart that finds every group as it left it needs only the
generic lister (SendGroups, worker Deployments) and the access reviews."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "kubernetes.client.api.apps_v1_api",
    "kubernetes.client.api.batch_v1_api",
    "kubernetes.client.api.core_v1_api",
)

CODE = """
import json, sys
from unittest import mock
import kubernetes.client as k8s
from sendgroup_operator import handlers, provider_handlers
from sendgroup_operator.kube import Kube

kube = Kube(k8s.ApiClient())
body = b'{"items": [{"metadata": {"name": "sg-a"}}]}'
answer = mock.Mock(status=200, response=mock.Mock(data=body))
with mock.patch.object(k8s.ApiClient, "call_api", return_value=answer) as call:
    import asyncio
    async def pages():
        return [p async for p in kube.list_deployments(None, "app=x")]
    items = [d for page in asyncio.run(pages()) for d in page]
    method, url = call.call_args.args[:2]
loaded = [m for m in HEAVY if m in sys.modules]
core = kube.core  # made when first needed
print(json.dumps({"loaded": loaded, "items": items, "request": [method, url],
                  "core_after": "kubernetes.client.api.core_v1_api" in sys.modules}))
"""


def test_a_start_lists_deployments_without_importing_the_apps_batch_or_core_api() -> None:
    code = f"HEAVY = {HEAVY!r}\n" + CODE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["loaded"] == []
    assert got["items"] == [{"metadata": {"name": "sg-a"}}]
    method, url = got["request"]  # what AppsV1Api's lister asks too
    assert (
        method == "GET" and "/apis/apps/v1/deployments?" in url and "labelSelector=app%3Dx" in url
    )
    assert got["core_after"] is True
