"""Pure provider decisions: resolution order, overlapping claims, shares (high first, then
max-min fair by weight) and the worker's view of its provider, as tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from sendgroup_operator import models, provider_io, provider_plan
from sendgroup_operator.models import Priority
from sendgroup_operator.provider_models import SendProvider
from sendgroup_operator.provider_plan import GroupDemand, shares
from sendgroup_operator.settings import Settings
from sendgroup_worker.provider import ProviderConfig


def _p(kind: str, name: str, created: str = "2026-01-01T00:00:00Z", **spec: Any) -> SendProvider:
    return SendProvider.model_validate(
        {"kind": kind, "metadata": {"name": name, "creationTimestamp": created}, "spec": spec}
    )


GOOGLE = _p(
    "ClusterSendProvider",
    "google",
    match={"domains": ["gmail.com"], "mxSuffixes": [".google.com"]},
    rate={"perMinute": 3000},
)
MS = _p("ClusterSendProvider", "microsoft", match={"domains": ["outlook.com", "hotmail.com"]})
MINE = _p("SendProvider", "our-gmail", match={"domains": ["gmail.com"]})
MX = {
    "workspace-customer.com": ["alt1.aspmx.l.google.com", "aspmx.l.google.com"],
    "small.example": ["mx.small.example"],
}


def _mx(domain: str) -> Sequence[str]:
    if domain == "broken.example":
        raise TimeoutError("DNS timeout")
    return MX.get(domain, [])


def _spec(host: str, **extra: Any) -> models.SendGroupSpec:
    return models.SendGroupSpec.model_validate({"campaign": "c", "host": host, **extra})


@pytest.mark.parametrize(
    ("host", "namespaced", "extra", "expected"),
    [
        (
            "gmail.com",
            [],
            {},
            ("True", "DomainMatched", "ClusterSendProvider/google", "domain gmail.com"),
        ),
        (
            "GMail.com",
            [MINE],
            {},
            ("True", "DomainMatched", "SendProvider/our-gmail", "domain gmail.com"),
        ),
        (
            "workspace-customer.com",
            [],
            {},
            ("True", "MxMatched", "ClusterSendProvider/google", "mx alt1.aspmx.l.google.com"),
        ),
        ("small.example", [], {}, ("False", "NoProviderMatched", None, None)),
        ("broken.example", [], {}, ("Unknown", "MxLookupFailed", None, None)),
        (
            "gmail.com",
            [],
            {"provider": {"name": "microsoft"}},
            ("True", "ProviderReferenced", "ClusterSendProvider/microsoft", "spec.provider"),
        ),
        (
            "gmail.com",
            [],
            {"provider": {"kind": "SendProvider", "name": "nope"}},
            ("False", "ProviderNotFound", None, None),
        ),
    ],
)
def test_resolution(
    host: str, namespaced: list[SendProvider], extra: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    r = provider_plan.resolve(_spec(host, **extra), "mail", namespaced, [GOOGLE, MS], _mx)
    got = (
        r.status,
        r.reason,
        f"{r.provider.kind}/{r.provider.name}" if r.provider else None,
        r.provider.via if r.provider else None,
    )
    assert got == expected, r.message
    # review finding: a misspelt spec.provider sent with no provider limit at all; it is held
    assert r.held == (r.reason == "ProviderNotFound")
    if r.provider is None and not r.held:
        assert "own limits" in r.message
    if r.held:
        assert "held, no workers" in r.message


def test_no_mx_lookup_when_a_domain_matches_or_nobody_has_mx_suffixes() -> None:
    def explode(domain: str) -> Sequence[str]:
        raise AssertionError(f"looked up {domain}")

    assert provider_plan.resolve(_spec("gmail.com"), "ns", [], [GOOGLE], explode).provider
    r = provider_plan.resolve(_spec("yahoo.com"), "ns", [], [MS], explode)
    assert r.reason == "NoProviderMatched"


def test_a_dns_failure_keeps_the_limits_the_group_can_still_name() -> None:
    """Review finding: with a namespaced SendProvider that has MX suffixes, a DNS failure
    returned "no provider" before the ClusterSendProvider that claims the host by domain was
    tried, and a group that matched by MX lost its provider: either way its workers rolled
    without the provider's limits. Now, in resolution order: the previous MX match while its
    provider exists and still has suffixes, a cluster domain claim, else none."""

    def down(domain: str) -> Sequence[str]:
        raise TimeoutError("DNS timeout")

    ours_mx = _p("SendProvider", "our-mx", match={"mxSuffixes": [".example.net"]})

    def resolve(host: str, namespaced: list[SendProvider], previous: Any = None) -> tuple[Any, ...]:
        r = provider_plan.resolve(_spec(host), "mail", namespaced, [GOOGLE, MS], down, previous)
        name = f"{r.provider.kind}/{r.provider.name}" if r.provider else None
        assert r.status == "Unknown" and r.reason == "MxLookupFailed", r
        return name, r.message

    # a namespaced MX-suffix provider cannot be asked: gmail.com's cluster claim holds
    name, message = resolve("gmail.com", [ours_mx])
    assert name == "ClusterSendProvider/google"
    assert "sending under ClusterSendProvider google (domain gmail.com) meanwhile" in message
    # the group matched the namespaced provider by MX before: it keeps it (that claim comes
    # before a cluster domain)
    before = models.ResolvedProvider(kind="SendProvider", name="our-mx", via="mx mx.example.net")
    assert resolve("gmail.com", [ours_mx], before)[0] == "SendProvider/our-mx"
    # a Workspace group keeps google through the outage
    was = models.ResolvedProvider(
        kind="ClusterSendProvider", name="google", via="mx aspmx.l.google.com"
    )
    name, message = resolve("workspace-customer.com", [], was)
    assert name == "ClusterSendProvider/google" and "keeps sending under" in message
    # not kept: the provider is gone, has no MX suffixes left, or the match was by domain
    assert resolve("workspace-customer.com", [], was.model_copy(update={"name": "gone"}))[0] is None
    no_suffix = _p("ClusterSendProvider", "google", match={"domains": ["gmail.com"]})
    r = provider_plan.resolve(
        _spec("workspace-customer.com"), "m", [ours_mx], [no_suffix], down, was
    )
    assert r.provider is None and "own limits" in r.message
    by_domain = was.model_copy(update={"via": "domain workspace-customer.com"})
    assert resolve("workspace-customer.com", [], by_domain)[0] is None
    # a previous cluster MX match does not win over a cluster domain claim
    assert resolve("outlook.com", [ours_mx], was)[0] == "ClusterSendProvider/microsoft"


def test_the_previous_provider_is_kept_only_for_the_spec_it_was_resolved_for() -> None:
    """Review finding: a group whose ``spec.host`` changed during a DNS outage kept the old
    host's provider ("keeps sending under google") for a host nobody had resolved. The
    previous provider counts only when its ProviderResolved condition was written for the
    current generation."""
    from sendgroup_operator import provider_handlers

    status = {
        "provider": {
            "kind": "ClusterSendProvider",
            "name": "google",
            "via": "mx aspmx.l.google.com",
        },
        "conditions": [
            {
                "type": "ProviderResolved",
                "status": "True",
                "reason": "MxMatched",
                "message": "sends under ClusterSendProvider google (mx aspmx.l.google.com)",
                "lastTransitionTime": "2026-12-01T00:00:00Z",
                "observedGeneration": 3,
            }
        ],
    }
    kept = provider_handlers.previous_provider(status, 3)
    assert kept is not None and kept.name == "google"
    assert provider_handlers.previous_provider(status, 4) is None  # spec changed since
    assert provider_handlers.previous_provider(status, None) is None
    assert provider_handlers.previous_provider({"provider": "garbage"}, 3) is None
    assert provider_handlers.previous_provider({}, 3) is None


def test_overlapping_cluster_claims_are_reported_on_the_later_provider() -> None:
    later = _p(
        "ClusterSendProvider",
        "google-copy",
        "2026-02-01T00:00:00Z",
        match={"domains": ["gmail.com", "x.com"], "mxSuffixes": [".google.com"]},
    )
    claims = provider_plan.overlapping_claims([later, GOOGLE, MS])
    assert claims == {
        "google-copy": [
            "domain gmail.com is claimed by google",
            "mxSuffix .google.com is claimed by google",
        ]
    }
    # resolution uses the earlier claim whatever the list order
    r = provider_plan.resolve(_spec("gmail.com"), "ns", [], [later, GOOGLE], _mx)
    assert r.provider is not None and r.provider.name == "google"


H, N = Priority.HIGH, Priority.NORMAL


@pytest.mark.parametrize(
    ("rate", "groups", "expected"),
    [
        # equal weights, unlimited: even split
        (
            1200,
            [GroupDemand("a"), GroupDemand("b"), GroupDemand("c")],
            {"a": 400, "b": 400, "c": 400},
        ),
        # weights 1:2
        (900, [GroupDemand("a"), GroupDemand("b", weight=2)], {"a": 300, "b": 600}),
        # a group limited below its fair share leaves the rest to the others (max-min)
        (
            1200,
            [GroupDemand("a", limit=100), GroupDemand("b"), GroupDemand("c")],
            {"a": 100, "b": 550, "c": 550},
        ),
        # high first: a high group takes what it can use, normals share the rest
        (
            1200,
            [GroupDemand("urgent", H, limit=300), GroupDemand("a"), GroupDemand("b")],
            {"urgent": 300, "a": 450, "b": 450},
        ),
        # an unlimited high group whose use is not known (no measurement) takes the whole
        # budget: normals wait (a measured one is capped by its use: test_provider_borrow)
        (1200, [GroupDemand("urgent", H), GroupDemand("a")], {"urgent": 1200, "a": 0}),
        # paused / idle / finished groups hold no share
        (1200, [GroupDemand("a"), GroupDemand("b", sending=False)], {"a": 1200, "b": 0}),
        # everybody limited below the budget: shares are the limits
        (1200, [GroupDemand("a", limit=100), GroupDemand("b", limit=200)], {"a": 100, "b": 200}),
    ],
)
def test_shares(rate: int, groups: list[GroupDemand], expected: dict[str, float]) -> None:
    got = shares(rate, groups)
    assert got == pytest.approx(expected)
    sending = [g for g in groups if g.sending]
    limits = sum(g.limit if g.limit is not None else float("inf") for g in sending)
    assert sum(got.values()) == pytest.approx(min(rate, limits))


def test_no_provider_rate_means_no_shares() -> None:
    assert shares(None, [GroupDemand("a")]) == {}
    assert provider_plan.share_fields({"b": 1.0 / 3, "a": 0.0}) == {"a": "0.000", "b": "0.333"}


def test_the_worker_env_parses_into_the_workers_provider_config() -> None:
    spec = GOOGLE.spec.model_copy(
        update={
            "concurrency": 20,
            "redis": models.RedisSpec.model_validate({"secretRef": {"name": "r", "key": "url"}}),
            "pushback": GOOGLE.spec.pushback.model_validate(
                {
                    "rules": [
                        {
                            "name": "unusual-rate",
                            "codes": [421, 451],
                            "pattern": "(?i)unusual rate",
                            "trigger": {"count": 3, "window": "10m"},
                            "action": {"scaleRate": 20},
                            "duration": "30m",
                        },
                        {
                            "name": "blocked",
                            "codes": [421],
                            "trigger": {"immediate": True},
                            "action": {"suspend": True},
                            "duration": "1h",
                            "recovery": {"stepPercent": 25, "every": "5m"},
                        },
                    ]
                }
            ),
        }
    )
    env = provider_plan.worker_provider_env(
        "ClusterSendProvider", "google", None, spec, "mail/g1", Settings.from_env({})
    )
    assert env[1] == {
        "name": "PROVIDER_REDIS_URL",
        "valueFrom": {"secretKeyRef": {"name": "r", "key": "url"}},
    }
    cfg = ProviderConfig.model_validate_json(env[0]["value"])
    assert (cfg.id, cfg.group, cfg.per_minute, cfg.concurrency) == (
        "csp/google",
        "mail/g1",
        3000,
        20,
    )
    first, second = cfg.rules
    assert (first.count, first.window, first.action, first.value, first.duration) == (
        3,
        600.0,
        "scale",
        20,
        1800.0,
    )
    assert (second.count, second.action, second.step_percent, second.every) == (
        1,
        "suspend",
        25,
        300.0,
    )
    assert provider_plan.provider_id("SendProvider", "p", "ns") == "sp/ns/p"


def test_rule_state_parses_what_the_worker_script_writes_and_recovers_additively() -> None:
    r = provider_plan.RuleState.parse("unusual-rate", "scale|20|1000000|1060000|40|30000")
    assert r is not None and (r.since, r.until, r.every) == (1000.0, 1060.0, 30.0)
    assert [round(r.factor(t), 2) for t in (1000, 1059.9, 1060, 1089.9, 1090)] == [
        0.2,
        0.2,
        0.6,
        0.6,
        1.0,
    ]
    assert r.holds(1089) and not r.holds(1090)
    assert provider_plan.RuleState.parse("x", "garbage") is None
    suspend = provider_plan.RuleState("blocked", "suspend", 0, 0, 100)
    assert provider_plan.effective_rate(3000, [r, suspend], 50) == 0.0
    assert provider_plan.effective_rate(3000, [r, suspend], 1000) == pytest.approx(600)
    assert provider_plan.effective_rate(None, [r], 1000) is None


def test_provider_status_conditions_shares_and_events() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    t = now.timestamp()
    demands = [
        GroupDemand("mail/urgent", H, limit=300),
        GroupDemand("mail/a"),
        GroupDemand("mail/b", sending=False),
    ]
    rule = provider_plan.RuleState("unusual-rate", "scale", 20, t - 10, t + 1790)
    allocation = shares(provider_plan.scaled_rate(3000, [rule], t), demands)
    status, events, changed = provider_plan.provider_status(
        GOOGLE, demands, allocation, [rule], {"unusual-rate": "421 4.7.28 unusual rate"}, [], now
    )
    assert changed
    assert status.groups == 2
    assert status.effective_rate.per_minute == 600
    # 20 % of 3000 = 600: the high group keeps its 300 first, the normal one gets the rest
    assert [(s.group, s.per_minute) for s in status.shares] == [
        ("mail/a", 300.0),
        ("mail/urgent", 300.0),
    ]
    assert [(a.rule, a.action, a.reply) for a in status.active_rules] == [
        ("unusual-rate", "ScaleRate(20%)", "421 4.7.28 unusual rate")
    ]
    conds = {c.type: (c.status, c.reason) for c in status.conditions}
    assert conds == {
        "Throttled": ("True", "RuleUnusualRate"),
        "Suspended": ("False", "NoRule"),
        "Ready": ("True", "Accepted"),
    }
    assert [(e.reason, e.type) for e in events] == [("RuleFired", "Warning")]
    # the same state again: no write, no event
    again = GOOGLE.model_copy(update={"status": status})
    _, events2, changed2 = provider_plan.provider_status(
        again, demands, allocation, [rule], {}, [], now
    )
    assert (events2, changed2) == ([], False)
    # the rule recovered: it expires with an event, Throttled goes False
    later = datetime.fromtimestamp(t + 1790 + 600 * 5, UTC)
    status3, events3, _ = provider_plan.provider_status(
        again, demands, allocation, [rule], {}, ["domain gmail.com is claimed by google"], later
    )
    assert [e.reason for e in events3] == ["RuleExpired"]
    conds3 = {c.type: (c.status, c.reason) for c in status3.conditions}
    assert conds3["Throttled"] == ("False", "NoRule")
    assert conds3["Ready"] == ("False", "OverlappingClaim")


def test_the_worker_deployment_carries_the_provider_env_and_its_hash_changes() -> None:
    from sendgroup_operator import builders
    from sendgroup_operator.settings import Settings

    spec = _spec("gmail.com")
    ref = builders.GroupRef(
        namespace="mail", name="g1", uid="u", campaign="c", host="gmail.com", created_at=""
    )
    settings = Settings.from_env({})
    env = provider_plan.worker_provider_env(
        "ClusterSendProvider", "google", None, GOOGLE.spec, "mail/g1", settings
    )
    dep = builders.deployment(ref, spec, settings, 1, env)
    names = [e["name"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert "SENDGROUP_PROVIDER" in names
    assert builders.template_hash(ref, spec, settings) != builders.template_hash(
        ref, spec, settings, env
    )


def test_the_resolution_lands_in_the_group_status_once() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 12, 1, tzinfo=UTC)
    status = models.SendGroupStatus()
    r = provider_plan.resolve(_spec("workspace-customer.com"), "mail", [], [GOOGLE], _mx)
    assert provider_plan.record_resolution(status, r, now, 3)
    assert status.provider is not None and status.provider.via == "mx alt1.aspmx.l.google.com"
    (cond,) = status.conditions
    assert (cond.type, cond.status, cond.reason) == ("ProviderResolved", "True", "MxMatched")
    assert not provider_plan.record_resolution(status, r, now, 3)  # nothing changed
    none = provider_plan.resolve(_spec("small.example"), "mail", [], [GOOGLE], _mx)
    assert provider_plan.record_resolution(status, none, now, 4)
    assert status.provider is None and status.conditions[0].reason == "NoProviderMatched"


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({"SENDGROUP_DEFAULT_REDIS_URL": "redis://shared:6379/2"},
         {"value": "redis://shared:6379/2"}),
        ({"SENDGROUP_DEFAULT_REDIS_URL": "redis://:pw@shared:6379/0",
          "SENDGROUP_DEFAULT_REDIS_SECRET": "redis-default/url"},
         {"valueFrom": {"secretKeyRef": {"name": "redis-default", "key": "url"}}}),
    ],
)  # fmt: skip
def test_a_provider_without_redis_gets_the_operators_default_on_every_worker(
    env: dict[str, str], want: dict[str, Any]
) -> None:
    """Review finding: PROVIDER_REDIS_URL was set only when the provider named a Redis, so
    workers kept its state on their group's Redis while the operator wrote shares to its
    default: groups on two Redis servers each got the whole budget. The worker env now always
    names the operator's default (the Secret reference when the chart sets one, as the group's
    own REDIS_URL takes it), whatever Redis the group's queue is on."""
    from sendgroup_operator import builders

    settings = Settings.from_env(env)
    group = _spec("gmail.com", redis={"url": "redis://group-own:6379/0"})
    entries = provider_plan.worker_provider_env(
        "ClusterSendProvider", "google", None, GOOGLE.spec, "mail/g1", settings
    )
    assert GOOGLE.spec.redis is None
    assert entries[1] == {"name": "PROVIDER_REDIS_URL", **want}
    ref = builders.GroupRef(
        namespace="mail", name="g1", uid="u", campaign="c", host="gmail.com", created_at=""
    )
    container = builders.deployment(ref, group, settings, 1, entries)["spec"]["template"]["spec"][
        "containers"
    ][0]
    by_name = {e["name"]: e for e in container["env"]}
    assert by_name["REDIS_URL"]["value"] == "redis://group-own:6379/0"
    assert by_name["PROVIDER_REDIS_URL"] == {"name": "PROVIDER_REDIS_URL", **want}


def test_a_scale_rule_shrinks_the_budget_that_is_shared_so_high_groups_keep_theirs() -> None:
    """Review finding: the shares were split from the full rate and the permit script scaled
    each by the rule's factor, so ScaleRate(20%) slowed a high group as much as a normal one
    (60/min of its 300 while a normal group still sent). Now the operator splits the scaled
    rate: high first, then normal; a suspension shows every share at 0."""
    from datetime import UTC, datetime

    now = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    t = now.timestamp()
    demands = [GroupDemand("mail/urgent", H, limit=300), GroupDemand("mail/news")]
    scale = provider_plan.RuleState("unusual-rate", "scale", 20, t - 10, t + 60, 50, 30)
    assert provider_plan.scaled_rate(1200, [scale], t) == 240
    assert shares(provider_plan.scaled_rate(1200, [scale], t), demands) == {
        "mail/urgent": 240.0,
        "mail/news": 0.0,
    }
    # recovering additively (50 % per 30 s after the rule ended): 70 % of 1200 = 840
    recovering = t + 60 + 1
    assert provider_plan.scaled_rate(1200, [scale], recovering) == 840
    assert shares(840, demands) == {"mail/urgent": 300.0, "mail/news": 540.0}
    assert provider_plan.scaled_rate(1200, [], t) == 1200
    assert provider_plan.scaled_rate(None, [scale], t) is None
    suspend = provider_plan.RuleState("blocked", "suspend", 0, t - 1, t + 60)
    assert provider_plan.scaled_rate(1200, [suspend], t) == 1200  # the script refuses all
    status, _, _ = provider_plan.provider_status(
        GOOGLE, demands, shares(1200, demands), [suspend], {}, [], now
    )
    assert status.effective_rate.per_minute == 0
    assert [(s.group, s.per_minute) for s in status.shares] == [
        ("mail/news", 0.0),
        ("mail/urgent", 0.0),
    ]


def test_a_running_group_competes_for_a_share_only_while_it_has_work() -> None:
    """Review finding: an emptied group kept its share until idleAfter (phase Running), so an
    empty high group held the whole budget and every normal group of the provider waited."""
    from sendgroup_operator import provider_handlers

    spec = models.SendGroupSpec.model_validate(
        {"campaign": "c", "host": "gmail.com", "priority": "high"}
    )
    running = {"phase": "Running", "queue": {"total": 0}}
    now = 1_000_000.0

    def sending(status: dict[str, Any], asked: float | None = None, s: Any = spec) -> bool:
        demand = provider_handlers._demand(s, status, "mail/g", asked, now)
        return bool(demand.sending)

    assert not sending(running)  # empty, nobody asked: no share
    assert sending(running, asked=now - 5)  # its workers asked 5 s ago
    assert not sending(running, asked=now - provider_plan.DEMAND_WINDOW - 1)
    assert sending({"phase": "Running", "queue": {"ready": 7, "total": 7}})  # ready jobs
    assert sending({"phase": "Running", "queue": {"reserved": 1, "total": 1}})  # being sent
    # review finding: only delayed jobs (a retry's backoff, a job pushed for later) held a
    # share until they fell due; a due job's lane asks for a permit (the second sign)
    assert not sending({"phase": "Running", "queue": {"delayed": 7, "total": 7}})
    assert not sending({"phase": "Paused", "queue": {"ready": 7, "total": 7}}, asked=now)
    paused = spec.model_copy(update={"paused": True})
    assert not sending({"phase": "Running", "queue": {"ready": 7, "total": 7}}, s=paused)
    # the high group empty: the normal group gets the whole budget
    demands = [
        provider_handlers._demand(spec, running, "mail/high", None, now),
        provider_handlers._demand(
            spec.model_copy(update={"priority": Priority.NORMAL}),
            {"phase": "Running", "queue": {"ready": 100, "total": 100}},
            "mail/normal",
            None,
            now,
        ),
    ]
    assert shares(1200, demands) == {"mail/high": 0.0, "mail/normal": 1200.0}


def test_a_cluster_providers_redis_secret_is_read_in_the_operators_own_namespace() -> None:
    """Review finding (issue 16): a ClusterSendProvider's ``redis.secretRef`` was read in the
    first watched namespace, a tenant's, whose Secret then chose the Redis where the shares
    and rules of every tenant's groups under that provider lived. The Kubernetes adapter
    here records where it is asked (the resolution of the namespace is what is tested)."""
    import asyncio
    from types import SimpleNamespace

    from sendgroup_operator import provider_handlers

    asked: list[tuple[str, str, str]] = []

    class Kube:
        async def secret_value(self, ns: str, name: str, key: str) -> str:
            asked.append((ns, name, key))
            return "redis://provider-state:6379/0"

    settings = Settings(namespace="sendgroup-system", watch_namespaces=("team-a", "team-b"))
    memo = SimpleNamespace(runtime=SimpleNamespace(settings=settings, kube=Kube()))
    spec = {"match": {"domains": ["gmail.com"]}, "redis": {"secretRef": {"name": "r", "key": "u"}}}
    cluster = _p("ClusterSendProvider", "google", **spec)
    url = asyncio.run(provider_handlers._redis_url(memo, cluster, None))
    assert url == "redis://provider-state:6379/0"
    assert asked == [("sendgroup-system", "r", "u")]
    mine = _p("SendProvider", "ours", **spec)
    # a tenant's Secret naming a Redis the operator may not use for tenants: refused, the
    # message without the URL (nothing contacted)
    with pytest.raises(provider_io.ProviderStateUnavailable) as refused:
        asyncio.run(provider_handlers._redis_url(memo, mine, "team-b"))
    assert asked[-1] == ("team-b", "r", "u")
    assert str(refused.value).startswith("spec.redis.secretRef: ")
    assert "provider-state" not in str(refused.value)
    allowed = Settings(
        namespace="sendgroup-system",
        watch_namespaces=("team-a", "team-b"),
        allowed_redis_hosts=["provider-state"],
    )
    memo.runtime.settings = allowed
    url = asyncio.run(provider_handlers._redis_url(memo, mine, "team-b"))
    assert url == "redis://provider-state:6379/0"


def test_a_tenants_own_smtp_server_fires_no_rule_of_a_shared_provider() -> None:
    """Security review (issue 16): a ClusterSendProvider's rule slows or suspends every
    tenant's groups, and ``spec.smtp.host`` is the tenant's choice: pointed at its own server,
    a ``421 unusual rate`` held everyone. Its workers now get no rules to fire, and its
    ProviderResolved message says why; a group on the default relay or on the provider's own
    MX keeps them, and a namespaced SendProvider (its own namespace only) always does."""
    import asyncio

    from sendgroup_operator import provider_handlers
    from sendgroup_worker.provider import ProviderConfig

    rule = {
        "name": "unusual-rate",
        "codes": [421],
        "trigger": {"immediate": True},
        "action": {"scaleRate": 20},
        "duration": "10m",
    }
    match = {"domains": ["gmail.com"], "mxSuffixes": [".google.com"]}
    body = {"match": match, "rate": {"perMinute": 600}, "pushback": {"rules": [rule]}}

    def raw(kind: str) -> dict[str, Any]:
        return {"kind": kind, "metadata": {"name": "google"}, "spec": body}

    settings = Settings(default_smtp_host="relay.platform.svc")

    def fired_by(smtp: dict[str, Any] | None, kind: str = "ClusterSendProvider") -> list[str]:
        spec = _spec("gmail.com", **({"smtp": smtp} if smtp else {}))
        if kind == "ClusterSendProvider":
            indexes: dict[str, Any] = {"cluster_providers": {"": [raw(kind)]}}
        else:
            indexes = {"namespaced_providers": {"mail": [raw(kind)]}}
        chosen = asyncio.run(provider_handlers.group_provider("mail", "g", spec, indexes, settings))
        env = {e["name"]: e.get("value") for e in chosen.env}
        config = ProviderConfig.model_validate_json(env["SENDGROUP_PROVIDER"])
        fires = [r.name for r in config.rules]
        said = "fire none of the provider's pushback rules" in chosen.resolution.message
        assert said == (not fires), chosen.resolution.message
        return fires

    assert fired_by({"host": "smtp.tenant-a.example", "port": 2525}) == []
    assert fired_by({"host": "Relay.Platform.svc."}) == ["unusual-rate"]
    assert fired_by(None) == ["unusual-rate"]
    assert fired_by({"host": "aspmx.l.google.com", "port": 25}) == ["unusual-rate"]
    assert fired_by({"host": "google.com.tenant-a.example"}) == []
    assert fired_by({"host": "gmail.com.evil.example"}) == []
    assert fired_by({"host": "smtp.tenant-a.example"}, "SendProvider") == ["unusual-rate"]


def test_every_shipped_provider_with_rules_can_fire_them_from_its_own_mx() -> None:
    """Review finding: the trust rule first looked at mxSuffixes only, and the shipped
    microsoft-consumer (no suffixes) and yandex (mx.yandex.ru, suffix .yandex.net) providers'
    rules could then never fire. Each shipped ClusterSendProvider with rules, talked to at its
    real MX host, fires them."""
    import yaml

    from sendgroup_operator.provider_models import parse_provider

    real_mx = {
        "google": "gmail-smtp-in.l.google.com",
        "microsoft-consumer": "outlook-com.olc.protection.outlook.com",
        "microsoft-365": "contoso-com.mail.protection.outlook.com",
        "yahoo-aol": "mta5.am0.yahoodns.net",
        "apple": "mx01.mail.icloud.com",
        "gmx-webde": "mx00.gmx.net",
        "mailru": "mxs.mail.ru",
        "yandex": "mx.yandex.ru",
    }
    path = "helm/sendgroup-operator/files/default-providers.yaml"
    with open(path, encoding="utf-8") as f:
        shipped = yaml.safe_load(f)["providers"]
    settings = Settings(default_smtp_host="relay.platform.svc")
    checked = []
    for name, spec in shipped.items():
        provider = parse_provider(
            {"kind": "ClusterSendProvider", "metadata": {"name": name}, "spec": spec}
        )
        assert provider.invalid is None, provider.invalid
        if not provider.spec.pushback.rules:
            continue
        host = real_mx[name]
        why = provider_plan.untrusted_replies("ClusterSendProvider", provider.spec, host, settings)
        assert why is None, (name, why)
        checked.append(name)
    assert len(checked) >= 5, checked
