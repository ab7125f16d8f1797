"""The provider passes' shared membership round (issue 15): every group's spec validated once
per watch event; one round a second for all providers together, not one per provider; a group
resolved again only when its spec or a provider's spec changed, or after RESOLUTION_KEEP; each
provider gets exactly the groups a group-by-group resolution gives it."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from sendgroup_operator import provider_handlers, provider_plan
from sendgroup_operator.provider_models import SendProvider


def _plain(kind: str, name: str, namespace: str | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta, "spec": spec, "status": {}}


# no mxSuffixes anywhere: an unmatched host needs no DNS (the machine has none)
GOOGLE = _plain("ClusterSendProvider", "google", match={"domains": ["gmail.com"]})
MS = _plain("ClusterSendProvider", "microsoft", match={"domains": ["outlook.com"]})
TENANT_A = _plain("SendProvider", "a-gmail", "a", match={"domains": ["gmail.com"]})
CLUSTER = [SendProvider.model_validate(p) for p in (GOOGLE, MS)]
INDEXES = {"namespaced_providers": {"a": [TENANT_A]}}


def _body(ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "generation": 1},
        "spec": spec,
        "status": {},
    }


@dataclasses.dataclass
class _Rt:
    groups: dict[tuple[str, str], dict[str, Any]]
    provider_round: Any = None
    provider_round_lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)


GROUPS = {
    ("a", "g1"): {"campaign": "c", "host": "gmail.com"},
    ("a", "o1"): {"campaign": "c", "host": "outlook.com"},
    ("b", "g2"): {"campaign": "c", "host": "gmail.com"},
    ("b", "x1"): {"campaign": "c", "host": "example.org"},
    ("b", "bad"): {"campaign": "c", "host": "gmail.com", "workers": -3},
}


def _runtime() -> _Rt:
    return _Rt({k: provider_handlers.group_entry(_body(*k, v)) for k, v in GROUPS.items()})


def test_the_spec_is_validated_once_at_the_event_and_an_invalid_one_kept_as_none() -> None:
    entry = provider_handlers.group_entry(_body("a", "g1", GROUPS[("a", "g1")]))
    assert entry["parsed"] is not None and entry["parsed"].host == "gmail.com"
    assert entry["specKey"] == provider_handlers.spec_key(entry["parsed"])
    assert len(entry["specKey"]) == 16
    # a changed spec gets another key (the resolution cache must not reuse its answer)
    other = provider_handlers.group_entry(_body("a", "g1", {**GROUPS[("a", "g1")], "workers": 7}))
    assert other["specKey"] != entry["specKey"]
    bad = provider_handlers.group_entry(_body("b", "bad", GROUPS[("b", "bad")]))
    assert bad["parsed"] is None and bad["spec"]["workers"] == -3


def test_the_entry_keeps_the_groups_status_but_not_kopfs_record_in_it() -> None:
    body = _body("a", "g1", GROUPS[("a", "g1")])
    body["status"] = {"phase": "Idle", "kopf": {"last-handled-configuration": "{}" * 300}}
    entry = provider_handlers.group_entry(body)
    assert entry["status"] == {"phase": "Idle"}
    assert body["status"]["kopf"]  # the object itself is left as it is


def test_each_provider_gets_the_groups_a_one_by_one_resolution_gives_it() -> None:
    async def run() -> dict[Any, list[tuple[str, str]]]:
        provider_handlers._resolved.clear()
        return await provider_handlers.membership(_runtime(), INDEXES, CLUSTER)

    got = asyncio.run(run())
    assert {k: sorted(v) for k, v in got.items()} == {
        ("SendProvider", "a-gmail", "a"): [("a", "g1")],  # the tenant's own provider wins
        ("ClusterSendProvider", "microsoft", None): [("a", "o1")],
        ("ClusterSendProvider", "google", None): [("b", "g2")],
    }  # example.org: no provider; the invalid spec: none
    # the same as resolving each group alone
    tenant = [SendProvider.model_validate(TENANT_A)]
    for (ns, name), spec in GROUPS.items():
        entry = provider_handlers.group_entry(_body(ns, name, spec))
        if entry["parsed"] is None:
            continue
        r = provider_handlers.resolve_group(
            entry["parsed"], ns, tenant if ns == "a" else [], CLUSTER
        )
        homes = [k for k, v in got.items() if (ns, name) in v]
        if r.provider is None:
            assert homes == []
        else:
            assert homes == [
                (
                    r.provider.kind,
                    r.provider.name,
                    ns if r.provider.kind == "SendProvider" else None,
                )
            ]


def _count_resolutions(monkeypatch: pytest.MonkeyPatch, dns_down: str | None = None) -> list[str]:
    """The hosts ``resolve_group`` is called for, in order, from now on; ``dns_down``: a host
    whose resolution comes back ``Unknown`` (a DNS failure)."""
    resolved: list[str] = []
    real = provider_handlers.resolve_group

    def counting(spec: Any, *args: Any, **kwargs: Any) -> provider_plan.Resolution:
        resolved.append(spec.host)
        if spec.host == dns_down:
            return provider_plan.Resolution(None, "Unknown", "MxLookupFailed", "DNS timeout")
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(provider_handlers, "resolve_group", counting)
    return resolved


def _age(rt: _Rt, round_by: float, resolutions_by: float) -> None:
    """Move the last round and every kept resolution back in time by these seconds."""
    rt.provider_round.at -= round_by
    for key in list(provider_handlers._resolved):
        at, r = provider_handlers._resolved[key]
        provider_handlers._resolved[key] = (at - resolutions_by, r)


def test_one_round_per_second_whatever_the_number_of_provider_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolved = _count_resolutions(monkeypatch)

    async def run() -> tuple[int, int, int]:
        provider_handlers._resolved.clear()
        rt = _runtime()
        # eight providers' passes at the same moment: one round
        await asyncio.gather(
            *(provider_handlers.membership(rt, INDEXES, CLUSTER) for _ in range(8))
        )
        first = len(resolved)
        # a group added within the second is seen by the next round, not this one
        rt.groups[("b", "new")] = provider_handlers.group_entry(
            _body("b", "new", {"campaign": "c", "host": "outlook.com"})
        )
        again = await provider_handlers.membership(rt, INDEXES, CLUSTER)
        assert ("b", "new") not in again.get(("ClusterSendProvider", "microsoft", None), [])
        rt.provider_round.at -= provider_handlers.RESOLUTION_REUSE  # the second is over
        later = await provider_handlers.membership(rt, INDEXES, CLUSTER)
        assert ("b", "new") in later[("ClusterSendProvider", "microsoft", None)]
        second = len(resolved) - first  # only the new group: the others' are kept
        # a provider's spec changes (its generation): every group is resolved again at once
        changed = [SendProvider.model_validate(p) for p in (GOOGLE, MS)]
        changed[1].metadata["generation"] = 2
        rt.provider_round.at -= provider_handlers.RESOLUTION_REUSE
        await provider_handlers.membership(rt, INDEXES, changed)
        third = len(resolved) - first - second
        # and after RESOLUTION_KEEP seconds anyway (an MX answer may have changed)
        _age(rt, provider_handlers.RESOLUTION_REUSE, provider_handlers.RESOLUTION_KEEP)
        await provider_handlers.membership(rt, INDEXES, changed)
        fourth = len(resolved) - first - second - third
        return first, second, third, fourth, len(rt.groups) - 1  # the invalid is never resolved

    first, second, third, fourth, valid = asyncio.run(run())
    assert (first, second, third, fourth) == (valid - 1, 1, valid, valid)


def test_a_resolution_left_unknown_by_dns_is_tried_again_next_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolved = _count_resolutions(monkeypatch, dns_down="dns-down.example")

    async def run() -> list[str]:
        provider_handlers._resolved.clear()
        rt = _runtime()
        rt.groups[("b", "dns")] = provider_handlers.group_entry(
            _body("b", "dns", {"campaign": "c", "host": "dns-down.example"})
        )
        await provider_handlers.membership(rt, INDEXES, CLUSTER)
        resolved.clear()
        _age(rt, provider_handlers.RESOLUTION_REUSE, provider_handlers.RESOLUTION_REUSE)
        await provider_handlers.membership(rt, INDEXES, CLUSTER)
        return resolved

    assert asyncio.run(run()) == ["dns-down.example"]
