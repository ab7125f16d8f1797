"""One reconciliation pass: observe -> plan -> apply. Called by every kopf handler and by the
reaper timer alike (level-based: a pass never assumes what the previous one did).

``Runtime`` holds what the passes share (clients, the global cap's book-keeping, locks,
the liveness heartbeat); it lives in kopf's ``memo``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from sendgroup_operator import (
    builders,
    conditions,
    fairshare,
    metrics,
    models,
    plan,
    provider_handlers,
    provider_plan,
    slimbodies,
    tenancy,
)
from sendgroup_operator.kube import Kube, KubeError
from sendgroup_operator.observer import Observer
from sendgroup_operator.queueio import QueueUnavailable, RedisQueues
from sendgroup_operator.scheduler import Scheduler
from sendgroup_operator.settings import Settings
from sendgroup_operator.shardmember import Shard
from sendgroup_worker.queue import protocol

#: Seconds a queue claim this process holds is trusted before it is confirmed in Redis again
#: (a claim changes only by its owner's release; the recheck catches a Redis that lost its
#: keys, or an admin's deletion of the claim).
CLAIM_RECHECK = 300.0
#: Seconds a Secret's value is cached (it is read again after this, so rotation works).
SECRET_TTL = 60.0
#: Seconds after this process wrote a group's Deployment during which its passes GET the
#: Deployment instead of trusting the watch-fed index (which may not have seen the write yet).
DEPLOYMENT_WRITE_GRACE = 15.0

#: The watch-fed index of worker Deployments (``Runtime.deployments``, see
#: :meth:`Runtime.deployment_index`): ``(namespace, deployment name) -> its DeploymentObs``
#: (None while it is being deleted); a name not in it has no Deployment.
DeploymentIndex = Mapping[tuple[str, str], plan.DeploymentObs | None]


@dataclass
class Runtime:
    """Shared state of the operator process (one per process, in kopf's memo)."""

    settings: Settings
    kube: Kube
    queues: RedisQueues = field(default_factory=RedisQueues)
    locks: defaultdict[str, asyncio.Lock] = field(default_factory=lambda: defaultdict(asyncio.Lock))
    #: Workers each group wants, for the global cap (write through :meth:`set_demand`).
    demands: dict[str, int] = field(default_factory=dict)
    #: The cap's allocation of ``demands``, None after any change (see :meth:`allowed`).
    _shares: dict[str, int] | None = field(default=None, init=False, repr=False)
    _shares_cap: int | None = field(default=None, init=False, repr=False)
    granted: dict[str, int] = field(default_factory=dict)
    table: metrics.GroupTable = field(default_factory=metrics.GroupTable)
    heartbeat: float = field(default_factory=time.monotonic)
    secrets: dict[tuple[str, str, str], tuple[float, str | None]] = field(default_factory=dict)
    #: The status this process last wrote per group (uid, status): the operator is the only
    #: writer of status, and a timer's body can predate the previous pass's patch.
    written: dict[str, tuple[str, models.SendGroupStatus]] = field(default_factory=dict)
    #: When this process last created, patched or deleted each group's Deployment (monotonic
    #: seconds), so the next passes read it from the API server, not from a lagging index.
    deployment_writes: dict[str, float] = field(default_factory=dict)
    #: Per group: the worker env entries of its provider (issue 14), from its last pass.
    provider_env: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Every group's reaper deadlines and the one task that runs their passes (scheduler.py;
    #: its loop is started by ``handlers.on_startup``): what a kopf daemon per group did.
    scheduler: Scheduler = field(default_factory=Scheduler)
    #: Queue claims this process made or confirmed, (Redis URL, queue) -> (owner id, monotonic
    #: seconds): confirmed again in Redis only after CLAIM_RECHECK seconds.
    claims: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)
    #: Measures every group's queue in batches and watches idle groups (observer.py); built
    #: on ``queues``, waking a group's next pass through :meth:`Scheduler.kick`.
    observer: Observer = field(init=False)
    #: The worker Deployments by (namespace, name) (see :meth:`deployment_index`), fed by
    #: ``handlers.on_worker_deployment`` (a watch event handler, not a kopf index: kopf holds
    #: every handler of every object until all indexed objects are indexed, through one
    #: condition notified per object, which made an operator restart quadratic in the number
    #: of objects: at 10,000 groups and 1,000 Deployments it did not finish, issue 15).
    deployments: dict[tuple[str, str], plan.DeploymentObs | None] = field(default_factory=dict)
    deployments_synced: bool = False
    #: Resting groups (idle, or paused at rest: their passes wait ``plan.idle_wait``) by their
    #: Deployment's (namespace, name) -> group key (see :meth:`saw_deployment`).
    resting: dict[tuple[str, str], str] = field(default_factory=dict)
    #: Every watched SendGroup, ``(namespace, name) -> {spec, status, metadata}``, for the
    #: provider passes (``provider_handlers.provider_groups``, a watch event handler; filled
    #: first by one LIST at start-up, :func:`load_groups`).
    groups: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: The provider passes' shared round: which groups each provider has, computed once a
    #: second for all of them (``provider_handlers.membership``), and the lock that makes one
    #: pass compute it while the others wait.
    provider_round: Any = None
    provider_round_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: This replica's shard membership when sharding is on (startup.py), else None.
    shard: Shard | None = None

    def __post_init__(self) -> None:
        self.observer = Observer(
            self.queues,
            lambda key: self.scheduler.kick(key, 0),
            track=self.settings.redis_client_tracking,
        )

    def deployment_index(self) -> DeploymentIndex | None:
        """The worker Deployments as the watch reported them, once the start-up LIST filled
        the index (:func:`load_deployments`); None before (each pass then GETs its own)."""
        return self.deployments if self.deployments_synced else None

    def saw_deployment(self, namespace: str, name: str, body: Mapping[str, Any] | None) -> None:
        """Record a worker Deployment as the watch, a LIST or a GET returned it (None: gone).
        A change of what the planner reads (:func:`deployment_obs`) of a resting group's
        Deployment wakes that group (see :meth:`rest`): e.g. a paused group's Deployment
        scaled up by hand is scaled back at once, not after its long wait."""
        where = (namespace, name)
        before = self.deployments.get(where)
        if body is None:
            self.deployments.pop(where, None)
            now = None
        else:
            now = self.deployments[where] = deployment_obs(body)
        key = self.resting.get(where)
        if key is not None and now != before:
            del self.resting[where]
            self.kick(key, 0)

    def rest(self, key: str, resting: bool) -> None:
        """After a pass: group ``key`` (``namespace/name``) now rests (waits
        :func:`plan.idle_wait`) or not; its Deployment's changes wake it while it rests."""
        namespace, _, name = key.partition("/")
        where = (namespace, builders.deployment_name(name))
        if resting:
            self.resting[where] = key
        else:
            self.resting.pop(where, None)

    def parse(
        self, body: Mapping[str, Any]
    ) -> tuple[plan.Group, models.SendGroupSpec, models.SendGroupStatus]:
        """:func:`parse`, with the spec model the watch handler already validated for this
        same version of the group (``provider_handlers.group_entry``, shared: one
        SendGroupSpec per group, not two; a body the handler has not seen yet is validated
        here). The status is validated from the body on every call (~11 us) and kept by no
        one after the pass: a status model is ~12 KB against ~3.5 KB for the body's status
        dict the entry holds anyway, and remembering one per group per version was the
        largest single cost of a resting group (issue 15: 11.4 KB of 47 KB per group,
        tracemalloc, 1,000 groups, ``bench/results/2026-12-05-mem``). The spec model is shared
        between passes: nothing may change it."""
        meta = body["metadata"]
        entry = self.groups.get((meta["namespace"], meta["name"]))
        if entry is None or not provider_handlers.built_from(entry, body):
            return parse(body)
        return parse(body, entry["parsed"])

    def kick(self, key: str, after: float) -> None:
        """Pass ``key`` within ``after`` seconds (a transition started by a change handler
        continues without waiting for the group's own deadline; jobs arrived at an idle group),
        unless a pass of ``key`` starts before then: that pass answers the kick
        (:meth:`Scheduler.kick`)."""
        self.scheduler.kick(key, after)

    def hand_over(self, key: str, delay: float) -> None:
        """A change handler just passed ``key``, and its plan wants the next pass in ``delay``
        seconds: the next reaper pass waits until then instead of running the same pass again
        at once (:meth:`Scheduler.defer`). At an operator's start every group gets kopf's
        resume handler and its first reaper pass within a second: two passes per group
        (issue 15: a restart's CPU)."""
        self.scheduler.defer(key, delay)

    def set_demand(self, key: str, demand: int) -> None:
        """Record the workers ``key`` wants (the global cap's input); a change drops the cached
        allocation."""
        if self.demands.get(key) != demand:
            self.demands[key] = demand
            self._shares = None

    def allowed(self, key: str, demand: int) -> int:
        """Workers the global cap grants ``key`` now: its water-filling share, and never so
        many that the sum of what is granted passes the cap (others shrink on their next
        pass, then this group grows). Without a cap, the demand itself (no pass over the
        other groups); with one, the allocation is computed once per change of any demand,
        not once per pass (issue 15: O(all groups) per check). Sharded, the cap is split
        evenly over the live replicas and each shares its part among the groups it owns (the
        sum stays within the cap; the split is not max-min fair across replicas)."""
        self.set_demand(key, demand)
        cap = self.settings.max_total_workers
        if cap is None:
            return demand
        if self.shard is not None:  # sharded: this replica's part of the cap, for its groups
            cap = self.shard.part(cap)
        if self._shares is None or cap != self._shares_cap:
            self._shares = fairshare.allocate(self.demands, cap)
            self._shares_cap = cap
        share = self._shares[key]
        others = sum(v for k, v in self.granted.items() if k != key)
        return max(0, min(share, cap - others))

    def forget(self, key: str) -> None:
        """The group is gone, or handed to another replica: release what this process holds
        for it (its share of the cap, locks, records). Its reaper deadline is the scheduler's
        (:meth:`Scheduler.drop` when it is gone, parked by the gate when handed away)."""
        if self.demands.pop(key, None) is not None:
            self._shares = None
        self.granted.pop(key, None)
        self.locks.pop(key, None)
        self.written.pop(key, None)
        self.deployment_writes.pop(key, None)
        self.rest(key, False)
        self.observer.forget(key)
        self.table.forget(key)


def _not_older(cached: models.SendGroupStatus, stored: models.SendGroupStatus) -> bool:
    """Whether our last written status is at least as new as the stored one (another
    replica may have written since, e.g. after a peering failover)."""
    if stored.last_refresh is None:
        return True
    return cached.last_refresh is not None and cached.last_refresh >= stored.last_refresh


def base_status(
    rt: Runtime, key: str, uid: str, stored: models.SendGroupStatus
) -> models.SendGroupStatus:
    """The status a pass of group ``key`` plans from: the one this process last wrote
    (``rt.written``) while the body's ``stored`` status is older (the write has not come back
    through the watch yet), else ``stored``. Once the body carries exactly what was written,
    the record goes: the body's status is the same, and keeping the record was a second
    status model per group (~12 KB, issue 15). Shared, not copied: nothing changes
    the status a pass plans from, the planner works on its own copy (a deep copy here too was
    14 % of the operator's CPU at rest, 3,000 groups, py-spy)."""
    cached = rt.written.get(key)
    if cached is None or cached[0] != uid:
        return stored
    written = cached[1]
    landed = stored.last_refresh is not None and stored.last_refresh == written.last_refresh
    if landed and stored == written:  # the write came back as it was sent
        del rt.written[key]
        return stored
    return written if _not_older(written, stored) else stored


def _parse_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return datetime.now(UTC)


def parse(
    body: Mapping[str, Any], spec_model: models.SendGroupSpec | None = None
) -> tuple[plan.Group, models.SendGroupSpec, models.SendGroupStatus]:
    """The object as models (raises pydantic.ValidationError on a spec the CRD would reject);
    ``spec_model``: the spec already validated from this same body (used as is)."""
    meta = body["metadata"]
    deleting_since = meta.get("deletionTimestamp")
    group = plan.Group(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        generation=int(meta.get("generation") or 1),
        created_at=_parse_time(meta.get("creationTimestamp")),
        deleting=deleting_since is not None,
        deleting_since=_parse_time(deleting_since) if deleting_since else None,
    )
    spec = spec_model or models.SendGroupSpec.model_validate(dict(body.get("spec") or {}))
    status = models.SendGroupStatus.model_validate(dict(body.get("status") or {}))
    return group, spec, status


async def redis_url(rt: Runtime, namespace: str, spec: models.SendGroupSpec) -> str:
    """The group's Redis URL: from its Secret (cached 60 s), ``redis.url``, or the default.
    Raises QueueUnavailable when the Secret or key is missing."""
    redis = spec.redis
    if redis is not None and redis.secret_ref is not None:
        key = (namespace, redis.secret_ref.name, redis.secret_ref.key)
        cached = rt.secrets.get(key)
        if cached is None or time.monotonic() - cached[0] > SECRET_TTL:
            value = await rt.kube.secret_value(*key)
            cached = (time.monotonic(), value)
            rt.secrets[key] = cached
        if cached[1] is None:
            raise QueueUnavailable(
                f"Secret {redis.secret_ref.name} key {redis.secret_ref.key} not found"
            )
        return cached[1]
    if redis is not None and redis.url:
        return redis.url
    return rt.settings.default_redis_url


async def _job_pods(rt: Runtime, namespace: str, job_name: str) -> list[dict[str, Any]]:
    """The pods of one Job (the label the Job controller puts on them)."""
    return await rt.kube.list_pods(namespace, f"batch.kubernetes.io/job-name={job_name}")


async def _summary(rt: Runtime, namespace: str, job_name: str) -> dict[str, Any] | None:
    """The JSON summary line a succeeded Job's pod printed, or None."""
    pods = await _job_pods(rt, namespace, job_name)
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Succeeded":
            continue
        text = await rt.kube.pod_log_tail(namespace, pod["metadata"]["name"])
        for line in reversed((text or "").strip().splitlines()):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    return None


def _job_obs(job: Mapping[str, Any]) -> plan.JobObs:
    status = job.get("status") or {}
    failed_final = any(
        c.get("type") == "Failed" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return plan.JobObs(
        name=job["metadata"]["name"],
        active=int(status.get("active") or 0),
        succeeded=int(status.get("succeeded") or 0),
        failed_final=failed_final,
    )


#: Container waiting reasons of a pod starting the usual way (not worth a word).
_STARTING: Final = frozenset({"ContainerCreating", "PodInitializing"})
#: Longest ``JobObs.waiting`` text (characters): it goes into a condition and an event.
WAITING_MAX: Final = 300


def _one_line(text: str) -> str:
    """``text`` on one line of printable characters, at most :data:`WAITING_MAX` long."""
    flat = "".join(ch if ch.isprintable() else " " for ch in text)
    flat = " ".join(flat.split())
    return flat if len(flat) <= WAITING_MAX else flat[: WAITING_MAX - 3] + "..."


def job_pod_waiting(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a Job's pod has not started, from its pods (``status.phase``, the ``PodScheduled``
    condition, containers' ``state.waiting``): ``pod NAME not scheduled: MESSAGE`` or ``pod
    NAME waiting: REASON: MESSAGE``; None when any pod runs or succeeded, or every pending pod
    is starting the usual way (``ContainerCreating``, ``PodInitializing``); failed pods (an
    earlier attempt) are skipped. The texts are Kubernetes' own (scheduler, kubelet),
    flattened to one line of at most :data:`WAITING_MAX` characters."""
    why: str | None = None
    for pod in pods:
        status = pod.get("status") or {}
        phase = status.get("phase")
        if phase in ("Running", "Succeeded"):
            return None
        if phase != "Pending":
            continue  # a failed attempt: its successor (if any) says how the Job stands
        name = (pod.get("metadata") or {}).get("name", "?")
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                detail = cond.get("message") or cond.get("reason") or "no reason given"
                why = why or f"pod {name} not scheduled: {detail}"
        statuses = list(status.get("initContainerStatuses") or []) + list(
            status.get("containerStatuses") or []
        )
        for cs in statuses:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason")
            if reason and reason not in _STARTING:
                message = waiting.get("message")
                why = why or f"pod {name} waiting: {reason}" + (f": {message}" if message else "")
    return None if why is None else _one_line(why)


def deployment_obs(raw: Mapping[str, Any]) -> plan.DeploymentObs | None:
    """What the planner needs of a worker Deployment (replicas, ready replicas, template
    hash, the fingerprint of what the operator owns in its template); None while it is being
    deleted."""
    meta = raw.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    annotations = meta.get("annotations") or {}
    template = (raw.get("spec") or {}).get("template")
    return plan.DeploymentObs(
        replicas=int((raw.get("spec") or {}).get("replicas") or 0),
        ready_replicas=int((raw.get("status") or {}).get("readyReplicas") or 0),
        template_hash=annotations.get(builders.ANNOTATION_TEMPLATE_HASH),
        owned=builders.owned_fingerprint(template) if isinstance(template, Mapping) else None,
    )


async def _deployment(
    rt: Runtime, group: plan.Group, index: DeploymentIndex | None
) -> plan.DeploymentObs | None:
    """The group's Deployment: from the watch-fed index when there is one and this process has
    not written the Deployment in the last :data:`DEPLOYMENT_WRITE_GRACE` seconds (a steady
    busy group then costs no API request per pass); else one GET."""
    key = f"{group.namespace}/{group.name}"
    name = builders.deployment_name(group.name)
    written = rt.deployment_writes.get(key)
    if index is not None and (
        written is None or time.monotonic() - written > DEPLOYMENT_WRITE_GRACE
    ):
        return index.get((group.namespace, name))
    raw = await rt.kube.get_deployment(group.namespace, name)
    rt.saw_deployment(group.namespace, name, raw)
    return None if raw is None else deployment_obs(raw)


async def load_groups(rt: Runtime) -> int:
    """Fill ``rt.groups`` (what the provider passes read) with one LIST of the SendGroups per
    watched namespace (one cluster-wide when watching all; in pages, ``Kube.list_groups``),
    at start-up before kopf's watches begin. Returns how many were found."""
    found = 0
    for ns in rt.settings.list_scopes:
        async for page in rt.kube.list_groups(ns):
            for raw in page:
                # slimmed as kopf's watch events are: the entry keeps parts of the body, and
                # parts of a raw LIST pin its pages' memory (issue 15)
                body = slimbodies.slim(raw)
                meta = body["metadata"]
                rt.groups[(meta["namespace"], meta["name"])] = provider_handlers.group_entry(body)
                found += 1
    return found


async def load_deployments(rt: Runtime) -> int:
    """Fill ``rt.deployments`` with one LIST of the worker Deployments per watched namespace
    (one cluster-wide when watching all), then mark the index synced. Run at start-up before
    kopf's watches begin: their events only add what is newer. Returns how many were found."""
    found = 0
    for ns in rt.settings.list_scopes:
        async for page in rt.kube.list_deployments(ns, builders.WORKER_SELECTOR):
            for dep in page:
                meta = dep["metadata"]
                rt.saw_deployment(meta["namespace"], meta["name"], dep)
                found += 1
    rt.deployments_synced = True
    return found


async def observe(
    rt: Runtime,
    group: plan.Group,
    spec: models.SendGroupSpec,
    st: models.SendGroupStatus,
    measured: plan.Measurement,
    index: DeploymentIndex | None = None,
) -> plan.Observed:
    """Read the children: the Deployment (see :func:`_deployment`); Jobs and pods only when
    the plan can need them (paused, finishing, a Job in flight)."""
    ref = group.ref(spec)
    dep = await _deployment(rt, group, index)
    if not plan.needs_children(group, spec, st, measured):
        return plan.Observed(deployment=dep)
    selector = builders.group_selector(ref)
    jobs = await rt.kube.list_jobs(group.namespace, selector)
    pods = await rt.kube.list_pods(group.namespace, builders.worker_selector(ref))
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    observed_jobs = {j["metadata"]["name"]: _job_obs(j) for j in jobs}
    op = st.operation
    job = observed_jobs.get(op.job_name) if op is not None else None
    if op is not None and job is not None and job.succeeded == 0 and not job.failed_final:
        # the operation in flight: say why its pod has not started, if it has not
        job_pods = await _job_pods(rt, group.namespace, op.job_name)
        observed_jobs[op.job_name] = dataclasses.replace(job, waiting=job_pod_waiting(job_pods))
    elif op is not None and op.kind == "dump" and job is not None and job.succeeded > 0:
        summary = await _summary(rt, group.namespace, op.job_name)
        observed_jobs[op.job_name] = dataclasses.replace(job, summary=summary)
    return plan.Observed(
        deployment=dep,
        pods=len(live),
        jobs=observed_jobs,
        jobs_listed=True,
    )


_POLICIES: dict[str, tenancy.QueueNamePolicy] = {
    "auto": "auto",
    "namespace": "namespace",
    "off": "off",
}


def policy_on(settings: Settings) -> bool:
    """Whether the queue-name policy (``<namespace>.`` prefix) applies to this operator."""
    policy = _POLICIES.get(settings.queue_name_policy, "auto")
    return tenancy.policy_applies(policy, settings.namespaces)


def effective_spec(
    settings: Settings, group: plan.Group, spec: models.SendGroupSpec
) -> models.SendGroupSpec:
    """The spec with the default queue the queue-name policy gives (``<namespace>.mail-<name>``)
    filled in when ``spec.queue`` is absent and the policy is on; else ``spec`` unchanged."""
    if spec.queue or not policy_on(settings):
        return spec
    queue = tenancy.default_queue(group.namespace, group.name, policy_on=True)
    return spec.model_copy(update={"queue": queue})


def _conflict_message(group: plan.Group, queue: str, owner: str) -> str:
    """QueueConflict message: the owner's name only when it is in the same namespace."""
    parts = owner.split("/")
    if len(parts) == 3 and parts[0] == group.namespace:
        return (
            f"queue {queue!r} is claimed by SendGroup {parts[1]} in this namespace: a queue "
            "belongs to one group; choose another spec.queue or delete that group"
        )
    return (
        f"queue {queue!r} is claimed by another group: a queue belongs to one group; "
        "choose another spec.queue"
    )


async def admit(
    rt: Runtime, group: plan.Group, spec: models.SendGroupSpec
) -> plan.Refused | plan.QueueError | str:
    """May the operator act on this group's queue? In order, before anything touches the
    queue: the queue-name policy (no Redis contact), the Redis URL against
    ``allowedRedisHosts`` (checked before any connection, so nothing is contacted), then the
    queue's claim in its Redis for ``<namespace>/<name>/<uid>`` (first claim wins; a claim
    left by a deleted group of the same namespace and name is taken over).

    Returns the Redis URL to use (the queue is this group's), a :class:`plan.Refused`, or a
    :class:`plan.QueueError` when Redis or its Secret is unavailable (ownership unknown)."""
    queue = spec.queue_name(group.name)
    settings = rt.settings
    if policy_on(settings):
        message = tenancy.queue_refusal(queue, group.namespace)
        if message is not None:
            return plan.Refused(tenancy.REASON_QUEUE_NOT_IN_NAMESPACE, f"spec.queue: {message}")
    try:
        url = await redis_url(rt, group.namespace, spec)
    except QueueUnavailable as exc:
        return plan.QueueError(str(exc))
    if spec.redis is not None and (spec.redis.secret_ref is not None or spec.redis.url):
        message = tenancy.redis_refusal(
            url, settings.default_redis_url, settings.allowed_redis_hosts
        )
        if message is not None:
            field = (
                "spec.redis.secretRef" if spec.redis.secret_ref is not None else "spec.redis.url"
            )
            return plan.Refused(tenancy.REASON_REDIS_NOT_ALLOWED, f"{field}: {message}")
    owner = protocol.owner_id(group.namespace, group.name, group.uid)
    held = rt.claims.get((url, queue))
    if held is not None and held[0] == owner and time.monotonic() - held[1] < CLAIM_RECHECK:
        return url  # claimed by this group a moment ago: no Redis call (idle groups stay cheap)
    try:
        claim = await rt.queues.claim(url, queue, owner)
        if not claim.held and claim.owner.startswith(f"{group.namespace}/{group.name}/"):
            claim = await rt.queues.claim(url, queue, owner, replace=claim.owner)
    except QueueUnavailable as exc:
        return plan.QueueError(str(exc))
    if not claim.held:
        rt.claims.pop((url, queue), None)
        return plan.Refused(
            conditions.REASON_QUEUE_CONFLICT, _conflict_message(group, queue, claim.owner)
        )
    rt.claims[(url, queue)] = (owner, time.monotonic())
    return url


async def measure(
    rt: Runtime, group: plan.Group, spec: models.SendGroupSpec, url: str | None = None
) -> tuple[plan.Measurement, str | None]:
    """Measure the queue at ``url`` (default: the group's Redis URL) through the observer (a
    batched round trip, or an idle group's last measurement); (QueueError, None) when Redis
    or its Secret is unavailable."""
    key = f"{group.namespace}/{group.name}"
    try:
        url = url or await redis_url(rt, group.namespace, spec)
        return await rt.observer.measure(key, url, spec.queue_name(group.name)), url
    except QueueUnavailable as exc:
        return plan.QueueError(str(exc)), None


class ApplyError(Exception):
    """One action of a plan failed; the message names the action and the API's reason (never
    a URL or a Secret's value)."""


class BudgetRefused(Exception):
    """The group's PodDisruptionBudget could not be applied (the Deployment was): the message
    names the PodDisruptionBudget and the API's reason."""


def _reason(exc: Exception) -> str:
    return str(exc)[:300]


async def apply(
    rt: Runtime,
    group: plan.Group,
    spec: models.SendGroupSpec,
    result: plan.Plan,
    observed: plan.Observed,
    url: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> str | None:
    """Carry out the plan's actions, each idempotent (404 on delete and 409 on create are
    outcomes, not errors). Returns why the group's PodDisruptionBudget was refused (the other
    actions are still carried out), else None."""
    refused: str | None = None
    for action in result.actions:
        try:
            await _apply_one(rt, group, spec, action, observed, url, logger)
        except BudgetRefused as exc:
            logger.warning("%s", exc)
            refused = str(exc)
        except (KubeError, QueueUnavailable) as exc:
            raise ApplyError(f"{type(action).__name__}: {_reason(exc)}") from exc
    return refused


async def _apply_one(
    rt: Runtime,
    group: plan.Group,
    spec: models.SendGroupSpec,
    action: plan.Action,
    observed: plan.Observed,
    url: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> None:
    ref = group.ref(spec)
    key = f"{group.namespace}/{group.name}"
    settings = rt.settings
    if isinstance(action, plan.SetPauseMarker):
        if url is None:
            raise QueueUnavailable("Redis unavailable: cannot set the pause marker")
        await rt.queues.set_pause_marker(url, spec.queue_name(group.name), action.paused)
        logger.info("pause marker %s", "set" if action.paused else "cleared")
    elif isinstance(action, plan.EnsureDeployment):
        env = rt.provider_env.get(key, [])
        name = builders.deployment_name(group.name)
        # issue 20: the workers' PodDisruptionBudget (the Deployment's hash covers it), applied
        # first: when it fails (a 422: an object stored before the CRD's rule, an admission
        # policy), the Deployment is still written, the workers run, but its hash annotation
        # says the budget is pending, so every later pass applies both again until it goes in
        budget = builders.pod_disruption_budget(ref, spec)
        refused: KubeError | None = None
        try:
            await rt.kube.apply_disruption_budget(group.namespace, name, budget)
        except KubeError as exc:
            refused = exc
        body = builders.deployment(
            ref, spec, settings, action.replicas, env, budget_applied=refused is None
        )
        try:
            await rt.kube.apply_deployment(body, exists=observed.deployment is not None)
        finally:  # failed or not, the index may be behind the API server now
            rt.deployment_writes[key] = time.monotonic()
        rt.granted[key] = action.replicas
        logger.info("deployment %s replicas=%d", body["metadata"]["name"], action.replicas)
        if refused is not None:
            raise BudgetRefused(f"PodDisruptionBudget {name}: {_reason(refused)}") from refused
    elif isinstance(action, plan.DeleteDeployment):
        try:
            await rt.kube.delete_deployment(group.namespace, builders.deployment_name(group.name))
        finally:
            rt.deployment_writes[key] = time.monotonic()
        rt.granted[key] = 0
        logger.info("deployment deleted")
    elif isinstance(action, plan.CreateJob):
        await rt.kube.create_job(builders.job(ref, spec, settings, action.kind, action.number))
        logger.info("job %s-%d created", action.kind, action.number)
    elif isinstance(action, plan.DeleteJob):
        await rt.kube.delete_job(group.namespace, action.name)
    elif isinstance(action, plan.PurgeQueue):
        if url is not None:
            deleted = await rt.queues.purge(url, spec.queue_name(group.name))
            logger.info("queue purged (%d keys)", deleted)
    elif isinstance(action, plan.RequestPurge):
        if url is None:
            raise QueueUnavailable("Redis unavailable: cannot mark the purge")
        await rt.queues.request_purge(url, spec.queue_name(group.name))
    elif isinstance(action, plan.ReleaseQueue):
        if url is not None:  # Redis unreachable past purgeTimeout: the claim stays (logged)
            owner = protocol.owner_id(group.namespace, group.name, group.uid)
            await rt.queues.claim(url, spec.queue_name(group.name), owner, release=True)
            rt.claims.pop((url, spec.queue_name(group.name)), None)
            logger.info("queue claim released")
        else:
            logger.warning("Redis unreachable: the queue's claim was not released")
    elif isinstance(action, plan.DeleteGroup):
        await rt.kube.delete_group(group.namespace, group.name)


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


async def _apply_plan(
    rt: Runtime,
    group: plan.Group,
    spec: models.SendGroupSpec,
    status: models.SendGroupStatus,
    result: plan.Plan,
    observed: plan.Observed,
    url: str | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    now: datetime,
) -> plan.Plan:
    """Apply ``result``; the plan as applied, or the planner's ApplyFailed status when an
    action failed (logged and counted; the old status otherwise kept). A refused
    PodDisruptionBudget fails no other action: the plan as applied, with
    ``Degraded=True`` reason ``DisruptionBudgetRefused`` (counted as an error too)."""
    try:
        refused = await apply(rt, group, spec, result, observed, url, logger)
    except ApplyError as exc:
        metrics.ERRORS.labels(group.namespace).inc()
        logger.warning("apply failed: %s", exc)
        return plan.apply_failed(group, status, result, str(exc), now)
    plan.applied(result)
    if refused is not None:
        metrics.ERRORS.labels(group.namespace).inc()
    if any(isinstance(a, plan.EnsureDeployment) for a in result.actions):
        plan.budget_applied(group, status, result, refused, now)
    return result


async def _refused(
    rt: Runtime,
    group: plan.Group,
    spec: models.SendGroupSpec,
    status: models.SendGroupStatus,
    refusal: plan.Refused,
    deployments: DeploymentIndex | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    now: datetime | None,
) -> plan.Plan:
    """A pass for a refused group (caller holds its lock): its own children observed, the
    planner's ``refused`` applied (only its own Deployment and Jobs are touched; the queue's
    Redis never, ``url`` None)."""
    key = f"{group.namespace}/{group.name}"
    unmeasured = plan.QueueError("not measured: the spec is refused")
    observed = await observe(rt, group, spec, status, unmeasured, deployments)
    rt.set_demand(key, 0)
    now = now or _now()
    result = plan.refused(group, spec, status, observed, refusal, rt.settings, now)
    result = await _apply_plan(rt, group, spec, status, result, observed, None, logger, now)
    if result.write_status:
        rt.written[key] = (group.uid, result.status.model_copy(deep=True))
    granted = plan.granted_after(result, observed)
    rt.granted[key] = 0 if granted is None else granted
    return result


async def count_orphan_deployments(rt: Runtime) -> int:
    """Worker Deployments of ours whose SendGroup this process does not know (compared by
    name sets: ``namespace/group``; sharded, every replica counts them all). Sets
    ``sendgroup_orphans{kind="deployment_without_group"}`` and returns the count. One LIST
    per watched namespace."""
    # sharded: every group this replica watches (its own have demands, the others do not)
    groups = rt.demands if rt.shard is None else rt.shard.groups
    known = {(ns, builders.label_value(name)) for ns, name in (k.split("/", 1) for k in groups)}
    orphans = 0
    for ns in rt.settings.list_scopes:
        async for page in rt.kube.list_deployments(ns, builders.WORKER_SELECTOR):
            for dep in page:
                meta = dep["metadata"]
                group = (meta.get("labels") or {}).get(builders.LABEL_GROUP, "")
                if (meta["namespace"], group) not in known:
                    orphans += 1
    metrics.ORPHANS.labels("deployment_without_group").set(orphans)
    return orphans


async def orphan_loop(rt: Runtime, logger: logging.Logger | logging.LoggerAdapter[Any]) -> None:
    """Every ``orphanGrace`` seconds (first after one period, when the groups are known),
    count orphan Deployments; errors are logged, never fatal."""
    while True:
        await asyncio.sleep(rt.settings.orphan_grace)
        try:
            count = await count_orphan_deployments(rt)
            if count:
                logger.warning("%d worker Deployment(s) without a SendGroup", count)
        except Exception as exc:
            logger.warning("orphan check failed: %s: %s", type(exc).__name__, exc)


async def reconcile(
    rt: Runtime,
    body: Mapping[str, Any],
    logger: logging.Logger | logging.LoggerAdapter[Any],
    now: datetime | None = None,
    deployments: DeploymentIndex | None = None,
    providers: Mapping[str, Any] | None = None,
) -> plan.Plan:
    """One pass for one group: observe, measure, plan, apply. Returns the plan (the caller
    writes ``plan.status`` through kopf's ``patch.status`` when ``plan.write_status``, and
    posts ``plan.events``). ``deployments``: the watch-fed Deployment index (None: GET the
    Deployment every pass). ``providers``: kopf's provider indexes (``namespaced_providers``,
    ``cluster_providers``) the group's provider is resolved from (issue 14).
    Kubernetes API errors propagate (kopf retries the handler)."""
    group, spec, status = rt.parse(body)
    spec = effective_spec(rt.settings, group, spec)
    key = f"{group.namespace}/{group.name}"
    started = time.monotonic()
    async with rt.locks[key]:
        status = base_status(rt, key, group.uid, status)
        admitted = await admit(rt, group, spec)
        if isinstance(admitted, plan.Refused):
            now = now or _now()
            result = await _refused(rt, group, spec, status, admitted, deployments, logger, now)
        else:
            result, now = await _pass(
                rt, group, spec, status, admitted, deployments, logger, now, providers
            )
            rt.set_demand(
                key, min(result.demand, plan.desired_workers(spec, rt.settings, group.namespace))
            )
    metrics.observe(group.namespace, group.name, result.status, spec.campaign, spec.host)
    rt.table.update(key, result.status, spec, now)
    rt.table.export(now, rt.settings.orphan_grace)
    metrics.DURATION.observe(time.monotonic() - started)
    return result


async def _pass(
    rt: Runtime,
    group: plan.Group,
    spec: models.SendGroupSpec,
    status: models.SendGroupStatus,
    admitted: plan.QueueError | str,
    deployments: DeploymentIndex | None,
    logger: logging.Logger | logging.LoggerAdapter[Any],
    now: datetime | None,
    providers: Mapping[str, Any] | None = None,
) -> tuple[plan.Plan, datetime]:
    """A pass for an admitted group (caller holds its lock): measure at the admitted URL
    (``admitted`` a QueueError: Redis unavailable), observe, plan, apply."""
    key = f"{group.namespace}/{group.name}"
    measured: plan.Measurement
    url: str | None
    if isinstance(admitted, plan.QueueError):
        measured, url = admitted, None
    else:
        measured, url = await measure(rt, group, spec, admitted)
    idle = plan.skips_observation(group, spec, status, measured)
    if idle:
        observed = plan.Observed()  # idle: no API request at all in this pass
    else:
        observed = await observe(rt, group, spec, status, measured, deployments)
    want = plan.demand(spec, status, measured, group.deleting, observed.deployment is not None)
    allowed = rt.allowed(key, min(want, plan.desired_workers(spec, rt.settings, group.namespace)))
    now = now or _now()
    chosen = await provider_handlers.group_provider(
        group.namespace,
        group.name,
        spec,
        providers or {},
        rt.settings,
        provider_handlers.kept_provider(status, group.generation),
    )
    rt.provider_env[key] = chosen.env
    result = plan.plan(
        group,
        spec,
        status,
        observed,
        measured,
        allowed,
        rt.settings,
        now,
        chosen.env,
        chosen.rules,
        chosen.held,
        chosen.resolution.reason,
    )
    if provider_plan.record_resolution(result.status, chosen.resolution, now, group.generation):
        result.write_status = True
    result = await _apply_plan(rt, group, spec, status, result, observed, url, logger, now)
    # idle and staying so: the observer answers its next passes without Redis and wakes it
    # when jobs arrive; anything in motion gets a full measurement next pass
    # a paused group at rest rests the same way (its Deployment, at 0, read from the index)
    resting = idle or plan.rests_paused(group, spec, status, measured)
    watched = rt.observer.settle(
        key,
        resting and not result.actions and result.requeue_after is None and not group.deleting,
    )
    rt.rest(key, watched)
    if watched and not result.write_status:
        result.idle_wait = plan.idle_wait(spec, result.status, now, rt.settings)
    if result.write_status:
        rt.written[key] = (group.uid, result.status.model_copy(deep=True))
    granted = plan.granted_after(result, observed)
    if granted is not None:
        rt.granted[key] = granted
    return result, now
