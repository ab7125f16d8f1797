"""Provider resolution through real DNS: a DNS server on loopback answers MX queries; the
operator's MxCache (dnspython) reads them, caches them by TTL, and the pure resolution uses
them (a Google Workspace customer's domain resolves to the google provider via its MX)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sendgroup_operator import models, provider_plan
from sendgroup_operator.provider_dns import (
    ERROR_TTL,
    NEGATIVE_TTL,
    STALE_MAX,
    MxCache,
    MxLookupError,
)
from sendgroup_operator.provider_models import SendProvider
from tests.support.dns_server import MxDnsServer

GOOGLE = SendProvider.model_validate(
    {
        "kind": "ClusterSendProvider",
        "metadata": {"name": "google"},
        "spec": {"match": {"domains": ["gmail.com"], "mxSuffixes": [".google.com"]}},
    }
)


@pytest.fixture
def dns_server() -> Iterator[MxDnsServer]:
    server = MxDnsServer(
        {
            "workspace-customer.com": [(10, "alt1.aspmx.l.google.com"), (1, "aspmx.l.google.com")],
            "own-mx.example": [(10, "mx1.own-mx.example")],
        },
        ttl=120,
    ).start()
    yield server
    server.stop()


def test_mx_answers_resolve_the_provider_and_are_cached_by_ttl(dns_server: MxDnsServer) -> None:
    now = [1000.0]
    cache = MxCache(["127.0.0.1"], port=dns_server.port, timeout=2.0, clock=lambda: now[0])
    spec = models.SendGroupSpec.model_validate({"campaign": "c", "host": "Workspace-Customer.com"})
    r = provider_plan.resolve(spec, "mail", [], [GOOGLE], cache.lookup)
    assert r.provider is not None
    assert (r.provider.name, r.provider.via) == ("google", "mx aspmx.l.google.com")  # preference 1
    assert cache.lookup("workspace-customer.com")[0] == "aspmx.l.google.com"
    assert dns_server.queries["workspace-customer.com"] == 1  # second answer from the cache
    now[0] += 119
    cache.lookup("workspace-customer.com")
    assert dns_server.queries["workspace-customer.com"] == 1
    now[0] += 2  # past the 120 s TTL
    cache.lookup("workspace-customer.com")
    assert dns_server.queries["workspace-customer.com"] == 2

    other = models.SendGroupSpec.model_validate({"campaign": "c", "host": "own-mx.example"})
    miss = provider_plan.resolve(other, "mail", [], [GOOGLE], cache.lookup)
    assert miss.reason == "NoProviderMatched" and "mx1.own-mx.example" in miss.message


def test_nxdomain_is_cached_briefly_and_a_timeout_is_an_error_not_cached(
    dns_server: MxDnsServer,
) -> None:
    now = [0.0]
    cache = MxCache(["127.0.0.1"], port=dns_server.port, timeout=0.5, clock=lambda: now[0])
    assert cache.lookup("nowhere.example") == ()
    assert cache.lookup("nowhere.example") == ()
    assert dns_server.queries["nowhere.example"] == 1
    now[0] += NEGATIVE_TTL + 1
    cache.lookup("nowhere.example")
    assert dns_server.queries["nowhere.example"] == 2

    dns_server.silent.add("slow.example")
    with pytest.raises(MxLookupError, match=r"slow\.example"):
        cache.lookup("slow.example")
    with pytest.raises(MxLookupError):  # remembered: no second wait for a timeout
        cache.lookup("slow.example")
    assert dns_server.queries["slow.example"] == 1
    now[0] += ERROR_TTL + 1  # then tried again
    spec = models.SendGroupSpec.model_validate({"campaign": "c", "host": "slow.example"})
    r = provider_plan.resolve(spec, "mail", [], [GOOGLE], cache.lookup)
    assert (r.status, r.reason) == ("Unknown", "MxLookupFailed")


def test_a_resolver_outage_serves_the_last_answer_so_the_group_keeps_its_provider(
    dns_server: MxDnsServer,
) -> None:
    """Review finding: a DNS failure after the answer's TTL moved a Workspace group off its
    provider (status Unknown, no provider: its workers rolled without the provider's limits).
    The last answer is now served stale for up to STALE_MAX past its expiry (RFC 8767), each
    failure remembered for ERROR_TTL; after that the lookup fails."""
    now = [0.0]
    cache = MxCache(["127.0.0.1"], port=dns_server.port, timeout=0.5, clock=lambda: now[0])
    spec = models.SendGroupSpec.model_validate({"campaign": "c", "host": "workspace-customer.com"})
    assert provider_plan.resolve(spec, "mail", [], [GOOGLE], cache.lookup).reason == "MxMatched"
    dns_server.silent.add("workspace-customer.com")
    now[0] += 121  # past the TTL: the server no longer answers
    r = provider_plan.resolve(spec, "mail", [], [GOOGLE], cache.lookup)
    assert (r.reason, r.provider and r.provider.name) == ("MxMatched", "google")
    assert dns_server.queries["workspace-customer.com"] == 2  # it did ask again
    cache.lookup("workspace-customer.com")
    assert dns_server.queries["workspace-customer.com"] == 2  # the failure is remembered
    now[0] += STALE_MAX
    with pytest.raises(MxLookupError):
        cache.lookup("workspace-customer.com")
    dns_server.silent.discard("workspace-customer.com")
    now[0] += ERROR_TTL + 1
    assert cache.lookup("workspace-customer.com")[0] == "aspmx.l.google.com"
