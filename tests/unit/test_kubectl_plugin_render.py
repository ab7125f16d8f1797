"""The kubectl plugin's pure parts: the status table's cells, the progress bar, which
conditions need attention, when ``--watch`` is done, ArgoCD detection, and usage errors that
must come before any connection."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner

from sendgroup_operator.cli import gitops, main, render


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0, "0s"),
        (59, "59s"),
        (60, "1m"),
        (200, "3m20s"),
        (3600, "1h"),
        (7500, "2h5m"),
        (86400 * 3 + 3600 * 4 + 5, "3d4h"),
        (-5, "0s"),
    ],
)
def test_age(seconds: int | None, text: str) -> None:
    assert render.age(seconds) == text


def test_progress_bar_cells_and_percent() -> None:
    assert render.progress_bar(0) == "[" + " " * 20 + "]   0.0%"
    assert render.progress_bar(100) == "[" + "█" * 20 + "] 100.0%"
    assert render.progress_bar(250) == render.progress_bar(100)
    half = render.progress_bar(50)
    assert half == "[" + "█" * 10 + " " * 10 + "]  50.0%"
    # 71.4% of 20 cells: 14 full cells and a partial one.
    bar = render.progress_bar(71.4)[1:21]
    assert bar[:14] == "█" * 14 and bar[14] not in " █" and bar[15:] == " " * 5
    assert render.progress_bar(50, ascii_only=True) == "[" + "#" * 10 + " " * 10 + "]  50.0%"


def cond(type_: str, status: str, reason: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason}


def test_conditions_not_ok() -> None:
    assert (
        render.conditions_not_ok(
            [
                cond("Ready", "True", "WorkersReady"),
                cond("QueueReachable", "True", "Measured"),
                cond("Suspended", "False", "Sending"),
                cond("Paused", "True", "Paused"),
                cond("Dumped", "True", "Dumped"),
            ]
        )
        == []
    )
    assert render.conditions_not_ok(
        [
            cond("Ready", "False", "Scaling"),
            cond("QueueReachable", "False", "RedisUnreachable"),
            cond("Suspended", "True", "ProviderPushback"),
            cond("Throttled", "True", "GlobalCap"),
            cond("Degraded", "Unknown"),
        ]
    ) == [
        "Ready=False(Scaling)",
        "QueueReachable=False(RedisUnreachable)",
        "Suspended=True(ProviderPushback)",
        "Throttled=True(GlobalCap)",
        "Degraded=Unknown",
    ]
    # Lifecycle states are the phase column's business.
    for reason in ("Paused", "Idle", "NoWork", "Completed", "Cancelled"):
        assert render.conditions_not_ok([cond("Ready", "False", reason)]) == []


def sendgroup(phase: str | None = None, **queue: Any) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase:
        status = {
            "phase": phase,
            "workers": {"ready": 1, "desired": 3},
            "queue": {"measuredAt": "2026-01-01T00:00:00Z", **queue},
            "progress": {"delivered": 9, "failed": 1, "percent": 45.0},
            "conditions": [cond("Ready", "False", "Scaling")],
        }
    return {
        "metadata": {"name": "gmail", "namespace": "mail"},
        "spec": {"campaign": "spring", "host": "gmail.com"},
        "status": status,
    }


def test_row_from_object_and_done() -> None:
    row = render.Row.from_object(
        sendgroup("Running", ready=5, delayed=2, reserved=1, failed=4, total=8,
                  oldestJobAgeSeconds=125)
    )  # fmt: skip
    assert row.cells(ascii_only=True) == [
        "gmail", "spring", "gmail.com", "Running", "1/3", "5", "2", "1", "4",
        "[" + "#" * 9 + " " * 11 + "]  45.0%", "2m5s", "Ready=False(Scaling)",
    ]  # fmt: skip
    assert not row.done()
    assert row.to_json() == {
        "namespace": "mail", "name": "gmail", "campaign": "spring", "host": "gmail.com",
        "phase": "Running", "workers": {"ready": 1, "desired": 3},
        "queue": {"ready": 5, "delayed": 2, "reserved": 1, "failed": 4, "total": 8,
                  "oldestJobAgeSeconds": 125},
        "progress": {"delivered": 9, "percent": 45.0},
        "conditionsNotOk": ["Ready=False(Scaling)"], "done": False,
    }  # fmt: skip
    # No status yet (no operator): dashes and zeros, not done.
    empty = render.Row.from_object(sendgroup())
    assert (empty.phase, empty.total, empty.oldest_seconds, empty.done()) == ("-", 0, None, False)
    assert render.Row.from_object(sendgroup("Running", total=0)).done()
    for phase in ("Completed", "Cancelled", "Failed", "Idle"):
        assert render.Row.from_object(sendgroup(phase, total=3)).done()
    # A paused or dumped group still has work to do, even with Redis empty.
    for phase in ("Paused", "Dumping", "Dumped", "Restoring"):
        assert not render.Row.from_object(sendgroup(phase, total=0)).done()


def test_table_alignment_and_namespace_column() -> None:
    rows = [render.Row.from_object(sendgroup("Running", ready=12345, total=12345))]
    text = render.table(rows, all_namespaces=True, ascii_only=True)
    header, line = text.splitlines()
    assert header.split()[:3] == ["NAMESPACE", "NAME", "CAMPAIGN"]
    assert line.split()[:2] == ["mail", "gmail"]
    assert line[header.index("READY") :].startswith("12345")
    assert line[header.index("PROGRESS") :].startswith("[#########")
    assert render.summary(rows) == "1 groups, 0 done; 12345 jobs queued, 9 delivered, 0 failed"


def test_argocd_evidence() -> None:
    def obj(**meta: Any) -> dict[str, Any]:
        return {"metadata": meta}

    assert gitops.argocd_evidence(obj()) is None
    assert (
        gitops.argocd_evidence(
            obj(annotations={"argocd.argoproj.io/tracking-id": "shop:sendgroups.io/SendGroup:a/b"})
        )
        == "annotation argocd.argoproj.io/tracking-id=shop:sendgroups.io/SendGroup:a/b"
    )
    assert (
        gitops.argocd_evidence(obj(managedFields=[{"manager": "kubectl-client-side-apply"}]))
        is None
    )
    assert (
        gitops.argocd_evidence(obj(managedFields=[{"manager": "argocd-controller"}]))
        == "field manager argocd-controller"
    )
    assert (
        gitops.argocd_evidence(obj(labels={"app.kubernetes.io/instance": "shop"}))
        == "label app.kubernetes.io/instance=shop"
    )
    helm = {"app.kubernetes.io/instance": "shop", "app.kubernetes.io/managed-by": "Helm"}
    assert gitops.argocd_evidence(obj(labels=helm)) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pause"], "say which groups to pause"),
        (["cancel", "-y"], "say which groups to cancel"),
        (["pause", "a", "-l", "x=y"], "not both"),
        (["resume", "a", "--campaign", "c"], "not both"),
        (["status", "-n", "x", "-A"], "-n and -A exclude each other"),
        (["pause", "a", "--dry-run=client"], "'client' is not one of 'none', 'server'"),
        # nan, inf and 1e400 (= inf) passed click.FloatRange: time.sleep(nan) was a traceback
        # and --timeout nan never ran out
        (["status", "a", "-w", "--interval", "nan"], "'nan' is not a finite number of seconds"),
        (["status", "a", "-w", "--interval", "inf"], "'inf' is not a finite number of seconds"),
        (["status", "a", "-w", "--interval", "1e400"], "'1e400' is not a finite number"),
        (["status", "a", "-w", "--interval", "0"], "0.0 is not in the range 0.2<=x<=3600"),
        (["status", "a", "-w", "--interval", "1e10"], "is not in the range 0.2<=x<=3600"),
        (["status", "a", "-w", "--timeout", "nan"], "'nan' is not a finite number of seconds"),
        (["status", "a", "-w", "--timeout", "inf"], "'inf' is not a finite number of seconds"),
        (["status", "a", "-w", "--timeout", "-1"], "-1.0 is not in the range x>=0"),
    ],
)
def test_usage_errors_exit_2_before_connecting(args: list[str], message: str) -> None:
    result = CliRunner().invoke(
        main, args, env={"KUBECONFIG": "/nonexistent/kubeconfig"}, catch_exceptions=False
    )
    assert result.exit_code == 2
    assert message in result.output


def test_oldest_counts_from_the_push_time_like_kubectl_get() -> None:
    """OLDEST agrees with ``kubectl get sg`` (age of ``oldestJobPushedAt`` now), not the age
    frozen at the last measurement."""
    obj = {
        "metadata": {"namespace": "m", "name": "g"},
        "spec": {"campaign": "c", "host": "h"},
        "status": {
            "queue": {
                "oldestJobAgeSeconds": 5,
                "oldestJobPushedAt": "2026-11-30T06:00:00Z",
                "measuredAt": "2026-11-30T06:00:05Z",
            }
        },
    }
    row = render.Row.from_object(obj, now=datetime(2026, 11, 30, 6, 0, 25, tzinfo=UTC))
    assert row.oldest_seconds == 25
    del obj["status"]["queue"]["oldestJobPushedAt"]  # type: ignore[index]
    assert render.Row.from_object(obj).oldest_seconds == 5


def test_terminal_escapes_in_a_tenant_field_never_reach_the_terminal() -> None:
    """Issue 16: spec.campaign is free text a tenant writes; the status table strips escape
    sequences and shows other control/format characters as '?'."""
    obj = sendgroup("Running", total=1)
    obj["spec"]["campaign"] = "\x1b[2J\x1b[31mspring\x1b]0;owned\x07\r\nfake-row\u202e"
    obj["metadata"]["namespace"] = "mail\x1b[A"
    text = render.table([render.Row.from_object(obj)], all_namespaces=True, ascii_only=True)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\r" not in text and len(text.splitlines()) == 2
    assert "spring" in text and "owned" not in text
    assert render.printable("caf\u00e9 \u2588") == "caf\u00e9 \u2588"  # text stays text
