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
from dataclasses import dataclass
from typing import Any, Final

from sendgroup_operator import durations
from sendgroup_operator.models import (
    CLUSTER_PROVIDER_KIND,
    PROVIDER_KIND,
    Priority,
    ProviderKind,
    ResolvedProvider,
    SendGroupSpec,
)
from sendgroup_operator.provider_models import SendProvider, SendProviderSpec

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
) -> Resolution:
    """Which provider ``spec`` (a group in ``namespace``) sends under.

    ``spec.provider`` wins when set (it must exist: else status False, ``ProviderNotFound``).
    Otherwise, for ``spec.host`` (lower-cased): namespaced SendProviders first (domains, then
    MX suffixes), then ClusterSendProviders (domains, then MX suffixes); among several claims
    the earliest created wins. MX records are looked up only when a provider has MX suffixes
    and no domain matched. A DNS failure gives status Unknown (``MxLookupFailed``; the caller
    retries), a host that matches nothing status False (``NoProviderMatched``: the group sends
    under its own limits only)."""
    ref = spec.provider
    if ref is not None:
        pool = namespaced if ref.kind == ProviderKind.SEND_PROVIDER else cluster
        found = next((p for p in pool if _name(p) == ref.name), None)
        if found is None:
            where = f" in namespace {namespace}" if ref.kind == PROVIDER_KIND else ""
            return Resolution(
                None,
                "False",
                "ProviderNotFound",
                f"spec.provider names {ref.kind} {ref.name}{where}, which does not exist: "
                "the group sends under its own limits until it does",
            )
        chosen = ResolvedProvider(kind=ref.kind, name=ref.name, via="spec.provider")
        return Resolution(chosen, "True", "ProviderReferenced", _message(chosen), spec=found.spec)
    host = spec.host.lower().rstrip(".")
    mx_hosts: Sequence[str] | None = None
    for kind, pool in (
        (ProviderKind.SEND_PROVIDER, namespaced),
        (ProviderKind.CLUSTER_SEND_PROVIDER, cluster),
    ):
        hit = _domain_match(host, pool)
        if hit is not None:
            chosen = ResolvedProvider(kind=kind, name=_name(hit), via=f"domain {host}")
            return Resolution(chosen, "True", "DomainMatched", _message(chosen), spec=hit.spec)
        if any(p.spec.match.mx_suffixes for p in pool):
            if mx_hosts is None:
                try:
                    mx_hosts = [h.lower().rstrip(".") for h in mx(host)]
                except Exception as exc:  # the adapter's DNS error, whatever its type
                    return Resolution(
                        None,
                        "Unknown",
                        "MxLookupFailed",
                        f"MX lookup of {host} failed ({exc}); retrying. The group sends under "
                        "its own limits meanwhile",
                    )
            mx_hit = _mx_match(mx_hosts, pool)
            if mx_hit is not None:
                p, mx_host = mx_hit
                chosen = ResolvedProvider(kind=kind, name=_name(p), via=f"mx {mx_host}")
                return Resolution(chosen, "True", "MxMatched", _message(chosen), spec=p.spec)
    return Resolution(
        None,
        "False",
        "NoProviderMatched",
        f"no SendProvider or ClusterSendProvider matches {host}"
        + (f" (MX {', '.join(mx_hosts)})" if mx_hosts else "")
        + ": the group sends under its own limits only",
    )


def _message(r: ResolvedProvider) -> str:
    return f"sends under {r.kind} {r.name} ({r.via})"


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
    ``sending``: has work and is neither paused nor finished (others hold no share)."""

    key: str
    priority: Priority = Priority.NORMAL
    weight: int = 1
    limit: float | None = None
    sending: bool = True


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


def shares(per_minute: float | None, groups: Sequence[GroupDemand]) -> dict[str, float]:
    """Each sending group's share of a provider's ``per_minute`` (recipients/min): ``high``
    groups first, max-min fair by weight among them (each capped by its own limit); ``normal``
    groups share what is left the same way; groups not sending hold no share (0). Without a
    provider rate there is nothing to share: {} (the worker then applies no share limit).

    The shares of sending groups sum to ``min(per_minute, sum of their limits)``."""
    if per_minute is None:
        return {}
    out = {g.key: 0.0 for g in groups}
    left = float(per_minute)
    for priority in (Priority.HIGH, Priority.NORMAL):
        tier = [g for g in groups if g.sending and g.priority == priority]
        given, left = _water_fill(left, tier)
        out.update(given)
    return out


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


def worker_provider_env(
    kind: str,
    name: str,
    namespace: str | None,
    spec: SendProviderSpec,
    group_key: str,
) -> list[dict[str, Any]]:
    """Env entries of the worker container for its provider: ``SENDGROUP_PROVIDER`` (JSON) and,
    when the provider names its own Redis, ``PROVIDER_REDIS_URL`` (a value, or a
    ``secretKeyRef``: the kubelet reads that Secret in the worker pod's namespace, so a
    ClusterSendProvider's Secret must exist in every namespace of its groups)."""
    env: list[dict[str, Any]] = [
        {
            "name": "SENDGROUP_PROVIDER",
            "value": json.dumps(
                worker_provider_config(kind, name, namespace, spec, group_key),
                separators=(",", ":"),
            ),
        }
    ]
    redis = spec.redis
    if redis is not None and redis.url:
        env.append({"name": "PROVIDER_REDIS_URL", "value": redis.url})
    elif redis is not None and redis.secret_ref is not None:
        env.append(
            {
                "name": "PROVIDER_REDIS_URL",
                "valueFrom": {
                    "secretKeyRef": {"name": redis.secret_ref.name, "key": redis.secret_ref.key}
                },
            }
        )
    return env


def share_fields(allocation: Mapping[str, float]) -> dict[str, str]:
    """The provider's ``shares`` hash as written to Redis: group key -> recipients/min with
    3 decimals (a share of 0 is written: the group waits; absent = no share limit)."""
    return {k: f"{max(0.0, v):.3f}" for k, v in sorted(allocation.items()) if math.isfinite(v)}
