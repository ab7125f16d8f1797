"""Operator start-up: kopf settings, clients in memo, the preflight that waits for the CRD
and the RBAC it needs (saying exactly what is missing), and the liveness check.

kopf's own annotations and finalizer carry our API group's prefix (``sendgroups.io/...``);
kopf keeps no state in ``status`` (that is ours, written through ``patch.status``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable
from typing import Any, Final, cast

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from sendgroup_operator import gcfreeze, memtrace, metrics, models, reconcile, shardmember
from sendgroup_operator.kube import LIST_PAGE, Kube
from sendgroup_operator.queueio import RedisQueues
from sendgroup_operator.reconcile import Runtime
from sendgroup_operator.settings import Settings
from sendgroup_worker.redisclient import quiet_cluster_node_notices

Logger = logging.Logger | logging.LoggerAdapter[Any]
FINALIZER: Final = f"{models.GROUP}/finalizer"
#: (verb, API group, resource) the operator needs in every watched namespace.
NAMESPACED_PERMISSIONS: Final = (
    ("list", models.GROUP, models.PLURAL),
    ("watch", models.GROUP, models.PLURAL),
    ("patch", models.GROUP, models.PLURAL),
    ("delete", models.GROUP, models.PLURAL),
    ("patch", models.GROUP, f"{models.PLURAL}/status"),
    ("get", "apps", "deployments"),
    ("create", "apps", "deployments"),
    ("patch", "apps", "deployments"),
    ("delete", "apps", "deployments"),
    ("create", "policy", "poddisruptionbudgets"),
    ("patch", "policy", "poddisruptionbudgets"),
    ("delete", "policy", "poddisruptionbudgets"),
    ("list", "batch", "jobs"),
    ("create", "batch", "jobs"),
    ("delete", "batch", "jobs"),
    ("list", "", "pods"),
    ("get", "", "secrets"),
    ("create", "", "events"),
)
#: (verb, API group, resource) a sharded operator needs in its own namespace (its Lease).
SHARD_PERMISSIONS: Final = (
    ("list", "coordination.k8s.io", "leases"),
    ("create", "coordination.k8s.io", "leases"),
    ("patch", "coordination.k8s.io", "leases"),
    ("delete", "coordination.k8s.io", "leases"),
)


def load_kube_config() -> k8s.ApiClient:
    """An API client from the in-cluster ServiceAccount or ``$KUBECONFIG``."""
    try:
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()  # type: ignore[no-untyped-call]
    return k8s.ApiClient()


#: seconds a kopf worker waits for its object's next event before freeing its slot, when
#: ``SENDGROUP_WORKER_LIMIT`` caps the workers (kopf's default: 5). A slot is held this long
#: after every event that needed no patch, so the workers handle at most ``limit /
#: IDLE_WORKER_TIMEOUT`` such events a second: at 0.5 s and 100 workers, 200 groups a second,
#: which was the whole pace of an operator restart (1,000 groups: ~5 s of its ~8.5 s, the
#: CPU partly idle; issue 15). A worker whose handler patched the object waits for that
#: patch's event anyway (kopf's ``consistency_timeout``), whatever this is; an event that comes
#: after a worker left gets a new one. Must be > 0 (asyncio's ``wait_for`` with 0 cancels the
#: queue read before it runs, and kopf's worker would retry it forever).
IDLE_WORKER_TIMEOUT: Final = 0.05


class StatusDiffBase(kopf.StatusDiffBaseStorage):
    """kopf's diff base in ``status.kopf.last-handled-configuration`` (kopf's own default
    place; :data:`models.KOPF_STATUS_FIELD`) instead of an annotation: kopf writes it after a
    change handler in the same patch as the handler's ``patch.status``, one status request.

    Objects handled by an older operator carry it in the annotation
    :data:`models.LEGACY_DIFFBASE_ANNOTATION` only: :meth:`fetch` falls back to it, so the upgrade
    replays no handled change. The annotation itself is not part of the essence: kopf marked our
    prefix as its own (``sendgroups.io/kopf-managed``), and leaves every annotation under a
    marked prefix out."""

    def __init__(self) -> None:
        super().__init__(name=models.KOPF_STATUS_FIELD)
        self._legacy = kopf.AnnotationsDiffBaseStorage(prefix=models.GROUP, key=models.DIFFBASE_KEY)

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        """The diff base from status, else from the legacy annotation, else None (a new
        object)."""
        found = super().fetch(body=body)
        return found if found is not None else self._legacy.fetch(body=body)

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        """kopf's essence of ``body`` (the same dict), built from the body without its
        ``status``: kopf deep-copies the whole body and then drops ``status``, which is most
        of a SendGroup (conditions, queue, workers; ~0.15 ms a copy per watch event and
        ~5 % of an operator restart's CPU, 1,000 groups, py-spy, issue 15). A handler
        watching a status field (none does) gets kopf's own build."""
        fields = list(extra_fields or ())
        if "status" not in body or any(_in_status(f) for f in fields):
            return super().build(body=body, extra_fields=fields)
        light = {k: v for k, v in body.items() if k != "status"}
        return super().build(body=cast(kopf.Body, light), extra_fields=fields)


class StatusProgress(kopf.StatusProgressStorage):
    """kopf's handler progress in ``status.kopf.progress`` (and its touch field in
    ``status.kopf.dummy``) instead of annotations. With annotations, kopf's first ``store`` on
    every object adds the marker annotation ``sendgroups.io/kopf-managed``, which no purge
    removes: a separate write of every new group (issue 15: a new group cost three writes,
    finalizer, marker + diff base, status; with both in status it costs two, finalizer and one
    status patch). A handler that succeeds at once leaves an empty ``progress`` behind.

    Upgrade: a group an older operator left mid-retry has its record in an annotation;
    :meth:`fetch` reads it there when status has none, and :meth:`purge` clears it there too
    (a write only for such a group)."""

    def __init__(self) -> None:
        super().__init__(name=models.KOPF_STATUS_FIELD)
        self._legacy = kopf.AnnotationsProgressStorage(prefix=models.GROUP)

    def fetch(self, *, key: Any, body: kopf.Body) -> Any:
        """The handler's record from status, else from the legacy annotation."""
        found = super().fetch(key=key, body=body)
        return found if found is not None else self._legacy.fetch(key=key, body=body)

    def purge(self, *, key: Any, body: kopf.Body, patch: kopf.Patch) -> None:
        """Clear the record in status and, when an older operator left one, its annotation."""
        super().purge(key=key, body=body, patch=patch)
        self._legacy.purge(key=key, body=body, patch=patch)

    def clear(self, *, essence: kopf.BodyEssence) -> kopf.BodyEssence:
        """The essence without kopf's progress record (``status.kopf.progress``). An essence
        without ``status`` (every one :class:`StatusDiffBase` builds or stored) has no record
        to drop: kopf's own ``clear`` deep-copied it anyway, twice per watch event (the old
        and the new essence; ~4 % of a restart's CPU, issue 15). Then only its empty stanzas
        go, from a copy of its top level and ``metadata`` (kopf only reads and serialises the
        result)."""
        if "status" in essence:
            return super().clear(essence=essence)
        out = cast(dict[str, Any], dict(essence))
        if isinstance(out.get("metadata"), dict):
            out["metadata"] = dict(out["metadata"])
        cleared = cast(kopf.BodyEssence, out)
        self.remove_empty_stanzas(cleared)
        return cleared


def _in_status(field: Any) -> bool:
    """Whether a kopf field spec (``"status.x"`` or a tuple path) lies in ``status``."""
    path = field.split(".") if isinstance(field, str) else list(field)
    return bool(path) and path[0] == "status"


def configure_kopf(settings: kopf.OperatorSettings, ours: Settings) -> None:
    """kopf settings: our prefix for its finalizer, its bookkeeping in ``status.kopf``
    (:class:`StatusDiffBase`, :class:`StatusProgress`), peering priority, and no events for
    kopf's own log lines (only ours)."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = StatusProgress()
    settings.persistence.diffbase_storage = StatusDiffBase()
    # with sharding kopf runs standalone (__main__): the Leases of shardmember.py coordinate
    settings.peering.priority = ours.peering_priority
    settings.peering.name = ours.peering_name
    settings.peering.lifetime = ours.peering_lifetime
    settings.peering.mandatory = False
    settings.peering.clusterwide = ours.clusterwide
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # kopf's initial LIST of each watch (and its re-LIST after a 410 Gone) in pages: kopf
    # keeps one page at a time instead of the whole list (issue 15: ~22 KB of JSON per
    # SendGroup, 44 MB at 2,000 groups held while kopf handed the objects out, tracemalloc)
    settings.watching.chunk_size = LIST_PAGE
    settings.queueing.error_delays = [1, 2, 5, 10, 30]  # kopf >= 1.39: was batching
    if ours.worker_limit > 0:
        # kopf keeps one worker task per object with events (queueing.worker_limit caps how many
        # run); a worker waits idle_timeout for its object's next event before freeing its
        # slot: 5 s by default, so a capped cold start would idle most of its slots (and a
        # restart, whose events need no patch, would pace at limit / idle_timeout groups a
        # second; see IDLE_WORKER_TIMEOUT).
        settings.queueing.worker_limit = ours.worker_limit
        settings.queueing.idle_timeout = IDLE_WORKER_TIMEOUT


async def missing_permissions(kube: Kube, ours: Settings) -> list[str]:
    """What the ServiceAccount may not do, as ``verb group/resource in namespace`` lines. The
    reviews are asked all at once (18 per watched scope, each a round trip through a thread:
    one after the other they were a visible part of every start, issue 15)."""
    asks: list[tuple[str, str, str, str | None, str]] = []
    for ns in ours.list_scopes:
        where = f"in namespace {ns}" if ns else "cluster-wide"
        asks += [
            (verb, group, resource, ns, where) for verb, group, resource in NAMESPACED_PERMISSIONS
        ]
    if ours.sharding:
        where = f"in namespace {ours.namespace}"
        asks += [(v, g, r, ours.namespace, where) for v, g, r in SHARD_PERMISSIONS]
    allowed = await asyncio.gather(*(kube.can(v, g, r, ns) for v, g, r, ns, _ in asks))
    return [
        f"{verb} {group or 'core'}/{resource} {where}"
        for (verb, group, resource, _, where), ok in zip(asks, allowed, strict=True)
        if not ok
    ]


async def preflight(kube: Kube, ours: Settings, logger: Logger) -> None:
    """Wait until the CRD exists and the RBAC is sufficient, logging exactly what is missing
    every ``preflight_retry`` seconds (no crash loop)."""
    while True:
        problems: list[str] = []
        try:
            if not await kube.crd_exists():
                problems.append(
                    f"CRD {models.PLURAL}.{models.GROUP} is not installed "
                    "(kubectl apply -f crds/sendgroups.yaml)"
                )
            problems += [f"RBAC: cannot {m}" for m in await missing_permissions(kube, ours)]
        except Exception as exc:  # the API server itself may not answer yet
            problems.append(f"API server: {type(exc).__name__}: {exc}")
        if not problems:
            logger.info("preflight ok: CRD installed, RBAC sufficient")
            return
        logger.error("waiting: %s", "; ".join(problems))
        await asyncio.sleep(ours.preflight_retry)


async def start(settings: kopf.OperatorSettings, memo: Any, logger: Logger) -> None:
    """The ``@kopf.on.startup`` body: settings, clients, metrics server, preflight."""
    ours = Settings.from_env()
    configure_kopf(settings, ours)
    # the observer's cluster clients: redis-py's node-object notice after a failover is DEBUG
    quiet_cluster_node_notices(asyncio.get_running_loop())
    kube = Kube(load_kube_config())
    memtrace.begin()  # SENDGROUP_TRACEMALLOC: trace from here (nothing when unset)
    memo.runtime = Runtime(settings=ours, kube=kube, queues=RedisQueues(ours.key_prefix))
    metrics.serve(ours.metrics_port, os.environ.get("SENDGROUP_LISTEN_HOST", "0.0.0.0"))
    await preflight(kube, ours, logger)
    groups = await reconcile.load_groups(memo.runtime)
    found = await reconcile.load_deployments(memo.runtime)
    logger.info("%d SendGroup(s) and %d worker Deployment(s) found", groups, found)
    gcfreeze.freeze_start()  # the groups' entries and the Deployments' index stay
    memo.runtime.heartbeat = time.monotonic()
    if ours.sharding:
        # the Leases on a client of their own (threads, connections, no client-side retry)
        shard = shardmember.Shard(kube.dedicated(), ours)
        logger.info(
            "sharding: member %s of set %s (Lease %s/%s, %.0f s)",
            shard.identity,
            shard.shard_set,
            ours.namespace,
            shard.name,
            ours.shard_lease_duration,
        )
        await shard.poll(logger)
        memo.runtime.shard = shard
        memo.shard_task = asyncio.create_task(_poll_after(shard, logger))
    memo.orphan_task = asyncio.create_task(reconcile.orphan_loop(memo.runtime, logger))
    memo.gc_task = asyncio.create_task(gcfreeze.freeze_loop(logger=logger))
    if os.environ.get("SENDGROUP_MALLOC_TRIM", "true").lower() not in ("0", "false", "no"):
        memo.trim_task = asyncio.create_task(gcfreeze.trim_loop())


async def _poll_after(shard: shardmember.Shard, logger: Logger) -> None:
    await asyncio.sleep(shard.duration / 3)
    await shard.run(logger)


def liveness(memo: Any) -> dict[str, Any]:
    """The ``@kopf.on.probe`` body: raises when groups exist but no reaper pass completed for
    ``SENDGROUP_LIVENESS_STALL`` seconds (kopf then answers the liveness endpoint with 500)."""
    rt: Runtime | None = getattr(memo, "runtime", None)
    if rt is None:
        return {"reaper": "starting"}
    stalled = time.monotonic() - rt.heartbeat
    if rt.demands and stalled > rt.settings.liveness_stall:
        raise RuntimeError(f"reaper made no progress for {int(stalled)}s")
    return {"reaper_seconds_since_pass": round(stalled, 1), "groups": len(rt.demands)}
