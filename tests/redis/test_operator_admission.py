"""The operator's admission of a group before any action on its queue (issue 16:
``reconcile.admit``) against a real redis-server: the claim (first group wins, a second one in
any namespace is refused, the same group re-created takes over its own stale claim), the
queue-name policy and ``allowedRedisHosts`` (refused before anything is contacted or written).
The Kubernetes client is real but never called: these groups name no Secret."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import kubernetes.client as k8s
import pytest
import redis

from sendgroup_operator import models, plan, reconcile
from sendgroup_operator.kube import Kube
from sendgroup_operator.settings import Settings
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.redis_server import free_port

pytestmark = pytest.mark.redis

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def spec(**kw: Any) -> models.SendGroupSpec:
    return models.SendGroupSpec.model_validate({"campaign": "c", "host": "gmail.com", **kw})


def group(namespace: str, name: str, uid: str) -> plan.Group:
    return plan.Group(namespace, name, uid, 1, T0)


def admit(rt: reconcile.Runtime, g: plan.Group, s: models.SendGroupSpec) -> Any:
    async def go() -> Any:
        try:
            return await reconcile.admit(rt, g, reconcile.effective_spec(rt.settings, g, s))
        finally:
            await rt.queues.close()

    return asyncio.run(go())


def runtime(redis_url: str, **settings: Any) -> reconcile.Runtime:
    return reconcile.Runtime(
        settings=Settings(default_redis_url=redis_url, **settings), kube=Kube(k8s.ApiClient())
    )


def test_first_group_owns_the_queue_and_others_are_refused(
    redis_url: str, redis_client: redis.Redis
) -> None:
    rt = runtime(redis_url, watch_namespaces=("team-a", "team-b"), queue_name_policy="off")
    keys = QueueKeys("mail-newsletter")
    owner = group("team-a", "newsletter", "uid-a")
    assert admit(rt, owner, spec(queue="mail-newsletter")) == redis_url
    assert redis_client.get(keys.owner) == b"team-a/newsletter/uid-a"
    assert admit(rt, owner, spec(queue="mail-newsletter")) == redis_url  # every pass: no-op

    other = admit(rt, group("team-b", "thief", "uid-b"), spec(queue="mail-newsletter"))
    assert isinstance(other, plan.Refused) and other.reason == "QueueConflict"
    assert "claimed by another group" in other.message and "team-a" not in other.message
    colleague = admit(rt, group("team-a", "copy", "uid-c"), spec(queue="mail-newsletter"))
    assert isinstance(colleague, plan.Refused)
    assert "SendGroup newsletter in this namespace" in colleague.message
    # another namespace's group of the same name is not a re-creation
    twin = admit(rt, group("team-b", "newsletter", "uid-t"), spec(queue="mail-newsletter"))
    assert isinstance(twin, plan.Refused)
    assert redis_client.get(keys.owner) == b"team-a/newsletter/uid-a"

    # deleted while Redis was down (no release), then re-created: a new uid takes over
    again = group("team-a", "newsletter", "uid-a2")
    assert admit(rt, again, spec(queue="mail-newsletter")) == redis_url
    assert redis_client.get(keys.owner) == b"team-a/newsletter/uid-a2"


def test_queue_name_policy_refuses_before_redis_and_gives_prefixed_defaults(
    redis_url: str, redis_client: redis.Redis
) -> None:
    rt = runtime(redis_url, watch_namespaces=("team-a", "team-b"))  # auto: on
    g = group("team-a", "newsletter", "uid-a")
    assert reconcile.effective_spec(rt.settings, g, spec()).queue == "team-a.mail-newsletter"
    assert admit(rt, g, spec()) == redis_url
    assert redis_client.get(QueueKeys("team-a.mail-newsletter").owner) == b"team-a/newsletter/uid-a"

    refused = admit(rt, group("team-b", "x", "uid-x"), spec(queue="team-a.mail-newsletter"))
    assert isinstance(refused, plan.Refused) and refused.reason == "QueueNameNotAllowed"
    assert refused.message.startswith("spec.queue:")
    refused = admit(rt, group("team-b", "y", "uid-y"), spec(queue="mail-free"))
    assert isinstance(refused, plan.Refused)
    assert not redis_client.exists(QueueKeys("mail-free").owner)  # nothing claimed
    # one namespace watched: the policy is off and defaults stay as they were
    single = runtime(redis_url, watch_namespaces=("team-a",))
    assert reconcile.effective_spec(single.settings, g, spec()).queue is None


def test_redis_outside_the_allowed_hosts_is_refused_without_contact(redis_url: str) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    g = group("team-a", "g", "uid-g")
    strict = runtime(redis_url)
    refused = admit(strict, g, spec(redis={"url": closed}))
    assert isinstance(refused, plan.Refused) and refused.reason == "RedisNotAllowed"
    assert refused.message.startswith("spec.redis.url:") and "127.0.0.1" not in refused.message
    # allowed, the same URL is contacted: unreachable is then a QueueError (ownership unknown)
    loose = runtime(redis_url, allowed_redis_hosts=("127.0.0.1",))
    unreachable = admit(loose, g, spec(redis={"url": closed}))
    assert isinstance(unreachable, plan.QueueError)
    # the default Redis, named explicitly with another database, is the default Redis
    explicit = redis_url.rsplit("/", 1)[0] + "/0" if redis_url.count("/") > 2 else redis_url + "/0"
    assert admit(strict, g, spec(redis={"url": explicit})) == explicit
