"""Pure decisions about providers: which provider a group sends under (resolution), how a
provider's budget is shared among its groups (shares), which cluster-wide domain claims
overlap, and the worker's view of its provider (the ``SendProvider`` env of the worker pod).

No I/O: MX records come through an injected lookup (:mod:`provider_dns` in the operator, a
dict in tests). Names as in ``providers.md``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from sendgroup_contract import worker_settings as ws
from sendgroup_operator import builders, conditions, durations, models
from sendgroup_operator.conditions import set_condition
from sendgroup_operator.models import (
    CLUSTER_PROVIDER_KIND,
    PROVIDER_KIND,
    Priority,
    ProviderKind,
    ResolvedProvider,
    SendGroupSpec,
)
from sendgroup_operator.plan.types import ProviderRule, rule_reason
from sendgroup_operator.provider_models import (
    ActiveRule,
    EffectiveRate,
    ProviderShare,
    SendProvider,
    SendProviderSpec,
    SendProviderStatus,
)
from sendgroup_operator.settings import Settings

#: Condition type on a SendGroup: which provider applies and why, or that none matched.
PROVIDER_RESOLVED: Final = "ProviderResolved"

#: MX lookup: domain -> MX host names (lower case, no trailing dot); raises on DNS trouble.
MxLookup = Callable[[str], Sequence[str]]


def provider_id(kind: str, name: str, namespace: str | None) -> str:
    """The id the worker keys its provider state by: ``csp/<name>`` or ``sp/<ns>/<name>``."""
    if kind == CLUSTER_PROVIDER_KIND:
        return f"csp/{name}"
    return f"sp/{namespace}/{name}"


def _name(p: SendProvider) -> str:
    return str(p.metadata.get("name", ""))


def _order(p: SendProvider) -> tuple[str, str]:
    """Earlier providers first: creation time, then name (claims are first come)."""
    return (str(p.metadata.get("creationTimestamp", "")), _name(p))


@dataclass(frozen=True, slots=True)
class Resolution:
    """Outcome of resolving one group: ``provider`` (None = none matched: the group's own limits
    only) and the ``ProviderResolved`` condition's status, reason and message."""

    provider: ResolvedProvider | None
    status: str
    reason: str
    message: str
    spec: SendProviderSpec | None = None
    #: the resolved provider's spec is unusable (:attr:`SendProvider.invalid`): the group is
    #: held (no workers) until it is fixed, never sent without the provider's limits
    held: bool = False


def _domain_match(host: str, providers: Sequence[SendProvider]) -> SendProvider | None:
    for p in sorted(providers, key=_order):
        if host in (p.spec.match.domains or []):
            return p
    return None


def _mx_match(
    mx_hosts: Sequence[str], providers: Sequence[SendProvider]
) -> tuple[SendProvider, str] | None:
    for p in sorted(providers, key=_order):
        for mx in mx_hosts:
            for suffix in p.spec.match.mx_suffixes or []:
                if mx.endswith(suffix):
                    return p, mx
    return None


def resolve(
    spec: SendGroupSpec,
    namespace: str,
    namespaced: Sequence[SendProvider],
    cluster: Sequence[SendProvider],
    mx: MxLookup,
    previous: ResolvedProvider | None = None,
) -> Resolution:
    """Which provider ``spec`` (a group in ``namespace``) sends under.

    ``spec.provider`` wins when set (it must exist: else status False, ``ProviderNotFound``,
    and ``held``: a typo must not send without the limits it named).
    Otherwise, for ``spec.host`` (lower-cased): namespaced SendProviders first (domains, then
    MX suffixes), then ClusterSendProviders (domains, then MX suffixes); among several claims
    the earliest created wins. MX records are looked up only when a provider has MX suffixes
    and no domain matched. A DNS failure gives status Unknown (``MxLookupFailed``; the caller
    retries) and never drops a provider's limits it can still name: the group keeps
    ``previous`` (its ``status.provider``, an MX match) while that provider exists, or takes
    the next claim that needs no DNS (a ClusterSendProvider's domain after a namespaced MX
    suffix), in resolution order (:func:`_lookup_failed`); else none (its own limits). A host
    that matches nothing gives status False (``NoProviderMatched``: the group sends under its
    own limits only). A provider whose spec the operator cannot use
    (:func:`~sendgroup_operator.provider_models.parse_provider`) still claims its name and its
    ``match``: a group resolved to it gets status False, ``ProviderInvalid``, and ``held``
    (no workers), never the unlimited sending of a group without a provider."""
    ref = spec.provider
    if ref is not None:
        pool = namespaced if ref.kind == ProviderKind.SEND_PROVIDER else cluster
        found = next((p for p in pool if _name(p) == ref.name), None)
        if found is None:
            where = f" in namespace {namespace}" if ref.kind == PROVIDER_KIND else ""
            return Resolution(
                None,
                "False",
                conditions.REASON_PROVIDER_NOT_FOUND,
                f"spec.provider names {ref.kind} {ref.name}{where}, which does not exist: "
                "the group is held, no workers, until it does (a group never sends outside "
                "the limits it named)",
                held=True,
            )
        chosen = ResolvedProvider(kind=ref.kind, name=ref.name, via="spec.provider")
        return _resolved(chosen, found, "ProviderReferenced")
    host = spec.host.lower().rstrip(".")
    mx_hosts: Sequence[str] | None = None
    for kind, pool in (
        (ProviderKind.SEND_PROVIDER, namespaced),
        (ProviderKind.CLUSTER_SEND_PROVIDER, cluster),
    ):
        hit = _domain_match(host, pool)
        if hit is not None:
            chosen = ResolvedProvider(kind=kind, name=_name(hit), via=f"domain {host}")
            return _resolved(chosen, hit, "DomainMatched")
        if any(p.spec.match.mx_suffixes for p in pool):
            if mx_hosts is None:
                try:
                    mx_hosts = [h.lower().rstrip(".") for h in mx(host)]
                except Exception as exc:  # the adapter's DNS error, whatever its type
                    return _lookup_failed(host, str(exc), kind, namespaced, cluster, previous)
            mx_hit = _mx_match(mx_hosts, pool)
            if mx_hit is not None:
                p, mx_host = mx_hit
                chosen = ResolvedProvider(kind=kind, name=_name(p), via=f"mx {mx_host}")
                return _resolved(chosen, p, "MxMatched")
    return Resolution(
        None,
        "False",
        "NoProviderMatched",
        f"no SendProvider or ClusterSendProvider matches {host}"
        + (f" (MX {', '.join(mx_hosts)})" if mx_hosts else "")
        + ": the group sends under its own limits only",
    )


def _lookup_failed(
    host: str,
    error: str,
    failed_in: ProviderKind,
    namespaced: Sequence[SendProvider],
    cluster: Sequence[SendProvider],
    previous: ResolvedProvider | None,
) -> Resolution:
    """The MX lookup of ``host`` failed while the ``failed_in`` pool's MX suffixes were being
    tried: status Unknown, reason ``MxLookupFailed``, with the provider whose limits the group
    keeps meanwhile, in resolution order: ``previous`` when it was an MX match that may still
    hold (its provider exists, still has MX suffixes, and its pool is the failed one), then a
    ClusterSendProvider's domain (after a namespaced pool's failure), then ``previous`` as a
    ClusterSendProvider MX match; else none. Held as usual when that provider is unusable."""
    text = f"MX lookup of {host} failed ({error}); retrying"

    def kept(kind: ProviderKind) -> Resolution | None:
        if previous is None or previous.kind != kind or not previous.via.startswith("mx "):
            return None
        pool = namespaced if kind == ProviderKind.SEND_PROVIDER else cluster
        found = next((p for p in pool if _name(p) == previous.name), None)
        if found is None or not found.spec.match.mx_suffixes:
            return None
        return _unknown(_resolved(previous, found, "MxLookupFailed"), text, "keeps")

    if failed_in == ProviderKind.SEND_PROVIDER:
        same = kept(ProviderKind.SEND_PROVIDER)
        if same is not None:
            return same
        hit = _domain_match(host, cluster)
        if hit is not None:
            chosen = ResolvedProvider(
                kind=ProviderKind.CLUSTER_SEND_PROVIDER, name=_name(hit), via=f"domain {host}"
            )
            return _unknown(_resolved(chosen, hit, "MxLookupFailed"), text, "sends")
    later = kept(ProviderKind.CLUSTER_SEND_PROVIDER)
    if later is not None:
        return later
    return Resolution(
        None, "Unknown", "MxLookupFailed", f"{text}. The group sends under its own limits meanwhile"
    )


def _unknown(r: Resolution, text: str, verb: str) -> Resolution:
    """``r`` (a provider the group sends under meanwhile) as status Unknown, ``MxLookupFailed``;
    a held resolution keeps its status False and reason (the group must not send)."""
    if r.held:
        return r
    assert r.provider is not None
    return replace(
        r,
        status="Unknown",
        reason="MxLookupFailed",
        message=f"{text}. The group {verb} sending under {r.provider.kind} {r.provider.name} "
        f"({r.provider.via}) meanwhile",
    )


def _message(r: ResolvedProvider) -> str:
    return f"sends under {r.kind} {r.name} ({r.via})"


def _resolved(chosen: ResolvedProvider, p: SendProvider, reason: str) -> Resolution:
    """The group resolved to ``p``; held (status False, reason ``ProviderInvalid``, the message
    naming the provider and what is wrong with it) when ``p``'s spec is unusable."""
    if p.invalid is not None:
        return Resolution(
            chosen,
            "False",
            conditions.REASON_PROVIDER_INVALID,
            f"{chosen.kind} {chosen.name} ({chosen.via}) has an invalid spec ({p.invalid}): "
            "the group is held, no workers, until the provider is fixed",
            held=True,
        )
    return Resolution(chosen, "True", reason, _message(chosen), spec=p.spec)


def overlapping_claims(cluster: Sequence[SendProvider]) -> dict[str, list[str]]:
    """Cluster-wide domain and MX-suffix claims that an earlier ClusterSendProvider already
    made: later provider name -> messages (``domain gmail.com is claimed by google``). The
    earlier claim is the one resolution uses; the later provider reports it as a condition."""
    seen_domains: dict[str, str] = {}
    seen_suffixes: dict[str, str] = {}
    out: dict[str, list[str]] = {}
    for p in sorted(cluster, key=_order):
        name = _name(p)
        for domain in p.spec.match.domains or []:
            owner = seen_domains.setdefault(domain, name)
            if owner != name:
                out.setdefault(name, []).append(f"domain {domain} is claimed by {owner}")
        for suffix in p.spec.match.mx_suffixes or []:
            owner = seen_suffixes.setdefault(suffix, name)
            if owner != name:
                out.setdefault(name, []).append(f"mxSuffix {suffix} is claimed by {owner}")
    return out


# ----------------------------------------------------------------------------- shares


@dataclass(frozen=True, slots=True)
class GroupDemand:
    """One group resolved to a provider: ``key`` ``namespace/name``; ``priority``, ``weight``;
    ``limit`` its own allowed rate (recipients/min after warm-up; None = unlimited);
    ``sending``: has work and is neither paused nor finished (others hold no share).

    What the group can use (:func:`usable`), from its status: ``backlog`` jobs ready +
    reserved at its last measurement (None = not known: the group is not capped by its use,
    the rule before work-conserving shares); ``used`` jobs/min it sent (delivered + failed)
    lately (:func:`send_rate`; None = not known yet, taken as 0)."""

    key: str
    priority: Priority = Priority.NORMAL
    weight: int = 1
    limit: float | None = None
    sending: bool = True
    backlog: int | None = None
    used: float | None = None


#: Seconds a group's last permit request counts as work (a group whose status shows no queued
#: job but whose workers asked for a permit this recently keeps, or gets, its share).
DEMAND_WINDOW: Final = 30.0


def has_work(queued: int, last_request: float | None, now: float) -> bool:
    """Whether a running group competes for a share: its status shows jobs to send now
    (``queued``: ``queue.ready + queue.reserved``; delayed jobs are not work until they fall
    due, when a lane asks for a permit), or its workers asked for a permit in the
    last :data:`DEMAND_WINDOW` seconds (``last_request``/``now``: unix seconds on the
    provider Redis' clock). An emptied group thus frees its share about 30 s after its last
    mail instead of holding it until ``idleAfter``; a group refilled after that asks with
    share 0 (refused, once a second) and is given its share at the next pass, within about
    two seconds."""
    if queued > 0:
        return True
    return last_request is not None and now - last_request <= DEMAND_WINDOW


def _water_fill(budget: float, groups: Sequence[GroupDemand]) -> tuple[dict[str, float], float]:
    """Weighted max-min fair split of ``budget`` (Bertsekas & Gallager, "Data Networks" 6.5.2,
    with weights): raise a level L; a group gets ``min(limit, weight * L)``. Returns the
    shares and what is left (only when every group is capped by its own limit)."""
    shares = {g.key: 0.0 for g in groups}
    open_ = sorted(groups, key=lambda g: g.key)
    left = budget
    while open_ and left > 1e-9:
        total_weight = sum(g.weight for g in open_)
        level = left / total_weight
        capped = [
            g for g in open_ if g.limit is not None and g.limit - shares[g.key] <= g.weight * level
        ]
        if not capped:
            for g in open_:
                shares[g.key] += g.weight * level
            left = 0.0
            break
        for g in capped:
            assert g.limit is not None
            left -= g.limit - shares[g.key]
            shares[g.key] = g.limit
        open_ = [g for g in open_ if g not in capped]
    return shares, max(0.0, left)


#: Factor on a group's measured send rate (``used``, jobs/min) that it may use: room to grow
#: between two measurements of its status (a group that grows past it builds a backlog, which
#: lifts its cap: see :func:`usable`).
USE_HEADROOM: Final = 1.5
#: Seconds in which a group's backlog (ready + reserved jobs) could be sent: a backlog of B
#: jobs can use ``60 * B / DRAIN_SECONDS`` per minute (100 jobs: 1,200/min). A group whose
#: backlog its share would send in less than this is capped; a larger backlog is not.
DRAIN_SECONDS: Final = 5.0
#: Fraction of the budget that the floors of the sending groups add up to (each group's
#: floor: this x budget / sending groups, recipients/min): a group with no measured use
#: (new, or after an operator restart) still sends while its backlog shows in its status.
FLOOR_FRACTION: Final = 0.05


def usable(group: GroupDemand, floor: float) -> float | None:
    """What ``group`` can use now, recipients/min (None = no cap: its use is not known):
    ``max(floor, USE_HEADROOM * used, 60 * backlog / DRAIN_SECONDS)``. Jobs are counted as
    one recipient each (the workers' counters count jobs): a group whose mails have several
    recipients is under-measured, sends at its cap, builds a backlog and is lifted by it.
    Work-conserving as HTB's borrowing (Linux ``tc-htb``: a class is served at its rate and
    lends what it does not use) and as max-min fairness with demands (Bertsekas & Gallager,
    "Data Networks" 6.5.2: a group's demand caps its share)."""
    if group.backlog is None:
        return None
    return max(
        floor,
        USE_HEADROOM * max(0.0, group.used or 0.0),
        60.0 * max(0, group.backlog) / DRAIN_SECONDS,
    )


def _capped(group: GroupDemand, cap: float | None) -> GroupDemand:
    """``group`` with its limit lowered to ``cap`` (recipients/min; None = unchanged)."""
    if cap is None or (group.limit is not None and group.limit <= cap):
        return group
    return GroupDemand(group.key, group.priority, group.weight, cap, group.sending)


def namespace_of(key: str) -> str:
    """The namespace of a group key ``namespace/name``."""
    return key.partition("/")[0]


def shares(
    per_minute: float | None, groups: Sequence[GroupDemand], by_namespace: bool = False
) -> dict[str, float]:
    """Each sending group's share of a provider's ``per_minute`` (recipients/min).

    ``by_namespace`` (``spec.shareBy: Namespace``): two levels, as Linux HTB's class tree
    (``tc-htb(8)``). First the namespaces with sending groups split the budget max-min fair,
    one equal weight each, a namespace capped by what its groups can use (the sum of their
    :func:`usable` caps, each within the group's own limit); what every capped namespace
    leaves goes back to them up to the sum of their groups' own limits. Then each namespace's
    part is split among its own groups by :func:`_group_shares` (``high`` first, by weight).
    A namespace's priorities and weights thus never take from another namespace. Otherwise
    one pool: :func:`_group_shares` over every group.

    The shares of sending groups sum to ``min(per_minute, sum of their limits)``; each is at
    most the group's own limit; groups not sending get 0; no provider rate: {}."""
    if per_minute is None:
        return {}
    if not by_namespace:
        return _group_shares(float(per_minute), groups)
    out = {g.key: 0.0 for g in groups}
    sending = [g for g in groups if g.sending]
    members: dict[str, list[GroupDemand]] = {}
    for g in sending:
        members.setdefault(namespace_of(g.key), []).append(g)
    floor = FLOOR_FRACTION * float(per_minute) / max(1, len(sending))

    def total(values: Sequence[float | None]) -> float | None:
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    def cap(g: GroupDemand) -> float | None:
        use = usable(g, floor)
        if use is None:
            return g.limit
        return use if g.limit is None else min(use, g.limit)

    namespaces = [GroupDemand(ns, limit=total([cap(g) for g in gs])) for ns, gs in members.items()]
    parts, left = _water_fill(float(per_minute), namespaces)
    if left > 1e-9:  # every namespace capped by its use: the rest back up to their limits
        room = []
        for ns, gs in members.items():
            hard = total([g.limit for g in gs])
            if hard is None or hard - parts[ns] > 1e-9:
                room.append(GroupDemand(ns, limit=None if hard is None else hard - parts[ns]))
        extra, _ = _water_fill(left, room)
        for ns, more in extra.items():
            parts[ns] += more
    for ns, gs in members.items():
        out.update(_group_shares(parts[ns], gs))
    return out


def _group_shares(per_minute: float, groups: Sequence[GroupDemand]) -> dict[str, float]:
    """Each sending group's share of ``per_minute`` (recipients/min: the provider's budget, or
    one namespace's part of it), work conserving: ``high`` groups first, max-min fair by
    weight among them, each capped by its own limit and by what it can use (:func:`usable`:
    its measured send rate with headroom, or its backlog, at least a floor); ``normal``
    groups share what is left the same way.
    What is still left (every sending group capped) goes back to the capped groups up to
    their own limits, ``high`` first: a capped group that grows is not held at its cap until
    its status shows it. Groups not sending hold no share (0).

    The shares of sending groups sum to ``min(per_minute, sum of their limits)``; each is at
    most the group's own limit."""
    out = {g.key: 0.0 for g in groups}
    left = per_minute
    sending = [g for g in groups if g.sending]
    floor = FLOOR_FRACTION * left / max(1, len(sending))
    capped = {g.key: _capped(g, usable(g, floor)) for g in sending}
    for priority in (Priority.HIGH, Priority.NORMAL):
        tier = [capped[g.key] for g in sending if g.priority == priority]
        given, left = _water_fill(left, tier)
        out.update(given)
    # the rest (only when every sending group is capped): back to the capped groups up to
    # their own limits, high first
    for priority in (Priority.HIGH, Priority.NORMAL):
        if left <= 1e-9:
            break
        room = [
            GroupDemand(
                g.key, g.priority, g.weight, None if g.limit is None else g.limit - out[g.key]
            )
            for g in sending
            if g.priority == priority and capped[g.key] is not g
        ]
        given, left = _water_fill(left, [r for r in room if r.limit is None or r.limit > 0])
        for key, extra in given.items():
            out[key] += extra
    return out


@dataclass(frozen=True, slots=True)
class SendSample:
    """One measurement of a group's counters: ``at`` unix seconds (``status.queue.measuredAt``)
    and ``sent`` jobs (``status.progress.delivered + failed``)."""

    at: float
    sent: int


#: Seconds two measurements must lie apart for a send rate (two passes can write statuses
#: milliseconds apart: see ``plan.status.QUIET_WINDOW``).
MIN_RATE_WINDOW: Final = 2.0


def send_sample(status: Mapping[str, Any]) -> SendSample | None:
    """The counters of a group's status dict (the kopf index entry, camelCase); None before
    its first measurement."""
    queue = status.get("queue") or {}
    at = queue.get("measuredAt")
    if not at:
        return None
    try:
        when = datetime.fromisoformat(str(at).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    progress = status.get("progress") or {}
    return SendSample(when, int(progress.get("delivered") or 0) + int(progress.get("failed") or 0))


#: Measurements kept per group (the newest ones; the rate uses the newest and the most recent
#: one at least :data:`MIN_RATE_WINDOW` older).
SAMPLES_KEPT: Final = 8


def next_samples(
    kept: tuple[SendSample, ...] | None, new: SendSample | None
) -> tuple[SendSample, ...] | None:
    """The measurements to keep after seeing ``new`` (``kept``: oldest first): ``new`` is
    appended unless already the newest (an older one, from a stale index entry, is ignored),
    and at most :data:`SAMPLES_KEPT` stay. Review finding: keeping just two (earlier, latest)
    pinned the earlier one while writes came less than 2 s apart, so the rate became a
    lifetime average, or never came."""
    if new is None:
        return kept
    if not kept:
        return (new,)
    if new.at <= kept[-1].at:
        return kept
    return (*kept, new)[-SAMPLES_KEPT:]


def send_rate(kept: tuple[SendSample, ...] | None) -> float | None:
    """Jobs/min sent between the newest measurement and the most recent one at least
    :data:`MIN_RATE_WINDOW` seconds older (:func:`next_samples`); None when there is no such
    pair, or the counters went back (a flushed Redis)."""
    if not kept:
        return None
    latest = kept[-1]
    earlier = next((s for s in reversed(kept) if latest.at - s.at >= MIN_RATE_WINDOW), None)
    if earlier is None or latest.sent < earlier.sent:
        return None
    return 60.0 * (latest.sent - earlier.sent) / (latest.at - earlier.at)


# ----------------------------------------------------------------------------- worker env


def _seconds(value: str) -> float:
    return durations.parse_seconds(value)


def worker_provider_config(
    kind: str, name: str, namespace: str | None, spec: SendProviderSpec, group_key: str
) -> dict[str, Any]:
    """The worker's ``SENDGROUP_PROVIDER`` object (``sendgroup_worker.provider.ProviderConfig``)
    for a group ``group_key`` (``namespace/name``) resolved to provider ``kind``/``name``."""
    rules = []
    for r in spec.pushback.rules:
        action = r.action
        if action.suspend:
            act, value = "suspend", 0
        elif action.scale_rate is not None:
            act, value = "scale", action.scale_rate
        else:
            act, value = "cap", action.cap_concurrency or 1
        rules.append(
            {
                "name": r.name,
                "codes": list(r.codes or []),
                "pattern": r.pattern,
                "count": 1 if r.trigger.immediate else (r.trigger.count or 1),
                "window": _seconds(r.trigger.window) if r.trigger.window else 0.0,
                "action": act,
                "value": value,
                "duration": _seconds(r.duration),
                "step_percent": r.recovery.step_percent,
                "every": _seconds(r.recovery.every),
            }
        )
    out: dict[str, Any] = {"id": provider_id(kind, name, namespace), "group": group_key}
    if spec.rate is not None:
        out["perMinute"] = spec.rate.per_minute
        if spec.rate.burst is not None:
            out["burst"] = spec.rate.burst
    if spec.concurrency is not None:
        out["concurrency"] = spec.concurrency
    out["rules"] = rules
    return out


def provider_redis_env(spec: SendProviderSpec, settings: Settings) -> dict[str, Any]:
    """The worker's ``PROVIDER_REDIS_URL`` entry: the provider's ``redis`` (a value, or a
    ``secretKeyRef``: the kubelet reads that Secret in the worker pod's namespace, so a
    ClusterSendProvider's Secret must exist in every namespace of its groups), else the
    operator's default Redis, the one the operator writes the provider's shares to and reads
    its rules from (``defaultRedisSecretRef`` as a ``secretKeyRef`` when set, as the group's
    own ``REDIS_URL`` takes it, else ``defaultRedisUrl``). Always set: a worker left to its
    own default would keep the provider's state on its group's Redis, and groups on
    different Redis servers would each get the whole budget."""
    redis = spec.redis
    if redis is not None and redis.url:
        return builders.env_value(ws.PROVIDER_REDIS_URL, redis.url)
    if redis is not None and redis.secret_ref is not None:
        ref = redis.secret_ref
        return builders.env_secret(ws.PROVIDER_REDIS_URL, ref.name, ref.key)
    return builders.default_redis_env(ws.PROVIDER_REDIS_URL, settings)


def untrusted_replies(
    kind: str, spec: SendProviderSpec, smtp_host: str | None, settings: Settings
) -> str | None:
    """Why a group's SMTP replies must not fire the provider's pushback rules, or None (they
    may). A ClusterSendProvider's rule, once fired, slows or suspends every tenant's groups of
    that provider, and a group's ``spec.smtp.host`` is its tenant's choice: a tenant pointing
    it at its own server could answer ``421 unusual rate`` and hold everyone (security review,
    issue 16). Its replies count only when the group talks to the operator's default relay
    (``smtp_host`` None or ``defaultSmtp.host``: the platform runs it) or to the provider's
    own hosts: under one of its ``mxSuffixes`` or its ``domains`` (Outlook.com's MX
    ``outlook-com.olc.protection.outlook.com`` is under ``outlook.com``, Yandex's
    ``mx.yandex.ru`` under ``yandex.ru``), whose DNS no tenant controls. A namespaced
    SendProvider's rules only reach its own namespace's groups: always trusted."""
    if kind != CLUSTER_PROVIDER_KIND or smtp_host is None:
        return None
    host = smtp_host.lower().rstrip(".")
    if host == settings.default_smtp_host.lower().rstrip("."):
        return None
    own = [*(spec.match.mx_suffixes or []), *(f".{d}" for d in spec.match.domains or [])]
    if any(host.endswith(suffix) for suffix in own):
        return None
    return (
        f"spec.smtp.host {host} is neither the operator's default relay nor a host of the "
        "provider (under its mxSuffixes or domains): its replies fire none of the provider's "
        "pushback rules (a rule slows every tenant's groups); the rules in force still apply"
    )


def laravel_unpaced(spec: SendGroupSpec) -> str | None:
    """Why a ``runtime: laravel`` group's workers are not paced by its provider, or None (a
    python-runtime group: they are). Laravel's ``queue:work`` runs the shop's own mail code
    and knows nothing of the provider's permits (review finding: such a group was said to
    send "under" the provider and took a share it never used, while sending unpaced). It
    takes no share; its message says so; ``worker.rate`` does not apply either (the runtime
    has no rate limiter of ours: use Laravel's own ``RateLimited`` middleware)."""
    if spec.worker.runtime != models.WorkerRuntime.LARAVEL:
        return None
    return (
        "runtime laravel: the provider's budget, share and rules do not pace this group's "
        "workers (Laravel's queue:work sends on its own); it takes no share of the provider"
    )


def worker_provider_env(
    kind: str,
    name: str,
    namespace: str | None,
    spec: SendProviderSpec,
    group_key: str,
    settings: Settings,
    pushback: bool = True,
) -> list[dict[str, Any]]:
    """Env entries of the worker container for its provider: ``SENDGROUP_PROVIDER`` (JSON) and
    ``PROVIDER_REDIS_URL`` (:func:`provider_redis_env`). ``pushback`` False: the worker gets
    no rules to fire (:func:`untrusted_replies`); it still obeys those in force (the permit
    script reads them from Redis)."""
    config = worker_provider_config(kind, name, namespace, spec, group_key)
    if not pushback:
        config["rules"] = []
    return [
        builders.env_value(ws.PROVIDER, json.dumps(config, separators=(",", ":"))),
        provider_redis_env(spec, settings),
    ]


def share_fields(allocation: Mapping[str, float]) -> dict[str, str]:
    """The provider's ``shares`` hash as written to Redis: group key -> recipients/min with
    3 decimals (a share of 0 is written: the group waits; absent = no share limit)."""
    return {k: f"{max(0.0, v):.3f}" for k, v in sorted(allocation.items()) if math.isfinite(v)}


# ----------------------------------------------------------------------------- status


@dataclass(frozen=True, slots=True)
class RuleState:
    """One rule's effect as the workers wrote it to Redis (hash ``rules``): ``action`` suspend,
    scale or cap; ``value`` percent or transactions; ``since``/``until`` unix seconds; recovery
    ``step_percent`` every ``every`` seconds."""

    name: str
    action: str
    value: float
    since: float
    until: float
    step_percent: float = 10.0
    every: float = 60.0

    @classmethod
    def parse(cls, name: str, text: str) -> RuleState | None:
        """From ``"action|value|since_ms|until_ms|step_pct|every_ms"``; None when malformed."""
        parts = text.split("|")
        if len(parts) != 6:
            return None
        try:
            return cls(
                name,
                parts[0],
                float(parts[1]),
                int(parts[2]) / 1000,
                int(parts[3]) / 1000,
                float(parts[4]),
                int(parts[5]) / 1000,
            )
        except ValueError:
            return None

    def factor(self, now: float) -> float:
        """Rate factor of a scale rule at ``now`` (1.0 when it no longer holds), recovery
        included; 1.0 for other actions."""
        if self.action != "scale":
            return 1.0
        f = self.value / 100
        if now >= self.until:
            steps = math.floor((now - self.until) / max(self.every, 0.001)) + 1
            f += steps * self.step_percent / 100
        return min(1.0, f)

    def holds(self, now: float) -> bool:
        """Whether the rule still acts at ``now`` (a scale rule until it fully recovered)."""
        if self.action == "scale":
            return self.factor(now) < 1.0
        return now < self.until

    def describe(self) -> str:
        """``Suspend``, ``ScaleRate(20%)`` or ``CapConcurrency(2)`` (the CRD's names)."""
        if self.action == "suspend":
            return "Suspend"
        if self.action == "scale":
            return f"ScaleRate({self.value:g}%)"
        return f"CapConcurrency({self.value:g})"


@dataclass(frozen=True, slots=True)
class ProviderEvent:
    """An event on the provider object: ``type`` Normal/Warning, ``reason``, ``message``."""

    type: str
    reason: str
    message: str


def scaled_rate(per_minute: float | None, rules: Sequence[RuleState], now: float) -> float | None:
    """``per_minute`` scaled by the lowest factor among scale rules at ``now`` (recovery
    included; suspensions ignored: the permit script refuses every group while one holds):
    the budget :func:`shares` splits, so a ``high`` group keeps its share before ``normal``
    groups get any when a ScaleRate rule holds. The permit script scales the provider level
    at once and applies the shares as written (the next pass, within a second, rewrites them).
    None without a provider rate."""
    if per_minute is None:
        return None
    return per_minute * min([r.factor(now) for r in rules] or [1.0])


def effective_rate(
    per_minute: float | None, rules: Sequence[RuleState], now: float
) -> float | None:
    """The provider's allowed rate at ``now``: 0 while suspended, else scaled by the lowest
    factor among scale rules (None without a provider rate)."""
    if per_minute is None:
        return None
    if any(r.action == "suspend" and r.holds(now) for r in rules):
        return 0.0
    return scaled_rate(per_minute, rules, now)


def provider_status(
    provider: SendProvider,
    demands: Sequence[GroupDemand],
    allocation: Mapping[str, float],
    rules: Sequence[RuleState],
    replies: Mapping[str, str],
    overlaps: Sequence[str],
    now: datetime,
) -> tuple[SendProviderStatus, list[ProviderEvent], bool]:
    """The provider's new status, the events to emit and whether the status changed.

    ``demands``: the groups resolved to it; ``allocation``: their shares (:func:`shares`);
    ``rules``: the effects in Redis; ``replies``: rule name -> the reply that last fired it;
    ``overlaps``: this provider's domain claims an earlier ClusterSendProvider holds
    (:func:`overlapping_claims`). Conditions: ``Suspended`` and ``Throttled`` name the rule,
    ``Ready`` False names the overlap. Events: ``RuleFired`` when a rule starts holding,
    ``RuleExpired`` when it stops (compared with the old ``activeRules``)."""
    old = provider.status
    status = old.model_copy(deep=True)
    generation = provider.metadata.get("generation")
    ts = now.timestamp()
    by_key = {g.key: g for g in demands}
    status.observed_generation = generation
    status.groups = sum(1 for g in demands if g.sending)
    per_minute = provider.spec.rate.per_minute if provider.spec.rate else None
    eff = effective_rate(per_minute, rules, ts)
    status.effective_rate = EffectiveRate(per_minute=None if eff is None else round(eff, 3))
    # the allocation is already of the scaled rate (scaled_rate); a suspension shows as 0
    suspended = eff == 0.0 and bool(per_minute)
    status.shares = [
        ProviderShare(
            group=key,
            per_minute=0.0 if suspended else round(value, 3),
            priority=by_key[key].priority if key in by_key else Priority.NORMAL,
            weight=by_key[key].weight if key in by_key else 1,
        )
        for key, value in sorted(allocation.items())
        if key in by_key and by_key[key].sending
    ]
    holding = sorted((r for r in rules if r.holds(ts)), key=lambda r: r.name)
    was = {a.rule: a for a in old.active_rules}

    def reply_of(r: RuleState) -> str:
        prev = was.get(r.name)
        kept = prev.reply if prev and prev.since == datetime.fromtimestamp(r.since, UTC) else ""
        return replies.get(r.name, kept)[:1024]

    status.active_rules = [
        ActiveRule(
            rule=r.name,
            since=datetime.fromtimestamp(r.since, UTC),
            until=datetime.fromtimestamp(r.until, UTC),
            reply=reply_of(r),
            action=r.describe(),
        )
        for r in holding
    ]
    events: list[ProviderEvent] = []
    for r in holding:
        prev = was.get(r.name)
        if prev is None or prev.since != datetime.fromtimestamp(r.since, UTC):
            events.append(
                ProviderEvent(
                    "Warning",
                    "RuleFired",
                    f"pushback rule {r.name} fired on {replies.get(r.name, 'a reply')!r}: "
                    f"{r.describe()} until {_iso(r.until)}",
                )
            )
    for name in sorted(set(was) - {r.name for r in holding}):
        events.append(ProviderEvent("Normal", "RuleExpired", f"pushback rule {name} expired"))
    suspend = [r for r in holding if r.action == "suspend"]
    throttle = [r for r in holding if r.action in ("scale", "cap")]
    conds = status.conditions
    if suspend:
        r = suspend[0]
        set_condition(
            conds,
            "Suspended",
            "True",
            rule_reason(r.name),
            f"rule {r.name}: {r.describe()} until {_iso(r.until)}",
            now,
            generation,
        )
    else:
        set_condition(
            conds, "Suspended", "False", "NoRule", "no Suspend rule holds", now, generation
        )
    if throttle:
        text = "; ".join(f"rule {r.name}: {r.describe()}" for r in throttle)
        set_condition(
            conds, "Throttled", "True", rule_reason(throttle[0].name), text, now, generation
        )
    else:
        set_condition(
            conds,
            "Throttled",
            "False",
            "NoRule",
            "no ScaleRate or CapConcurrency rule holds",
            now,
            generation,
        )
    if overlaps:
        set_condition(
            conds,
            "Ready",
            "False",
            "OverlappingClaim",
            "; ".join(overlaps) + ": the earlier provider keeps them",
            now,
            generation,
        )
    else:
        set_condition(
            conds, "Ready", "True", "Accepted", f"{status.groups} group(s) sending", now, generation
        )
    changed = status.model_dump(mode="json") != old.model_dump(mode="json")
    return status, events, changed


#: Ready reason of a provider whose spec the operator cannot use.
INVALID_SPEC: Final = conditions.REASON_INVALID_SPEC


def invalid_status(
    provider: SendProvider, now: datetime
) -> tuple[SendProviderStatus | None, ProviderEvent | None]:
    """A provider whose spec is unusable (``provider.invalid``): condition ``Ready`` False,
    reason ``InvalidSpec``, the message naming each field and rule; the status to write only
    when it changed, and ONE Warning event ``InvalidSpec`` when the condition appears or its
    message changes (not once a pass). A provider that was invalid and is usable again: a
    Normal event ``SpecAccepted`` (its ``Ready`` then comes from :func:`provider_status`)."""
    old = provider.status
    generation = provider.metadata.get("generation")
    ready = conditions.find(old.conditions, conditions.READY)
    was = (ready.reason, ready.message) if ready is not None else None
    if provider.invalid is None:
        if was is not None and was[0] == INVALID_SPEC:
            return None, ProviderEvent(
                "Normal", "SpecAccepted", "spec usable again: its groups send under it"
            )
        return None, None
    message = (
        f"{provider.invalid}: the operator does not use this provider; groups resolved to it "
        "are held (no workers) until it is fixed"
    )
    status = old.model_copy(deep=True)
    status.observed_generation = generation
    set_condition(status.conditions, "Ready", "False", INVALID_SPEC, message, now, generation)
    changed = status.model_dump(mode="json") != old.model_dump(mode="json")
    event = (
        ProviderEvent("Warning", INVALID_SPEC, message) if was != (INVALID_SPEC, message) else None
    )
    return (status if changed else None), event


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def group_rules(provider: SendProvider) -> list[ProviderRule]:
    """The provider's rules in force as its groups' planner takes them: one
    :class:`~sendgroup_operator.plan.types.ProviderRule` per ``status.activeRules`` entry,
    with the rule's index in ``spec.pushback.rules`` (None when the spec no longer has it)."""
    index = {r.name: i for i, r in enumerate(provider.spec.pushback.rules)}
    label = f"{provider.kind} {_name(provider)}"
    return [
        ProviderRule(
            provider=label,
            rule=a.rule,
            index=index.get(a.rule),
            action=a.action,
            since=a.since,
            until=a.until,
            reply=a.reply,
        )
        for a in provider.status.active_rules
    ]


def record_resolution(
    status: models.SendGroupStatus, r: Resolution, now: datetime, generation: int | None
) -> bool:
    """Write a group's resolution into its status in place: ``status.provider`` and condition
    ``ProviderResolved`` (apimachinery semantics). Returns True when anything changed."""
    changed = status.provider != r.provider
    status.provider = r.provider
    status_value = r.status if r.status in ("True", "False", "Unknown") else "Unknown"
    changed |= set_condition(
        status.conditions,
        PROVIDER_RESOLVED,
        status_value,  # type: ignore[arg-type]
        r.reason,
        r.message,
        now,
        generation,
    )
    return changed
