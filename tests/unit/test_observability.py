"""The shipped dashboard and alert rules against promtool (Debian's prometheus package, via
hack/promtool/build) and against the metrics the code registers; docs/observability.md's
metrics reference against both registries."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from sendgroup_operator import metrics as operator_metrics
from sendgroup_worker import metrics as worker_metrics
from sendgroup_worker import smtp
from tests.support.observability import (
    DOC,
    RULE_TESTS,
    RULES,
    check_metrics,
    dashboard,
    dashboard_exprs,
    dashboard_panels,
    metric_names,
    promtool,
    promtool_bin,
    rules,
    used_metric_names,
)

SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def _registry_table(registry: CollectorRegistry) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Documented name (counter: ``x_total``) -> (type, label names) of every collector."""
    table: dict[str, tuple[str, tuple[str, ...]]] = {}
    for collector in set(registry._names_to_collectors.values()):
        name = collector._name  # type: ignore[attr-defined]
        kind = collector._type  # type: ignore[attr-defined]
        labels = tuple(collector._labelnames)  # type: ignore[attr-defined]
        table[name + ("_total" if kind == "counter" else "")] = (kind, labels)
    return table


def _code_metrics() -> dict[str, tuple[str, tuple[str, ...]]]:
    return {
        **_registry_table(operator_metrics.REGISTRY),
        **_registry_table(worker_metrics.WorkerMetrics("q").registry),
    }


def _doc_metrics() -> dict[str, tuple[str, tuple[str, ...]]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"`sendgroup_\w+`", cells[0]):
            labels = tuple(x.strip() for x in cells[2].split(",") if x.strip())
            rows[cells[0].strip("`")] = (cells[1], labels)
    return rows


def _exposed_names(table: dict[str, tuple[str, tuple[str, ...]]]) -> set[str]:
    names = set()
    for name, (kind, _labels) in table.items():
        base = name.removesuffix("_total") if kind == "counter" else name
        names |= {base + s for s in SUFFIXES[kind]}
    return names


# --- promtool ---------------------------------------------------------------------------


def test_promtool_checks_the_rules_file() -> None:
    proc = promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules())} rules found" in proc.stdout


def test_promtool_rule_unit_tests_pass() -> None:
    proc = promtool("test", "rules", str(RULE_TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_rule_unit_tests_cover_every_alert() -> None:
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert tested == {r["alert"] for r in rules()}


def test_rule_unit_tests_catch_a_changed_threshold(tmp_path: Path) -> None:
    """The unit tests are not vacuous: the same tests against rules whose failure-ratio and
    age thresholds changed fail, naming those alerts."""
    files = tmp_path / "helm" / "sendgroup-operator" / "files"
    files.mkdir(parents=True)
    text = RULES.read_text()
    assert ") > 0.1\n" in text and "> 1800" in text
    changed = text.replace(") > 0.1\n", ") > 0.2\n").replace("> 1800", "> 3600")
    (files / "prometheus-rules.yaml").write_text(changed)
    (tmp_path / "tests" / "promtool").mkdir(parents=True)
    shutil.copy(RULE_TESTS, tmp_path / "tests" / "promtool" / "rules_test.yaml")
    proc = promtool("test", "rules", str(tmp_path / "tests" / "promtool" / "rules_test.yaml"))
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "alertname: SendGroupFailureRatioHigh" in out
    assert "alertname: SendGroupOldestJobTooOld" in out
    assert "alertname: SendGroupDumpFailed" not in out


def test_every_alert_has_severity_summary_description_and_a_documented_runbook() -> None:
    doc = DOC.read_text()
    for rule in rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        assert rule["annotations"]["runbook_url"] == f"docs/observability.md#{name.lower()}"
        assert f"\n#### {name}\n" in doc, f"no runbook section for {name}"
        assert f"| {name} | {rule['labels']['severity']} |" in doc, f"{name} not in the table"


def test_alerts_keep_the_labels_their_summary_names() -> None:
    per_group = 0
    for rule in rules():
        named = set(re.findall(r"\$labels\.(\w+)", rule["annotations"]["summary"]))
        if "sendgroup" in named:
            per_group += 1
            assert re.search(r"by \(namespace, sendgroup\b", rule["expr"]), rule["alert"]
        elif named:
            assert re.search(r"by \((\w+, )*" + "|".join(named), rule["expr"]), rule["alert"]
    assert per_group >= 7


def test_check_metrics_rejects_a_bad_exposition() -> None:
    bad = "# HELP foo_count x\n# TYPE foo_count counter\nfoo_count 1\n"
    with pytest.raises(AssertionError, match='should have "_total" suffix'):
        check_metrics(bad)


def test_missing_promtool_fails_with_the_command_that_fetches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SENDGROUP_PROMTOOL", raising=False)
    monkeypatch.setenv("SENDGROUP_PROMTOOL_CACHE", str(tmp_path))
    with pytest.raises(AssertionError, match="run hack/promtool/build"):
        promtool_bin()


# --- metric names -----------------------------------------------------------------------


def test_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le) (rate(a_bucket{x=~"$g", y!="b c"}'
        "[$__rate_interval]))) / on (ns) group_left b_total offset 5m and absent(c)"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}


def test_dashboard_and_rules_use_only_metrics_the_code_registers() -> None:
    registered = _exposed_names(_code_metrics())
    missing = {n: w for n, w in used_metric_names().items() if n not in registered}
    assert not missing, f"metrics used but not registered by the code: {missing}"
    # both sources are used
    used = set(used_metric_names())
    assert any(n.startswith("sendgroup_worker_") for n in used)
    assert any(not n.startswith("sendgroup_worker_") for n in used)


# --- the dashboard ----------------------------------------------------------------------


def test_dashboard_is_templated_by_datasource_namespace_campaign_and_group() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "campaign", "group"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
        assert variables[name]["multi"] and variables[name]["includeAll"]
        # "All" must expand to the listed values (a ".*" would ignore the campaign)
        assert "allValue" not in variables[name]
    assert 'campaign=~"$campaign"' in variables["group"]["definition"]


def test_every_panel_queries_the_datasource_variable_and_filters_by_group() -> None:
    panels = [p for p in dashboard_panels() if p["type"] != "row"]
    assert len({p["id"] for p in dashboard_panels()}) == len(list(dashboard_panels()))
    per_group = 0
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["description"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            expr = target["expr"]
            if 'sendgroup=~"$group"' in expr:
                per_group += 1
                assert 'namespace=~"$namespace"' in expr, panel["title"]
    assert per_group >= 15


@pytest.mark.parametrize(
    ("title", "needle"),
    [
        ("Queue depth per group", "sendgroup_queue_jobs"),
        ("Oldest ready job age", "sendgroup_queue_oldest_job_age_seconds"),
        ("Send rate per group", 'outcome="delivered"'),
        ("Failures by SMTP class", "sendgroup_worker_smtp_replies_total"),
        ("Workers per group", "sendgroup_workers"),
        ("Orphaned groups", 'sendgroup_orphans{kind="group_without_workers"}'),
    ],
)
def test_dashboard_has_the_panels_the_issue_asks_for(title: str, needle: str) -> None:
    [panel] = [p for p in dashboard_panels() if p["title"] == title]
    assert any(needle in t["expr"] for t in panel["targets"])


def test_dashboard_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in dashboard_panels():
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, panel["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, panel["title"]
        cells |= mine


def test_dashboard_expressions_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses every dashboard expression (Grafana's $vars replaced) as part of a
    recording rule file."""
    exprs = [e.replace("$__rate_interval", "5m").replace("$", "") for e in dashboard_exprs()]
    records = [{"record": f"r{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "dashboard-exprs.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    proc = promtool("check", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in proc.stdout


# --- metrics reference ------------------------------------------------------------------


def test_docs_list_every_metric_with_its_type_and_labels() -> None:
    code = _code_metrics()
    doc = _doc_metrics()
    assert sorted(doc) == sorted(code), "docs/observability.md metrics differ from the code"
    for name, (kind, labels) in code.items():
        assert doc[name] == (kind, labels), f"{name}: docs {doc[name]}, code {(kind, labels)}"


def test_worker_label_values_are_initialised_and_match_the_reply_classes() -> None:
    assert tuple(c.value for c in smtp.ReplyClass) == worker_metrics.REPLY_CLASSES
    m = worker_metrics.WorkerMetrics("mail-x")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in m.registry.collect()
        for s in family.samples
    }
    for outcome in worker_metrics.OUTCOMES:
        key = (
            "sendgroup_worker_jobs_total",
            (("outcome", outcome), ("queue", "mail-x"), ("sendgroup", "mail-x")),
        )
        assert samples[key] == 0.0
    for reply_class in worker_metrics.REPLY_CLASSES:
        key = (
            "sendgroup_worker_smtp_replies_total",
            (("queue", "mail-x"), ("reply_class", reply_class), ("sendgroup", "mail-x")),
        )
        assert samples[key] == 0.0
