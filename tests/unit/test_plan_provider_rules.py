"""The group's ``Suspended`` / ``Throttled`` conditions name the provider rule that caused them
(issue 14): the provider's rules in force reach the pure planner as input, with an injected
clock; a rule past its ``until`` no longer acts, and a pass is asked for when it ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sendgroup_operator import models, provider_plan
from sendgroup_operator import plan as p
from sendgroup_operator.conditions import find
from sendgroup_operator.provider_models import SendProvider
from sendgroup_operator.settings import Settings

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings()
GROUP = p.Group("mail", "g1", "uid-1", 1, T0)
PROVIDER = "ClusterSendProvider google"


def rule(
    action: str, until: float, name: str = "unusual-rate", index: int | None = 0
) -> p.ProviderRule:
    return p.ProviderRule(
        provider=PROVIDER,
        rule=name,
        index=index,
        action=action,
        since=T0 - timedelta(seconds=5),
        until=T0 + timedelta(seconds=until),
        reply="421 4.7.28 Our system has detected an unusual rate of unsolicited mail",
    )


def run(
    rules: list[p.ProviderRule],
    total: int = 5,
    now: datetime = T0,
    allowed: int = 3,
    suspended_seconds: int = 0,
    paused: bool = False,
    status: models.SendGroupStatus | None = None,
) -> p.Plan:
    s = models.SendGroupSpec.model_validate(
        {"campaign": "c", "host": "gmail.com", "workers": 3, "paused": paused}
    )
    return p.plan(
        GROUP,
        s,
        status or models.SendGroupStatus(),
        p.Observed(jobs_listed=True),
        p.QueueMeasure(ready=total, suspended_seconds=suspended_seconds),
        allowed,
        SETTINGS,
        now,
        (),
        rules,
    )


def cond(plan: p.Plan, type_: str) -> tuple[str, str, str] | None:
    c = find(plan.status.conditions, type_)
    return None if c is None else (c.status, c.reason, c.message)


SCALE = "ScaleRate(20%)"


@pytest.mark.parametrize(
    ("rules", "kw", "suspended", "throttled"),
    [
        # no rule: the group's own backpressure and the global cap decide, as before
        ([], {}, ("False", "Sending"), ("False", "WithinCap")),
        ([], {"suspended_seconds": 30}, ("True", "ProviderPushback"), ("False", "WithinCap")),
        ([], {"allowed": 1}, ("False", "Sending"), ("True", "GlobalCap")),
        # a Suspend rule in force: Suspended names it (over the group's own backpressure)
        ([rule("Suspend", 60)], {}, ("True", "RuleUnusualRate"), ("False", "WithinCap")),
        (
            [rule("Suspend", 60)],
            {"suspended_seconds": 30},
            ("True", "RuleUnusualRate"),
            ("False", "WithinCap"),
        ),
        # ... and past its until it no longer acts, even if the status still lists it
        ([rule("Suspend", -1)], {}, ("False", "Sending"), ("False", "WithinCap")),
        # a ScaleRate or CapConcurrency rule: Throttled names it (over the global cap)
        ([rule(SCALE, 60)], {}, ("False", "Sending"), ("True", "RuleUnusualRate")),
        ([rule(SCALE, 60)], {"allowed": 1}, ("False", "Sending"), ("True", "RuleUnusualRate")),
        ([rule("CapConcurrency(2)", 60)], {}, ("False", "Sending"), ("True", "RuleUnusualRate")),
        ([rule("CapConcurrency(2)", -1)], {}, ("False", "Sending"), ("False", "WithinCap")),
        # a ScaleRate rule past until recovers: it throttles while the provider lists it
        ([rule(SCALE, -10)], {}, ("False", "Sending"), ("True", "RuleUnusualRate")),
        # no work and no workers: nothing is throttled
        ([rule(SCALE, 60)], {"total": 0}, ("False", "Sending"), ("False", "WithinCap")),
    ],
)
def test_provider_rules_table(
    rules: list[p.ProviderRule],
    kw: dict[str, Any],
    suspended: tuple[str, str],
    throttled: tuple[str, str],
) -> None:
    plan = run(rules, **kw)
    got_s, got_t = cond(plan, "Suspended"), cond(plan, "Throttled")
    assert got_s is not None and got_t is not None
    assert got_s[:2] == suspended
    assert got_t[:2] == throttled


def test_the_messages_name_provider_rule_index_action_until_and_reply() -> None:
    plan = run([rule("Suspend", 60, name="blocked", index=2), rule(SCALE, 30)], allowed=1)
    suspended = cond(plan, "Suspended")
    throttled = cond(plan, "Throttled")
    assert suspended is not None and throttled is not None
    assert (suspended[1], throttled[1]) == ("RuleBlocked", "RuleUnusualRate")
    assert suspended[2] == (
        "ClusterSendProvider google rule blocked (spec.pushback.rules[2]): Suspend until "
        '2026-03-01T12:01:00+00:00 (fired by "421 4.7.28 Our system has detected an unusual '
        'rate of unsolicited mail"): no mail is sent to the provider'
    )
    assert throttled[2].startswith(
        "ClusterSendProvider google rule unusual-rate (spec.pushback.rules[0]): ScaleRate(20%) "
        "until 2026-03-01T12:00:30+00:00"
    )
    assert throttled[2].endswith("; maxTotalWorkers allows 1 of 3 workers")
    recovering = cond(run([rule(SCALE, -10)]), "Throttled")
    assert recovering is not None and "recovering since 2026-03-01T11:59:50+00:00" in recovering[2]
    gone = cond(run([rule(SCALE, 5, index=None)]), "Throttled")
    assert gone is not None and "rules[" not in gone[2]


def test_events_on_the_flip_only() -> None:
    first = run([rule("Suspend", 60)])
    assert [(e.type, e.reason) for e in first.events if e.reason == "Suspended"] == [
        ("Warning", "Suspended")
    ]
    again = run([rule("Suspend", 60)], now=T0 + timedelta(seconds=1), status=first.status)
    assert not [e for e in again.events if e.reason == "Suspended"]
    throttled = run([rule(SCALE, 60)])
    assert [e.message for e in throttled.events if e.reason == "Throttled"] == [
        cond(throttled, "Throttled")[2]  # type: ignore[index]
    ]


def test_expiry_clears_on_time_and_a_pass_follows_the_until() -> None:
    # a paused group with nothing in motion: only the rule's end asks for a pass
    held = run([rule("Suspend", 4)], paused=True)
    assert held.requeue_after == pytest.approx(4.1)
    after = run(
        [rule("Suspend", 4)], now=T0 + timedelta(seconds=4), status=held.status, paused=True
    )
    assert cond(after, "Suspended")[:2] == ("False", "Sending")  # type: ignore[index]
    assert after.write_status and after.requeue_after is None
    # an until beyond the reaper's own interval asks for nothing extra
    assert run([rule("Suspend", 3600)], paused=True).requeue_after is None
    # something in motion (workers being created) keeps its own, shorter requeue
    assert run([rule("Suspend", 4)]).requeue_after == p.BUSY_REQUEUE


def test_a_paused_group_shows_a_provider_suspend_but_no_throttle() -> None:
    plan = run([rule("Suspend", 60), rule(SCALE, 60, name="slow")], paused=True)
    assert cond(plan, "Suspended")[:2] == ("True", "RuleUnusualRate")  # type: ignore[index]
    assert cond(plan, "Throttled") is None


def test_group_rules_from_the_provider_status() -> None:
    provider = SendProvider.model_validate(
        {
            "kind": "ClusterSendProvider",
            "metadata": {"name": "google"},
            "spec": {
                "pushback": {
                    "rules": [
                        {
                            "name": "other",
                            "codes": [550],
                            "trigger": {"immediate": True},
                            "action": {"suspend": True},
                            "duration": "1m",
                        },
                        {
                            "name": "unusual-rate",
                            "codes": [421],
                            "trigger": {"immediate": True},
                            "action": {"scaleRate": 20},
                            "duration": "4s",
                        },
                    ]
                }
            },
            "status": {
                "activeRules": [
                    {
                        "rule": "unusual-rate",
                        "since": "2026-03-01T11:59:55Z",
                        "until": "2026-03-01T12:00:30Z",
                        "reply": "421 unusual rate",
                        "action": SCALE,
                    },
                    {
                        "rule": "removed-since",
                        "since": "2026-03-01T11:59:55Z",
                        "until": "2026-03-01T12:00:30Z",
                        "action": "Suspend",
                    },
                ]
            },
        }
    )
    got = provider_plan.group_rules(provider)
    assert [(r.provider, r.rule, r.index, r.action) for r in got] == [
        (PROVIDER, "unusual-rate", 1, SCALE),
        (PROVIDER, "removed-since", None, "Suspend"),
    ]
    assert got[0].until == T0 + timedelta(seconds=30) and got[0].reply == "421 unusual rate"
