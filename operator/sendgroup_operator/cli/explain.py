"""Pure text of ``kubectl sendgroup explain GROUP``: which provider applies to the group and
why (``status.provider.via``: spec.provider, the domain, or the MX host), the provider's
budget and its effective rate now, this group's share now, and the provider's active rules.
Reads only the objects' ``status`` as the operator wrote it. No API calls here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _cond(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def _rate(value: Any) -> str:
    return "unlimited" if value is None else f"{float(value):g}/min"


def explain(group: Mapping[str, Any], provider: Mapping[str, Any] | None) -> str:
    """Lines for one group (``group``: the SendGroup object) and its provider object (None
    when the group has none or it could not be read)."""
    meta = group.get("metadata") or {}
    spec = group.get("spec") or {}
    status = group.get("status") or {}
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    own = (spec.get("rate") or {}).get("perMinute")
    lines = [f"sendgroup {key} (host {spec.get('host')}, campaign {spec.get('campaign')})"]
    resolved = status.get("provider")
    cond = _cond(group, "ProviderResolved")
    if not resolved:
        why = f"{cond.get('reason')}: {cond.get('message')}" if cond else "not resolved yet"
        lines.append(f"provider:  none ({why})")
        lines.append(f"limits:    the group's own only: rate {_rate(own)}")
        return "\n".join(lines)
    lines.append(
        f"provider:  {resolved.get('kind')} {resolved.get('name')} ({resolved.get('via')})"
    )
    if provider is None:
        lines.append("           (the provider object could not be read)")
        return "\n".join(lines)
    pspec = provider.get("spec") or {}
    pstatus = provider.get("status") or {}
    budget = (pspec.get("rate") or {}).get("perMinute")
    effective = (pstatus.get("effectiveRate") or {}).get("perMinute")
    concurrency = pspec.get("concurrency")
    lines.append(
        f"budget:    {_rate(budget)}, effective now {_rate(effective if budget else None)}, "
        f"concurrency {concurrency if concurrency else 'unlimited'}, "
        f"{pstatus.get('groups', 0)} group(s) sending"
    )
    share = next((s for s in pstatus.get("shares") or [] if s.get("group") == key), None)
    priority = spec.get("priority", "normal")
    weight = spec.get("weight", 1)
    if share is None:
        lines.append(f"share now: none (not sending now); priority {priority}, weight {weight}")
    else:
        lines.append(
            f"share now: {_rate(share.get('perMinute'))} (priority {priority}, weight {weight}); "
            f"own rate {_rate(own)}"
        )
    rules = pstatus.get("activeRules") or []
    if not rules:
        lines.append("rules:     none active")
    for i, r in enumerate(rules):
        head = "rules:    " if i == 0 else "          "
        lines.append(
            f"{head} {r.get('rule')}: {r.get('action')} since {r.get('since')} until "
            f"{r.get('until')}, fired by {r.get('reply')!r}"
        )
    return "\n".join(lines)
