"""promtool (from Debian's prometheus package, cached by hack/promtool/build) and the metric
names the shipped dashboard and alert rules use, for the observability tests.

:func:`promtool` runs the binary; a missing binary raises AssertionError naming the command
that fetches it (tests fail with the reason, never skip). :func:`metric_names` extracts the
metric names of a PromQL expression with a small tokenizer (strings, label matchers, range
selectors, grouping clauses and function calls removed), enough for the expressions we ship.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.support.tools import cached_tool

REPO = Path(__file__).resolve().parents[2]
CHART_FILES = REPO / "helm" / "sendgroup-operator" / "files"
DASHBOARD = CHART_FILES / "grafana-dashboard.json"
RULES = CHART_FILES / "prometheus-rules.yaml"
RULE_TESTS = REPO / "tests" / "promtool" / "rules_test.yaml"
DOC = REPO / "docs" / "observability.md"
BUILD_SCRIPT = REPO / "hack" / "promtool" / "build"
PROMTOOL_ENV = "SENDGROUP_PROMTOOL"

_KEYWORDS = frozenset(
    [
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "inf",
        "nan",
    ]
)
_AGGREGATIONS = frozenset(
    [
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    ]
)


def promtool_bin() -> Path:
    """Path of promtool: ``$SENDGROUP_PROMTOOL``, else the one ``hack/promtool/build`` cached.

    Raises AssertionError naming the command that fetches it when there is none.
    """
    return cached_tool(
        "promtool",
        PROMTOOL_ENV,
        BUILD_SCRIPT,
        "promtool is not available: run hack/promtool/build (hack/test does it before pytest; "
        "it extracts promtool from Debian's prometheus package)",
    )


def promtool(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` (stdin ``input``); the finished process, whatever its exit code."""
    return subprocess.run(
        [str(promtool_bin()), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )


def check_metrics(exposition: str) -> None:
    """``promtool check metrics`` on a /metrics text; AssertionError with its findings."""
    proc = promtool("check", "metrics", input=exposition)
    assert proc.returncode == 0, f"promtool check metrics:\n{proc.stdout}{proc.stderr}"


def sample_names(exposition: str) -> set[str]:
    """Names of the samples in a Prometheus text exposition (``x_total``, ``x_bucket``, ...)."""
    names = set()
    for line in exposition.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects, e.g. ``{"sendgroup_queue_jobs"}`` for
    ``sum by (state) (sendgroup_queue_jobs{state="ready"})``."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers (and Grafana's $vars in them)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range/subquery selectors
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = match.group(0)
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or word.lower() in _KEYWORDS or word in _AGGREGATIONS:
            continue
        before = text[: match.start()]
        if before.endswith("$") or re.search(r"[0-9.]$", before):
            continue  # a Grafana variable, or the unit of a number like 5m
        names.add(word)
    return names


def dashboard() -> dict[str, Any]:
    """The shipped dashboard JSON."""
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def dashboard_panels() -> Iterator[dict[str, Any]]:
    """Every panel of the dashboard (rows' nested panels included)."""
    for panel in dashboard()["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and variable queries."""
    exprs = [t["expr"] for p in dashboard_panels() for t in p.get("targets", [])]
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", query)
            assert inner, f"variable {var['name']}: unexpected query {query}"
            exprs.append(inner.group(1))
    return exprs


def rules() -> list[dict[str, Any]]:
    """The alerting rules of the shipped rules file."""
    data = yaml.safe_load(RULES.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def used_metric_names() -> dict[str, set[str]]:
    """Metric name -> where it is used (``"dashboard"``, ``"alert NAME"``)."""
    used: dict[str, set[str]] = {}
    for expr in dashboard_exprs():
        for name in metric_names(expr):
            used.setdefault(name, set()).add("dashboard")
    for rule in rules():
        for name in metric_names(rule["expr"]):
            used.setdefault(name, set()).add(f"alert {rule['alert']}")
    return used


def missing_from(exposition: str, prefix_filter: str, exclude: str | None = None) -> list[str]:
    """Used metric names (starting with ``prefix_filter``, not with ``exclude``) that are not
    sample names of ``exposition``, each with where it is used."""
    present = sample_names(exposition)
    return sorted(
        f"{name} (used by {', '.join(sorted(where))})"
        for name, where in used_metric_names().items()
        if name.startswith(prefix_filter)
        and not (exclude and name.startswith(exclude))
        and name not in present
    )
