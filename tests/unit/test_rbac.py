"""helm/sendgroup-operator/files/rbac-rules.yaml covers what the operator checks at start-up
(and nothing is granted cluster-wide that only a namespace needs)."""

from __future__ import annotations

from pathlib import Path

import yaml

from sendgroup_operator import startup

RULES = yaml.safe_load(
    (
        Path(__file__).resolve().parents[2]
        / "helm"
        / "sendgroup-operator"
        / "files"
        / "rbac-rules.yaml"
    ).read_text()
)


def _allows(rules: list[dict[str, list[str]]], verb: str, group: str, resource: str) -> bool:
    return any(
        group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules
    )


def test_preflight_permissions_are_granted() -> None:
    for verb, group, resource in startup.NAMESPACED_PERMISSIONS:
        assert _allows(RULES["namespaced"], verb, group, resource), (verb, group, resource)


def test_shard_permissions_are_granted() -> None:
    for verb, group, resource in startup.SHARD_PERMISSIONS:
        assert _allows(RULES["shard"], verb, group, resource), (verb, group, resource)
    assert {res for r in RULES["shard"] for res in r["resources"]} == {"leases"}


def test_no_wildcards_and_secrets_read_only() -> None:
    for rule in RULES["namespaced"] + RULES["cluster"] + RULES["shard"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
    secrets = [r for r in RULES["namespaced"] if "secrets" in r["resources"]]
    assert [r["verbs"] for r in secrets] == [["get"]]
    cluster_resources = {res for r in RULES["cluster"] for res in r["resources"]}
    assert cluster_resources == {
        "customresourcedefinitions",
        "namespaces",
        "clusterkopfpeerings",
        "clustersendproviders",
        "clustersendproviders/status",
    }
