"""Helpers the Kubernetes scenarios (6: operator scale, 7: time to first mail) share.

Process figures come from ``/proc`` (RSS, peak RSS, CPU seconds); API server figures from its
own ``/metrics`` (API Priority and Fairness counters, which split requests by the flow schema
the requesting user falls into: the operator's ServiceAccount lands in ``service-accounts``);
Redis figures from ``INFO commandstats``. Times are seconds, memory MiB.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from tests.support.cluster import KubeCluster

#: the APF flow schema a ServiceAccount outside kube-system falls into (the operator's)
SA_FLOW_SCHEMA = "service-accounts"


def proc_stats(pid: int) -> dict[str, float]:
    """``cpu_s`` (user+system CPU seconds), ``rss_mib`` and ``hwm_mib`` (peak RSS) of ``pid``.

    Raises OSError when the process is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    out = {"cpu_s": (int(fields[11]) + int(fields[12])) / ticks, "rss_mib": 0.0, "hwm_mib": 0.0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            out["rss_mib"] = int(line.split()[1]) / 1024
        elif line.startswith("VmHWM:"):
            out["hwm_mib"] = int(line.split()[1]) / 1024
    return out


def apf_dispatched(kube: KubeCluster) -> dict[str, float]:
    """``apiserver_flowcontrol_dispatched_requests_total`` per flow schema (summed over
    priority levels): every request the API server executed, by who asked."""
    text = kube.kubectl("get", "--raw=/metrics", timeout=60).stdout
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("apiserver_flowcontrol_dispatched_requests_total{"):
            labels, value = line.rsplit(" ", 1)
            schema = labels.split('flow_schema="', 1)[1].split('"', 1)[0]
            out[schema] = out.get(schema, 0.0) + float(value)
    return out


def redis_calls(client: redis.Redis) -> dict[str, int]:
    """``INFO commandstats`` calls per command (lower-case name, e.g. ``llen``)."""
    info: dict[str, Any] = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}


def redis_calls_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Calls per command between two :func:`redis_calls` readings, without the ``info``
    calls of the readings themselves; zero entries dropped."""
    out = {k: after.get(k, 0) - before.get(k, 0) for k in after if k != "info"}
    return {k: v for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v}


def median_max(values: list[float]) -> tuple[float, float]:
    """(median, max); (nan, nan) for no values."""
    if not values:
        return float("nan"), float("nan")
    return statistics.median(values), max(values)


def poll(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Call ``predicate`` every ``interval`` s until truthy; return the value. Raises
    TimeoutError naming ``what`` (with the last exception, if any) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
        except Exception as exc:  # not there yet: keep polling, report at the end
            last = exc
        else:
            if value:
                return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s (last error: {last!r})")
        time.sleep(interval)
