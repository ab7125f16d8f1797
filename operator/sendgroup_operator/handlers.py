"""kopf wiring only: parse -> plan -> apply -> ``patch.status``. Handlers return None.

create / update / resume / the reaper all call the same :func:`reconcile.reconcile`;
deletion runs it with the finalizer held until the plan says the group is finalized.

The reaper is one :class:`scheduler.Scheduler` for every group (:class:`Reaper`: a heap of
per-group deadlines and one task), not a kopf daemon per group (issue 15: a daemon's runner
task, frames, kwargs, cause, loggers, stop flag and kopf's body copy were ~15-20 KB per group)
nor a kopf timer (which fires only every ``reaperInterval``, so each step of a multi-step
transition, restore -> workers, dump -> Dumped, workers gone -> purge, waited a whole interval).
A group's next pass comes ``plan.requeue_after`` seconds after a pass while something is in
motion, after ``plan.idle_wait`` when it is idle and watched by the observer, else after
``reaperInterval``; the observer (jobs arrived), a change handler's follow-up and a resting
group's Deployment change bring it closer (``Runtime.kick``). A change handler's pass
(create, spec update, resume at the operator's start) whose plan named the next pass (an idle
wait, a follow-up) stands for the reaper's next pass (``Runtime.hand_over``), so a start passes
each resting group once, not twice. A pass that named none (a new group's first, which writes
its status) is not handed over: the reaper settles the group within its initial delay
(``scheduler.INITIAL_DELAY`` after the watch first saw it).
The reaper writes status through the API (:meth:`Kube.patch_group_status`).
Status is written only when the plan says something meaningful changed, so a steady group
causes no writes, and no handler reacts to our own status patches (kopf's diff base ignores
``status``).

Sharding (``SENDGROUP_SHARDING``, see sharding.py and shardmember.py): every replica watches
every group, and a group is acted on only by its owner (``rt.shard.may_act``). A non-owner's
change handler returns at once (kopf records its diff base even when no handler matches: the
first replica to see a spec change writes it, the others then see no change; two that see it
at the same moment both write it; the owner learns of the change through :func:`on_event`); the
reaper parks the group until the assignment changes and runs a full pass as soon as it owns
the group (the takeover); its deletion handler never lets kopf finish (kopf drops its finalizer
when no deletion handler is left), so only the owner purges and releases the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, cast

import kopf
import pydantic
from kopf._core.engines import posting

from sendgroup_operator import (
    builders,
    kopfpause,
    metrics,
    models,
    plan,
    reconcile,
    startup,
    unusable,
)

RESOURCE = (models.GROUP, models.VERSION, models.PLURAL)


@kopf.on.startup()
async def on_startup(
    settings: kopf.OperatorSettings, memo: Any, logger: startup.Logger, **_: Any
) -> None:
    """Settings, clients and the preflight (waits for CRD and RBAC), then the reaper's
    scheduler (one task for every group's passes, :class:`Reaper`)."""
    await startup.start(settings, memo, logger)
    memo.reaper = Reaper(memo, settings, logger)
    memo.reaper_task = memo.reaper.start()


@kopf.on.cleanup()
async def on_cleanup(memo: Any, logger: startup.Logger, **_: Any) -> None:
    """Stop the reaper (its passes in flight get ``CANCELLATION_TIMEOUT`` seconds), leave the
    shard set (sharding: the others take our groups at once), close the Redis pools."""
    tasks = ("orphan_task", "shard_task", "gc_task", "trim_task")
    for name in (*tasks, "shard_follow_task", "pause_follow_task"):
        task = getattr(memo, name, None)
        if task is not None:
            task.cancel()
    rt: reconcile.Runtime | None = getattr(memo, "runtime", None)
    if rt is not None:
        await rt.scheduler.stop(CANCELLATION_TIMEOUT)
    if rt is not None and rt.shard is not None:
        await rt.shard.leave(logger)
    if rt is not None:
        await rt.observer.close()
        await rt.queues.close()


@kopf.on.probe(id="reaper")
def on_probe(memo: Any, **_: Any) -> dict[str, Any]:
    """Liveness: fails when the reaper stopped making progress."""
    return startup.liveness(memo)


@kopf.on.event(
    "apps",
    "v1",
    "deployments",
    labels=builders.WORKER_LABELS,
)
async def on_worker_deployment(
    type: str | None, namespace: str | None, name: str, body: kopf.Body, memo: Any, **_: Any
) -> None:
    """The worker Deployments, fed by a watch into ``Runtime.deployments`` (filled first by
    one LIST at start-up, ``reconcile.load_deployments``); the passes read it instead of a
    GET per group per pass (see ``reconcile._deployment``). Not a ``@kopf.index``: kopf holds
    every handler until all indexed objects are indexed, through one condition notified per
    object (quadratic at 10,000 groups, issue 15)."""
    rt: reconcile.Runtime | None = getattr(memo, "runtime", None)
    if rt is None or namespace is None:
        return
    rt.saw_deployment(namespace, name, None if type == "DELETED" else body)


def _events(result: plan.Plan, body: kopf.Body) -> None:
    for event in result.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)


async def _compute(
    body: kopf.Body,
    memo: Any,
    logger: startup.Logger,
    deployments: reconcile.DeploymentIndex | None,
    providers: Mapping[str, Any] | None = None,
) -> plan.Plan | None:
    rt: reconcile.Runtime = memo.runtime
    try:
        return await reconcile.reconcile(
            rt, body, logger, deployments=deployments, providers=providers
        )
    except pydantic.ValidationError as exc:
        # An object the API server accepted but the operator cannot use: condition, ONE
        # event, the pause applied anyway (issue 16; decisions in unusable.py)
        await _refuse(rt, body, exc)
        return None
    except Exception:
        metrics.ERRORS.labels(body["metadata"]["namespace"]).inc()
        raise


async def _refuse(rt: reconcile.Runtime, body: kopf.Body, exc: pydantic.ValidationError) -> None:
    meta = body["metadata"]
    refusal = unusable.refuse(body, exc, datetime.now(UTC))
    if refusal.event:
        kopf.event(
            body, type="Warning", reason=unusable.REASON_INVALID_SPEC, message=refusal.message
        )
    if refusal.status is not None:
        await rt.kube.patch_group_status(meta["namespace"], meta["name"], refusal.status)
    if refusal.pause:
        name = builders.deployment_name(meta["name"])
        if await rt.kube.get_deployment(meta["namespace"], name) is not None:
            scale = {"metadata": {"namespace": meta["namespace"], "name": name}}
            await rt.kube.apply_deployment({**scale, "spec": {"replicas": 0}}, exists=True)


async def _pass(
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    logger: startup.Logger,
    deployments: reconcile.DeploymentIndex | None,
    providers: Mapping[str, Any] | None = None,
) -> plan.Plan | None:
    """One pass from a change handler: status through kopf's ``patch``; a follow-up pass the
    plan asks for is the reaper's, scheduled for it."""
    result = await _compute(body, memo, logger, deployments, providers)
    if result is not None:
        _events(result, body)
        if result.write_status:
            patch.status.update(result.status.model_dump(mode="json", by_alias=True))
        rt: reconcile.Runtime = memo.runtime
        meta = body["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if result.idle_wait is not None or result.requeue_after is not None:
            # the plan said when to look next; else (a new group's first pass, which writes
            # its status) the reaper's first pass settles it as before, within its initial
            # delay, so its one follow-up measurement does not land minutes later
            rt.hand_over(key, _next_delay(rt, result))
        if result.requeue_after is not None:
            rt.kick(key, result.requeue_after)
    return result


def _next_delay(rt: reconcile.Runtime, result: plan.Plan) -> float:
    """Seconds until a group's next pass after ``result``: ``requeue_after`` while something
    is in motion, else ``idle_wait`` when it rests (the observer wakes it when jobs arrive),
    else ``reaperInterval``."""
    delay = rt.settings.reaper_interval
    if result.idle_wait is not None:
        delay = result.idle_wait
    if result.requeue_after is not None:
        delay = min(delay, result.requeue_after)
    return delay


def _not_mine(memo: Any, body: kopf.Body) -> bool:
    """Sharding on and this replica may not act on the group now."""
    shard = memo.runtime.shard
    return shard is not None and not shard.may_act(body["metadata"]["uid"])


@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
@kopf.on.resume(*RESOURCE)
async def on_change(
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    logger: startup.Logger,
    **kwargs: Any,
) -> None:
    """Spec created or changed, or operator (re)started: one reconciliation pass (by the
    group's owner only, when sharded)."""
    if _not_mine(memo, body):
        return
    shard = memo.runtime.shard
    if shard is not None:
        shard.busy += 1
    try:
        await _pass(body, patch, memo, logger, memo.runtime.deployment_index(), kwargs)
    finally:
        if shard is not None:
            shard.busy -= 1


@kopf.on.event(*RESOURCE)
async def on_event(
    type: str | None, body: kopf.Body, memo: Any, logger: startup.Logger, **kwargs: Any
) -> None:
    """Every watch event of a SendGroup: its membership in the reaper's schedule
    (:meth:`Reaper.saw`: a new group is due after ``scheduler.INITIAL_DELAY``, a group being
    deleted or gone is dropped), and, sharded, a spec change the owner's change handler may not
    have seen (another replica handled it first and kopf's shared diff base then says "no
    change") wakes the owner's next pass. No API call, no write. Async: kopf runs a sync
    handler in a thread, where there is no event loop to schedule the wake-up on."""
    reaper: Reaper | None = getattr(memo, "reaper", None)
    if reaper is None:
        return
    reaper.saw(type, body, kwargs)
    rt = reaper.rt
    if rt.shard is None or type == "DELETED":
        return
    meta = body.get("metadata", {})
    observed = (body.get("status") or {}).get("observedGeneration")
    if meta.get("generation") != observed and rt.shard.may_act(meta.get("uid", "")):
        rt.kick(f"{meta.get('namespace')}/{meta.get('name')}", 0)


#: Seconds a scheduled pass (its passes in flight) gets at the operator's stop before it is
#: cancelled (the former daemon's ``cancellation_timeout``).
CANCELLATION_TIMEOUT: Final = 10.0
#: Seconds between two refreshes of ``sendgroup_operator_owned_groups`` while groups come and
#: go (sharded): each counts every group's owner, so not once per group at a start.
COUNT_DEBOUNCE: Final = 1.0


class Reaper:
    """The reaper of every group, run by one :class:`scheduler.Scheduler` (``rt.scheduler``)
    instead of one kopf daemon per group (issue 15): measure the queue (through
    ``rt.observer``: a batched round trip shared with the other groups on that Redis, or, idle,
    the last measurement; the observer kicks the group when jobs arrive), move the clocks, act
    on deadlines; again after ``requeue_after`` (2 s) while a transition is in motion, after
    ``plan.idle_wait`` (60 s) when the pass left it idle, else after ``reaperInterval``. A
    failed pass is logged, counted (``sendgroup_reconcile_errors_total``, by ``_compute``) and
    tried again after ``reaperInterval``; a plan's events are posted through kopf's queue.

    A pass reads the group from ``rt.groups`` (``provider_handlers.group_entry``: spec, status
    and the metadata a pass reads, fed by the watch), not from a body kopf keeps for it. The
    watch's events (:func:`on_event`) add a group to the schedule and drop it when it is being
    deleted or gone, so no reaper pass starts after that (``on_delete`` still runs).

    Sharded: a due group passes only when this replica may act on it (:meth:`gate`); else it is
    parked (no deadline) until the assignment changes (:meth:`follow_shard` wakes every group)
    and, if this replica owned it until then, what it held for the group is dropped
    (``rt.forget``, ``metrics.remove``). ``shard.groups`` lists every group of the schedule."""

    def __init__(self, memo: Any, settings: kopf.OperatorSettings, logger: startup.Logger) -> None:
        self.memo = memo
        self.rt: reconcile.Runtime = memo.runtime
        self.settings = settings
        self.logger = logger
        #: Groups this replica acted on at their last due time (sharded only): a group that
        #: leaves this set was handed away.
        self.owned: set[str] = set()
        #: kopf's provider indexes (``namespaced_providers``, ``cluster_providers``), from a
        #: handler's kwargs: the same live ``kopf.Index`` objects every handler gets.
        self.indexes: dict[str, Any] = {}
        self._count: asyncio.TimerHandle | None = None
        #: kopf's event queue and its loop, from a handler's context (see :meth:`run`).
        self._posting: tuple[Any, Any] | None = None

    def start(self) -> asyncio.Task[None]:
        """Start the scheduler's loop, :meth:`follow_pause` and, sharded, :meth:`follow_shard`."""
        if self.rt.shard is not None:
            self.memo.shard_follow_task = asyncio.create_task(self.follow_shard())
        self.memo.pause_follow_task = asyncio.create_task(self.follow_pause())
        return self.rt.scheduler.start(self.run, self.gate)

    def saw(self, type: str | None, body: Mapping[str, Any], kwargs: Mapping[str, Any]) -> None:
        """A watch event of a group: schedule it, or drop it (being deleted, or gone)."""
        if not self.indexes:
            self.indexes = {k: kwargs[k] for k in _INDEXES if k in kwargs}
        if self._posting is None:
            with contextlib.suppress(LookupError):
                self._posting = (posting.event_queue_var.get(), posting.event_queue_loop_var.get())
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        shard = self.rt.shard
        if type == "DELETED" or meta.get("deletionTimestamp"):
            if self.rt.scheduler.drop(key) and shard is not None:
                shard.groups.pop(key, None)
                self.owned.discard(key)
                self._count_soon()
            return
        if self.rt.scheduler.add(key) and shard is not None:
            shard.groups[key] = str(meta.get("uid", ""))
            self._count_soon()

    def _count_soon(self) -> None:
        shard = self.rt.shard
        if shard is None or self._count is not None:
            return

        def count() -> None:
            self._count = None
            shard.count()

        self._count = asyncio.get_running_loop().call_later(COUNT_DEBOUNCE, count)

    def gate(self, key: str) -> bool:
        """Whether the due group ``key`` may pass now: always unsharded; sharded, when this
        replica may act on it (a group handed away drops what this replica held for it). Never
        while kopf has paused the operator (peering: a peer of higher priority is active; kopf
        stopped its daemons then, :mod:`kopfpause`)."""
        if kopfpause.paused():
            return False
        shard = self.rt.shard
        if shard is None:
            return True
        if shard.may_act(shard.groups.get(key, "")):
            if key not in self.owned:
                self.logger.debug("shard: this replica (%s) acts on %s", shard.identity, key)
                self.owned.add(key)
            return True
        if key in self.owned:  # handed over: drop what this replica held for the group
            uid = shard.groups.get(key, "")
            self.logger.debug(
                "shard: %s handed over to %s", key, shard.owner(uid) or "(no live member)"
            )
            self.owned.discard(key)
            namespace, _, name = key.partition("/")
            self.rt.forget(key)
            metrics.remove(namespace, name)
        return False

    async def follow_pause(self) -> None:
        """When kopf resumes after a pause (peering), every group is due (kopf restarted its
        daemons then); while paused, :meth:`gate` parks every group that falls due."""
        while True:
            await kopfpause.wait_for(True)
            self.logger.info("kopf paused the operator: no reaper pass until it resumes")
            await kopfpause.wait_for(False)
            self.rt.scheduler.wake_all()

    async def follow_shard(self) -> None:
        """Sharded: every change of the assignment makes every group due (the event is taken
        before the wait, so a change in between is not lost)."""
        shard = self.rt.shard
        assert shard is not None
        while True:
            changed = shard.changed()
            await changed.wait()
            self.rt.scheduler.wake_all()

    async def run(self, key: str) -> float | None:
        """One reaper pass of ``key`` from its ``rt.groups`` entry; the seconds until its next
        pass (None when the group is no longer there or is being deleted: nothing scheduled)."""
        namespace, _, name = key.partition("/")
        entry = self.rt.groups.get((namespace, name))
        if entry is None or entry["metadata"].get("deletionTimestamp"):
            return None
        if self._posting is not None:
            # kopf sets its event queue in the context of each object's handling task only;
            # a pass runs in a task of ours, so kopf.event needs them here too (this task's
            # own context: nothing else sees them)
            posting.event_queue_var.set(self._posting[0])
            posting.event_queue_loop_var.set(self._posting[1])
        body = kopf.Body(_body(namespace, name, entry))
        logger = kopf.ObjectLogger(body=body, settings=self.settings)
        return await _reaper_pass(body, self.memo, logger, self.indexes, namespace, name)


#: The kopf indexes a pass reads (provider resolution, issue 14).
_INDEXES: Final = ("namespaced_providers", "cluster_providers")


def _body(namespace: str, name: str, entry: Mapping[str, Any]) -> kopf.RawBody:
    """A SendGroup as a pass reads it, built for the pass from its ``rt.groups`` entry
    (``provider_handlers.group_entry``; the spec and status dicts are shared, not copied)."""
    meta = entry["metadata"]
    raw: dict[str, Any] = {
        "apiVersion": f"{models.GROUP}/{models.VERSION}",
        "kind": models.KIND,
        "metadata": {**meta, "namespace": namespace, "name": name},
        "spec": entry["spec"],
        "status": entry["status"],
    }
    return cast(kopf.RawBody, raw)


async def _reaper_pass(
    body: kopf.Body,
    memo: Any,
    logger: startup.Logger,
    kwargs: Mapping[str, Any],
    namespace: str,
    name: str,
) -> float:
    """One reaper pass; returns the seconds until the next (``reaperInterval`` when it
    failed). Its plan (the status model the planner copied: ~8-10 KB per group) lives only as
    long as the pass (issue 15)."""
    rt: reconcile.Runtime = memo.runtime
    shard = rt.shard
    delay = rt.settings.reaper_interval
    if shard is not None:
        shard.busy += 1
    try:
        result = await _compute(body, memo, logger, rt.deployment_index(), kwargs)
        if result is not None:
            _events(result, body)
            if result.write_status:
                await write_status(rt, namespace, name, result.status)
            delay = _next_delay(rt, result)
    except Exception as exc:  # never let one failure stop the reaper
        logger.warning("reaper pass failed: %s: %s", type(exc).__name__, exc)
    finally:
        rt.heartbeat = time.monotonic()
        if shard is not None:
            shard.busy -= 1
    return delay


async def write_status(
    rt: reconcile.Runtime, namespace: str, name: str, status: models.SendGroupStatus
) -> None:
    """Merge-patch the group's status. The pass already recorded it in ``rt.written`` (the
    base of the next pass); when the patch fails (e.g. 429 while the API server is busy) that
    record goes, so the next pass plans from the status the API server really holds and writes
    again, instead of believing a status that never landed (seen after a 429-heavy cold start:
    groups left without any status)."""
    try:
        await rt.kube.patch_group_status(
            namespace, name, status.model_dump(mode="json", by_alias=True)
        )
    except BaseException:
        rt.written.pop(f"{namespace}/{name}", None)
        raise


@kopf.on.delete(*RESOURCE)
async def on_delete(
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    logger: startup.Logger,
    **kwargs: Any,
) -> None:
    """Deletion: workers gone, then purge or retain per ``deletionPolicy``; the finalizer
    stays until then (bounded when Redis is unreachable, see ``purgeTimeout``). Sharded: a
    non-owner waits up to a third of the lease duration for the assignment to change, then
    runs the pass if it owns the group now, else asks kopf to retry (never succeeds, so
    kopf keeps the finalizer for the owner)."""
    shard = memo.runtime.shard
    if shard is not None:
        uid = body["metadata"]["uid"]
        if not shard.may_act(uid):
            changed = shard.changed()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), shard.duration / 3)
        if not shard.may_act(uid):
            raise kopf.TemporaryError(
                f"deleted by its owner ({shard.owner(uid) or 'no live replica yet'})", delay=1
            )
        shard.busy += 1
    try:
        result = await _pass(body, patch, memo, logger, memo.runtime.deployment_index(), kwargs)
    finally:
        if shard is not None:
            shard.busy -= 1
    if result is not None and not result.finalized:
        raise kopf.TemporaryError("waiting for workers to stop and the purge", delay=2)
    rt: reconcile.Runtime = memo.runtime
    meta = body["metadata"]
    rt.forget(f"{meta['namespace']}/{meta['name']}")
    metrics.remove(meta["namespace"], meta["name"])
