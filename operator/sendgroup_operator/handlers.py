"""kopf wiring only: parse -> plan -> apply -> ``patch.status``. Handlers return None.

create / update / resume / the reaper daemon all call the same :func:`reconcile.reconcile`;
deletion runs it with the finalizer held until the plan says the group is finalized.

The reaper is a kopf daemon (one coroutine per group), not a timer: a timer fires only every
``reaperInterval``, so each step of a multi-step transition (restore -> workers, dump ->
Dumped, workers gone -> purge) waited a whole interval. The daemon runs the next pass after
``plan.requeue_after`` seconds while something is in motion, after ``plan.idle_wait`` when
it is idle and watched by the observer, else after ``reaperInterval``. A change handler's pass
(create, spec update, resume at the operator's start) whose plan named the next pass (an idle
wait, a follow-up) stands for the daemon's next pass: the daemon waits that delay
(``Runtime.hand_over``), so a start passes each resting group once, not twice. A pass that named
none (a new group's first, which writes its status) is not handed over: the daemon settles the
group within its initial delay.
It writes status through the API (:meth:`Kube.patch_group_status`): kopf applies a daemon's
``patch`` only when the daemon function returns.
Status is written only when the plan says something meaningful changed, so a steady group
causes no writes, and no handler reacts to our own status patches (kopf's diff base ignores
``status``).

Sharding (``SENDGROUP_SHARDING``, see sharding.py and shardmember.py): every replica watches
every group, and a group is acted on only by its owner (``rt.shard.may_act``). A non-owner's
change handler returns at once (kopf records its diff base even when no handler matches: the
first replica to see a spec change writes it, the others then see no change; two that see it
at the same moment both write it; the owner learns of the change through :func:`on_event`); its
reaper daemon waits for the assignment to change and runs a full pass as soon as it owns the
group (the takeover); its deletion handler never lets kopf finish (kopf drops its finalizer
when no deletion handler is left), so only the owner purges and releases the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
import pydantic

from sendgroup_operator import builders, metrics, models, plan, reconcile, startup, unusable

RESOURCE = (models.GROUP, models.VERSION, models.PLURAL)


@kopf.on.startup()
async def on_startup(
    settings: kopf.OperatorSettings, memo: Any, logger: startup.Logger, **_: Any
) -> None:
    """Settings, clients and the preflight (waits for CRD and RBAC)."""
    await startup.start(settings, memo, logger)


@kopf.on.cleanup()
async def on_cleanup(memo: Any, logger: startup.Logger, **_: Any) -> None:
    """Leave the shard set (sharding: the others take our groups at once), close the Redis
    pools."""
    for name in ("orphan_task", "shard_task", "gc_task", "trim_task"):
        task = getattr(memo, name, None)
        if task is not None:
            task.cancel()
    rt: reconcile.Runtime | None = getattr(memo, "runtime", None)
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
    plan asks for is the reaper daemon's, woken for it."""
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
            # its status) the daemon's first pass settles it as before, within its initial
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
async def on_event(body: kopf.Body, memo: Any, **_: Any) -> None:
    """Sharding only: a spec change the owner's change handler may not have seen (another
    replica handled it first and kopf's shared diff base then says "no change") wakes the
    owner's reaper daemon. No API call, no write. Async: kopf runs a sync handler in a
    thread, where there is no event loop to schedule the wake-up on."""
    rt: reconcile.Runtime | None = getattr(memo, "runtime", None)
    if rt is None or rt.shard is None:
        return
    meta = body.get("metadata", {})
    observed = (body.get("status") or {}).get("observedGeneration")
    if meta.get("generation") != observed and rt.shard.may_act(meta.get("uid", "")):
        rt.kick(f"{meta.get('namespace')}/{meta.get('name')}", 0)


@kopf.daemon(*RESOURCE, initial_delay=1.0, cancellation_timeout=10.0)
async def reaper(
    body: kopf.Body,
    memo: Any,
    logger: startup.Logger,
    stopped: kopf.DaemonStopped,
    **kwargs: Any,
) -> None:
    """The reaper: measure the queue (through ``rt.observer``: a batched round trip shared
    with the other groups on that Redis, or, idle, the last measurement; the observer wakes
    this daemon when jobs arrive), move the clocks, act on deadlines; again after
    ``requeue_after`` (2 s) while a transition is in motion, after ``plan.idle_wait`` (60 s)
    when the pass left it idle (the observer wakes it when jobs arrive), else after
    ``reaperInterval``. A failed pass is logged and counted; the loop keeps running until kopf
    stops it (the group is being deleted, or the operator exits)."""
    rt: reconcile.Runtime = memo.runtime
    namespace, name, uid = _names(body)
    key = f"{namespace}/{name}"
    shard = rt.shard
    if shard is None:
        await _reap(body, memo, logger, stopped, kwargs)
        return
    shard.groups[key] = uid
    shard.count()
    owner = False
    try:
        while not stopped:
            changed = shard.changed()  # before the check: a change in between is not lost
            if shard.may_act(uid):
                if not owner:
                    logger.debug("shard: this replica (%s) acts on this group", shard.identity)
                owner = True
                await _reap(body, memo, logger, stopped, kwargs)
                continue
            if owner:  # handed over: drop what this replica held for the group
                logger.debug("shard: handed over to %s", shard.owner(uid) or "(no live member)")
                rt.forget(key)
                metrics.remove(namespace, name)
            owner = False
            await _sleep(stopped, None, None, changed)
    finally:
        shard.groups.pop(key, None)
        shard.count()


def _names(body: kopf.Body) -> tuple[str, str, str]:
    """A daemon's group: (namespace, name, uid), plain strings. A daemon lives as long as
    its group and kopf replaces the raw body under ``body`` with every event; a daemon that
    kept ``body["metadata"]`` (the raw dict of the body it started with, managedFields
    included) held that first body's metadata for good, a second copy beside kopf's current
    one (issue 15). Here the dict is only read."""
    meta = body["metadata"]
    return str(meta["namespace"]), str(meta["name"]), str(meta["uid"])


async def _reap(
    body: kopf.Body,
    memo: Any,
    logger: startup.Logger,
    stopped: kopf.DaemonStopped,
    kwargs: Mapping[str, Any],
) -> None:
    """The reaper's passes, until stopped, or (sharded) until this replica may no longer act
    on the group (checked before every pass)."""
    rt: reconcile.Runtime = memo.runtime
    namespace, name, uid = _names(body)
    key = f"{namespace}/{name}"
    shard = rt.shard
    while not stopped:
        if shard is not None and not shard.may_act(uid):
            return
        wakeup = rt.wakeup(key)
        changed = None if shard is None else shard.changed()
        handed = rt.handed(key)
        if handed is not None:  # a change handler's pass stands for this one
            await _sleep(stopped, wakeup, handed, changed)
            continue
        delay = await _reaper_pass(body, memo, logger, kwargs, namespace, name)
        # sharded: a change of the assignment ends the sleep too (the next check may stop us)
        await _sleep(stopped, wakeup, delay, changed)


async def _reaper_pass(
    body: kopf.Body,
    memo: Any,
    logger: startup.Logger,
    kwargs: Mapping[str, Any],
    namespace: str,
    name: str,
) -> float:
    """One reaper pass; returns the seconds until the next. A function of its own so that
    its plan (the status model the planner copied: ~8-10 KB per group, tracemalloc at 1,000
    groups) is not a local of the daemon's loop, held through the sleep that follows (60 s
    for a resting group, i.e. always; issue 15)."""
    rt: reconcile.Runtime = memo.runtime
    shard = rt.shard
    delay = rt.settings.reaper_interval
    if shard is not None:
        shard.busy += 1
    rt.passing(f"{namespace}/{name}")
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


async def _sleep(
    stopped: kopf.DaemonStopped,
    wakeup: asyncio.Event | None,
    delay: float | None,
    also: asyncio.Event | None = None,
) -> None:
    """Until ``delay`` seconds passed (None: no limit), the daemon is stopped, a change
    handler woke it (``wakeup``, cleared here), or ``also`` is set (the shard assignment
    changed; never cleared: other daemons wait on the same event).

    Every resting group sleeps here, so its cost is per group (issue 15): the daemon's own
    task awaits ``wakeup`` under :func:`asyncio.timeout` (no task), and one task waits for
    kopf's stop flag (and one for ``also``), each setting ``wakeup`` when it ends. kopf's
    ``stopped.wait(delay)`` took three tasks (its promise, its waiter, ``wait_for``'s inner
    task) and ``wakeup`` a fourth: ~7.5 KB per sleeping group (tracemalloc, 2,000 daemons),
    ~3.3 KB now. Without ``wakeup``, or with a ``stopped`` that is not kopf's, the former way
    (:func:`_sleep_tasks`)."""
    stop = _stop_event(stopped)
    if wakeup is None or stop is None:
        await _sleep_tasks(stopped, wakeup, delay, also)
        return

    def wake(_: object) -> None:
        wakeup.set()

    waits = [asyncio.ensure_future(event.wait()) for event in (stop, also) if event is not None]
    for task in waits:
        task.add_done_callback(wake)
    try:
        async with asyncio.timeout(delay):
            await wakeup.wait()
    except TimeoutError:
        pass  # the delay passed
    finally:
        for task in waits:
            task.remove_done_callback(wake)  # before cancel(): a cancelled task calls back
            task.cancel()
        wakeup.clear()


def _stop_event(stopped: Any) -> asyncio.Event | None:
    """The asyncio event kopf sets when it stops a daemon: ``stopped`` is kopf's
    ``AsyncFlagWaiter`` over a ``FlagSetter`` whose ``async_event`` it sets (kopf
    ``_cogs/aiokits/aioenums.py``; ``_setter`` is kopf's own attribute, checked by
    tests/unit/test_daemon_memory.py against the installed kopf); None for anything else."""
    event = getattr(getattr(stopped, "_setter", None), "async_event", None)
    return event if isinstance(event, asyncio.Event) else None


async def _sleep_tasks(
    stopped: kopf.DaemonStopped,
    wakeup: asyncio.Event | None,
    delay: float | None,
    also: asyncio.Event | None = None,
) -> None:
    """:func:`_sleep` with one task per thing it waits for (kopf's ``stopped.wait``)."""
    waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(stopped.wait(delay))}
    for event in (wakeup, also):
        if event is not None:
            waits.add(asyncio.ensure_future(event.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()
        if wakeup is not None:
            wakeup.clear()


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
