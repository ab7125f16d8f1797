"""Provider resolution through real DNS: a DNS server on loopback answers MX queries; the
operator's MxCache (dnspython) reads them, caches them by TTL, and the pure resolution uses
them (a Google Workspace customer's domain resolves to the google provider via its MX)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sendgroup_operator import models, provider_plan
from sendgroup_operator.provider_dns import ERROR_TTL, NEGATIVE_TTL, MxCache, MxLookupError
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
