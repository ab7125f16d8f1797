"""The operator's per-group series from a status: sendgroup_info follows the group's campaign,
sendgroup_operation_failed follows the Degraded condition the planner sets, and a deleted
group leaves no series behind."""

from __future__ import annotations

import gc
import tracemalloc
from datetime import UTC, datetime

from sendgroup_operator import conditions, metrics, models

NOW = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)


def _samples(namespace: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "namespace"))): s.value
        for family in metrics.REGISTRY.collect()
        for s in family.samples
        if s.labels.get("namespace") == namespace
    }


def _status(degraded_reason: str | None = None) -> models.SendGroupStatus:
    status = models.SendGroupStatus(queue=models.QueueStatus(ready=3, total=3))
    if degraded_reason:
        conditions.set_condition(
            status.conditions, conditions.DEGRADED, "True", degraded_reason, "Job failed", NOW, 1
        )
    return status


def test_operation_failed_follows_the_degraded_condition() -> None:
    ns = "unit-opfailed"
    failed = "sendgroup_operation_failed"
    metrics.observe(ns, "g", _status("DumpFailed"), "spring", "gmail.com")
    s = _samples(ns)
    assert s[(failed, (("kind", "dump"), ("sendgroup", "g")))] == 1
    assert s[(failed, (("kind", "restore"), ("sendgroup", "g")))] == 0
    metrics.observe(ns, "g", _status("RestoreFailed"), "spring", "gmail.com")
    s = _samples(ns)
    assert s[(failed, (("kind", "dump"), ("sendgroup", "g")))] == 0
    assert s[(failed, (("kind", "restore"), ("sendgroup", "g")))] == 1
    metrics.observe(ns, "g", _status("ApplyFailed"), "spring", "gmail.com")
    s = _samples(ns)
    assert s[(failed, (("kind", "dump"), ("sendgroup", "g")))] == 0
    assert s[(failed, (("kind", "restore"), ("sendgroup", "g")))] == 0


def test_info_carries_campaign_and_host_and_follows_a_change() -> None:
    ns = "unit-info"
    metrics.observe(ns, "g", _status(), "spring", "gmail.com")
    info = ("sendgroup_info", (("campaign", "spring"), ("host", "gmail.com"), ("sendgroup", "g")))
    assert _samples(ns)[info] == 1
    metrics.observe(ns, "g", _status(), "summer", "gmail.com")
    s = _samples(ns)
    assert info not in s
    assert s[
        ("sendgroup_info", (("campaign", "summer"), ("host", "gmail.com"), ("sendgroup", "g")))
    ]
    # the namespace's error counter exists at 0 before any error
    assert s[("sendgroup_reconcile_errors_total", ())] == 0


def test_a_removed_group_leaves_no_series() -> None:
    ns = "unit-remove"
    metrics.observe(ns, "g", _status("DumpFailed"), "spring", "gmail.com")
    metrics.observe(ns, "h", _status(), "spring", "outlook.com")
    metrics.remove(ns, "g")
    left = {labels for (_name, labels) in _samples(ns) if ("sendgroup", "g") in labels}
    assert left == set()
    assert any(("sendgroup", "h") in labels for (_name, labels) in _samples(ns))


def test_per_group_series_cost_little_memory() -> None:
    """Issue 15: a group's 15 per-group series are one small tuple, not 15 prometheus_client
    children (those were ~10 KB per group: ~100 MB at 10,000 groups; tracemalloc)."""
    ns, n = "unit-memory", 1000
    status = _status()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            metrics.observe(ns, f"g-{i:05d}", status, "spring", f"g-{i:05d}.example.com")
        gc.collect()
        per_group = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
        for i in range(n):
            metrics.remove(ns, f"g-{i:05d}")
    assert per_group < 1024, f"{per_group:.0f} bytes per group"
    assert not [labels for (_name, labels) in _samples(ns) if "sendgroup" in dict(labels)]
