"""The CPU limit of the container the worker runs in, from its cgroup (Linux).

Kubernetes turns a container's ``resources.limits.cpu`` into a CFS bandwidth quota on its
cgroup: ``cpu.max`` = ``"<quota_us> <period_us>"`` or ``"max <period_us>"`` (cgroup v2,
kernel docs ``admin-guide/cgroup-v2.rst``, "cpu.max"), or ``cpu.cfs_quota_us`` (-1 = none) and
``cpu.cfs_period_us`` under ``cpu/`` or ``cpu,cpuacct/`` (cgroup v1, ``scheduler/sched-bwc.rst``).
The lane controller (:mod:`sendgroup_worker.lanes`) measures CPU utilisation against it.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def cpu_limit(root: Path = ROOT) -> float | None:
    """Cores the quota allows (``limits.cpu: 500m`` -> 0.5), None when there is none or the
    files are missing or unreadable (not Linux, no cgroup mounted, no quota)."""
    try:
        text = (root / "cpu.max").read_text().split()
    except OSError:
        text = []
    if len(text) == 2:
        return _cores(text[0], text[1])
    for sub in ("cpu", "cpu,cpuacct"):
        try:
            quota = (root / sub / "cpu.cfs_quota_us").read_text().strip()
            period = (root / sub / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            continue
        return _cores(quota, period)
    return None


def _cores(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:  # "max": no quota
        return None
    if q <= 0 or p <= 0:  # v1's -1: no quota
        return None
    return q / p
