"""A worker Deployment edited by hand is put back (security review, issue 16): the operator
compared only its template-hash annotation, so a namespace admin's ``kubectl edit`` of the
``sg-<name>`` Deployment (another ``SENDGROUP_QUEUE``, another ``REDIS_URL``, a sidecar, a hostPath
volume) stayed. :func:`builders.owned_fingerprint` hashes what the operator owns and the API
server never defaults; the planner compares it with the Deployment as read back. The real API
server's defaulting is checked in tests/cluster/test_lifecycle.py."""

from __future__ import annotations

import copy
from typing import Any

from sendgroup_operator import builders, models
from sendgroup_operator import plan as p
from sendgroup_operator.reconcile import deployment_obs
from sendgroup_operator.settings import Settings
from tests.unit.test_plan import GROUP, at, q, run

SETTINGS = Settings(default_image="img:1", default_redis_url="redis://r:6379/0")


def _deployment(**spec: Any) -> dict[str, Any]:
    s = models.SendGroupSpec.model_validate({"campaign": "c", "host": "gmail.com", **spec})
    return builders.deployment(GROUP.ref(s), s, SETTINGS, 3)


def _env(dep: dict[str, Any]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    return env


def test_what_the_api_server_fills_in_is_not_an_edit() -> None:
    dep = _deployment()
    stored = copy.deepcopy(dep)
    env = _env(stored)
    env.append({"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    dep_env = _env(dep)
    dep_env.append(copy.deepcopy(env[-1]))
    env[-1]["valueFrom"]["fieldRef"]["apiVersion"] = "v1"  # the API server's default
    for e in env:
        if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]:
            e["valueFrom"]["secretKeyRef"]["optional"] = False
    pod = stored["spec"]["template"]["spec"]
    pod["dnsPolicy"] = "ClusterFirst"  # defaults the operator does not own
    pod["containers"][0]["terminationMessagePath"] = "/dev/termination-log"
    pod["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    template = dep["spec"]["template"]
    assert builders.owned_fingerprint(stored["spec"]["template"]) == builders.owned_fingerprint(
        template
    )


def test_an_edited_queue_a_sidecar_or_a_volume_is_seen() -> None:
    dep = _deployment()
    want = builders.owned_fingerprint(dep["spec"]["template"])

    def edited(change: Any) -> str:
        d = copy.deepcopy(dep)
        change(d["spec"]["template"]["spec"])
        return builders.owned_fingerprint(d["spec"]["template"])

    def queue(pod: dict[str, Any]) -> None:
        for e in pod["containers"][0]["env"]:
            if e["name"] == "SENDGROUP_QUEUE":
                e["value"] = "team-b.newsletter"

    def sidecar(pod: dict[str, Any]) -> None:
        pod["containers"].append({"name": "tap", "image": "busybox"})

    def host_path(pod: dict[str, Any]) -> None:
        pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}})

    def image(pod: dict[str, Any]) -> None:
        pod["containers"][0]["image"] = "evil:1"

    for change in (queue, sidecar, host_path, image):
        assert edited(change) != want, change.__name__


def test_the_planner_puts_an_edited_deployment_back() -> None:
    s = models.SendGroupSpec.model_validate({"campaign": "c", "host": "gmail.com", "workers": 3})
    st = run(s, measure=q(5)).status
    dep = builders.deployment(GROUP.ref(s), s, Settings(), 3)
    obs = deployment_obs(dep)
    assert obs is not None
    steady = p.Observed(obs, jobs_listed=True)
    assert run(s, st, steady, q(5), at(1)).actions == []  # as built: nothing to do
    for e in _env(dep):
        if e["name"] == "SENDGROUP_QUEUE":
            e["value"] = "team-b.newsletter"
    edited = deployment_obs(dep)
    assert edited is not None and edited.template_hash == obs.template_hash
    assert run(s, st, p.Observed(edited, jobs_listed=True), q(5), at(1)).actions == [
        p.EnsureDeployment(3)
    ]
