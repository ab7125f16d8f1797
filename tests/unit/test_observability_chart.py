"""The chart's optional observability objects rendered by the real helm: the Grafana dashboard
ConfigMap, the PrometheusRule and the workers' PodMonitor, each from its one file in files/
and off by default."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from sendgroup_operator import builders, models
from sendgroup_operator.settings import Settings
from tests.support.helm import CHART, find, helm, render, values_args
from tests.support.observability import DASHBOARD, RULES

pytestmark = pytest.mark.helm

ALL_ON = {
    "grafanaDashboard.enabled": True,
    "prometheusRule.enabled": True,
    "podMonitor.enabled": True,
}
STANDARD_LABELS = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
}


def test_observability_objects_are_off_by_default() -> None:
    objects = render()
    assert find(objects, "ConfigMap") == []
    assert find(objects, "PrometheusRule") == []
    assert find(objects, "PodMonitor") == []


def test_lint_passes_with_everything_enabled() -> None:
    out = helm("lint", "--strict", str(CHART), *values_args(ALL_ON)).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_dashboard_configmap_carries_the_dashboard_file_and_the_sidecar_label() -> None:
    [cm] = find(render({"grafanaDashboard.enabled": True}), "ConfigMap")
    assert cm["metadata"]["name"] == "sg-sendgroup-operator-dashboard"
    assert cm["metadata"]["namespace"] == "mail"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert set(cm["metadata"]["labels"]) >= STANDARD_LABELS
    [(key, text)] = cm["data"].items()
    assert key.endswith(".json")
    assert text == DASHBOARD.read_text().strip()  # byte for byte: no second copy
    assert json.loads(text)["uid"] == "sendgroup-operator"


def test_dashboard_configmap_namespace_labels_and_annotations_are_values() -> None:
    values = {
        "grafanaDashboard.enabled": True,
        "grafanaDashboard.namespace": "monitoring",
        "grafanaDashboard.labels": {"dashboards": "mail"},
        "grafanaDashboard.annotations": {"grafana_folder": "Mail"},
    }
    [cm] = find(render(values), "ConfigMap")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["dashboards"] == "mail"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Mail"}


def test_prometheus_rule_is_the_rules_file() -> None:
    values = {"prometheusRule.enabled": True, "prometheusRule.labels": {"release": "prom"}}
    [rule] = find(render(values), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert set(rule["metadata"]["labels"]) >= STANDARD_LABELS
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    # the alert templates reach Prometheus untouched by helm
    summaries = [r["annotations"]["summary"] for r in rule["spec"]["groups"][0]["rules"]]
    assert any("{{ $labels.sendgroup }}" in s for s in summaries)


def _worker_pod_template() -> dict[str, Any]:
    """The pod template of a worker Deployment as the operator builds it."""
    ref = builders.GroupRef("mail", "gmail-1", "uid-1", "spring-sale", "gmail.com")
    spec = models.SendGroupSpec.model_validate({"campaign": "spring-sale", "host": "gmail.com"})
    dep = builders.deployment(ref, spec, Settings(default_image="img:1"), 1)
    template: dict[str, Any] = dep["spec"]["template"]
    return template


def _meta_label(label: str) -> str:
    """Prometheus' Kubernetes SD name of a pod label."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)


def test_pod_monitor_selects_the_operators_worker_pods_and_adds_group_labels() -> None:
    [pm] = find(render({"podMonitor.enabled": True, "podMonitor.interval": "15s"}), "PodMonitor")
    assert set(pm["metadata"]["labels"]) >= STANDARD_LABELS
    template = _worker_pod_template()
    pod_labels = template["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    [endpoint] = pm["spec"]["podMetricsEndpoints"]
    container = template["spec"]["containers"][0]
    assert endpoint["port"] in [p["name"] for p in container["ports"]]
    assert endpoint["interval"] == "15s"
    assert endpoint["honorLabels"] is True  # the worker's own sendgroup label wins
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert relabel == {
        "sendgroup": [_meta_label(builders.LABEL_GROUP)],
        "campaign": [_meta_label(builders.LABEL_CAMPAIGN)],
        "host": [_meta_label(builders.LABEL_HOST)],
    }
    # the relabelled values are the ones the operator's own series carry
    assert pod_labels[builders.LABEL_GROUP] == "gmail-1"
    assert pod_labels[builders.LABEL_CAMPAIGN] == "spring-sale"


@pytest.mark.parametrize(
    ("watch", "selector"),
    [
        ([], {"matchNames": ["mail"]}),
        (["a", "b"], {"matchNames": ["a", "b"]}),
        ("*", {"any": True}),
    ],
)
def test_pod_monitor_watches_the_operators_namespaces(watch: Any, selector: Any) -> None:
    values = {"podMonitor.enabled": True, "watchNamespaces": watch}
    [pm] = find(render(values), "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == selector


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"prometheusRule.enabled": "yes"}, "/prometheusRule/enabled"),
        ({"grafanaDashboard.namespace": "Not_A_Namespace"}, "/grafanaDashboard/namespace"),
        ({"podMonitor.interval": "soon"}, "/podMonitor/interval"),
    ],
)
def test_bad_observability_values_are_rejected(values: dict[str, Any], message: str) -> None:
    proc = helm("template", "sg", str(CHART), *values_args(values), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
