"""The tenancy rules (docs/security.md, "Tenancy model"), as pure decisions: which Redis a
tenant may name, and the queue-name policy when one operator serves several namespaces."""

from __future__ import annotations

import pytest

from sendgroup_operator import tenancy
from sendgroup_operator.settings import Settings, SettingsError
from sendgroup_worker.queue.keys import validate_queue_name

DEFAULT = "redis://redis.sendgroups:6379/0"


@pytest.mark.parametrize(
    ("url", "allowed", "ok"),
    [
        (DEFAULT, (), True),
        ("redis://:pw@redis.sendgroups:6379/3", (), True),  # same server, other db
        ("redis://redis.sendgroups:6380/0", (), False),  # same host, other port
        ("redis://10.0.0.7:6379/0", (), False),
        ("redis://127.0.0.1:22/0", (), False),
        ("redis://kubernetes.default:443/0", (), False),
        ("redis://Team-Redis.a.svc:6379/0", ("team-redis.a.svc",), True),
        ("redis://team-redis.a.svc:7000/0", ("team-redis.a.svc:6379",), False),
        ("redis://team-redis.a.svc:6379/0", ("team-redis.a.svc:6379",), True),
        ("redis://h:bad/0", ("h",), False),
    ],
)
def test_only_the_default_and_listed_redis_hosts(
    url: str, allowed: tuple[str, ...], ok: bool
) -> None:
    refusal = tenancy.redis_refusal(url, DEFAULT, allowed)
    assert (refusal is None) == ok


def test_the_refusal_never_tells_what_listens() -> None:
    messages = {
        tenancy.redis_refusal(u, DEFAULT, ())
        for u in ("redis://127.0.0.1:1/0", "redis://127.0.0.1:22/0", "redis://10.0.0.9:6379/0")
    }
    assert len(messages) == 1 and "nothing was contacted" in messages.pop()  # type: ignore[operator]


def test_queue_name_policy() -> None:
    assert tenancy.policy_applies("auto", ("*",))
    assert tenancy.policy_applies("auto", ("team-a", "team-b"))
    assert not tenancy.policy_applies("auto", ("sendgroups",))
    assert tenancy.policy_applies("namespace", ("sendgroups",))
    assert not tenancy.policy_applies("off", ("*",))
    assert tenancy.queue_refusal("team-a.newsletter", "team-a") is None
    assert tenancy.queue_refusal("{team-a.newsletter}", "team-a") is None
    # team "team" can never take "team-b"'s queues: the separator is a dot, never in a namespace
    assert tenancy.queue_refusal("team-b.newsletter", "team") is not None
    assert tenancy.queue_refusal("mail-newsletter", "team-b") is not None
    for name in ("g", "x" * 253):
        queue = tenancy.default_queue("team-b", name, policy_on=True)
        validate_queue_name(queue)
        assert tenancy.queue_in_namespace(queue, "team-b")
    assert tenancy.default_queue("team-b", "g", policy_on=False) == "mail-g"


def test_settings() -> None:
    s = Settings.from_env(
        {
            "SENDGROUP_ALLOWED_REDIS_HOSTS": " a.svc , b.svc:7000 ,",
            "SENDGROUP_QUEUE_NAME_POLICY": "off",
        }
    )
    assert s.allowed_redis_hosts == ("a.svc", "b.svc:7000") and s.queue_name_policy == "off"
    assert Settings.from_env({}).queue_name_policy == "auto"
    with pytest.raises(SettingsError, match="SENDGROUP_QUEUE_NAME_POLICY"):
        Settings.from_env({"SENDGROUP_QUEUE_NAME_POLICY": "strict"})


def test_tenant_acl_rules_name_only_the_namespace_keys_and_listed_commands() -> None:
    """The rules a namespace's Redis user gets (docs/security.md, "Redis credentials per
    tenant"; proven on a real server in tests/redis/test_tenant_acl.py)."""
    rules = tenancy.tenant_acl_rules("team-a", "laravel_database_", ["big*mail"])
    assert rules[:2] == ["reset", "resetchannels"]  # no key, command or channel left over
    keys = [r for r in rules if r.startswith("~")]
    assert keys == [
        "~laravel_database_queues:team-a.*",
        "~laravel_database_queues:{team-a.*",
        "~laravel_database_sendgroups:team-a:outcomes",
        "~laravel_database_sendgroups:team-a:suppressed",
        "~sendgroups:provider:{sp/team-a/*",  # provider keys carry no key prefix
        "~sendgroups:provider:{csp/big\\*mail}:*",  # a glob character in a name is literal
    ]
    commands = [r for r in rules if r[0] in "+-"]
    assert commands[0] == "-@all" and all(c.startswith("+") for c in commands[1:])
    assert not any("@" in c for c in commands[1:])  # an explicit list, no category
    for forbidden in ("keys", "scan", "flushall", "flushdb", "config", "script|flush", "info"):
        assert f"+{forbidden}" not in commands
    assert not any(r in ("allkeys", "allchannels", "nopass", "on") for r in rules)
    assert "~queues:team-a.*" in tenancy.tenant_acl_rules("team-a")


@pytest.mark.parametrize("bad", ["", "Team-A", "team.a", "team/a", "*", "a" * 64, "-a"])
def test_tenant_acl_rules_refuse_what_is_not_a_namespace(bad: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes namespace"):
        tenancy.tenant_acl_rules(bad)
