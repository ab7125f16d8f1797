"""The provider scripts on a real 3-master Redis Cluster: every key of a provider carries its
hash tag, so the permit (five keys) and the pushback (three keys) each run on one node, and
two providers land on their own slots."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis.asyncio.cluster

from sendgroup_worker.provider import ProviderConfig, ProviderPacer, PushbackRuleConfig
from sendgroup_worker.ratelimit import RatePolicy
from tests.support.redis_cluster import RedisCluster

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    c = RedisCluster().start()
    yield c
    c.cleanup()


def test_permits_leases_and_rules_on_a_cluster(cluster: RedisCluster) -> None:
    rule = PushbackRuleConfig(name="blocked", codes=[421], action="suspend", duration=30.0)

    async def scenario() -> tuple[list[bool], str, bool]:
        nodes = [redis.asyncio.cluster.ClusterNode("127.0.0.1", s.port) for s in cluster.servers]
        client = redis.asyncio.cluster.RedisCluster(startup_nodes=nodes)
        try:
            google = ProviderPacer(
                client,  # a cluster client: the scripts need one slot per call
                ProviderConfig(
                    id="csp/google",
                    group="mail/a",
                    perMinute=60,
                    burst=2,
                    concurrency=5,
                    rules=[rule],
                ),
                RatePolicy(per_minute=None),
                30,
            )
            yahoo = ProviderPacer(
                client,  # a cluster client: the scripts need one slot per call
                ProviderConfig(id="csp/yahoo", group="mail/b", perMinute=60, burst=2),
                RatePolicy(per_minute=None),
                30,
            )
            grants = [(await google.try_take(f"l{i}")).granted for i in range(3)]
            assert await google.record_reply("421 4.7.0 try later")
            refused = await google.try_take("l0")
            other = await yahoo.try_take("l0")  # another provider is not suspended
            return grants, refused.why, other.granted
        finally:
            await client.aclose()

    grants, why, other = asyncio.run(scenario())
    assert grants == [True, True, False]  # burst 2
    assert why == "suspended:blocked"
    assert other
