"""Redis credentials per tenant (docs/security.md, "Redis credentials per tenant"; issue 16):
two namespaces share one Redis, each through an ACL user made from
``tenancy.tenant_acl_rules``. A real worker process with tenant A's URL delivers A's mail
(a retry and a permanent failure included, with a provider of A's namespace), and A's dump,
restore and purge Jobs' commands work; with A's credentials every attempt on B's keys and every
server-wide command is refused with NOPERM, and B's keys stay byte for byte."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from sendgroup_operator import tenancy
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.dumps import run_cli, summary
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import (
    WorkerProcess,
    drained,
    mail_payload,
    sync_queue,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.redis

A, B = "team-a", "team-b"
QA, QB = f"{A}.news", f"{B}.news"
PROVIDER_A, PROVIDER_B = f"sp/{A}/bulk", f"sp/{B}/bulk"
#: What a tenant's pods send and the rules refuse, on purpose: redis-py's ``INFO cluster`` probe
#: (a refusal = a standalone server) and, on Redis 7.2+ and Valkey, the ``CLIENT SETINFO`` it
#: sends on each connection (a refusal is ignored).
PROBES = {"info", "client|setinfo"}


def _url(server: RedisServer, user: str) -> str:
    return f"redis://{user}:pw-{user}@127.0.0.1:{server.port}/0"


def _setuser(admin: redis.Redis, user: str, *rules: str) -> None:
    admin.execute_command("ACL", "SETUSER", user, *rules, "on", f">pw-{user}")


@pytest.fixture
def tenants(redis_server: RedisServer, redis_url: str) -> Iterator[dict[str, str]]:
    """ACL users ``team-a`` and ``team-b`` (rules from ``tenant_acl_rules``), the ACL log
    cleared; deleted after the test. Maps namespace -> its Redis URL."""
    admin = redis_server.client()
    for ns in (A, B):
        _setuser(admin, ns, *tenancy.tenant_acl_rules(ns))
    admin.execute_command("ACL", "LOG", "RESET")
    yield {ns: _url(redis_server, ns) for ns in (A, B)}
    admin.execute_command("ACL", "DELUSER", A, B, "team", "provider")
    admin.close()


def _acl_log(admin: redis.Redis) -> list[tuple[str, str, str]]:
    """(user, reason, object) of every refusal the server logged."""
    out = []
    for entry in admin.execute_command("ACL", "LOG"):
        d = dict(zip(entry[::2], entry[1::2], strict=True))
        out.append((d[b"username"].decode(), d[b"reason"].decode(), d[b"object"].decode()))
    return out


def _fill_b(redis_url: str) -> dict[bytes, bytes]:
    """Tenant B's queue and provider state as B's producer and workers leave them; returns
    every B key's DUMP (what 'unchanged' is compared with)."""
    q = sync_queue(redis_url, QB)
    q.push_many(mail_payload(f"b{i}@b.example") for i in range(3))
    admin = redis.Redis.from_url(redis_url)
    admin.set(f"sendgroups:provider:{{{PROVIDER_B}}}:tat", "123 456")
    admin.xadd(f"sendgroups:{B}:outcomes", {"uuid": "x", "outcome": "delivered"})
    admin.sadd(f"sendgroups:{B}:suppressed", "someone@b.example")
    return _b_state(admin)


def _b_state(admin: redis.Redis) -> dict[bytes, bytes]:
    keys = [*admin.scan_iter(match=f"*{B}*", count=1000)]
    assert len(keys) >= 5
    return {k: admin.dump(k) for k in sorted(keys)}


def test_a_tenant_worker_delivers_its_mail_with_its_own_acl_user(
    redis_server: RedisServer,
    redis_url: str,
    tenants: dict[str, str],
    smtp_sink: SmtpSink,
    workers: list[WorkerProcess],
) -> None:
    """A's worker, A's URL as REDIS_URL and PROVIDER_REDIS_URL, a SendProvider of A's
    namespace with a pushback rule: 5 mails delivered, one deferred (451) then delivered, one
    failed (550, no tries left); outcomes and suppression set used. The server refused
    nothing but :data:`PROBES` (refused INFO = a standalone server), and
    B's queue and state are unchanged and none of B's mail was sent."""
    admin = redis_server.client()
    b_before = _fill_b(redis_url)
    qa = sync_queue(redis_url, QA)
    qa.push_many(mail_payload(f"a{i}@a.example") for i in range(5))
    qa.push(mail_payload("gone@a.example", maxTries=1))
    qa.push(mail_payload("later@a.example"))
    qa.push(mail_payload("unsubscribed@a.example"))
    admin.sadd(f"sendgroups:{A}:suppressed", "unsubscribed@a.example")
    smtp_sink.script("gone@a.example", "550 5.1.1 no such user")
    smtp_sink.script("later@a.example", "451 4.3.0 try later", "250 2.0.0 ok")
    provider = {
        "id": PROVIDER_A,
        "group": f"{A}/news",
        "perMinute": 600,
        "concurrency": 4,
        "rules": [
            {"name": "slow", "codes": [451], "count": 1, "action": "scale", "value": 50,
             "duration": 2.0},
        ],
    }  # fmt: skip
    env = worker_env(
        tenants[A],
        QA,
        smtp_sink.port,
        SENDGROUP_NAMESPACE=A,
        SENDGROUP_GROUP="news",
        SENDGROUP_PROVIDER=json.dumps(provider),
        PROVIDER_REDIS_URL=tenants[A],
        RATE_PER_MINUTE=600,
        RATE_BURST=10,
    )
    worker = WorkerProcess(env, name="tenant-a")
    workers.append(worker)
    wait_for(drained(qa), 30, "A's queue drained by A's worker")
    stats = qa.measure()
    assert (stats.delivered, stats.failed, stats.released) == (6, 1, 1), stats
    received = set(smtp_sink.per_recipient())
    assert received == {*(f"a{i}@a.example" for i in range(5)), "later@a.example"}, received
    outcomes = admin.xrange(f"sendgroups:{A}:outcomes")
    seen = {f[b"outcome"] for _, f in outcomes}
    assert seen == {b"delivered", b"deferred", b"failed", b"suppressed"}
    assert admin.exists(f"sendgroups:provider:{{{PROVIDER_A}}}:rules")  # the rule fired
    worker.stop()
    assert "NOPERM" not in worker.log() and "NoPermissionError" not in worker.log()
    assert {obj for _, _, obj in _acl_log(admin)} <= PROBES, _acl_log(admin)
    assert _b_state(admin) == b_before


def test_a_tenant_dump_restore_and_purge_work_with_its_acl_user(
    redis_server: RedisServer, redis_url: str, tenants: dict[str, str], tmp_path: Path
) -> None:
    """The dump, restore and purge Jobs of A's group read the same Secret: with A's URL they
    move A's queue to a segment and back and purge it, refused nothing but :data:`PROBES`."""
    admin = redis_server.client()
    b_before = _fill_b(redis_url)
    qa = sync_queue(redis_url, QA)
    qa.push_many(mail_payload(f"a{i}@a.example") for i in range(50))
    dumps = ("--dumps-dir", str(tmp_path))
    dumped = summary(run_cli("dump", "-q", QA, *dumps, redis_url=tenants[A]))
    assert dumped["jobs"] == 50 and qa.measure().ready == 0
    restored = summary(run_cli("restore", "-q", QA, *dumps, redis_url=tenants[A]))
    assert restored["jobs"] == 50 and qa.measure().ready == 50
    purged = summary(run_cli("purge", "-q", QA, *dumps, redis_url=tenants[A]))
    assert purged["jobs"] == 50 and not [*admin.scan_iter(match=f"queues:{QA}*")]
    assert {obj for _, _, obj in _acl_log(admin)} <= PROBES, _acl_log(admin)
    assert _b_state(admin) == b_before
    # and A's Job pointed at B's queue gets nothing
    refused = run_cli("purge", "-q", QB, *dumps, redis_url=tenants[A])
    assert refused.returncode != 0 and "permission" in (refused.stdout + refused.stderr).lower()
    assert _b_state(admin) == b_before


A_READY, B_READY = QueueKeys(QA).ready, QueueKeys(QB).ready
B_ATTEMPTS: list[tuple[str, tuple[Any, ...]]] = [
    ("read B's ready list", ("LRANGE", B_READY, 0, -1)),
    ("take B's next job", ("LPOP", B_READY)),
    ("delete B's ready list", ("DEL", B_READY)),
    ("push into B's queue", ("RPUSH", B_READY, "{}")),
    ("wait on B's notify list", ("BLPOP", QueueKeys(QB).notify, 0.01)),
    ("move B's jobs into A's queue", ("BLMOVE", B_READY, A_READY, "LEFT", "RIGHT", 0.01)),
    ("rename A's key over B's", ("RENAME", A_READY, B_READY)),
    ("pause B", ("SET", QueueKeys(QB).paused, "1")),
    ("take over B's claim", ("SET", QueueKeys(QB).owner, f"{A}/x/y")),
    ("B's hash-tagged queue", ("LPOP", QueueKeys(f"{{{B}.x}}").ready)),
    ("B's failed jobs", ("HGETALL", QueueKeys(QB).failed_jobs)),
    ("B's provider budget", ("SET", f"sendgroups:provider:{{{PROVIDER_B}}}:tat", "0 0")),
    ("a cluster provider not granted", ("GET", "sendgroups:provider:{csp/bigmail}:tat")),
    ("B's outcome stream", ("XADD", f"sendgroups:{B}:outcomes", "*", "outcome", "delivered")),
    ("B's suppression set", ("SISMEMBER", f"sendgroups:{B}:suppressed", "someone@b.example")),
    ("EVAL declaring B's key",
     ("EVAL", "return redis.call('LPOP', KEYS[1])", 1, B_READY)),
    ("EVAL declaring A's key, touching B's",
     ("EVAL", f"return redis.call('LPOP', '{B_READY}')", 1, A_READY)),
    ("EVAL declaring nothing, touching B's",
     ("EVAL", f"return redis.call('DEL', '{B_READY}')", 0)),
    ("EVAL calling a command not granted", ("EVAL", "return redis.call('KEYS', '*')", 0)),
    ("list every key", ("KEYS", "*")),
    ("scan every key", ("SCAN", 0)),
    ("key count", ("DBSIZE",)),
    ("another database", ("SELECT", 1)),
    ("flush everything", ("FLUSHALL",)),
    ("flush the database", ("FLUSHDB",)),
    ("read the configuration", ("CONFIG", "GET", "*")),
    ("change the configuration", ("CONFIG", "SET", "maxmemory", "1")),
    ("drop every script", ("SCRIPT", "FLUSH")),
    ("kill a running script", ("SCRIPT", "KILL")),
    ("functions", ("FUNCTION", "FLUSH")),
    ("see other clients", ("CLIENT", "LIST")),
    ("kill other clients", ("CLIENT", "KILL", "ID", 1)),
    ("pause every client", ("CLIENT", "PAUSE", 1000)),
    ("read the users", ("ACL", "LIST")),
    ("change a user", ("ACL", "SETUSER", B, "off")),
    ("server information", ("INFO",)),
    ("watch every command", ("MONITOR",)),
    ("publish", ("PUBLISH", "x", "y")),
    ("swap databases", ("SWAPDB", 0, 1)),
    ("move B's key to another database", ("MOVE", B_READY, 1)),
    ("shut the server down", ("SHUTDOWN", "NOSAVE")),
]  # fmt: skip


@pytest.mark.parametrize(("what", "command"), B_ATTEMPTS, ids=[w for w, _ in B_ATTEMPTS])
def test_with_a_credentials_nothing_reaches_b(
    redis_server: RedisServer,
    redis_url: str,
    tenants: dict[str, str],
    what: str,
    command: tuple[Any, ...],
) -> None:
    """Each attempt with A's credentials on B's keys or on the whole server: NOPERM, and B's
    keys are unchanged. (A can do the same to its own keys: checked first, so the refusal is
    about B, not about A being refused everything.)"""
    admin = redis_server.client()
    b_before = _fill_b(redis_url)
    client = redis.Redis.from_url(tenants[A])
    client.rpush(QueueKeys(QA).ready, "{}")
    assert client.lrange(QueueKeys(QA).ready, 0, -1) == [b"{}"]
    assert client.eval("return redis.call('LPOP', KEYS[1])", 1, QueueKeys(QA).ready) == b"{}"
    client.rpush(QueueKeys(f"{{{A}.x}}").ready, "{}")  # A's hash-tagged queue
    client.set(f"sendgroups:provider:{{{PROVIDER_A}}}:tat", "0 0")
    with pytest.raises(redis.exceptions.ResponseError) as refused:
        client.execute_command(*command)
    # NOPERM; a command a script calls is refused inside the script, as a script error
    # naming the ACL
    text = str(refused.value)
    # Redis: "The user executing the script can't access/run ...", Valkey: "ACL failure in
    # script: No permissions to ..."
    in_script = command[0] == "EVAL" and re.search(r"(?i)script.*(can't|no permission)", text)
    assert in_script or isinstance(refused.value, redis.exceptions.NoPermissionError), text
    assert redis_server.client().ping()
    assert _b_state(admin) == b_before
    client.close()


def test_key_patterns_never_overlap_between_namespaces(
    redis_server: RedisServer, redis_url: str, tenants: dict[str, str]
) -> None:
    """On the server (``ACL DRYRUN``): namespaces whose names prefix each other (``team`` and
    ``team-a``) or look like a key word (``provider``) each reach their own keys only, with
    and without a key prefix; a ClusterSendProvider granted to two tenants is writable by both
    (the known limit), and by nobody else."""
    admin = redis_server.client()
    names = ("team", A, "provider")

    def own_keys(ns: str, prefix: str) -> list[str]:
        return [
            QueueKeys(f"{ns}.q", prefix).ready,
            QueueKeys(f"{ns}.q", prefix).paused,
            QueueKeys(f"{{{ns}.q}}", prefix).delayed,
            f"{prefix}sendgroups:{ns}:outcomes",
            f"{prefix}sendgroups:{ns}:suppressed",
            f"sendgroups:provider:{{sp/{ns}/p}}:tat",
            f"sendgroups:provider:{{sp/{ns}/p}}:group:{ns}/g",
        ]

    def allowed(user: str, key: str) -> bool:
        reply = admin.execute_command("ACL", "DRYRUN", user, "SET", key, "1")
        return reply in (b"OK", "OK")

    for prefix in ("", "laravel_database_"):
        for ns in names:
            _setuser(admin, ns, *tenancy.tenant_acl_rules(ns, prefix, ["shared"]))
        for ns in names:
            for other in names:
                for key in own_keys(other, prefix):
                    assert allowed(ns, key) == (ns == other), (ns, key)
            assert allowed(ns, "sendgroups:provider:{csp/shared}:tat")
            assert not allowed(ns, "sendgroups:provider:{csp/other}:tat")
            other_prefix = "" if prefix else "laravel_database_"
            assert not allowed(ns, own_keys(ns, other_prefix)[0])
