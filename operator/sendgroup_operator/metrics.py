"""Prometheus metrics of the operator (counts and names only, never a URL or a secret).

=========================================  =====================================================
metric                                     labels
=========================================  =====================================================
sendgroup_queue_jobs                       namespace, sendgroup, state (ready, delayed,
                                           reserved, failed)
sendgroup_queue_oldest_job_age_seconds     namespace, sendgroup
sendgroup_workers                          namespace, sendgroup, kind (desired, ready, allowed)
sendgroup_dump_bytes                       namespace, sendgroup
sendgroup_groups                           phase
sendgroup_orphans                          kind (group_without_workers,
                                           deployment_without_group)
sendgroup_reconcile_errors_total           namespace
sendgroup_reconcile_seconds                (histogram)
sendgroup_kube_requests_total              (API requests of the reconciler)
sendgroup_queue_reachable                  namespace, sendgroup (0 while Redis cannot be
                                           measured: condition QueueReachable=False)
sendgroup_queue_unreachable                deprecated (1 - sendgroup_queue_reachable); removed
                                           in the next release
sendgroup_info                             namespace, sendgroup, campaign, host (always 1)
sendgroup_operation_failed                 namespace, sendgroup, kind (dump, restore)
sendgroup_operator_owned_groups            (groups this replica acts on; sharding only)
sendgroup_operator_shard_members           (live members in this replica's view; sharding
                                           only)
=========================================  =====================================================

Label cardinality is bounded by the number of SendGroups (a few series each) plus fixed sets
(phases, states, kinds); ``campaign`` and ``host`` appear only on ``sendgroup_info``, which
dashboards join on ``namespace, sendgroup``. docs/observability.md is the reference (a test
checks it against this registry).
"""

from __future__ import annotations

import bisect
import contextlib
from collections import Counter as TallyCounter
from datetime import datetime, timedelta
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from sendgroup_operator import conditions, models

REGISTRY: Final = CollectorRegistry()

QUEUE_JOBS: Final = Gauge(
    "sendgroup_queue_jobs",
    "Jobs in a group's queue by state",
    ["namespace", "sendgroup", "state"],
    registry=REGISTRY,
)
OLDEST_AGE: Final = Gauge(
    "sendgroup_queue_oldest_job_age_seconds",
    "Age of the oldest ready job",
    ["namespace", "sendgroup"],
    registry=REGISTRY,
)
WORKERS: Final = Gauge(
    "sendgroup_workers",
    "Worker pods of a group: desired by spec, ready, allowed by the global cap",
    ["namespace", "sendgroup", "kind"],
    registry=REGISTRY,
)
DUMP_BYTES: Final = Gauge(
    "sendgroup_dump_bytes",
    "Bytes of a group's dump segments on the volume",
    ["namespace", "sendgroup"],
    registry=REGISTRY,
)
REACHABLE: Final = Gauge(
    "sendgroup_queue_reachable",
    "0 while the group's Redis cannot be measured (condition QueueReachable=False), else 1",
    ["namespace", "sendgroup"],
    registry=REGISTRY,
)
UNREACHABLE: Final = Gauge(
    "sendgroup_queue_unreachable",
    "Deprecated, removed in the next release: 1 - sendgroup_queue_reachable",
    ["namespace", "sendgroup"],
    registry=REGISTRY,
)
INFO: Final = Gauge(
    "sendgroup_info",
    "Always 1 for every known SendGroup; carries its campaign and host (spec.campaign, "
    "spec.host) for joins on namespace and sendgroup",
    ["namespace", "sendgroup", "campaign", "host"],
    registry=REGISTRY,
)
#: Values of ``sendgroup_operation_failed{kind}``.
OPERATION_KINDS: Final = ("dump", "restore")
OPERATION_FAILED: Final = Gauge(
    "sendgroup_operation_failed",
    "1 while the group's last dump or restore Job failed (condition Degraded=True, reason "
    "DumpFailed or RestoreFailed) and no later one succeeded",
    ["namespace", "sendgroup", "kind"],
    registry=REGISTRY,
)
OWNED_GROUPS: Final = Gauge(
    "sendgroup_operator_owned_groups",
    "SendGroups this operator replica acts on (sharding: its share; 0 while it is fenced)",
    registry=REGISTRY,
)
SHARD_MEMBERS: Final = Gauge(
    "sendgroup_operator_shard_members",
    "Live operator replicas in this replica's view of the shard set (sharding only)",
    registry=REGISTRY,
)
GROUPS: Final = Gauge("sendgroup_groups", "SendGroups by phase", ["phase"], registry=REGISTRY)
ORPHANS: Final = Gauge(
    "sendgroup_orphans",
    "Groups with work and no ready worker past the grace period",
    ["kind"],
    registry=REGISTRY,
)
ERRORS: Final = Counter(
    "sendgroup_reconcile_errors",
    "Reconciliation passes that failed",
    ["namespace"],
    registry=REGISTRY,
)
KUBE_REQUESTS: Final = Counter(
    "sendgroup_kube_requests",
    "Kubernetes API requests made by the reconciler (kopf's own watches not included)",
    registry=REGISTRY,
)
DURATION: Final = Histogram(
    "sendgroup_reconcile_seconds", "Duration of one reconciliation pass", registry=REGISTRY
)


class GroupTable:
    """Last known phase and work of every group, to compute the cross-group gauges."""

    def __init__(self) -> None:
        self.phases: dict[str, str] = {}
        #: groups per phase, kept with ``phases`` so :meth:`export` need not count them all
        self.tally: TallyCounter[str] = TallyCounter()
        self.starved_since: dict[str, datetime] = {}
        #: the values of ``starved_since``, sorted, so :meth:`export` counts the groups
        #: starved past the grace period with one bisection
        self._starts: list[datetime] = []

    def update(
        self, key: str, status: models.SendGroupStatus, spec: models.SendGroupSpec, now: datetime
    ) -> None:
        """Record one group's status after a pass."""
        phase = status.phase.value if status.phase else "Pending"
        previous = self.phases.get(key)
        if previous != phase:
            if previous is not None:
                self.tally[previous] -= 1
            self.tally[phase] += 1
            self.phases[key] = phase
        starving = (
            status.queue.total > 0
            and not spec.paused
            and spec.state != models.State.CANCELLED
            and status.workers.allowed > 0
            and status.workers.ready == 0
        )
        if starving:
            if key not in self.starved_since:
                self.starved_since[key] = now
                bisect.insort(self._starts, now)
        else:
            self._unstarve(key)

    def forget(self, key: str) -> None:
        """The group is gone."""
        previous = self.phases.pop(key, None)
        if previous is not None:
            self.tally[previous] -= 1
        self._unstarve(key)

    def _unstarve(self, key: str) -> None:
        since = self.starved_since.pop(key, None)
        if since is not None:
            del self._starts[bisect.bisect_left(self._starts, since)]

    def export(self, now: datetime, grace: float) -> None:
        """Set ``sendgroup_groups`` and ``sendgroup_orphans``: O(phases + log starved
        groups), not O(all groups) (issue 15: this runs after every pass; counting the starved
        groups one by one was O(starved groups) per pass, 8 % of the operator's CPU at rest
        with 300 of 3,000 groups starved, py-spy, and quadratic in the groups)."""
        for phase in models.Phase:
            GROUPS.labels(phase.value).set(self.tally.get(phase.value, 0))
        # since <= now - grace  <=>  (now - since) >= grace
        starved = bisect.bisect_right(self._starts, now - timedelta(seconds=grace))
        ORPHANS.labels("group_without_workers").set(starved)


_INFO_LABELS: dict[tuple[str, str], tuple[str, str]] = {}


def observe(
    namespace: str,
    name: str,
    status: models.SendGroupStatus,
    campaign: str = "",
    host: str = "",
) -> None:
    """Export one group's gauges from its (new) status; ``campaign`` and ``host`` (its spec)
    go to ``sendgroup_info``. Also creates ``sendgroup_reconcile_errors_total{namespace}`` at 0,
    so error rates are defined before the first error."""
    ERRORS.labels(namespace)
    info = (campaign, host)
    old = _INFO_LABELS.get((namespace, name))
    if old is not None and old != info:
        _drop(INFO, namespace, name, *old)
    _INFO_LABELS[(namespace, name)] = info
    INFO.labels(namespace, name, campaign, host).set(1)
    degraded = next((c for c in status.conditions if c.type == conditions.DEGRADED), None)
    failed_reason = degraded.reason if degraded is not None and degraded.status == "True" else ""
    for kind in OPERATION_KINDS:
        failed = failed_reason == f"{kind.capitalize()}Failed"
        OPERATION_FAILED.labels(namespace, name, kind).set(1 if failed else 0)
    q = status.queue
    for state, value in (
        ("ready", q.ready),
        ("delayed", q.delayed),
        ("reserved", q.reserved),
        ("failed", q.failed),
    ):
        QUEUE_JOBS.labels(namespace, name, state).set(value)
    OLDEST_AGE.labels(namespace, name).set(q.oldest_job_age_seconds or 0)
    w = status.workers
    for kind, value in (("desired", w.desired), ("ready", w.ready), ("allowed", w.allowed)):
        WORKERS.labels(namespace, name, kind).set(value)
    DUMP_BYTES.labels(namespace, name).set(sum(s.bytes or 0 for s in status.dump.segments))
    reachable = next((c for c in status.conditions if c.type == conditions.QUEUE_REACHABLE), None)
    down = reachable is not None and reachable.status == "False"
    REACHABLE.labels(namespace, name).set(0 if down else 1)
    UNREACHABLE.labels(namespace, name).set(1 if down else 0)


def remove(namespace: str, name: str) -> None:
    """Drop a deleted group's series."""
    for state in ("ready", "delayed", "reserved", "failed"):
        _drop(QUEUE_JOBS, namespace, name, state)
    for kind in ("desired", "ready", "allowed"):
        _drop(WORKERS, namespace, name, kind)
    for gauge in (OLDEST_AGE, DUMP_BYTES, REACHABLE, UNREACHABLE):
        _drop(gauge, namespace, name)
    for kind in OPERATION_KINDS:
        _drop(OPERATION_FAILED, namespace, name, kind)
    info = _INFO_LABELS.pop((namespace, name), None)
    if info is not None:
        _drop(INFO, namespace, name, *info)


def _drop(gauge: Gauge, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        gauge.remove(*labels)


def serve(port: int, host: str) -> None:
    """Serve ``/metrics`` on ``host:port`` (port 0: do not serve)."""
    if port:
        start_http_server(port, addr=host, registry=REGISTRY)
