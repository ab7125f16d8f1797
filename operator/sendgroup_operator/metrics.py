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
checks it against this registry). The per-group gauges are collectors that read one tuple per
group at scrape time (:class:`_GroupGauge`), not labelled ``Gauge`` children (issue 15: ~10 KB
and ~140 us per pass per group).
"""

from __future__ import annotations

import bisect
from collections import Counter as TallyCounter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Final, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sendgroup_operator import conditions, models

REGISTRY: Final = CollectorRegistry()

#: Per group (``(namespace, name)``), the values of its series as of its last pass
#: (:class:`_Series`, written by :func:`observe`, read at scrape time by the per-group
#: collectors below).
_SERIES: dict[tuple[str, str], _Series] = {}


class _Series(NamedTuple):
    """One group's per-group series values (one tuple, ~200 bytes with its entry, instead of 15
    prometheus_client children of ~650 bytes each, ~10 KB per group: issue 15, measured with
    tracemalloc over 2,000 groups)."""

    campaign: str
    host: str
    dump_failed: int
    restore_failed: int
    ready: int
    delayed: int
    reserved: int
    failed: int
    oldest_age: float
    desired: int
    workers_ready: int
    allowed: int
    dump_bytes: int
    reachable: int


class _GroupGauge(Collector):
    """A gauge family with one or more series per known group, built at scrape time from
    :data:`_SERIES` (``rows``: a group's values -> (extra label values, value) pairs). Not a
    labelled ``Gauge``: its children cost ~10 KB per group in all and their locks ~140 us per
    pass (issue 15). The exposition is the same (names, help, labels, one sample per group per
    label set). ``_name``, ``_type`` and ``_labelnames`` are what the documentation check reads
    from prometheus_client's own collectors (tests/unit/test_observability.py)."""

    _type = "gauge"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        rows: Callable[[_Series], Iterable[tuple[tuple[str, ...], float]]],
        registry: CollectorRegistry,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._rows = rows
        registry.register(self)

    def describe(self) -> list[Metric]:
        """The family without samples (the registry learns the name without a collect)."""
        return [GaugeMetricFamily(self._name, self._documentation, labels=self._labelnames)]

    def collect(self) -> list[Metric]:
        """One sample per group and label set. Runs in the metrics server's thread: it reads a
        copy of the table (``list`` of a dict copies it without releasing the GIL)."""
        family = GaugeMetricFamily(self._name, self._documentation, labels=self._labelnames)
        for (namespace, name), values in list(_SERIES.items()):
            for extra, value in self._rows(values):
                family.add_metric((namespace, name, *extra), value)
        return [family]


QUEUE_JOBS: Final = _GroupGauge(
    "sendgroup_queue_jobs",
    "Jobs in a group's queue by state",
    ["namespace", "sendgroup", "state"],
    lambda v: (
        (("ready",), v.ready),
        (("delayed",), v.delayed),
        (("reserved",), v.reserved),
        (("failed",), v.failed),
    ),
    REGISTRY,
)
OLDEST_AGE: Final = _GroupGauge(
    "sendgroup_queue_oldest_job_age_seconds",
    "Age of the oldest ready job",
    ["namespace", "sendgroup"],
    lambda v: (((), v.oldest_age),),
    REGISTRY,
)
WORKERS: Final = _GroupGauge(
    "sendgroup_workers",
    "Worker pods of a group: desired by spec, ready, allowed by the global cap",
    ["namespace", "sendgroup", "kind"],
    lambda v: ((("desired",), v.desired), (("ready",), v.workers_ready), (("allowed",), v.allowed)),
    REGISTRY,
)
DUMP_BYTES: Final = _GroupGauge(
    "sendgroup_dump_bytes",
    "Bytes of a group's dump segments on the volume",
    ["namespace", "sendgroup"],
    lambda v: (((), v.dump_bytes),),
    REGISTRY,
)
REACHABLE: Final = _GroupGauge(
    "sendgroup_queue_reachable",
    "0 while the group's Redis cannot be measured (condition QueueReachable=False), else 1",
    ["namespace", "sendgroup"],
    lambda v: (((), v.reachable),),
    REGISTRY,
)
UNREACHABLE: Final = _GroupGauge(
    "sendgroup_queue_unreachable",
    "Deprecated, removed in the next release: 1 - sendgroup_queue_reachable",
    ["namespace", "sendgroup"],
    lambda v: (((), 1 - v.reachable),),
    REGISTRY,
)
INFO: Final = _GroupGauge(
    "sendgroup_info",
    "Always 1 for every known SendGroup; carries its campaign and host (spec.campaign, "
    "spec.host) for joins on namespace and sendgroup",
    ["namespace", "sendgroup", "campaign", "host"],
    lambda v: (((v.campaign, v.host), 1),),
    REGISTRY,
)
#: Values of ``sendgroup_operation_failed{kind}``.
OPERATION_KINDS: Final = ("dump", "restore")
OPERATION_FAILED: Final = _GroupGauge(
    "sendgroup_operation_failed",
    "1 while the group's last dump or restore Job failed (condition Degraded=True, reason "
    "DumpFailed or RestoreFailed) and no later one succeeded",
    ["namespace", "sendgroup", "kind"],
    lambda v: ((("dump",), v.dump_failed), (("restore",), v.restore_failed)),
    REGISTRY,
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
        for phase in _PHASES:
            _set(GROUPS, phase, self.tally.get(phase, 0))
        # since <= now - grace  <=>  (now - since) >= grace
        starved = bisect.bisect_right(self._starts, now - timedelta(seconds=grace))
        _set(ORPHANS, "group_without_workers", starved)


_PHASES: Final = tuple(phase.value for phase in models.Phase)
#: What :meth:`GroupTable.export` last wrote to each (gauge, label) child: it writes only
#: changes (issue 15: the 13 child lookups and locked writes of every pass were ~12 % of an
#: idle group's pass, 1,000 groups in-process, cProfile).
_EXPORTED: dict[tuple[Gauge, str], float] = {}


def _set(gauge: Gauge, label: str, value: float) -> None:
    """Set ``gauge{label}`` to ``value`` unless :meth:`GroupTable.export` already did."""
    key = (gauge, label)
    if _EXPORTED.get(key) != value:
        gauge.labels(label).set(value)
        _EXPORTED[key] = value


#: The namespaces whose ``sendgroup_reconcile_errors_total`` child exists (made at 0 once).
_ERROR_NAMESPACES: set[str] = set()


def observe(
    namespace: str,
    name: str,
    status: models.SendGroupStatus,
    campaign: str = "",
    host: str = "",
) -> None:
    """Export one group's gauges from its (new) status; ``campaign`` and ``host`` (its spec)
    go to ``sendgroup_info``. Also creates ``sendgroup_reconcile_errors_total{namespace}`` at 0,
    so error rates are defined before the first error. One tuple per group (:data:`_SERIES`),
    read at scrape time."""
    if namespace not in _ERROR_NAMESPACES:
        ERRORS.labels(namespace)
        _ERROR_NAMESPACES.add(namespace)
    degraded = next((c for c in status.conditions if c.type == conditions.DEGRADED), None)
    failed_reason = degraded.reason if degraded is not None and degraded.status == "True" else ""
    reachable = next((c for c in status.conditions if c.type == conditions.QUEUE_REACHABLE), None)
    down = reachable is not None and reachable.status == "False"
    q, w = status.queue, status.workers
    _SERIES[(namespace, name)] = _Series(
        campaign,
        host,
        int(failed_reason == "DumpFailed"),
        int(failed_reason == "RestoreFailed"),
        q.ready,
        q.delayed,
        q.reserved,
        q.failed,
        q.oldest_job_age_seconds or 0,
        w.desired,
        w.ready,
        w.allowed,
        sum(s.bytes or 0 for s in status.dump.segments),
        0 if down else 1,
    )


def remove(namespace: str, name: str) -> None:
    """Drop a deleted group's series."""
    _SERIES.pop((namespace, name), None)


def serve(port: int, host: str) -> None:
    """Serve ``/metrics`` on ``host:port`` (port 0: do not serve)."""
    if port:
        start_http_server(port, addr=host, registry=REGISTRY)
