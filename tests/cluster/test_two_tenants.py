"""The tenancy model of docs/security.md ("Tenancy model", issue 16) on the real control plane:
one operator process (under its ServiceAccount, watching two namespaces), one real
redis-server, two tenants. Tenant B names tenant A's queue and tries everything a SendGroup
can do to it (take it with workers, pause, dump, cancel, delete); A's jobs, claim, workers and
state must not move. No node runs pods: "workers" are the Deployments the operator creates."""

from __future__ import annotations

import json
import secrets
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from sendgroup_worker.queue.keys import QueueKeys
from tests.cluster.conftest import Objects
from tests.support import manifests
from tests.support.cluster import KubeCluster, wait_for
from tests.support.operator_proc import SA_NAME, OperatorProcess, apply_objects, rbac_objects
from tests.support.redis_server import free_port

pytestmark = pytest.mark.cluster


def push(client: redis.Redis, queue: str, n: int) -> None:
    """Push ``n`` Laravel-shaped jobs (ready list + notify tokens)."""
    keys = QueueKeys(queue)
    payloads = [
        json.dumps(
            {
                "uuid": str(uuid.uuid4()),
                "displayName": "sendgroups.SendMail",
                "job": "sendgroups.SendMail",
                "attempts": 0,
                "pushedAt": f"{time.time():.4f}",
                "data": {"to": f"u{i}@gmail.com", "subject": "hi", "text": "hello"},
            }
        )
        for i in range(n)
    ]
    client.rpush(keys.ready, *payloads)
    client.rpush(keys.notify, *(["1"] * n))


def sendgroup(name: str, **spec: Any) -> str:
    body = {"campaign": "spring-sale", "host": "gmail.com", **spec}
    return manifests.stream(manifests.sendgroup(name, body))


def replicas(objects: Objects, name: str) -> int | None:
    dep = objects.get("deployment", f"sg-{name}")
    return None if dep is None else int(dep["spec"].get("replicas") or 0)


def ready(objects: Objects, name: str) -> dict[str, Any]:
    return objects.condition(name, "Ready") or {}


def refused_redis(objects: Objects, name: str, port: int) -> str:
    """Create group ``name`` naming the Redis at 127.0.0.1:``port``; wait for its
    RedisNotAllowed condition and return the message (checked to hide the URL)."""
    url = f"redis://127.0.0.1:{port}/0"
    queue = f"{objects.namespace}.{name}"
    objects.apply(sendgroup(name, workers=1, queue=queue, redis={"url": url}))
    cond = wait_for(
        lambda: (c := ready(objects, name)).get("reason") == "RedisNotAllowed" and c,
        20,
        f"{name}: RedisNotAllowed",
        describe=lambda: objects.status(name),
    )
    message = str(cond["message"])
    assert message.startswith("spec.redis.url:") and str(port) not in message
    assert "127.0.0.1" not in message and "nothing was contacted" in message
    assert objects.get("deployment", f"sg-{name}") is None
    assert warnings(objects, name, "RedisNotAllowed") == 1
    return message


def warnings(objects: Objects, name: str, reason: str) -> int:
    """How many times an event of ``reason`` was posted for ``name`` (count summed)."""
    return sum(int(e.get("count") or 1) for e in objects.events(name) if e["reason"] == reason)


@pytest.fixture
def tenant_b(kube_cluster: KubeCluster, namespace: str) -> Iterator[str]:
    """A second tenant namespace; the operator's ServiceAccount (in ``namespace``, tenant A's
    and the operator's home) gets the chart's namespaced Role there too."""
    name = f"{namespace[:50]}-b{secrets.token_hex(2)}"
    kube_cluster.kubectl("create", "namespace", name)
    kube_cluster.kubectl("label", "namespace", name, "sendgroup.test/temporary=true")
    role, binding = (o for o in rbac_objects(name) if o["kind"] in ("Role", "RoleBinding"))
    binding["subjects"] = [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": namespace}]
    apply_objects(kube_cluster, [role, binding])
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


@pytest.fixture
def two_tenants(
    operator_factory: Callable[..., OperatorProcess],
    kube_cluster: KubeCluster,
    namespace: str,
    tenant_b: str,
) -> Callable[..., tuple[Objects, Objects]]:
    """Start one operator watching both namespaces (``env``: extra settings); returns the
    helpers of A's and B's namespace."""

    def start(**env: str) -> tuple[Objects, Objects]:
        operator_factory(SENDGROUP_WATCH_NAMESPACES=f"{namespace},{tenant_b}", **env)
        return Objects(kube_cluster, namespace), Objects(kube_cluster, tenant_b)

    return start


def test_claimed_queue_cannot_be_taken_paused_dumped_cancelled_or_released_by_another_tenant(
    two_tenants: Callable[..., tuple[Objects, Objects]], redis_client: redis.Redis
) -> None:
    # The queue-name policy off: B can name A's queue, the claim alone must stop it.
    a, b = two_tenants(SENDGROUP_QUEUE_NAME_POLICY="off")
    queue = "mail-newsletter"
    keys = QueueKeys(queue)
    push(redis_client, queue, 100)
    a.apply(sendgroup("newsletter", workers=2, queue=queue))
    wait_for(lambda: replicas(a, "newsletter") == 2, 30, "A's workers")
    uid = (a.get("sendgroup", "newsletter") or {})["metadata"]["uid"]
    owner = f"{a.namespace}/newsletter/{uid}".encode()
    wait_for(lambda: redis_client.get(keys.owner) == owner, 10, "A's claim")

    b.apply(sendgroup("thief", workers=3, queue=queue, smtp={"host": "relay.team-b.example"}))
    cond = wait_for(
        lambda: (c := ready(b, "thief")).get("reason") == "QueueConflict" and c,
        20,
        "B's QueueConflict",
        describe=lambda: b.status("thief"),
    )
    assert cond["status"] == "False"
    assert "claimed by another group" in cond["message"] and a.namespace not in cond["message"]
    assert b.status("thief")["phase"] == "Pending"

    # B pauses, asks for a dump, cancels: nothing reaches A's queue.
    b.patch_sg("thief", {"paused": True, "reaper": {"dumpAfter": "1s"}})
    time.sleep(4)
    assert not redis_client.exists(keys.paused), "B's pause set A's pause marker"
    b.patch_sg("thief", {"state": "Cancelled"})
    time.sleep(4)
    assert redis_client.llen(keys.ready) == 100
    assert not redis_client.exists(keys.purge_requested)
    assert b.get("deployment", "sg-thief") is None
    assert b.list("jobs") == [], "B got a dump or purge Job for A's queue"
    assert warnings(b, "thief", "QueueConflict") == 1, b.events("thief")

    # B's deletion finishes without touching the queue or A's claim.
    b.cluster.kubectl("delete", "sg", "thief", "-n", b.namespace, "--timeout=30s", timeout=45)
    assert b.get("sendgroup", "thief") is None
    assert redis_client.get(keys.owner) == owner
    assert redis_client.llen(keys.ready) == 100

    # A keeps its workers and its state all along.
    assert replicas(a, "newsletter") == 2
    status = a.status("newsletter")
    assert status["phase"] == "Running" and status["queue"]["ready"] == 100, status
    assert "QueueConflict" not in {e["reason"] for e in a.events("newsletter")}

    # The same mistake inside one namespace names the owner (a colleague's group).
    a.apply(sendgroup("copy", workers=1, queue=queue))
    cond = wait_for(
        lambda: (c := ready(a, "copy")).get("reason") == "QueueConflict" and c, 20, "conflict"
    )
    assert "SendGroup newsletter in this namespace" in cond["message"]
    assert a.get("deployment", "sg-copy") is None

    # The owner's deletion purges and releases: the queue is free for the next group.
    copy_uid = (a.get("sendgroup", "copy") or {})["metadata"]["uid"]
    copy_owner = f"{a.namespace}/copy/{copy_uid}".encode()
    a.cluster.kubectl("delete", "sg", "newsletter", "-n", a.namespace, "--timeout=60s", timeout=90)
    assert not redis_client.exists(keys.ready), "the owner's deletion did not purge"
    # released: free, or already claimed by the waiting group (its pass may come first)
    assert redis_client.get(keys.owner) in (None, copy_owner), redis_client.get(keys.owner)
    wait_for(lambda: redis_client.get(keys.owner) == copy_owner, 20, "copy claims the freed queue")
    wait_for(lambda: ready(a, "copy").get("reason") != "QueueConflict", 20, "conflict over")


def test_queue_name_policy_and_allowed_redis_hosts_with_two_namespaces(
    two_tenants: Callable[..., tuple[Objects, Objects]],
    redis_client: redis.Redis,
) -> None:
    # Two namespaces watched: the queue-name policy is on by default; only the default Redis.
    a, b = two_tenants(SENDGROUP_ALLOWED_REDIS_HOSTS="")
    queue = f"{a.namespace}.mail-newsletter"
    push(redis_client, queue, 7)
    a.apply(sendgroup("newsletter", workers=1))  # the default queue carries the namespace
    dep = wait_for(lambda: a.get("deployment", "sg-newsletter"), 30, "A's workers")
    env = {
        e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert queue in env.values(), env
    wait_for(lambda: a.status("newsletter").get("queue", {}).get("ready") == 7, 20, "A measured")

    b.apply(sendgroup("thief", workers=1, queue=queue))
    cond = wait_for(
        lambda: (c := ready(b, "thief")).get("reason") == "QueueNameNotAllowed" and c,
        20,
        "B's QueueNameNotAllowed",
        describe=lambda: b.status("thief"),
    )
    assert cond["message"].startswith("spec.queue:") and f"'{b.namespace}." in cond["message"]
    assert b.get("deployment", "sg-thief") is None
    assert (redis_client.get(QueueKeys(queue).owner) or b"").startswith(f"{a.namespace}/".encode())

    # A closed port and a listening non-Redis port get the same words: no port-scan oracle.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        ports = {"closed": free_port(), "open": listener.getsockname()[1]}
        messages = [refused_redis(b, name, port) for name, port in ports.items()]
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # the operator never connected: the check runs before
    assert messages[0] == messages[1]
    b.cluster.kubectl("delete", "sg", "--all", "-n", b.namespace, "--timeout=30s", timeout=45)
    assert redis_client.llen(QueueKeys(queue).ready) == 7


def test_one_tenants_high_priority_takes_nothing_from_another_on_a_cluster_provider(
    two_tenants: Callable[..., tuple[Objects, Objects]],
    kube_cluster: KubeCluster,
    redis_client: redis.Redis,
) -> None:
    """docs/security.md, tenancy model: a namespace's priorities and weights order its own
    groups only. A sets ``priority: high`` and ``weight: 1000`` on three groups with work, B
    has one normal group: on a shared ClusterSendProvider (``shareBy: Namespace``, the default)
    each namespace gets half the budget; ``shareBy: Group`` gives A's high groups all of it."""
    a, b = two_tenants()
    name = f"tenants-{secrets.token_hex(3)}"
    domain = f"{name}.example"

    def provider(share_by: str | None) -> str:
        spec: dict[str, Any] = {"match": {"domains": [domain]}, "rate": {"perMinute": 1200}}
        if share_by:
            spec["shareBy"] = share_by
        body = {
            "apiVersion": "sendgroups.io/v1alpha1",
            "kind": "ClusterSendProvider",
            "metadata": {"name": name},
            "spec": spec,
        }
        return json.dumps(body)

    kube_cluster.kubectl("apply", "-f", "-", input=provider(None))
    try:
        for i in range(3):
            queue = f"{a.namespace}.hi{i}"
            push(redis_client, queue, 50)
            a.apply(sendgroup(f"hi{i}", host=domain, queue=queue, priority="high", weight=1000))
        push(redis_client, f"{b.namespace}.news", 50)
        b.apply(sendgroup("news", host=domain, queue=f"{b.namespace}.news"))

        def by_namespace() -> dict[str, float]:
            obj = json.loads(
                kube_cluster.kubectl("get", "clustersendprovider", name, "-o", "json").stdout
            )
            out: dict[str, float] = {}
            for share in (obj.get("status") or {}).get("shares") or []:
                ns = share["group"].partition("/")[0]
                out[ns] = out.get(ns, 0.0) + float(share["perMinute"])
            return out

        split = wait_for(
            lambda: (s := by_namespace()).get(b.namespace, 0) > 0 and len(s) == 2 and s,
            60,
            "both namespaces' groups sharing",
            describe=by_namespace,
        )
        assert split == pytest.approx({a.namespace: 600.0, b.namespace: 600.0}, abs=1.0)
        kube_cluster.kubectl("apply", "-f", "-", input=provider("Group"))
        wait_for(
            lambda: by_namespace().get(b.namespace) == 0.0,
            30,
            "one pool: A's high groups first",
            describe=by_namespace,
        )
        assert by_namespace()[a.namespace] == pytest.approx(1200.0, abs=1.0)
    finally:
        kube_cluster.kubectl("delete", "clustersendprovider", name, "--ignore-not-found")
