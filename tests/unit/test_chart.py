"""The Helm chart rendered by the real helm (built by hack/helm/build): lint, labels and
selectors, the operator settings it passes (read back by the operator's own Settings), RBAC
from the single rules file, restricted pod security, and the optional objects."""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from sendgroup_operator import builders, models, settings
from tests.support.helm import CHART, REPO, env_of, find, helm, render, values_args

pytestmark = pytest.mark.helm

RULES = yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text())
STANDARD_LABELS = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
}
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "all-namespaces": {"watchNamespaces": "*"},
    "two-namespaces": {"watchNamespaces": ["mail", "campaigns"]},
    "network-policy": {
        "networkPolicy.enabled": True,
        "networkPolicy.redis.cidrs": ["10.1.2.0/24"],
        "networkPolicy.smtp.cidrs": ["192.0.2.10/32"],
    },
    "service-monitor": {"serviceMonitor.enabled": True},
    "ha": {"replicas": 2},
    "sharded": {"replicas": 3, "sharding.enabled": True, "watchNamespaces": ["mail", "news"]},
}


def test_sharded_instances_get_leases_not_peering() -> None:
    """sharding.enabled with replicas >= 2: every instance runs with SENDGROUP_SHARDING, its
    instance name as shard identity, one shard set; no KopfPeering (no write per namespace),
    and the Lease rules (rules file, "shard") only in the release namespace."""
    objects = render(
        {"replicas": 3, "sharding.enabled": True, "sharding.leaseDuration": 9},
        extra=("--set", "watchNamespaces={mail,news}"),
    )
    deps = operator_deployments(objects)
    envs = [env_of(d, "mail") for d in deps]
    assert [e["POD_ID"] for e in envs] == [d["metadata"]["name"] for d in deps]
    for e in envs:
        assert e["SENDGROUP_SHARDING"] == "true"
        assert e["SENDGROUP_SHARD_LEASE_DURATION"] == "9"
        assert e["SENDGROUP_SHARD_SET"] == "sg-sendgroup-operator"
        assert "SENDGROUP_PEERING_PRIORITY" not in e and "SENDGROUP_STANDALONE" not in e
        ours = settings.Settings.from_env(e)
        assert ours.sharding and ours.shard_lease_duration == 9.0
    assert find(objects, "KopfPeering") == [] and find(objects, "ClusterKopfPeering") == []
    [role] = find(objects, "Role", "sg-sendgroup-operator-shard")
    assert role["metadata"]["namespace"] == "mail" and role["rules"] == RULES["shard"]
    [binding] = find(objects, "RoleBinding", "sg-sendgroup-operator-shard")
    assert binding["metadata"]["namespace"] == "mail"
    assert not any("leases" in str(r["rules"]) for r in find(objects, "Role") if r is not role)


def test_sharding_needs_two_replicas() -> None:
    objects = render({"sharding.enabled": True})
    [dep] = operator_deployments(objects)
    env = env_of(dep, "mail")
    assert "SENDGROUP_SHARDING" not in env and env["SENDGROUP_STANDALONE"] == "true"
    assert find(objects, "Role", "sg-sendgroup-operator-shard") == []


def operator_deployments(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return find(objects, "Deployment")


# --- chart metadata ---------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm_lint_passes(variant: str) -> None:
    out = helm("lint", "--strict", str(CHART), *values_args(VARIANTS[variant])).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_app_version_is_the_project_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]
    dep = operator_deployments(render())[0]
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"sendgroup-operator:{project['version']}"
    assert (
        env_of(dep, "mail")["SENDGROUP_DEFAULT_IMAGE"] == f"sendgroup-worker:{project['version']}"
    )


def test_chart_crds_are_the_repository_crds() -> None:
    """The chart's crds/ are copies (helm packages no symlink) of the generated crds/: they
    must be byte-identical (fix: cp crds/*.yaml helm/sendgroup-operator/crds/)."""
    top = {p.name: p.read_bytes() for p in (REPO / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert set(chart) == set(top)
    for name, data in top.items():
        assert chart[name] == data, f"helm/sendgroup-operator/crds/{name} differs from crds/{name}"


def _documented_keys(text: str) -> tuple[set[str], set[str]]:
    """(all dotted keys, keys whose comment block starts with '# <dotted key> --')."""
    keys: set[str] = set()
    documented: set[str] = set()
    stack: list[tuple[int, str]] = []
    comment: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped)
            continue
        m = re.match(r"^( *)([A-Za-z][A-Za-z0-9]*):", line)
        if not m:
            comment = [] if not stripped else comment
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack and stack[-1][1] in documented:  # inside a documented map value
            comment = []
            continue
        path = f"{stack[-1][1]}.{m.group(2)}" if stack else m.group(2)
        keys.add(path)
        if comment and comment[0].startswith(f"# {path} --"):
            documented.add(path)
        stack.append((indent, path))
        comment = []
    return keys, documented


def test_every_value_is_documented_by_a_comment_starting_with_its_name() -> None:
    keys, documented = _documented_keys((CHART / "values.yaml").read_text())
    undocumented = {
        k for k in keys - documented if not any(d.startswith(k + ".") for d in documented)
    }
    assert not undocumented
    assert {"defaultRedisUrl", "watchNamespaces", "networkPolicy.redis.cidrs"} <= documented


def test_values_are_camel_case_and_covered_by_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key in values:
        assert re.fullmatch(r"[a-z][A-Za-z0-9]*", key), key
        assert key in schema["properties"], key


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"defaultSmtp.tls": "ssl"}, "/defaultSmtp/tls"),
        ({"maxWorkersPerGroup": -1}, "/maxWorkersPerGroup"),
        ({"replicaCount": 2}, "replicaCount"),
        ({"watchNamespaces": ["mail", "*"]}, '"*" (all namespaces) cannot be combined'),
        ({"defaultRedisUrl": "http://redis"}, "/defaultRedisUrl"),
    ],
)
def test_bad_values_are_rejected_naming_the_value(values: dict[str, Any], message: str) -> None:
    proc = helm("template", "sg", str(CHART), *values_args(values), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


# --- labels and selectors -----------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_has_the_standard_labels_and_selectors_name_the_component(
    variant: str,
) -> None:
    objects = render(VARIANTS[variant])
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert set(labels) >= STANDARD_LABELS, (obj["kind"], obj["metadata"]["name"])
        assert labels["app.kubernetes.io/instance"] == "sg"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == "0.1.0" or labels["helm.sh/chart"]
    for dep in find(objects, "Deployment"):
        sel = dep["spec"]["selector"]["matchLabels"]
        assert sel["app.kubernetes.io/component"] == "operator"
        assert sel.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    for svc in find(objects, "Service"):
        assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "operator"
    for np in find(objects, "NetworkPolicy"):
        assert np["spec"]["podSelector"]["matchLabels"]
    for sm in find(objects, "ServiceMonitor"):
        assert sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"


# --- the operator Deployment --------------------------------------------------------------


def test_operator_deployment_recreate_liveness_and_settings_the_operator_reads() -> None:
    values = {
        "defaultRedisUrl": "redis://redis.mail:6379/2",
        "defaultImage": "registry.local/sendgroup-worker:1.2",
        "allowImageOverride": True,
        "maxWorkersPerGroup": 20,
        "maxTotalWorkers": 200,
        "dumpsClaimName": "queue-dumps",
        "reaperInterval": 5,
        "keyPrefix": "laravel_database_",
        "metrics.port": 9100,
        "healthPort": 9101,
        "defaultSmtp": {"host": "relay.mail", "port": 587, "tls": "starttls"},
    }
    objects = render(values)
    [dep] = operator_deployments(objects)
    spec = dep["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9100, "health": 9101}
    for probe in ("livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    [sa] = [
        o
        for o in find(objects, "ServiceAccount")
        if o["metadata"]["name"] == "sg-sendgroup-operator"
    ]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]

    env = env_of(dep, "mail")
    known = (REPO / "operator" / "sendgroup_operator").glob("*.py")
    source = "\n".join(p.read_text() for p in known)
    import kopf

    # kopf reads POD_ID itself (its peering identity, kopf/_core/engines/peering.py)
    kopf_source = (Path(kopf.__file__).parent / "_core" / "engines" / "peering.py").read_text()
    for name in env:
        where = kopf_source if name == "POD_ID" else source
        assert f"'{name}'" in where or f'"{name}"' in where, f"{name} is not read by the operator"
    ours = settings.Settings.from_env(env)
    assert ours.default_redis_url == "redis://redis.mail:6379/2"
    assert ours.default_image == "registry.local/sendgroup-worker:1.2"
    assert ours.allow_image_override is True
    assert ours.max_workers_per_group == 20
    assert ours.max_total_workers == 200
    assert ours.dumps_claim_name == "queue-dumps"
    assert ours.reaper_interval == 5
    assert ours.key_prefix == "laravel_database_"
    assert ours.metrics_port == 9100
    assert (ours.default_smtp_host, ours.default_smtp_port, ours.default_smtp_tls) == (
        "relay.mail",
        587,
        "starttls",
    )
    assert env["SENDGROUP_HEALTH_PORT"] == "9101"
    assert ours.namespaces == ("mail",) and not ours.clusterwide
    assert ours.worker_service_account == "sg-sendgroup-operator-worker"
    assert ours.peering_name == "sg-sendgroup-operator" and ours.peering_priority == 100
    [pvc] = find(objects, "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == "queue-dumps"


def test_defaults_give_no_worker_cap_and_watch_the_release_namespace() -> None:
    ours = settings.Settings.from_env(env_of(operator_deployments(render())[0], "mail"))
    assert ours.max_total_workers is None
    assert ours.namespaces == ("mail",)
    assert ours.max_workers_per_group == models.MAX_WORKERS_PER_GROUP_DEFAULT


def test_ha_instances_get_distinct_priorities_and_selectors() -> None:
    objects = render({"replicas": 3, "peering.priority": 50})
    deps = operator_deployments(objects)
    assert [d["metadata"]["name"] for d in deps] == [
        "sg-sendgroup-operator",
        "sg-sendgroup-operator-1",
        "sg-sendgroup-operator-2",
    ]
    priorities = [env_of(d, "mail")["SENDGROUP_PEERING_PRIORITY"] for d in deps]
    assert priorities == ["50", "49", "48"]
    assert {env_of(d, "mail")["SENDGROUP_PEERING_NAME"] for d in deps} == {"sg-sendgroup-operator"}
    for d in deps:
        assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate"
        others = [o for o in deps if o is not d]
        sel = d["spec"]["selector"]["matchLabels"].items()
        for o in others:
            assert not sel <= o["spec"]["template"]["metadata"]["labels"].items()
    [svc] = find(objects, "Service")
    for d in deps:  # the metrics Service reaches every instance
        assert (
            svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        )
    [peering] = find(objects, "KopfPeering")
    assert peering["metadata"] == peering["metadata"] | {
        "name": "sg-sendgroup-operator",
        "namespace": "mail",
    }


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """Violations of the restricted Pod Security Standard (v1.30 rules: host namespaces,
    privileged, capabilities, hostPath/volume types, host ports, privilege escalation,
    non-root, seccomp) plus the project's read-only root filesystem rule."""
    bad: list[str] = []
    psc = pod.get("securityContext", {})
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            bad.append(field)
    allowed_volumes = {
        "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
        "persistentVolumeClaim", "projected", "secret",
    }  # fmt: skip
    for vol in pod.get("volumes", []):
        kinds = set(vol) - {"name"}
        if not kinds <= allowed_volumes:
            bad.append(f"volume {vol['name']}: {kinds}")
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext", {})
        name = c["name"]
        if sc.get("privileged"):
            bad.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{name}: allowPrivilegeEscalation must be false")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            bad.append(f"{name}: capabilities must drop ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            bad.append(f"{name}: adds capabilities")
        if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
            bad.append(f"{name}: runAsNonRoot")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            bad.append(f"{name}: runAsUser 0")
        seccomp = sc.get("seccompProfile") or psc.get("seccompProfile") or {}
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{name}: seccompProfile RuntimeDefault or Localhost")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            bad.append(f"{name}: hostPort")
        if sc.get("readOnlyRootFilesystem") is not True:
            bad.append(f"{name}: readOnlyRootFilesystem")
    return bad


def test_restricted_checker_catches_violations() -> None:
    pod = operator_deployments(render())[0]["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    broken = copy.deepcopy(pod)
    broken["hostNetwork"] = True
    broken["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    broken["containers"][0]["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"]}
    del broken["securityContext"]["seccompProfile"]
    del broken["containers"][0]["securityContext"]["seccompProfile"]
    broken["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    assert len(restricted_violations(broken)) == 6


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_pods_meet_restricted_pod_security(variant: str) -> None:
    for dep in operator_deployments(render(VARIANTS[variant])):
        assert restricted_violations(dep["spec"]["template"]["spec"]) == []


# --- disruption budget ------------------------------------------------------------------


def test_disruption_budget_lets_the_single_instance_go_and_covers_every_ha_instance() -> None:
    [pdb] = find(render(), "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    objects = render({"replicas": 3})
    [pdb] = find(objects, "PodDisruptionBudget")
    selector = pdb["spec"]["selector"]["matchLabels"].items()
    deps = operator_deployments(objects)
    assert len(deps) == 3
    for dep in deps:
        assert selector <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert find(render({"podDisruptionBudget.enabled": False}), "PodDisruptionBudget") == []
    [pdb] = find(render({"podDisruptionBudget.maxUnavailable": "50%"}), "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == "50%"
    [pdb] = find(
        render({"podDisruptionBudget.unhealthyPodEvictionPolicy": ""}), "PodDisruptionBudget"
    )
    assert "unhealthyPodEvictionPolicy" not in pdb["spec"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"podDisruptionBudget.maxUnavailable": 0}, "/podDisruptionBudget/maxUnavailable"),
        ({"podDisruptionBudget.maxUnavailable": "0%"}, "/podDisruptionBudget/maxUnavailable"),
        ({"podDisruptionBudget.minAvailable": 1}, "minAvailable"),
        ({"podDisruptionBudget.unhealthyPodEvictionPolicy": "Never"}, "unhealthyPodEviction"),
    ],
)
def test_budgets_that_could_block_a_drain_forever_are_rejected(
    values: dict[str, Any], message: str
) -> None:
    proc = helm("template", "sg", str(CHART), *values_args(values), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


# --- RBAC, ServiceAccounts, peering, dumps ----------------------------------------------


def test_rbac_of_one_namespace_is_the_rules_file() -> None:
    objects = render()
    [role] = find(objects, "Role")
    assert role["metadata"]["namespace"] == "mail"
    assert role["rules"] == RULES["namespaced"]
    [binding] = find(objects, "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sg-sendgroup-operator", "namespace": "mail"}
    ]
    [cluster_role] = find(objects, "ClusterRole", "sg-sendgroup-operator-mail")
    assert cluster_role["rules"] == RULES["cluster"]
    [crb] = find(objects, "ClusterRoleBinding")
    assert crb["roleRef"]["name"] == "sg-sendgroup-operator-mail"
    assert crb["subjects"] == binding["subjects"]


def test_all_namespaces_use_one_cluster_role_with_every_rule() -> None:
    objects = render({"watchNamespaces": "*"})
    assert find(objects, "Role") == [] and find(objects, "RoleBinding") == []
    [cluster_role] = find(objects, "ClusterRole", "sg-sendgroup-operator-mail")
    assert cluster_role["rules"] == RULES["namespaced"] + RULES["cluster"]
    ours = settings.Settings.from_env(env_of(operator_deployments(objects)[0], "mail"))
    assert ours.clusterwide
    # The worker ServiceAccount cannot exist in namespaces nobody listed: pods use the
    # namespace's default one (the operator's pods still mount no token).
    assert ours.worker_service_account is None
    assert [o["metadata"]["name"] for o in find(objects, "ClusterKopfPeering")] == [
        "sg-sendgroup-operator"
    ]
    assert find(objects, "KopfPeering") == []


def test_listed_namespaces_each_get_role_peering_worker_account_and_claim() -> None:
    objects = render({"watchNamespaces": "mail, campaigns"})
    for kind in ("Role", "RoleBinding", "KopfPeering", "PersistentVolumeClaim"):
        assert sorted(o["metadata"]["namespace"] for o in find(objects, kind)) == [
            "campaigns",
            "mail",
        ], kind
    workers = find(objects, "ServiceAccount", "sg-sendgroup-operator-worker")
    assert sorted(o["metadata"]["namespace"] for o in workers) == ["campaigns", "mail"]
    for sa in workers:
        assert sa["automountServiceAccountToken"] is False
    # RoleBindings in other namespaces bind the operator's account in the release namespace.
    for rb in find(objects, "RoleBinding"):
        assert rb["subjects"][0]["namespace"] == "mail"
    ours = settings.Settings.from_env(env_of(operator_deployments(objects)[0], "mail"))
    assert ours.namespaces == ("mail", "campaigns")


def test_the_operators_own_namespace_unwatched_gets_only_secret_reads() -> None:
    """A ClusterSendProvider's redis.secretRef is read in the operator's own namespace (it
    was the first watched namespace: a tenant's); when that namespace is not watched, a Role
    there lets the operator get Secrets and nothing else."""
    objects = render({"watchNamespaces": "team-a, team-b"})
    own = [o for o in find(objects, "Role") if o["metadata"]["namespace"] == "mail"]
    assert [r["rules"] for r in own] == [
        [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    ]
    [binding] = [o for o in find(objects, "RoleBinding") if o["metadata"]["namespace"] == "mail"]
    assert binding["roleRef"]["name"] == own[0]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == "sg-sendgroup-operator"
    # watched, or all namespaces: no second Role
    assert len(find(render(), "Role")) == 1
    assert find(render({"watchNamespaces": "*"}), "Role") == []


def test_worker_account_has_no_token_and_no_binding() -> None:
    objects = render()
    [worker] = find(objects, "ServiceAccount", "sg-sendgroup-operator-worker")
    assert worker["automountServiceAccountToken"] is False
    for binding in find(objects, "RoleBinding") + find(objects, "ClusterRoleBinding"):
        assert all(s["name"] != "sg-sendgroup-operator-worker" for s in binding["subjects"])


def test_aggregated_roles_reach_view_edit_admin() -> None:
    objects = render()
    view = find(objects, "ClusterRole", "sendgroups-view")[0]
    edit = find(objects, "ClusterRole", "sendgroups-edit")[0]
    agg = "rbac.authorization.k8s.io/aggregate-to-"
    assert {
        k for k, v in view["metadata"]["labels"].items() if k.startswith(agg) and v == "true"
    } == {
        agg + "view",
        agg + "edit",
        agg + "admin",
    }
    assert {
        k for k, v in edit["metadata"]["labels"].items() if k.startswith(agg) and v == "true"
    } == {
        agg + "edit",
        agg + "admin",
    }
    assert "create" in edit["rules"][0]["verbs"]
    assert all("sendgroups/status" not in r["resources"] for r in edit["rules"])
    assert find(render({"rbac.aggregatedRoles": False}), "ClusterRole", "sendgroups-view") == []


def test_dumps_claim_values_and_existing_claim() -> None:
    objects = render(
        {
            "dumps.storageClassName": "fast",
            "dumps.size": "50Gi",
            "dumps.accessModes": ["ReadWriteMany"],
        }
    )
    [pvc] = find(objects, "PersistentVolumeClaim", "sendgroup-dumps")
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "fast",
        "resources": {"requests": {"storage": "50Gi"}},
    }
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    objects = render({"dumps.create": False, "dumpsClaimName": "mine"})
    assert find(objects, "PersistentVolumeClaim") == []
    assert env_of(operator_deployments(objects)[0], "mail")["SENDGROUP_DUMPS_CLAIM_NAME"] == "mine"


# --- metrics, ServiceMonitor, NetworkPolicy ----------------------------------------------


def test_service_monitor_scrapes_the_metrics_service() -> None:
    objects = render({"serviceMonitor.enabled": True, "serviceMonitor.labels": {"release": "prom"}})
    [svc] = find(objects, "Service")
    [sm] = find(objects, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert [e["port"] for e in sm["spec"]["endpoints"]] == [p["name"] for p in svc["spec"]["ports"]]
    assert svc["spec"]["ports"][0]["port"] == 8080
    assert find(render(), "ServiceMonitor") == []


def _egress_ports(policy: dict[str, Any]) -> set[tuple[str, int]]:
    return {(p["protocol"], p["port"]) for rule in policy["spec"]["egress"] for p in rule["ports"]}


def test_network_policies_limit_egress_to_redis_smtp_dns_and_api_server() -> None:
    objects = render(VARIANTS["network-policy"])
    operator = find(objects, "NetworkPolicy", "sg-sendgroup-operator-operator")[0]
    workers = find(objects, "NetworkPolicy", "sg-sendgroup-operator-workers")[0]
    assert _egress_ports(operator) == {
        ("TCP", 443),
        ("TCP", 6443),
        ("TCP", 6379),
        ("UDP", 53),
        ("TCP", 53),
    }
    assert _egress_ports(workers) == {
        ("TCP", 6379), ("TCP", 25), ("TCP", 465), ("TCP", 587), ("UDP", 53), ("TCP", 53),
    }  # fmt: skip
    for policy in (operator, workers):
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    [dep] = operator_deployments(objects)
    assert operator["spec"]["podSelector"]["matchLabels"].items() <= (
        dep["spec"]["template"]["metadata"]["labels"].items()
    )
    # The worker policy selects the pods the operator really creates (builders.py).
    ref = builders.GroupRef("mail", "gmail", "uid-1", "spring", "gmail.com")
    spec = models.SendGroupSpec.model_validate({"campaign": "spring", "host": "gmail.com"})
    worker_pod_labels = builders.deployment(ref, spec, settings.Settings(), 1)["spec"]["template"][
        "metadata"
    ]["labels"]
    assert workers["spec"]["podSelector"]["matchLabels"].items() <= worker_pod_labels.items()
    # Redis and SMTP: only the listed addresses (the render fails without them).
    workers = find(objects, "NetworkPolicy", "sg-sendgroup-operator-workers")[0]
    peers = [rule.get("to") for rule in workers["spec"]["egress"]]
    assert peers == [
        [{"ipBlock": {"cidr": "10.1.2.0/24"}}],
        [{"ipBlock": {"cidr": "192.0.2.10/32"}}],
        None,
    ]
    assert find(render(), "NetworkPolicy") == []


def test_crds_are_not_templated() -> None:
    """The CRDs come from the chart's crds/ (installed by helm install, never upgraded)."""
    kinds = {o["kind"] for o in render()}
    assert "CustomResourceDefinition" not in kinds
    rendered_crds = [
        d
        for d in yaml.safe_load_all(helm("template", "sg", str(CHART), "--include-crds").stdout)
        if d and d["kind"] == "CustomResourceDefinition"
    ]
    names = sorted(d["metadata"]["name"] for d in rendered_crds)
    assert names == [
        "clusterkopfpeerings.kopf.dev",
        "clustersendproviders.sendgroups.io",
        "kopfpeerings.kopf.dev",
        "sendgroups.sendgroups.io",
        "sendproviders.sendgroups.io",
    ]


def test_readme_documents_the_chart() -> None:
    readme = (REPO / "README.md").read_text()
    assert "## Helm chart" in readme
    assert "helm install" in readme
    assert Path("helm/sendgroup-operator/values.yaml").as_posix() in readme


def test_packaged_chart_carries_rules_and_crds(tmp_path: Path) -> None:
    """`helm package` keeps files/rbac-rules.yaml and crds/ (no symlinks, nothing ignored)."""
    helm("package", str(CHART), "--destination", str(tmp_path))
    [archive] = tmp_path.glob("sendgroup-operator-*.tgz")
    out = helm("template", "sg", str(archive), "--namespace", "mail", "--include-crds").stdout
    objects = [d for d in yaml.safe_load_all(out) if d]
    assert find(objects, "Role")[0]["rules"] == RULES["namespaced"]
    assert len(find(objects, "CustomResourceDefinition")) == 5


def test_default_redis_secret_ref_replaces_the_plain_url() -> None:
    """Issue 16: ``defaultRedisSecretRef`` gives the operator its default URL from the Secret
    and tells it the Secret's name/key for the pods; no URL is plain env then."""
    [dep] = operator_deployments(
        render({"defaultRedisSecretRef": {"name": "redis-default", "key": "url"}})
    )
    [container] = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["SENDGROUP_DEFAULT_REDIS_URL"]["valueFrom"] == {
        "secretKeyRef": {"name": "redis-default", "key": "url"}
    }
    assert env["SENDGROUP_DEFAULT_REDIS_SECRET"]["value"] == "redis-default/url"
    [dep] = operator_deployments(render({}))
    [container] = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["SENDGROUP_DEFAULT_REDIS_URL"]["value"] == "redis://redis:6379/0"
    assert "SENDGROUP_DEFAULT_REDIS_SECRET" not in env


def test_sharded_lease_requests_get_their_own_priority_level() -> None:
    """With sharding, a FlowSchema classifies the operator's Lease requests (its
    ServiceAccount, leases in the release namespace, every verb shardmember.py uses) under the
    built-in leader-election priority level, ahead of the built-in service-accounts FlowSchema
    (9000); it can be turned off, and is not rendered without sharding."""
    objects = render({"replicas": 2, "sharding.enabled": True})
    [schema] = find(objects, "FlowSchema")
    assert schema["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
    assert schema["metadata"]["name"] == "sg-sendgroup-operator-mail-shard-leases"
    assert "namespace" not in schema["metadata"]  # cluster-scoped
    spec = schema["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": "leader-election"}
    assert spec["matchingPrecedence"] < 9000
    [rule] = spec["rules"]
    [sa] = find(objects, "ServiceAccount", "sg-sendgroup-operator")  # the operator's, not workers'
    assert rule["subjects"] == [
        {
            "kind": "ServiceAccount",
            "serviceAccount": {"name": sa["metadata"]["name"], "namespace": "mail"},
        }
    ]
    [resources] = rule["resourceRules"]
    assert resources["apiGroups"] == ["coordination.k8s.io"]
    assert resources["resources"] == ["leases"] and resources["namespaces"] == ["mail"]
    [shard_rule] = RULES["shard"]
    assert set(shard_rule["verbs"]) <= set(resources["verbs"])  # every verb the operator may use
    assert "nonResourceRules" not in rule

    custom = render(
        {
            "replicas": 2,
            "sharding.enabled": True,
            "sharding.flowSchema.priorityLevel": "ours",
            "sharding.flowSchema.matchingPrecedence": 700,
        }
    )
    [schema] = find(custom, "FlowSchema")
    assert schema["spec"]["priorityLevelConfiguration"] == {"name": "ours"}
    assert schema["spec"]["matchingPrecedence"] == 700
    assert (
        find(
            render({"replicas": 2, "sharding.enabled": True, "sharding.flowSchema.enabled": False}),
            "FlowSchema",
        )
        == []
    )
    assert find(render({"sharding.enabled": True}), "FlowSchema") == []  # one replica: no sharding
    assert find(render({"replicas": 2}), "FlowSchema") == []  # peering, not sharding
    bad = helm(
        "template",
        "sg",
        str(CHART),
        *values_args(
            {
                "replicas": 2,
                "sharding.enabled": True,
                "sharding.flowSchema.matchingPrecedence": 9000,
            }
        ),
        check=False,
    )
    assert bad.returncode != 0  # at or after service-accounts: would never match
