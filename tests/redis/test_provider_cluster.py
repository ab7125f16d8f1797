"""The provider scripts on a real 3-master Redis Cluster: every key of a provider carries its
hash tag, so the permit (five keys) and the pushback (three keys) each run on one node, and
two providers land on their own slots."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import redis.asyncio.cluster

from sendgroup_operator import provider_io
from sendgroup_operator.provider_io import ProviderState
from sendgroup_worker import redisclient
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


def test_the_operator_reads_and_writes_a_providers_state_on_a_cluster(
    cluster: RedisCluster,
) -> None:
    """The operator's side on a cluster (review finding: read_state put TIME in a cluster
    pipeline, which redis-py refuses, so no share was ever written and no rule reached the
    provider's status): shares written, a rule fired by a worker read back with the clock of
    the node that owns the provider's slot."""
    rule = PushbackRuleConfig(name="blocked", codes=[421], action="suspend", duration=30.0)

    async def scenario() -> tuple[ProviderState, float, str]:
        url = f"redis+cluster://127.0.0.1:{cluster.servers[0].port}/"
        client = await redisclient.connect_async(url)
        try:
            await provider_io.write_shares(client, url, "csp/outlook", {"ns/a": 600.0})
            pacer = ProviderPacer(
                client,
                ProviderConfig(id="csp/outlook", group="ns/a", perMinute=60, rules=[rule]),
                RatePolicy(per_minute=None),
                30,
            )
            assert await pacer.record_reply("421 4.7.0 try later")
            state = await provider_io.read_state(client, url, "csp/outlook")
            share = (await pacer.try_take("l0")).why
            return state, time.time(), share
        finally:
            await redisclient.aclose(client)

    state, now, why = asyncio.run(scenario())
    assert state.shares_present
    assert [r.name for r in state.rules] == ["blocked"]
    assert state.replies["blocked"].startswith("421")
    assert abs(state.now - now) < 5  # the servers run on this machine's clock
    assert why == "suspended:blocked"
