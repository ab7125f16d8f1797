"""kopf wiring for SendProviders and ClusterSendProviders: once a second per provider, find the
groups resolved to it, share its budget among them, write the shares to the provider's Redis
(where every worker's permit call reads them), read the rules the workers fired, and write the
provider's status (groups, effective rate, shares, active rules, conditions) and events.

Thin: the decisions are :mod:`provider_plan` (pure), the I/O :mod:`provider_io` (Redis) and
:mod:`provider_dns` (MX). Groups come from a watch-fed map of SendGroups (no API call per pass).

The group side (``status.provider`` with condition ``ProviderResolved``, and the worker env
``SENDGROUP_PROVIDER`` from :func:`provider_plan.worker_provider_env`) belongs to the group's
reconcile pass: :func:`resolve_group` is the one call it needs.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

import kopf
import pydantic

from sendgroup_operator import conditions, models, plan, provider_io, provider_plan, tenancy
from sendgroup_operator.provider_dns import MxCache, MxLookupError
from sendgroup_operator.provider_models import (
    CLUSTER_PLURAL,
    PLURAL,
    SendProvider,
    ShareBy,
    parse_provider,
)
from sendgroup_operator.settings import Settings
from sendgroup_worker.ratelimit import RatePolicy

#: Seconds between two passes of one provider: a group that starts or pauses gets its share,
#: and a rule's firing reaches the status, within this time.
PROVIDER_INTERVAL: Final = 1.0
#: Shares are written again at least this often (seconds), even unchanged: a restarted Redis
#: has them back quickly.
SHARES_REFRESH: Final = 30.0

SP = (models.GROUP, models.VERSION, PLURAL)
CSP = (models.GROUP, models.VERSION, CLUSTER_PLURAL)
SG = (models.GROUP, models.VERSION, models.PLURAL)

#: Seconds a membership round (which groups each provider has) is reused by the provider
#: passes: one round a second for all providers, not one per provider.
RESOLUTION_REUSE: Final = 1.0
#: Seconds a group's resolution is reused while its spec and every provider it could match
#: (their uid and metadata.generation) are unchanged. Resolving is pure but for MX answers
#: (cached by their TTL): an MX change reaches the groups within this time after its TTL. A
#: resolution left ``Unknown`` by a DNS failure is kept one round only.
#: Re-resolving every group every second cost ~45 us each (10,000 groups: ~0.45 s of CPU a
#: second, issue 15).
RESOLUTION_KEEP: Final = 60.0

_MX = MxCache.from_env(os.environ.get("SENDGROUP_DNS_SERVERS"))
_written: dict[str, tuple[float, dict[str, str]]] = {}
#: (namespace, name, spec JSON, providers' fingerprint) -> (time.monotonic(), resolution)
_resolved: dict[tuple[str, str, bytes, int], tuple[float, provider_plan.Resolution]] = {}
#: group key -> its last measurements seen in the index, oldest first (its send rate: a share
#: capped by what the group uses, :func:`provider_plan.usable`); in memory, rebuilt after a
#: restart
_samples: dict[str, tuple[provider_plan.SendSample, ...]] = {}


def group_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a provider pass and the group's own reaper pass need of a SendGroup: ``{spec,
    status, metadata, parsed, specKey}`` (``metadata``: uid, creationTimestamp, generation,
    resourceVersion, deletionTimestamp: the reaper's pass builds its body from this entry,
    ``handlers.Reaper.run``; the group's own passes share ``parsed`` for that version,
    ``Runtime.parse``); ``parsed``: the validated ``SendGroupSpec`` (None when invalid: no
    provider counts it), ``specKey``: :func:`spec_key` of it (the resolution cache key);
    ``status`` without kopf's own ``status.kopf``. Validated here, once per watch event, not
    by every provider's pass every second (8 default providers x 10,000 groups was 80,000
    validations a second: issue 15)."""
    spec = dict(body.get("spec") or {})
    try:
        parsed: models.SendGroupSpec | None = models.SendGroupSpec.model_validate(spec)
    except pydantic.ValidationError:
        parsed = None
    return {
        "spec": spec,
        # kopf's own record (``status.kopf``: the last-handled configuration, ~0.6 KB) is
        # kopf's, read from the object it handles; no pass reads it from here
        "status": {
            k: v for k, v in (body.get("status") or {}).items() if k != models.KOPF_STATUS_FIELD
        },
        "metadata": {
            "uid": body["metadata"].get("uid"),
            "creationTimestamp": body["metadata"].get("creationTimestamp"),
            "generation": body["metadata"].get("generation"),
            "resourceVersion": body["metadata"].get("resourceVersion"),
            "deletionTimestamp": body["metadata"].get("deletionTimestamp"),
        },
        "parsed": parsed,
        "specKey": spec_key(parsed) if parsed is not None else b"",
    }


def spec_key(parsed: models.SendGroupSpec) -> bytes:
    """The resolution cache's key for a validated spec: a 16-byte BLAKE2b digest of its JSON
    (``model_dump_json``). Kept per group in :func:`group_entry`; the JSON itself was ~0.7 KB
    of a group's ~21 KB at 10,000 groups (heap profile, issue 15), the digest is 49 bytes.
    Two specs that differ collide with probability ~2^-128."""
    return hashlib.blake2b(parsed.model_dump_json().encode(), digest_size=16).digest()


@kopf.on.event(*SG)
async def provider_groups(
    type: str | None, namespace: str | None, name: str, body: kopf.Body, memo: Any, **_: Any
) -> None:
    """Every SendGroup into ``Runtime.groups`` (``(namespace, name) -> group_entry``; filled
    first by one LIST at start-up, ``reconcile.load_groups``). Not a ``@kopf.index``: kopf holds
    every handler until all indexed objects are indexed, through one condition notified per
    object and woken for every waiting object, quadratic in the number of groups (issue 15)."""
    rt = getattr(memo, "runtime", None)
    if rt is None or namespace is None:
        return
    if type == "DELETED":
        rt.groups.pop((namespace, name), None)
    elif not built_from(rt.groups.get((namespace, name)), body):
        rt.groups[(namespace, name)] = group_entry(body)


def built_from(entry: Mapping[str, Any] | None, body: Mapping[str, Any]) -> bool:
    """Whether ``entry`` (:func:`group_entry`) was built from this very version of ``body``
    (same uid and ``resourceVersion``): kopf's first listing after a start repeats every group
    the start-up LIST (``reconcile.load_groups``) just entered, and validating and dumping each
    spec again was ~0.1 ms per group of a restart (issue 15); a pass of the same version
    shares the entry's spec model (``Runtime.parse``)."""
    if entry is None:
        return False
    meta = entry["metadata"]
    version = meta.get("resourceVersion")
    return (
        version is not None
        and version == body["metadata"].get("resourceVersion")
        and meta.get("uid") == body["metadata"].get("uid")
    )


@kopf.index(*SP)
def namespaced_providers(
    namespace: str | None, body: kopf.Body, **_: Any
) -> dict[str, dict[str, Any]]:
    """SendProviders by namespace."""
    return {namespace or "": _plain(body)}


@kopf.index(*CSP)
def cluster_providers(body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    """ClusterSendProviders (one key)."""
    return {"": _plain(body)}


def _plain(body: kopf.Body) -> dict[str, Any]:
    return {
        "kind": body.get("kind"),
        "metadata": dict(body["metadata"]),
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }


def _parse_providers(items: Iterable[Mapping[str, Any]]) -> list[SendProvider]:
    """Every provider, usable or not: one the operator cannot use keeps its name and ``match``
    with ``invalid`` set, so that its groups resolve to it and are held (reported on the
    provider by its own pass)."""
    return [parse_provider(item) for item in items]


def _admitted(provider: SendProvider, settings: Settings) -> SendProvider:
    """``provider``, or a copy with ``invalid`` set when it is a namespaced SendProvider whose
    ``spec.redis.url`` names a Redis the operator may not use for tenants (the default Redis
    and ``allowedRedisHosts`` only, as for a group's ``spec.redis``: review finding, issue 16,
    a tenant's SendProvider made the operator connect anywhere). Its groups are then held and
    the provider says why, without the URL; nothing is contacted."""
    redis = provider.spec.redis
    if provider.metadata.get("namespace") is None or redis is None or not redis.url:
        return provider
    refusal = tenancy.redis_refusal(
        redis.url, settings.default_redis_url, settings.allowed_redis_hosts
    )
    if refusal is None or provider.invalid is not None:
        return provider
    return provider.model_copy(update={"invalid": f"spec.redis.url: {refusal}"})


def _values(index: Any, key: str) -> list[Mapping[str, Any]]:
    if index is None or key not in index:
        return []
    return list(index[key])


def resolve_group(
    spec: models.SendGroupSpec,
    namespace: str,
    namespaced: Iterable[SendProvider],
    cluster: Iterable[SendProvider],
    previous: models.ResolvedProvider | None = None,
) -> provider_plan.Resolution:
    """The group's provider (pure resolution with the shared MX cache; ``previous``: its
    ``status.provider``, kept through a DNS failure). Blocking on DNS at most the resolver's
    timeout: call it through ``asyncio.to_thread`` from async code."""
    return provider_plan.resolve(
        spec, namespace, list(namespaced), list(cluster), _MX.lookup, previous
    )


def previous_provider(
    status: Mapping[str, Any], generation: int | None
) -> models.ResolvedProvider | None:
    """``status.provider`` of a group's stored status (an index entry) when it was resolved
    for the spec of ``generation`` (its ``ProviderResolved`` condition's
    ``observedGeneration``: a changed ``spec.host`` must not keep the old host's provider
    through a DNS failure), else None (also when absent or not readable)."""
    try:
        parsed = models.SendGroupStatus.model_validate(
            {"provider": status.get("provider"), "conditions": status.get("conditions") or []}
        )
    except pydantic.ValidationError:
        return None
    return kept_provider(parsed, generation)


def kept_provider(
    status: models.SendGroupStatus, generation: int | None
) -> models.ResolvedProvider | None:
    """``status.provider`` when its ``ProviderResolved`` condition was written for the spec of
    ``generation``, else None (see :func:`previous_provider`)."""
    resolved = conditions.find(status.conditions, provider_plan.PROVIDER_RESOLVED)
    if generation is None or resolved is None or resolved.observed_generation != generation:
        return None
    return status.provider


def _demand(
    spec: models.SendGroupSpec,
    status: Mapping[str, Any],
    key: str,
    last_request: float | None = None,
    redis_now: float = 0.0,
    used: float | None = None,
) -> Any:
    """The group as the share computation sees it; ``last_request``: unix seconds of its
    workers' last permit request (the provider's ``demand`` hash), ``redis_now``: the
    provider Redis' clock; ``used``: jobs/min it sent lately
    (:func:`provider_plan.send_rate`). Its backlog: ``queue.ready + queue.reserved`` of its
    last measurement (None before its first: not capped by its use)."""
    now = datetime.now(UTC)
    rate = spec.rate
    warmup = spec.warmup
    policy = RatePolicy(
        per_minute=rate.per_minute if rate else None,
        burst=rate.burst if rate else None,
        warmup_start_per_hour=warmup.start_per_hour if warmup else None,
        warmup_growth_per_day=warmup.growth_per_day if warmup else 2.0,
        warmup_since=warmup.since if warmup else None,
    )
    running = (
        not spec.paused
        and spec.state == models.State.ACTIVE
        and status.get("phase") == models.Phase.RUNNING.value
    ) or (spec.state == models.State.COMPLETED and status.get("phase") == "Running")
    queue = status.get("queue") or {}
    # delayed jobs are not work yet: a lane whose delayed job falls due asks for a permit,
    # which the demand hash records (has_work's second sign)
    backlog = int(queue.get("ready") or 0) + int(queue.get("reserved") or 0)
    queued = backlog
    measured = bool(queue.get("measuredAt"))
    return provider_plan.GroupDemand(
        key=key,
        priority=spec.priority,
        weight=spec.weight,
        limit=policy.allowed_per_minute(now),
        sending=running and provider_plan.has_work(queued, last_request, redis_now),
        backlog=backlog if measured else None,
        used=used,
    )


@kopf.timer(*SP, interval=PROVIDER_INTERVAL, initial_delay=1.0)
@kopf.timer(*CSP, interval=PROVIDER_INTERVAL, initial_delay=1.0)
async def provider_pass(
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    logger: Any,
    **kwargs: Any,
) -> None:
    """One pass over one provider (see the module docstring). Never raises: a failed pass is
    logged and the next one runs a second later. Sharded: only the provider's owner (the same
    assignment as groups, by the provider's uid) runs it; it sees every group
    (``Runtime.groups``), so its shares are the same as one replica's."""
    shard = memo.runtime.shard
    if shard is not None and not shard.may_act(body["metadata"]["uid"]):
        return
    try:
        await _pass(body, patch, memo, logger, kwargs)
    except Exception as exc:  # the timer must keep running
        logger.warning("provider pass failed: %s: %s", type(exc).__name__, exc)


async def _pass(
    body: kopf.Body, patch: kopf.Patch, memo: Any, logger: Any, kwargs: Mapping[str, Any]
) -> None:
    kind = str(body.get("kind"))
    name = str(body["metadata"]["name"])
    own_ns = body["metadata"].get("namespace")
    provider = _admitted(parse_provider(_plain(body)), memo.runtime.settings)
    cluster = _parse_providers(_values(kwargs.get("cluster_providers"), ""))
    groups: Mapping[tuple[str, str], Mapping[str, Any]] = memo.runtime.groups
    members: list[tuple[models.SendGroupSpec, Mapping[str, Any], str]] = []
    for g_ns, g_name in (await membership(memo.runtime, kwargs, cluster)).get(
        (kind, name, own_ns), []
    ):
        entry = groups.get((g_ns, g_name))
        spec = entry.get("parsed") if entry is not None else None
        if entry is None or spec is None:  # deleted, or made invalid, since the round
            continue
        if provider_plan.laravel_unpaced(spec) is None:  # laravel workers take no permit
            members.append((spec, entry["status"], f"{g_ns}/{g_name}"))
    if provider.invalid is not None or _was_invalid(provider):
        status, event = provider_plan.invalid_status(provider, datetime.now(UTC))
        if event is not None:
            kopf.event(body, type=event.type, reason=event.reason, message=event.message)
            # held, or released: the groups resolved to it follow within about a second
            for _, _, key in members:
                memo.runtime.kick(key, PROVIDER_INTERVAL)
        if status is not None:
            patch.status.update(status.model_dump(mode="json", by_alias=True))
        if provider.invalid is not None:
            return
    per_minute = provider.spec.rate.per_minute if provider.spec.rate else None
    pid = provider_plan.provider_id(kind, name, own_ns)
    url = await _redis_url(memo, provider, own_ns)
    client = await memo.runtime.queues.client(url)
    state = await provider_io.read_state(client, url, pid)
    await provider_io.forget_demand(
        client,
        url,
        pid,
        [g for g, at in state.demand.items() if state.now - at > provider_io.DEMAND_FORGET],
    )
    demands = [
        _demand(spec, st, key, state.demand.get(key), state.now, _send_rate(key, st))
        for spec, st, key in members
    ]
    # shares of the rate the scale rules in force leave (a high group keeps its share first)
    scaled = provider_plan.scaled_rate(per_minute, state.rules, state.now)
    allocation = provider_plan.shares(
        scaled, demands, by_namespace=provider.spec.share_by is ShareBy.NAMESPACE
    )
    fields = provider_plan.share_fields(allocation)
    last = _written.get(pid)
    if (
        last is None
        or last[1] != fields
        or (fields and not state.shares_present)  # a Redis restart lost them
        or time.monotonic() - last[0] > SHARES_REFRESH
    ):
        await provider_io.write_shares(client, url, pid, allocation)
        _written[pid] = (time.monotonic(), fields)
    overlaps = provider_plan.overlapping_claims(cluster).get(name, []) if own_ns is None else []
    status, events, changed = provider_plan.provider_status(
        provider,
        demands,
        allocation,
        state.rules,
        state.replies,
        overlaps,
        datetime.fromtimestamp(state.now, UTC),
    )
    for event in events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
    if events:
        # a rule fired or expired: the groups' Suspended/Throttled follow within about a
        # second (their passes read activeRules from the index once this patch is in)
        for demand in demands:
            memo.runtime.kick(demand.key, PROVIDER_INTERVAL)
    if changed:
        patch.status.update(status.model_dump(mode="json", by_alias=True))


def _send_rate(key: str, status: Mapping[str, Any]) -> float | None:
    """Jobs/min the group sent lately, from the measurements seen in its status (kept in
    :data:`_samples`); None until there are two."""
    if len(_samples) > 10_000:
        _samples.clear()
    kept = provider_plan.next_samples(_samples.get(key), provider_plan.send_sample(status))
    if kept is None:
        return None
    _samples[key] = kept
    return provider_plan.send_rate(kept)


def _was_invalid(provider: SendProvider) -> bool:
    ready = conditions.find(provider.status.conditions, conditions.READY)
    return ready is not None and ready.reason == provider_plan.INVALID_SPEC


#: A provider's key in a membership round: (kind, name, namespace; None for a cluster one).
ProviderKey = tuple[str, str, str | None]


@dataclass(slots=True)
class _Round:
    """Every group's provider at ``at`` (``time.monotonic()``): provider key -> the
    ``(namespace, name)`` of the groups resolved to it."""

    at: float
    members: dict[ProviderKey, list[tuple[str, str]]]


async def membership(
    rt: Any, indexes: Mapping[str, Any], cluster: list[SendProvider]
) -> dict[ProviderKey, list[tuple[str, str]]]:
    """Which groups each provider has (provider key -> ``(namespace, name)`` list), computed
    once per :data:`RESOLUTION_REUSE` seconds for every provider's pass: each pass used to
    validate and resolve every group itself, providers x groups a second (issue 15). ``rt``:
    the ``reconcile.Runtime`` (its ``groups``, entries from :func:`group_entry`, and its
    ``provider_round``); ``indexes``: the handler's kwargs (the provider indexes); ``cluster``:
    the parsed ClusterSendProviders. Groups with an invalid spec belong to no provider."""
    groups: Mapping[tuple[str, str], Mapping[str, Any]] = rt.groups
    async with rt.provider_round_lock:
        now = time.monotonic()
        last: _Round | None = rt.provider_round
        if last is not None and now - last.at < RESOLUTION_REUSE:
            return last.members
        if len(_resolved) > 2 * len(groups) + 10_000:  # old specs and provider generations
            _resolved.clear()
        cluster_fp = _fingerprint(cluster)
        namespaced: dict[str, tuple[list[SendProvider], int]] = {}
        found: list[tuple[str, str, provider_plan.Resolution]] = []
        misses: list[tuple[tuple[str, str, bytes, int], _Resolve]] = []
        for (g_ns, g_name), entry in list(groups.items()):
            spec = entry.get("parsed")
            if spec is None:
                continue
            if g_ns not in namespaced:
                theirs = _parse_providers(_values(indexes.get("namespaced_providers"), g_ns))
                namespaced[g_ns] = (theirs, hash((cluster_fp, _fingerprint(theirs))))
            providers, fp = namespaced[g_ns]
            key = (g_ns, g_name, bytes(entry["specKey"]), fp)
            hit = _resolved.get(key)
            if hit is not None and now - hit[0] < _keep(hit[1]):
                found.append((g_ns, g_name, hit[1]))
                continue
            previous = previous_provider(
                entry["status"] or {}, (entry.get("metadata") or {}).get("generation")
            )
            misses.append((key, (spec, g_ns, providers, cluster, previous)))
        if misses:  # one thread for the round: MX lookups may block, resolving does not
            resolved = await asyncio.to_thread(_resolve_many, [m[1] for m in misses])
            for (key, _), r in zip(misses, resolved, strict=True):
                _resolved[key] = (now, r)
                found.append((key[0], key[1], r))
        members: dict[ProviderKey, list[tuple[str, str]]] = {}
        for g_ns, g_name, r in found:
            if r.provider is None:
                continue
            own = g_ns if r.provider.kind == models.PROVIDER_KIND else None
            members.setdefault((r.provider.kind, r.provider.name, own), []).append((g_ns, g_name))
        rt.provider_round = _Round(time.monotonic(), members)
        return members


def _keep(r: provider_plan.Resolution) -> float:
    """How long ``r`` is reused (seconds): :data:`RESOLUTION_KEEP`, but one round only when
    its ``ProviderResolved`` is ``Unknown`` (a DNS failure: the MX cache retries every 30 s,
    and its answer must reach the group at once)."""
    return RESOLUTION_REUSE if r.status == "Unknown" else RESOLUTION_KEEP


def _fingerprint(providers: Iterable[SendProvider]) -> int:
    """What a resolution depends on in ``providers``: each one's uid, name and generation
    (its spec; not its status, which its pass rewrites every second)."""
    return hash(
        tuple(
            (p.metadata.get("uid"), p.metadata.get("name"), p.metadata.get("generation"), p.invalid)
            for p in providers
        )
    )


#: The arguments of one :func:`resolve_group` call.
_Resolve = tuple[
    models.SendGroupSpec,
    str,
    list[SendProvider],
    list[SendProvider],
    models.ResolvedProvider | None,
]


def _resolve_many(calls: list[_Resolve]) -> list[provider_plan.Resolution]:
    """:func:`resolve_group` for each of ``calls``, in order (blocking: run in a thread)."""
    return [resolve_group(*call) for call in calls]


async def _redis_url(memo: Any, provider: SendProvider, namespace: str | None) -> str:
    """The provider's Redis: ``spec.redis.url``, its Secret (in the provider's namespace; for a
    ClusterSendProvider in the operator's own namespace, never a tenant's: review finding, it
    was the first watched namespace, whose tenant then chose where the state of every
    tenant's groups under that provider lived), or the operator's default
    (``defaultRedisUrl``, whatever Redis its groups use: the workers get the same one in
    ``PROVIDER_REDIS_URL``, see :func:`provider_plan.provider_redis_env`)."""
    rt = memo.runtime
    redis = provider.spec.redis
    if redis is not None and redis.url:
        return redis.url
    if redis is not None and redis.secret_ref is not None:
        ns = namespace or rt.settings.namespace
        value = await rt.kube.secret_value(ns, redis.secret_ref.name, redis.secret_ref.key)
        if value and namespace is not None:  # a tenant's Secret: only hosts tenants may name
            refusal = tenancy.redis_refusal(
                str(value), rt.settings.default_redis_url, rt.settings.allowed_redis_hosts
            )
            if refusal is not None:
                raise provider_io.ProviderStateUnavailable(f"spec.redis.secretRef: {refusal}")
        if value:
            return str(value)
        raise provider_io.ProviderStateUnavailable(
            f"Secret {redis.secret_ref.name} key {redis.secret_ref.key} not found in {ns}"
        )
    return str(rt.settings.default_redis_url)


@dataclass(frozen=True, slots=True)
class GroupProvider:
    """What the group's reconcile pass needs: the ``resolution`` (for ``status.provider`` and
    ``ProviderResolved``, see :func:`provider_plan.record_resolution`) and the worker ``env``
    entries for its provider (empty: none matched)."""

    resolution: provider_plan.Resolution
    env: list[dict[str, Any]]
    #: the provider's pushback rules in force (its ``status.activeRules``)
    rules: list[plan.ProviderRule] = field(default_factory=list)

    @property
    def held(self) -> str | None:
        """Why the group must not send (its provider's spec is unusable), else None."""
        r = self.resolution
        return r.message if r.held else None


def _resolve_cached(
    spec: models.SendGroupSpec,
    namespace: str,
    namespaced: Sequence[SendProvider],
    cluster: Sequence[SendProvider],
    previous: models.ResolvedProvider | None,
) -> provider_plan.Resolution | None:
    """:func:`resolve_group` in the event loop when it needs no MX query (no provider with MX
    suffixes, a domain match, or a fresh MX cache entry: the common case); None when it would
    query DNS (the caller then resolves in a thread: a query may block)."""
    missed = False

    def cached(domain: str) -> Sequence[str]:
        nonlocal missed
        if not _MX.fresh(domain):
            missed = True
            raise MxLookupError(f"MX of {domain} not cached")
        return _MX.lookup(domain)

    r = provider_plan.resolve(spec, namespace, list(namespaced), list(cluster), cached, previous)
    return None if missed else r


async def group_provider(
    namespace: str,
    name: str,
    spec: models.SendGroupSpec,
    indexes: Mapping[str, Any],
    settings: Settings,
    previous: models.ResolvedProvider | None = None,
) -> GroupProvider:
    """Resolve one group from kopf's provider indexes (``indexes``: the handler's kwargs, which
    kopf fills with every index: ``namespaced_providers`` and ``cluster_providers``), with the
    provider's rules in force from its status there. MX lookups run in a thread (cached by
    TTL); a resolution that needs none runs in the event loop. ``settings``: the operator's
    default Redis, the provider's when it names none; ``previous``: the group's
    ``status.provider`` (kept through a DNS failure)."""
    namespaced = [
        _admitted(p, settings)
        for p in _parse_providers(_values(indexes.get("namespaced_providers"), namespace))
    ]
    cluster = _parse_providers(_values(indexes.get("cluster_providers"), ""))
    # a thread only when an MX query may be sent (issue 15: a thread hop per pass of every
    # group, ~7 % of an idle pass's CPU)
    r = _resolve_cached(spec, namespace, namespaced, cluster, previous)
    if r is None:
        r = await asyncio.to_thread(resolve_group, spec, namespace, namespaced, cluster, previous)
    env: list[dict[str, Any]] = []
    rules: list[plan.ProviderRule] = []
    if r.provider is not None and r.spec is not None:
        own_ns = namespace if r.provider.kind == models.PROVIDER_KIND else None
        smtp_host = spec.smtp.host if spec.smtp is not None else None
        untrusted = provider_plan.untrusted_replies(r.provider.kind, r.spec, smtp_host, settings)
        env = provider_plan.worker_provider_env(
            r.provider.kind,
            r.provider.name,
            own_ns,
            r.spec,
            f"{namespace}/{name}",
            settings,
            pushback=untrusted is None,
        )
        pool = namespaced if r.provider.kind == models.PROVIDER_KIND else cluster
        found = next((p for p in pool if p.metadata.get("name") == r.provider.name), None)
        if found is not None:
            rules = provider_plan.group_rules(found)
        notes = [n for n in (untrusted, provider_plan.laravel_unpaced(spec)) if n is not None]
        if notes:
            r = replace(r, message="; ".join([r.message, *notes]))
    return GroupProvider(r, env, rules)
