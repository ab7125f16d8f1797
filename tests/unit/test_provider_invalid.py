"""A provider whose spec the operator cannot use (a pattern RE2 refuses, an object stored
before the CRD's current rules). Review finding (issue 14): ``_parse_providers`` skipped it
silently, so its groups said ``NoProviderMatched`` (or "does not exist" when named) and sent
with no provider limits at all. Now the provider keeps its name and ``match``, says
``Ready=False`` ``InvalidSpec`` naming the rule (one event), and every group that resolves to
it (by name, domain or MX) is held: no workers, ``Ready=False`` ``ProviderInvalid`` naming the
provider, until it is fixed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from sendgroup_operator import conditions, models, provider_handlers, provider_plan
from sendgroup_operator import plan as p
from sendgroup_operator.provider_models import SendProvider, parse_provider
from sendgroup_operator.settings import Settings

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BAD_RULE = {
    "name": "unusual-rate",
    "codes": [421],
    "pattern": r"(a)\1",  # a backreference: RE2 refuses it
    "trigger": {"immediate": True},
    "action": {"scaleRate": 20},
    "duration": "30m",
}


def _raw(kind: str = "ClusterSendProvider", **spec: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"name": "google", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "match": {"domains": ["gmail.com"], "mxSuffixes": [".google.com"]},
            "rate": {"perMinute": 60},
            "pushback": {"rules": [BAD_RULE]},
            **spec,
        },
    }


def _mx(domain: str) -> Sequence[str]:
    return {"workspace.example": ["aspmx.l.google.com"]}.get(domain, [])


def _spec(host: str, **extra: Any) -> models.SendGroupSpec:
    return models.SendGroupSpec.model_validate(
        {"campaign": "c", "host": host, "workers": 2, **extra}
    )


def test_the_provider_is_kept_with_its_match_and_a_message_naming_the_rule() -> None:
    bad = parse_provider(_raw())
    assert bad.invalid is not None
    assert bad.invalid.startswith("spec.pushback.rules[0] (unusual-rate).pattern: ")
    assert "not an RE2 regular expression" in bad.invalid
    assert bad.spec.match.domains == ["gmail.com"]
    assert bad.spec.rate is None and bad.spec.pushback.rules == []  # nothing else is used
    assert provider_handlers._parse_providers([_raw()])[0].invalid == bad.invalid
    assert parse_provider({**_raw(), "spec": {"match": {"domains": ["gmail.com"]}}}).invalid is None


@pytest.mark.parametrize(
    ("spec", "via"),
    [
        (_spec("gmail.com"), "domain gmail.com"),
        (_spec("workspace.example"), "mx aspmx.l.google.com"),
        (
            _spec("other.example", provider={"kind": "ClusterSendProvider", "name": "google"}),
            "spec.provider",
        ),
    ],
)
def test_a_group_resolved_to_it_is_held_not_unlimited(spec: models.SendGroupSpec, via: str) -> None:
    r = provider_plan.resolve(spec, "mail", [], [parse_provider(_raw())], _mx)
    assert r.provider is not None and (r.provider.name, r.provider.via) == ("google", via)
    assert (r.status, r.reason, r.held, r.spec) == ("False", "ProviderInvalid", True, None)
    assert "ClusterSendProvider google" in r.message
    assert "spec.pushback.rules[0] (unusual-rate).pattern" in r.message
    assert "held" in r.message


def test_one_bad_match_entry_does_not_drop_the_providers_other_claims() -> None:
    """Review finding: ``match`` was read as a whole, so one entry stored before the CRD's
    rules (an MX suffix without its leading dot) emptied it, and a gmail.com group resolved to
    no provider at all: it sent under its own limits only."""
    raw = _raw()
    raw["spec"]["match"] = {
        "domains": ["gmail.com", "Not A Domain", 7],
        "mxSuffixes": ["google.com", ".google.com"],
    }
    bad = parse_provider(raw)
    assert bad.invalid is not None and "spec.match.mxSuffixes.0" in bad.invalid
    assert (bad.spec.match.domains, bad.spec.match.mx_suffixes) == (["gmail.com"], [".google.com"])
    for host in ("gmail.com", "workspace.example"):
        r = provider_plan.resolve(_spec(host), "mail", [], [bad], _mx)
        assert r.provider is not None and r.held, (host, r)
    odd = parse_provider({**_raw(), "spec": {"match": "gmail.com"}})
    assert odd.invalid is not None and odd.spec.match.domains is None


def test_a_claim_written_in_another_case_or_as_one_string_is_kept() -> None:
    """Review finding: the salvage dropped ``Gmail.com`` and ``domains: gmail.com`` (a string,
    not a list), both stored before the CRD's rules, so a gmail.com group resolved to no
    provider and sent without its limits. They claim what they say, written the CRD's way."""
    raw = _raw()
    raw["spec"]["match"] = {"domains": " Gmail.COM. ", "mxSuffixes": [".Google.com", 7]}
    bad = parse_provider(raw)
    assert bad.invalid is not None
    assert (bad.spec.match.domains, bad.spec.match.mx_suffixes) == (["gmail.com"], [".google.com"])
    for host in ("gmail.com", "GMAIL.com", "workspace.example"):
        r = provider_plan.resolve(_spec(host), "mail", [], [bad], _mx)
        assert r.provider is not None and r.held, (host, r)


def test_a_namespaced_invalid_provider_wins_over_a_cluster_one_and_holds() -> None:
    """Precedence is unchanged: the namespaced provider for gmail.com is the one that applies,
    broken or not; falling through to the cluster provider would silently change budgets."""
    good = SendProvider.model_validate(
        {
            "kind": "ClusterSendProvider",
            "metadata": {"name": "google-cluster"},
            "spec": {"match": {"domains": ["gmail.com"]}},
        }
    )
    bad = parse_provider(_raw("SendProvider"))
    r = provider_plan.resolve(_spec("gmail.com"), "mail", [bad], [good], _mx)
    assert r.provider is not None and r.provider.kind == "SendProvider" and r.held


def test_group_provider_gives_no_env_and_the_hold() -> None:
    indexes = {"namespaced_providers": {}, "cluster_providers": {"": [_raw()]}}
    chosen = asyncio.run(
        provider_handlers.group_provider("mail", "g1", _spec("gmail.com"), indexes, Settings())
    )
    assert chosen.env == [] and chosen.rules == []
    assert chosen.held is not None and "ClusterSendProvider google" in chosen.held
    fine = asyncio.run(
        provider_handlers.group_provider("mail", "g1", _spec("yahoo.com"), indexes, Settings())
    )
    assert fine.held is None


def _plan(hold: str | None, deployment: p.DeploymentObs | None = None) -> p.Plan:
    return p.plan(
        p.Group("mail", "g1", "uid-1", 1, T0),
        _spec("gmail.com"),
        models.SendGroupStatus(),
        p.Observed(deployment=deployment, jobs_listed=True),
        p.QueueMeasure(ready=50),
        2,
        Settings(),
        T0,
        (),
        (),
        hold,
    )


def test_the_planner_holds_the_group_no_workers_one_event() -> None:
    held = _plan("ClusterSendProvider google (domain gmail.com) has an invalid spec (...)")
    assert not any(isinstance(a, p.EnsureDeployment) for a in held.actions), held.actions
    ready = conditions.find(held.status.conditions, conditions.READY)
    assert ready is not None and (ready.status, ready.reason) == ("False", "ProviderInvalid")
    assert "ClusterSendProvider google" in ready.message
    assert held.status.phase == models.Phase.PENDING
    assert held.demand == 0  # nothing asked of maxTotalWorkers
    assert [e.reason for e in held.events if e.type == "Warning"] == ["ProviderInvalid"]
    # workers already running (the provider turned invalid): removed
    running = _plan("bad provider", p.DeploymentObs(replicas=2, ready_replicas=2))
    assert any(isinstance(a, p.DeleteDeployment) for a in running.actions)
    # not held: the workers come as before
    assert any(isinstance(a, p.EnsureDeployment) for a in _plan(None).actions)


def test_the_provider_says_invalid_spec_once() -> None:
    bad = parse_provider(_raw())
    status, event = provider_plan.invalid_status(bad, T0)
    assert status is not None and event is not None
    (ready,) = [c for c in status.conditions if c.type == "Ready"]
    assert (ready.status, ready.reason) == ("False", "InvalidSpec")
    assert ready.message.startswith("spec.pushback.rules[0] (unusual-rate).pattern: ")
    assert (event.type, event.reason) == ("Warning", "InvalidSpec")
    # the next pass sees the written status: nothing to write, no second event
    again = parse_provider({**_raw(), "status": status.model_dump(mode="json", by_alias=True)})
    assert provider_plan.invalid_status(again, T0) == (None, None)
    # fixed: one Normal event; Ready then comes from provider_status
    fixed_raw = {**_raw(), "status": status.model_dump(mode="json", by_alias=True)}
    fixed_raw["spec"] = {**fixed_raw["spec"], "pushback": {"rules": []}}
    fixed = parse_provider(fixed_raw)
    assert fixed.invalid is None
    none, accepted = provider_plan.invalid_status(fixed, T0)
    assert none is None and accepted is not None and accepted.reason == "SpecAccepted"


def test_a_group_naming_a_provider_that_does_not_exist_is_held_as_not_found() -> None:
    """Review finding: ``spec.provider`` with a typo (``gogle``) resolved to no provider and
    the group sent under its own limits only, outside the budget it named. It is held, Ready
    False with reason ProviderNotFound (not ProviderInvalid), until the provider exists."""
    indexes = {"namespaced_providers": {}, "cluster_providers": {"": [_raw()]}}
    typo = _spec("gmail.com", provider={"kind": "ClusterSendProvider", "name": "gogle"})
    chosen = asyncio.run(provider_handlers.group_provider("mail", "g1", typo, indexes, Settings()))
    assert chosen.env == [] and chosen.held is not None and "gogle" in chosen.held
    assert chosen.resolution.reason == conditions.REASON_PROVIDER_NOT_FOUND
    group = p.Group("mail", "g1", "uid-1", 1, T0)
    result = p.plan(
        group,
        typo,
        models.SendGroupStatus(),
        p.Observed(jobs_listed=True),
        p.QueueMeasure(ready=10),
        2,
        Settings(),
        T0,
        chosen.env,
        chosen.rules,
        chosen.held,
        chosen.resolution.reason,
    )
    ready = conditions.find(result.status.conditions, conditions.READY)
    assert ready is not None and (ready.status, ready.reason) == ("False", "ProviderNotFound")
    assert not any(type(a).__name__ == "CreateDeployment" for a in result.actions)
    assert [e.reason for e in result.events] == ["ProviderNotFound"]


def test_a_laravel_runtime_group_says_it_is_not_paced_and_takes_no_share() -> None:
    """Review finding: a ``runtime: laravel`` group (Laravel's queue:work, which takes no
    provider permit) was said to send "under" its provider and was given a share it never
    used, while sending unpaced. Its message now says so, and the provider pass leaves it
    out of the shares."""
    from sendgroup_operator.provider_models import parse_provider as parse

    good = {
        "kind": "ClusterSendProvider",
        "metadata": {"name": "google", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"match": {"domains": ["gmail.com"]}, "rate": {"perMinute": 600}},
    }
    assert parse(good).invalid is None
    indexes = {"namespaced_providers": {}, "cluster_providers": {"": [good]}}
    laravel = _spec("gmail.com", worker={"runtime": "laravel", "image": "shop/app:1"})
    chosen = asyncio.run(
        provider_handlers.group_provider("mail", "g", laravel, indexes, Settings())
    )
    assert chosen.held is None and chosen.resolution.status == "True"
    assert "do not pace this group's workers" in chosen.resolution.message
    assert provider_plan.laravel_unpaced(laravel) is not None
    python = asyncio.run(
        provider_handlers.group_provider("mail", "g", _spec("gmail.com"), indexes, Settings())
    )
    assert "do not pace" not in python.resolution.message
    assert provider_plan.laravel_unpaced(_spec("gmail.com")) is None


def test_a_tenants_sendprovider_naming_a_redis_not_allowed_holds_its_groups() -> None:
    """Review finding (issue 16): a namespaced SendProvider's ``spec.redis.url`` was used as
    is, so a tenant made the operator connect to any host (the check groups get was missing
    here). Now only the default Redis and ``allowedRedisHosts``; the provider is unusable
    (its message names the field, never the URL) and its groups are held; a cluster-scoped
    provider is the admin's and is not checked."""
    settings = Settings(default_redis_url="redis://redis.sendgroups:6379/0")

    def namespaced(url: str) -> dict[str, Any]:
        raw = _raw("SendProvider", redis={"url": url}, pushback={"rules": []})
        raw["metadata"]["namespace"] = "mail"
        return raw

    refused = provider_handlers._admitted(
        parse_provider(namespaced("redis://10.0.0.9:6379/0")), settings
    )
    assert refused.invalid is not None and refused.invalid.startswith("spec.redis.url: ")
    assert "10.0.0.9" not in refused.invalid and "nothing was contacted" in refused.invalid
    indexes = {
        "namespaced_providers": {"mail": [namespaced("redis://10.0.0.9:6379/0")]},
        "cluster_providers": {},
    }
    chosen = asyncio.run(
        provider_handlers.group_provider("mail", "g1", _spec("gmail.com"), indexes, settings)
    )
    assert chosen.env == [] and chosen.held is not None and "spec.redis.url" in chosen.held
    for url in ("redis://redis.sendgroups:6379/1", "redis://allowed.example:6380/0"):
        allowed = Settings(
            default_redis_url="redis://redis.sendgroups:6379/0",
            allowed_redis_hosts=["allowed.example"],
        )
        assert provider_handlers._admitted(parse_provider(namespaced(url)), allowed).invalid is None
    cluster = _raw(redis={"url": "redis://10.0.0.9:6379/0"}, pushback={"rules": []})
    assert provider_handlers._admitted(parse_provider(cluster), settings).invalid is None
