"""SendProviders and ClusterSendProviders against the real API server and the real operator:
bad specs refused naming the rule; a provider's status shows its sending groups and their
shares (written to Redis, where the workers read them); a rule a worker fires shows up as an
active rule, a Throttled condition and an event, and expires on its own."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import redis
import redis.asyncio

from sendgroup_worker.provider import ProviderConfig, ProviderKeys, ProviderPacer
from sendgroup_worker.ratelimit import RatePolicy
from tests.cluster.conftest import Objects
from tests.cluster.test_operator import push, sendgroup
from tests.support.cluster import KubeCluster, wait_for
from tests.support.operator_proc import OperatorProcess

pytestmark = pytest.mark.cluster


def _provider(kind: str, name: str, spec: dict[str, Any]) -> str:
    return json.dumps(
        {
            "apiVersion": "sendgroups.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        }
    )


RULE = {
    "name": "unusual-rate",
    "codes": [421],
    "pattern": "(?i)unusual rate",
    "trigger": {"immediate": True},
    "action": {"scaleRate": 20},
    "duration": "4s",
    "recovery": {"stepPercent": 100, "every": "1s"},
}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"pushback": {"rules": [{**RULE, "action": {"scaleRate": 20, "suspend": True}}]}},
            "(rule: one action)",
        ),
        (
            {"pushback": {"rules": [{**RULE, "trigger": {"count": 3}}]}},
            "(rule: count within window)",
        ),
        (
            {
                "pushback": {
                    "rules": [{**RULE, "trigger": {"immediate": True, "count": 2, "window": "1m"}}]
                }
            },
            "(rule: one trigger)",
        ),
        (
            {
                "pushback": {
                    "rules": [{k: v for k, v in RULE.items() if k not in ("codes", "pattern")}]
                }
            },
            "(rule: a rule matches replies)",
        ),
        (
            {"pushback": {"rules": [{**RULE, "duration": "soon"}]}},
            "rule.duration must be a duration",
        ),
        (
            {"pushback": {"rules": [{**RULE, "duration": "0s"}]}},
            "rule.duration must be longer than 0s",
        ),
        (
            {"pushback": {"rules": [{**RULE, "recovery": {"every": "00m"}}]}},
            "every must be longer than 0s",
        ),
        (
            {"pushback": {"rules": [{**RULE, "trigger": {"count": 3, "window": "0s"}}]}},
            "trigger.window must be longer than 0s",
        ),
        (
            {"pushback": {"rules": [{**RULE, "duration": "10000000d"}]}},
            "rule.duration must be at most 36500d (rule: duration at most 36500d)",
        ),
        (
            {"pushback": {"rules": [{**RULE, "duration": "36499d24h1s"}]}},
            "rule.duration must be at most 36500d",
        ),
        (
            {"pushback": {"rules": [{**RULE, "trigger": {"count": 3, "window": "9" * 31 + "m"}}]}},
            "trigger.window must be at most 36500d",
        ),
        ({"match": {"mxSuffixes": ["google.com"]}}, "spec.match.mxSuffixes[0]"),
        ({"rate": {"perMinute": 0}}, "spec.rate.perMinute"),
        ({"pushback": {"rules": [RULE, RULE]}}, "Duplicate value"),
    ],
)
def test_bad_provider_specs_are_refused_naming_the_rule(
    kube_cluster: KubeCluster, sendgroup_crd: str, spec: dict[str, Any], message: str
) -> None:
    proc = kube_cluster.kubectl(
        "apply", "-f", "-", input=_provider("ClusterSendProvider", "bad", spec), check=False
    )
    assert proc.returncode != 0, proc.stdout
    assert message in proc.stderr, proc.stderr


def test_groups_resolve_to_their_provider_and_its_status_shows_shares_and_rules(
    kube_cluster: KubeCluster,
    operator: OperatorProcess,
    objects: Objects,
    redis_client: redis.Redis,
    redis_url: str,
    namespace: str,
) -> None:
    objects.apply(
        _provider(
            "SendProvider",
            "bigmail",
            {
                "match": {"domains": ["bigmail.example"]},
                "rate": {"perMinute": 1200},
                "pushback": {"rules": [RULE]},
            },
        )
    )
    push(redis_client, "mail-urgent", 50)
    push(redis_client, "mail-news", 50)
    objects.apply(
        sendgroup("urgent", host="bigmail.example", priority="high", rate={"perMinute": 300})
    )
    objects.apply(sendgroup("news", host="bigmail.example", weight=2))

    def provider_status() -> dict[str, Any]:
        obj = objects.get("sendprovider", "bigmail") or {}
        return dict(obj.get("status") or {})

    wait_for(lambda: provider_status().get("groups") == 2, 60, "both groups counted")
    # the group side: status.provider, ProviderResolved, and the workers' env
    wait_for(lambda: bool(objects.status("urgent").get("provider")), 30, "status.provider")
    assert objects.status("urgent")["provider"] == {
        "kind": "SendProvider",
        "name": "bigmail",
        "via": "domain bigmail.example",
    }
    resolved = objects.condition("urgent", "ProviderResolved")
    assert resolved is not None and (resolved["status"], resolved["reason"]) == (
        "True",
        "DomainMatched",
    )
    dep = objects.get("deployment", "sg-urgent") or {}
    env = {
        e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    worker_view = ProviderConfig.model_validate_json(env["SENDGROUP_PROVIDER"])
    assert (worker_view.id, worker_view.group, worker_view.per_minute) == (
        f"sp/{namespace}/bigmail",
        f"{namespace}/urgent",
        1200,
    )
    shares = {s["group"]: s["perMinute"] for s in provider_status()["shares"]}
    assert shares == {f"{namespace}/urgent": 300.0, f"{namespace}/news": 900.0}
    keys = ProviderKeys(f"sp/{namespace}/bigmail")
    assert redis_client.hgetall(keys.shares) == {
        f"{namespace}/news".encode(): b"900.000",
        f"{namespace}/urgent".encode(): b"300.000",
    }

    async def fire() -> None:
        client: redis.asyncio.Redis[bytes] = redis.asyncio.Redis.from_url(redis_url)
        cfg = ProviderConfig.model_validate(
            {
                "id": f"sp/{namespace}/bigmail",
                "group": f"{namespace}/news",
                "perMinute": 1200,
                "rules": [
                    {
                        "name": "unusual-rate",
                        "codes": [421],
                        "pattern": "(?i)unusual rate",
                        "action": "scale",
                        "value": 20,
                        "duration": 4.0,
                        "step_percent": 100,
                        "every": 1.0,
                    }
                ],
            }
        )
        pacer = ProviderPacer(client, cfg, RatePolicy(per_minute=None), 10)
        assert await pacer.record_reply("421 4.7.28 unusual rate of unsolicited mail")
        await client.connection_pool.disconnect()

    asyncio.run(fire())
    fired = time.monotonic()
    wait_for(lambda: bool(provider_status().get("activeRules")), 10, "the active rule")
    seen = time.monotonic() - fired
    status = provider_status()
    (active,) = status["activeRules"]
    assert (active["rule"], active["action"]) == ("unusual-rate", "ScaleRate(20%)")
    assert active["reply"] == "421 4.7.28 unusual rate of unsolicited mail"
    assert status["effectiveRate"]["perMinute"] == 240.0
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Throttled"]["status"] == "True"
    assert conds["Throttled"]["reason"] == "RuleUnusualRate"
    print(f"rule visible in the provider's status {seen:.1f}s after it fired")
    wait_for(lambda: not provider_status().get("activeRules"), 15, "the rule's expiry")
    conds = {c["type"]: c for c in provider_status()["conditions"]}
    assert conds["Throttled"]["status"] == "False"
    reasons = [
        e["reason"]
        for e in objects.list("events")
        if e["involvedObject"].get("kind") == "SendProvider"
    ]
    assert "RuleFired" in reasons and "RuleExpired" in reasons

    objects.patch_sg("news", {"paused": True})
    wait_for(lambda: provider_status().get("groups") == 1, 30, "the paused group dropped")
    assert redis_client.hget(keys.shares, f"{namespace}/urgent") == b"300.000"
    assert redis_client.hget(keys.shares, f"{namespace}/news") == b"0.000"


def test_a_group_whose_host_matches_no_provider_says_so(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis
) -> None:
    push(redis_client, "mail-lonely", 5)
    objects.apply(sendgroup("lonely", host="nobody-claims.example"))
    wait_for(
        lambda: objects.condition("lonely", "ProviderResolved") is not None, 30, "ProviderResolved"
    )
    cond = objects.condition("lonely", "ProviderResolved")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "NoProviderMatched")
    assert "own limits" in cond["message"]
    assert not objects.status("lonely").get("provider")


def test_a_group_names_the_provider_rule_that_suspends_or_throttles_it_until_it_expires(
    operator: OperatorProcess,
    objects: Objects,
    redis_client: redis.Redis,
    redis_url: str,
    namespace: str,
) -> None:
    """Two rules of one provider fire (a worker counts the replies in Redis, as in a real
    send): the group's ``Suspended`` and ``Throttled`` conditions name the provider, the rule,
    its index, the action, its end and the reply, within seconds; both clear once the rules
    expired (the Suspend rule at its ``until``, the ScaleRate rule after its recovery)."""
    blocked = {
        "name": "blocked",
        "codes": [554],
        "pattern": "(?i)blocked",
        "trigger": {"immediate": True},
        "action": {"suspend": True},
        "duration": "6s",
    }
    objects.apply(
        _provider(
            "SendProvider",
            "slowmail",
            {
                "match": {"domains": ["slowmail.example"]},
                "rate": {"perMinute": 600},
                "pushback": {"rules": [RULE, blocked]},
            },
        )
    )
    push(redis_client, "mail-held", 20)
    objects.apply(sendgroup("held", host="slowmail.example"))
    wait_for(lambda: bool(objects.status("held").get("provider")), 30, "status.provider")
    wait_for(
        lambda: (objects.condition("held", "Throttled") or {}).get("status") == "False",
        30,
        "Throttled False before any rule",
    )

    async def fire() -> None:
        client: redis.asyncio.Redis[bytes] = redis.asyncio.Redis.from_url(redis_url)
        rules = [
            {
                "name": "unusual-rate",
                "codes": [421],
                "pattern": "(?i)unusual rate",
                "action": "scale",
                "value": 20,
                "duration": 4.0,
                "step_percent": 100,
                "every": 1.0,
            },
            {
                "name": "blocked",
                "codes": [554],
                "pattern": "(?i)blocked",
                "action": "suspend",
                "duration": 6.0,
            },
        ]
        cfg = ProviderConfig.model_validate(
            {"id": f"sp/{namespace}/slowmail", "group": f"{namespace}/held", "rules": rules}
        )
        pacer = ProviderPacer(client, cfg, RatePolicy(per_minute=None), 10)
        assert await pacer.record_reply("421 4.7.28 unusual rate of unsolicited mail")
        assert await pacer.record_reply("554 5.7.1 Message blocked")
        await client.connection_pool.disconnect()

    asyncio.run(fire())
    fired = time.monotonic()

    def named(type_: str, reason: str) -> bool:
        cond = objects.condition("held", type_) or {}
        return cond.get("status") == "True" and cond.get("reason") == reason

    wait_for(
        lambda: named("Suspended", "RuleBlocked") and named("Throttled", "RuleUnusualRate"),
        15,
        "the group names the rules",
    )
    seen = time.monotonic() - fired
    suspended = objects.condition("held", "Suspended") or {}
    throttled = objects.condition("held", "Throttled") or {}
    assert suspended["message"].startswith(
        "SendProvider slowmail rule blocked (spec.pushback.rules[1]): Suspend until "
    ), suspended
    assert '(fired by "554 5.7.1 Message blocked")' in suspended["message"]
    assert throttled["message"].startswith(
        "SendProvider slowmail rule unusual-rate (spec.pushback.rules[0]): ScaleRate(20%) "
    ), throttled
    assert "421 4.7.28 unusual rate" in throttled["message"]
    reasons = {
        (e["reason"], e["type"])
        for e in objects.list("events")
        if e["involvedObject"].get("kind") == "SendGroup"
        and e["involvedObject"].get("name") == "held"
    }
    assert {("Suspended", "Warning"), ("Throttled", "Normal")} <= reasons
    print(f"the group named the provider's rules {seen:.1f}s after they fired")

    wait_for(
        lambda: (objects.condition("held", "Suspended") or {}).get("status") == "False",
        20,
        "expiry",
    )
    cleared = time.monotonic() - fired
    assert 5.0 <= cleared <= 9.0, cleared  # the Suspend rule lasts 6 s
    wait_for(
        lambda: (objects.condition("held", "Throttled") or {}).get("status") == "False",
        20,
        "the ScaleRate rule's recovery",
    )
    print(f"Suspended cleared {cleared:.1f}s after firing (rule: 6 s)")


def test_a_provider_the_operator_cannot_use_holds_its_groups_until_fixed(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis
) -> None:
    """A pattern RE2 refuses passes the API server (CEL cannot check RE2 syntax). Review
    finding: the operator skipped such a provider, so its groups said NoProviderMatched and
    sent without any provider limit. Now the provider says Ready=False InvalidSpec naming the
    rule, its group is held (no Deployment, ProviderInvalid), and fixing the pattern releases
    it."""
    bad_rule = {**RULE, "pattern": r"(unusual) \1"}  # a backreference
    spec = {"match": {"domains": ["broken.example"]}, "rate": {"perMinute": 600}}
    objects.apply(_provider("SendProvider", "broken", {**spec, "pushback": {"rules": [bad_rule]}}))
    push(redis_client, "mail-held", 5)
    objects.apply(sendgroup("held", host="broken.example"))

    def provider_ready() -> dict[str, Any]:
        obj = objects.get("sendprovider", "broken") or {}
        conds = (obj.get("status") or {}).get("conditions") or []
        return next((dict(c) for c in conds if c["type"] == "Ready"), {})

    wait_for(lambda: provider_ready().get("reason") == "InvalidSpec", 30, "provider InvalidSpec")
    assert provider_ready()["message"].startswith("spec.pushback.rules[0] (unusual-rate).pattern")
    wait_for(
        lambda: (objects.condition("held", "Ready") or {}).get("reason") == "ProviderInvalid",
        30,
        "the group held",
    )
    resolved = objects.condition("held", "ProviderResolved")
    assert resolved is not None and resolved["reason"] == "ProviderInvalid", resolved
    assert "SendProvider broken" in resolved["message"]
    time.sleep(2.0)
    assert objects.get("deployment", "sg-held") is None
    # fixed: the group gets its workers, under the provider
    objects.apply(_provider("SendProvider", "broken", {**spec, "pushback": {"rules": [RULE]}}))
    wait_for(lambda: objects.get("deployment", "sg-held") is not None, 30, "workers after the fix")
    wait_for(
        lambda: (
            (objects.condition("held", "ProviderResolved") or {}).get("reason") == "DomainMatched"
        ),
        30,
        "ProviderResolved after the fix",
    )
    # the provider's own status follows at its next pass (one a second, PROVIDER_INTERVAL),
    # which may come just after the group's release (CI, 2026-12-04: asserted 0.4 s early)
    wait_for(
        lambda: provider_ready().get("reason") not in (None, "InvalidSpec"),
        10,
        "the provider's Ready after the fix",
    )
    fixed = provider_ready()
    assert fixed["status"] == "True", fixed
    assert fixed["observedGeneration"] == 2, fixed
