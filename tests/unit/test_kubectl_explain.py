"""``kubectl sendgroup explain``: the text for a group with a provider (MX-resolved, a share,
an active rule) and for a group that matched none."""

from __future__ import annotations

from sendgroup_operator.cli.explain import explain

GROUP = {
    "metadata": {"namespace": "mail", "name": "spring-gmail"},
    "spec": {"host": "customer.example", "campaign": "spring", "rate": {"perMinute": 1200}},
    "status": {
        "provider": {
            "kind": "ClusterSendProvider",
            "name": "google",
            "via": "mx aspmx.l.google.com",
        },
        "conditions": [{"type": "ProviderResolved", "status": "True", "reason": "MxMatched"}],
    },
}
PROVIDER = {
    "spec": {"rate": {"perMinute": 3000}, "concurrency": 20},
    "status": {
        "groups": 2,
        "effectiveRate": {"perMinute": 600},
        "shares": [{"group": "mail/spring-gmail", "perMinute": 300, "priority": "normal"}],
        "activeRules": [
            {
                "rule": "unusual-rate",
                "action": "ScaleRate(20%)",
                "since": "2026-12-01T11:00:00Z",
                "until": "2026-12-01T11:30:00Z",
                "reply": "421 4.7.28 unusual rate",
            }
        ],
    },
}


def test_a_group_with_a_provider() -> None:
    text = explain(GROUP, PROVIDER)
    assert "provider:  ClusterSendProvider google (mx aspmx.l.google.com)" in text
    assert "budget:    3000/min, effective now 600/min, concurrency 20, 2 group(s)" in text
    assert "share now: 300/min (priority normal, weight 1); own rate 1200/min" in text
    assert "unusual-rate: ScaleRate(20%) since 2026-12-01T11:00:00Z" in text
    assert "'421 4.7.28 unusual rate'" in text


def test_a_group_without_a_provider() -> None:
    group = {
        **GROUP,
        "status": {
            "conditions": [
                {
                    "type": "ProviderResolved",
                    "status": "False",
                    "reason": "NoProviderMatched",
                    "message": "no provider matches customer.example",
                }
            ]
        },
    }
    text = explain(group, None)
    assert "provider:  none (NoProviderMatched: no provider matches customer.example)" in text
    assert "the group's own only: rate 1200/min" in text
