"""A DNS server on loopback (dnslib) answering MX queries from a table, for provider resolution
tests. ``answers`` maps a domain to ``[(preference, host), ...]``; an unknown domain gets
NXDOMAIN; a domain in ``silent`` gets no answer at all (a timeout for the client). Counts the
queries it received."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from dnslib import MX, QTYPE, RCODE, RR, DNSRecord
from dnslib.server import BaseResolver, DNSLogger, DNSServer

from tests.support.ports import free_port


class _Resolver(BaseResolver):  # type: ignore[misc]
    def __init__(self, owner: MxDnsServer) -> None:
        self.owner = owner

    def resolve(self, request: DNSRecord, handler: Any) -> DNSRecord:
        name = str(request.q.qname).rstrip(".").lower()
        with self.owner.lock:
            self.owner.queries[name] += 1
        reply = request.reply()
        if name in self.owner.silent:
            return None  # dnslib sends nothing: the client times out
        records = self.owner.answers.get(name)
        if records is None:
            reply.header.rcode = RCODE.NXDOMAIN
            return reply
        if request.q.qtype == QTYPE.MX:
            for pref, host in records:
                reply.add_answer(RR(name, QTYPE.MX, ttl=self.owner.ttl, rdata=MX(host, pref)))
        return reply


class MxDnsServer:
    """Runs in a thread on 127.0.0.1:``port`` (UDP)."""

    def __init__(self, answers: dict[str, list[tuple[int, str]]], ttl: int = 60) -> None:
        self.answers = answers
        self.ttl = ttl
        self.silent: set[str] = set()
        self.queries: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.port = free_port(udp=True)
        self._server = DNSServer(
            _Resolver(self),
            address="127.0.0.1",
            port=self.port,
            logger=DNSLogger(log="-request,-reply,-truncated,-data", prefix=False),
        )

    def start(self) -> MxDnsServer:
        self._server.start_thread()
        return self

    def stop(self) -> None:
        self._server.stop()
