"""The chart's NetworkPolicies (security.md rule 8): when enabled, workers reach only the Redis
and SMTP addresses the values list (an empty list fails the render instead of allowing any
address), in every namespace where workers run, and their probes get through."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.helm import CHART, find, helm, render, values_args

pytestmark = pytest.mark.helm

ENABLED: dict[str, Any] = {
    "networkPolicy.enabled": True,
    "networkPolicy.redis.cidrs": ["10.1.2.0/24"],
    "networkPolicy.smtp.cidrs": ["192.0.2.10/32"],
}


@pytest.mark.parametrize("peer", ["redis", "smtp"])
def test_enabled_without_addresses_is_refused_naming_the_value(peer: str) -> None:
    values = {**ENABLED, f"networkPolicy.{peer}.cidrs": []}
    proc = helm("template", "sg", str(CHART), *values_args(values), check=False)
    assert proc.returncode != 0
    assert f"networkPolicy.{peer}.cidrs is empty" in proc.stderr, proc.stderr


def worker_policy_namespaces(values: dict[str, Any]) -> list[str]:
    policies = find(render(values, namespace="ops"), "NetworkPolicy")
    return sorted(
        p["metadata"]["namespace"] for p in policies if p["metadata"]["name"].endswith("-workers")
    )


def test_a_worker_policy_in_every_namespace_where_workers_run() -> None:
    assert worker_policy_namespaces(ENABLED) == ["ops"]
    listed = {**ENABLED, "watchNamespaces": ["mail", "campaigns"]}
    assert worker_policy_namespaces(listed) == ["campaigns", "mail"]
    everywhere = {
        **ENABLED,
        "watchNamespaces": "*",
        "networkPolicy.workerNamespaces": ["mail", "ops"],
    }
    assert worker_policy_namespaces(everywhere) == ["mail", "ops"]


def test_worker_egress_is_the_listed_addresses_and_probes_get_in() -> None:
    [workers] = [
        p
        for p in find(render(ENABLED), "NetworkPolicy")
        if p["metadata"]["name"].endswith("-workers")
    ]
    to = [rule.get("to") for rule in workers["spec"]["egress"]]
    assert to[:2] == [
        [{"ipBlock": {"cidr": "10.1.2.0/24"}}],
        [{"ipBlock": {"cidr": "192.0.2.10/32"}}],
    ]
    ingress_ports = {port["port"] for rule in workers["spec"]["ingress"] for port in rule["ports"]}
    assert ingress_ports == {9090, 8080}  # metrics, and /livez + /readyz for the kubelet
