"""End to end on the local node: two campaigns send to one provider, which sees their sum.

A namespaced ``SendProvider`` claims the domain ``bigmail.test`` with a budget of 600
recipients a minute (10/s). Two SendGroups of two campaigns (``spring`` and ``news``), two
worker pods each and no rate of their own, send to it at once; the operator resolves both to
the provider, shares its budget between them and writes the shares to Redis, and the worker
pods take a permit per mail. What a user checks at the receiving side: recipients per second
arriving at the provider in total (within 5 % of the budget) and per group (an even split, as
both have weight 1), and that a paused group's share goes to the other within seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.cluster import wait_for
from tests.support.e2e import (
    operator_for_test,
    patch_spec,
    push_mails,
    sendgroup_manifest,
    sendgroup_status,
    worker_pods,
)
from tests.support.node import NodeCluster, get_json
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink

pytestmark = [pytest.mark.e2e]

DOMAIN = "bigmail.test"
PER_SECOND = 10
GROUPS = ("spring-bigmail", "news-bigmail")
JOBS = 600  # per group: more than the test sends (~350 each)


@dataclass
class Env:
    node: NodeCluster
    namespace: str
    smtp: SmtpSink
    redis: RedisServer
    report: list[str]

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return self.node.kube.kubectl("-n", self.namespace, *args, input=stdin).stdout

    def arrivals(self, start: float, end: float, group: str = "") -> int:
        """Recipients the sink received in [start, end), of one group's campaign or all."""
        tag = f"@{group.split('-')[0]}." if group else "@"
        with self.smtp.lock:
            return sum(
                1
                for m in self.smtp.received
                if start <= m.at < end and m.recipient.endswith(DOMAIN) and tag in m.recipient
            )

    def provider_status(self) -> dict[str, Any]:
        obj = get_json(self.node.kube, "-n", self.namespace, "sendprovider", "bigmail")
        return dict(obj.get("status") or {})


@pytest.fixture
def env(
    node_cluster: NodeCluster,
    e2e_namespace: str,
    pod_redis: RedisServer,
    pod_smtp: SmtpSink,
    request: pytest.FixtureRequest,
) -> Iterator[Env]:
    with operator_for_test(
        node_cluster, e2e_namespace, pod_redis.url, pod_smtp.host, pod_smtp.port, request
    ) as (_operator, report):
        yield Env(node_cluster, e2e_namespace, pod_smtp, pod_redis, report)


@pytest.mark.timeout(600)
def test_two_campaigns_to_one_provider_share_its_budget_and_a_pause_hands_over(
    env: Env,
) -> None:
    provider = {
        "apiVersion": "sendgroups.io/v1alpha1",
        "kind": "SendProvider",
        "metadata": {"name": "bigmail", "namespace": env.namespace},
        "spec": {
            "match": {"domains": [DOMAIN]},
            "rate": {"perMinute": PER_SECOND * 60, "burst": PER_SECOND},
            "concurrency": 8,
        },
    }
    env.kubectl("apply", "-f", "-", stdin=json.dumps(provider))
    client = env.redis.client()
    for group in GROUPS:
        campaign = group.split("-")[0]
        # recipients on the provider's domain, the campaign in the local part's domain label
        push_mails(client, f"mail-{group}", [f"r{i}@{campaign}.{DOMAIN}" for i in range(JOBS)])
    worker = {"timeout": 10, "retryAfter": 20}
    for group in GROUPS:
        env.kubectl(
            "apply",
            "-f",
            "-",
            stdin=sendgroup_manifest(
                group,
                env.namespace,
                campaign=group.split("-")[0],
                host=DOMAIN,
                workers=2,
                worker=worker,
            ),
        )

    # both resolved to the provider, and both sending
    def provider_of(group: str) -> str:
        status = sendgroup_status(env.node.kube, env.namespace, group)
        return str((status.get("provider") or {}).get("name", ""))

    for group in GROUPS:
        wait_for(lambda g=group: provider_of(g) == "bigmail", 120, f"{group} resolved")
    wait_for(
        lambda: all(env.arrivals(0, time.time() + 1, g) > 0 for g in GROUPS),
        180,
        "mail from both groups",
    )
    wait_for(lambda: env.provider_status().get("groups") == 2, 60, "provider counts 2 groups")

    # 30 s of both sending, past the start-up burst
    time.sleep(3.0)
    t0 = time.time()
    time.sleep(30.0)
    total = env.arrivals(t0, t0 + 30.0)
    each = {g: env.arrivals(t0, t0 + 30.0, g) for g in GROUPS}
    env.report.append(
        f"provider {PER_SECOND}/s, two groups x 2 worker pods, 30 s: {total} recipients "
        f"(target {PER_SECOND * 30}), per group {each}"
    )
    assert abs(total - PER_SECOND * 30) <= PER_SECOND * 30 * 0.05, (total, each)
    for g, n in each.items():
        assert 0.35 * total <= n <= 0.65 * total, (g, each)

    # pause news: its workers go, spring gets the whole budget
    patch_spec(env.node.kube, env.namespace, GROUPS[1], {"paused": True})
    paused_at = time.time()
    wait_for(lambda: not worker_pods(env.node.kube, env.namespace, GROUPS[1]), 90, "news paused")
    gone = time.time() - paused_at
    time.sleep(3.0)  # the next share write (once a second) and the workers' next permits
    t1 = time.time()
    time.sleep(15.0)
    after = {g: env.arrivals(t1, t1 + 15.0, g) for g in GROUPS}
    env.report.append(
        f"news paused: its pods gone {gone:.1f}s after the patch; next 15 s: {after} "
        f"(target {PER_SECOND * 15} for spring, 0 for news)"
    )
    assert after[GROUPS[1]] == 0, after
    assert abs(after[GROUPS[0]] - PER_SECOND * 15) <= PER_SECOND * 15 * 0.1, after
