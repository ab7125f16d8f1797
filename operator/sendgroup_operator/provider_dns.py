"""MX lookups for provider resolution (dnspython), cached by the answer's TTL.

A group's ``spec.host`` that no provider claims by domain is classified by its MX hosts (a
Google Workspace domain has MX ``aspmx.l.google.com``). Answers are cached for their TTL
(bounded by :data:`MIN_TTL`..:data:`MAX_TTL`); "no such domain" and "no MX record" are
cached as an empty answer for :data:`NEGATIVE_TTL`; a DNS failure (timeout, no server) is
remembered for :data:`ERROR_TTL` only, so passes do not each wait for a timeout and a later
pass tries again. Meanwhile the last answer read is served stale, up to :data:`STALE_MAX`
past its expiry (RFC 8767, "Serving Stale Data to Improve DNS Resiliency": a resolver may
answer from expired data when the authorities cannot be reached; it suggests 1 to 3 days),
so a resolver outage does not move a group off its provider; with no answer to serve it
raises :class:`MxLookupError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import dns.exception
import dns.resolver

#: Cache bounds, seconds.
MIN_TTL: Final = 30.0
MAX_TTL: Final = 86400.0
NEGATIVE_TTL: Final = 300.0
#: A DNS failure is remembered this long (seconds), so passes do not each wait for a timeout.
ERROR_TTL: Final = 30.0
#: How long past its expiry an answer is served when the lookup fails (seconds; RFC 8767
#: section 5 suggests 1 to 3 days).
STALE_MAX: Final = 3 * 86400.0


class MxLookupError(RuntimeError):
    """The MX records could not be read (DNS timeout or failure); try again later."""


@dataclass(frozen=True, slots=True)
class _Entry:
    hosts: tuple[str, ...]
    expires: float
    error: str = ""
    #: until when ``hosts`` (the last answer read) may be served while lookups fail
    #: (monotonic seconds; 0: no answer to serve)
    stale_until: float = 0.0


class MxCache:
    """``lookup(domain)`` -> MX host names, best preference first (lower case, no trailing
    dot). ``nameservers``: ``["127.0.0.1"]`` with ``port`` for a test server; default: the
    system's resolver configuration. ``clock``: monotonic seconds (injected in tests)."""

    def __init__(
        self,
        nameservers: Sequence[str] | None = None,
        port: int = 53,
        timeout: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if nameservers:
            self.resolver = dns.resolver.Resolver(configure=False)
            self.resolver.nameservers = list(nameservers)
        else:
            self.resolver = dns.resolver.Resolver()
        self.resolver.port = port
        self.resolver.lifetime = timeout
        self.clock = clock
        self._cache: dict[str, _Entry] = {}
        #: DNS queries actually sent (not answered from the cache)
        self.queries = 0
        #: no lookups at all (``SENDGROUP_DNS_SERVERS=none``): every domain has no MX
        self.disabled = False

    @classmethod
    def from_env(cls, value: str | None) -> MxCache:
        """The cache the operator uses: ``SENDGROUP_DNS_SERVERS`` is empty (the system's
        resolver), ``none`` (no MX lookup at all: groups resolve by domain only; the tests
        use it so that no query leaves the machine), or ``host[:port],...``."""
        text = (value or "").strip()
        if not text:
            return cls()
        if text.lower() == "none":
            cache = cls(nameservers=["127.0.0.1"])
            cache.disabled = True
            return cache
        hosts = [h.strip() for h in text.split(",") if h.strip()]
        port = 53
        servers = []
        for host in hosts:
            name, _, number = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
            servers.append(name)
            if number:
                port = int(number)
        return cls(nameservers=servers, port=port)

    def fresh(self, domain: str) -> bool:
        """Whether :meth:`lookup` of ``domain`` would answer from the cache now, without a DNS
        query (and so without blocking): lookups disabled, or an entry (answer or remembered
        failure) not yet expired."""
        if self.disabled:
            return True
        entry = self._cache.get(domain.lower().rstrip("."))
        return entry is not None and entry.expires > self.clock()

    def lookup(self, domain: str) -> Sequence[str]:
        """MX hosts of ``domain``; on DNS trouble the last answer read (served stale, see the
        module docstring), else raises :class:`MxLookupError`."""
        if self.disabled:
            return ()
        key = domain.lower().rstrip(".")
        now = self.clock()
        entry = self._cache.get(key)
        if entry is not None and entry.expires > now:
            if entry.error:
                if entry.stale_until > now:
                    return entry.hosts
                raise MxLookupError(entry.error)
            return entry.hosts
        self.queries += 1
        try:
            answer = self.resolver.resolve(key, "MX")
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            self._answer(key, (), now + NEGATIVE_TTL)
            return ()
        except (dns.exception.Timeout, dns.resolver.NoNameservers) as exc:
            return self._failed(key, entry, f"MX lookup of {key}: {type(exc).__name__}", now)
        except dns.exception.DNSException as exc:
            return self._failed(key, entry, f"MX lookup of {key}: {exc}", now)
        records = sorted(answer, key=lambda r: (r.preference, str(r.exchange)))
        hosts = tuple(str(r.exchange).lower().rstrip(".") for r in records)
        ttl = float(answer.rrset.ttl) if answer.rrset is not None else MIN_TTL
        self._answer(key, hosts, now + min(MAX_TTL, max(MIN_TTL, ttl)))
        return hosts

    def _answer(self, key: str, hosts: tuple[str, ...], expires: float) -> None:
        self._cache[key] = _Entry(hosts, expires, stale_until=expires + STALE_MAX)

    def _failed(self, key: str, entry: _Entry | None, error: str, now: float) -> Sequence[str]:
        """Remember the failure for :data:`ERROR_TTL`; serve the last answer while it may be
        served stale, else raise."""
        stale = entry is not None and entry.stale_until > now
        hosts = entry.hosts if entry is not None and stale else ()
        until = entry.stale_until if entry is not None and stale else 0.0
        self._cache[key] = _Entry(hosts, now + ERROR_TTL, error, until)
        if stale:
            return hosts
        raise MxLookupError(error) from None
