"""A real SMTP server (aiosmtpd) on 127.0.0.1 that records what it received and answers as
scripted per recipient.

* ``SmtpSink().start()`` runs it in a thread (aiosmtpd's ``Controller``) for in-process tests;
  ``python -m tests.support.smtp_sink --port N`` runs it as its own process (the bench), and
  prints ``READY <port>`` once it listens.
* Per recipient: a list of replies for its successive RCPT attempts (``"451 4.7.1 later"``,
  ``"550 5.1.1 no such user"``, ``"250"``; the last one repeats), and optional delays before
  the RCPT reply or the DATA reply, for the first ``delay_attempts`` attempts.
* A message counts as received only when its final ``250`` could still be written to a live
  connection: a client killed while the DATA reply is delayed leaves an ``aborted`` entry, not
  a delivery (what an exactly-once test needs to tell "sent" from "half sent").
* ``received`` holds ``Received(recipient, job, data)`` where ``job`` is the message's
  ``X-SendGroup-Job`` header (the job uuid).
* ``pipelining=True`` adds PIPELINING (RFC 2920) to the EHLO reply (aiosmtpd reads one command
  line at a time from its stream, so a pipelined client is served in order);
  ``mail_reply`` (e.g. ``"451 4.3.0 later"``) refuses every MAIL FROM with that reply (the
  RCPTs and DATA that follow then get aiosmtpd's ``503``); ``mail_delay`` (seconds) holds
  every MAIL FROM reply that long (a slow relay: one wait per mail, no CPU spent);
  ``data_without_rcpt=True`` answers ``354`` to a DATA with no accepted recipient, as a lax
  relay may, reads the content up to the ``.`` line, records it in ``data_for_nobody`` and
  answers ``554`` (delivers nothing);
  ``data_reply`` refuses every DATA command with that reply (no 354); ``final_reply`` answers
  the end of every message with that reply instead of 250 (nothing recorded as received).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session, syntax

from tests.support.ports import free_port

JOB_HEADER = "X-SendGroup-Job"
_JOB_RE = re.compile(rb"^X-SendGroup-Job:[ \t]*(\S+)", re.MULTILINE | re.IGNORECASE)


@dataclass(frozen=True)
class Received:
    """One accepted message for one recipient: ``job`` = its X-SendGroup-Job header."""

    recipient: str
    job: str
    data: bytes
    at: float


@dataclass
class Script:
    """Scripted behaviour for one recipient (see the module docstring)."""

    replies: list[str] = field(default_factory=lambda: ["250 OK"])
    rcpt_delay: float = 0.0
    data_delay: float = 0.0
    delay_attempts: int = 1


class _Handler:
    def __init__(self, sink: SmtpSink) -> None:
        self.sink = sink

    async def handle_EHLO(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname
        if self.sink.pipelining:
            responses.insert(len(responses) - 1, "250-PIPELINING")
        return responses

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        with self.sink.lock:
            self.sink.mail_log.append(address)
            refusal = self.sink.mail_reply
            delay = self.sink.mail_delay
        if delay:
            await asyncio.sleep(delay)
        if refusal is not None:
            return refusal
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        sink = self.sink
        with sink.lock:
            attempt = sink.attempts[address]
            sink.attempts[address] += 1
            sink.rcpt_log.append((time.time(), address))
            script = sink.scripts.get(address.lower())
        if script is None:
            envelope.rcpt_tos.append(address)
            return "250 OK"
        if script.rcpt_delay and attempt < script.delay_attempts:
            with sink.lock:
                sink.rcpt_waiting[address] += 1
            await asyncio.sleep(script.rcpt_delay)
        reply = script.replies[min(attempt, len(script.replies) - 1)]
        if reply.startswith("2"):
            envelope.rcpt_tos.append(address)
        return reply

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        sink = self.sink
        with sink.lock:
            final = sink.final_reply
        if final is not None:
            return final
        content = envelope.original_content or b""
        if not isinstance(content, bytes):
            content = str(content).encode()
        delay = 0.0
        with sink.lock:
            for rcpt in envelope.rcpt_tos:
                script = sink.scripts.get(rcpt.lower())
                if script and script.data_delay and sink.attempts[rcpt] <= script.delay_attempts:
                    delay = max(delay, script.data_delay)
            if delay:
                for rcpt in envelope.rcpt_tos:
                    sink.data_waiting[rcpt] += 1
        if delay:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:  # aiosmtpd cancels the hook when the client is gone
                with sink.lock:
                    sink.aborted.extend(envelope.rcpt_tos)
                raise
        transport = server.transport
        if transport is None or transport.is_closing():
            with sink.lock:
                sink.aborted.extend(envelope.rcpt_tos)
            return "451 4.3.0 connection gone"
        head = content.split(b"\r\n\r\n", 1)[0]
        found = _JOB_RE.search(head)
        job = found.group(1).decode() if found else ""
        now = time.time()
        with sink.lock:
            sink.messages += 1
            for rcpt in envelope.rcpt_tos:
                sink.received.append(
                    Received(rcpt, str(job), content if sink.keep_data else b"", now)
                )
        return "250 2.0.0 queued"


class _Server(SMTP):
    """aiosmtpd's server with ``data_reply`` and ``data_without_rcpt`` (module docstring)."""

    def __init__(self, sink: SmtpSink, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sink = sink

    @syntax("DATA")
    async def smtp_DATA(self, arg: str) -> None:
        refusal = self.sink.data_reply
        if refusal is not None and self.envelope is not None and self.envelope.rcpt_tos:
            await self.push(refusal)
            return
        if not self.sink.data_without_rcpt or self.envelope is None or self.envelope.rcpt_tos:
            await super().smtp_DATA(arg)
            return
        await self.push("354 End data with <CR><LF>.<CR><LF>")
        content = bytearray()
        while True:
            line = await self._reader.readuntil(b"\r\n")
            if line == b".\r\n":
                break
            content.extend(line)
        with self.sink.lock:
            self.sink.data_for_nobody.append(bytes(content))
        self._set_rset_state()
        await self.push("554 5.5.1 Error: no valid recipients")


class _Controller(Controller):
    def __init__(self, sink: SmtpSink, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sink = sink

    def factory(self) -> SMTP:
        return _Server(self.sink, self.handler, **self.SMTP_kwargs)


class SmtpSink:
    """The sink. Thread-safe accessors; times in seconds."""

    def __init__(
        self,
        port: int | None = None,
        keep_data: bool = True,
        tls: str = "none",
        ssl_context: ssl.SSLContext | None = None,
        credentials: tuple[str, str] | None = None,
        host: str = "127.0.0.1",
        pipelining: bool = False,
    ) -> None:
        #: PIPELINING offered in the EHLO reply
        self.pipelining = pipelining
        #: the reply to every MAIL FROM instead of 250 (None: accepted)
        self.mail_reply: str | None = None
        #: seconds every MAIL FROM reply is held (0: at once)
        self.mail_delay = 0.0
        #: answer 354 to a DATA without an accepted recipient (then 554 after the content)
        self.data_without_rcpt = False
        #: the reply to every DATA command with recipients instead of 354 (None: 354)
        self.data_reply: str | None = None
        #: the reply after every message's final "." instead of 250 (None: 250, received)
        self.final_reply: str | None = None
        #: content read after such a 354 (never delivered)
        self.data_for_nobody: list[bytes] = []
        #: MAIL FROM addresses, in order
        self.mail_log: list[str] = []
        #: address to listen on: loopback, or the local node's pod gateway for the e2e tier
        self.host = host
        self.port = port or free_port()
        self.keep_data = keep_data
        self.tls = tls
        self.ssl_context = ssl_context
        self.credentials = credentials
        self.lock = threading.Lock()
        self.scripts: dict[str, Script] = {}
        self.attempts: Counter[str] = Counter()
        self.rcpt_waiting: Counter[str] = Counter()
        self.data_waiting: Counter[str] = Counter()
        self.received: list[Received] = []
        self.aborted: list[str] = []
        #: (unix time, recipient) of every RCPT command
        self.rcpt_log: list[tuple[float, str]] = []
        self.messages = 0
        self._controller: Controller | None = None

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> SmtpSink:
        options: dict[str, Any] = {}
        if self.tls == "starttls":
            options.update(tls_context=self.ssl_context, require_starttls=True)
        elif self.tls == "tls":
            # aiosmtpd does not see implicit TLS as TLS: allow AUTH on it explicitly
            options.update(ssl_context=self.ssl_context, auth_require_tls=False)
        if self.credentials is not None:
            expected = self.credentials

            def check(
                server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
            ) -> AuthResult:
                ok = (
                    isinstance(auth_data, LoginPassword)
                    and (auth_data.login.decode(), auth_data.password.decode()) == expected
                )
                return AuthResult(success=ok)

            # AUTH is offered (and checked) in every mode; required only with STARTTLS,
            # where aiosmtpd knows the session is encrypted
            options.update(authenticator=check, auth_required=self.tls == "starttls")
        self._controller = _Controller(
            self,
            _Handler(self),
            hostname=self.host,
            port=self.port,
            decode_data=False,
            enable_SMTPUTF8=True,
            data_size_limit=10 * 1024 * 1024,
            **options,
        )
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self) -> SmtpSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- scripting ------------------------------------------------------------------------
    def script(self, recipient: str, *replies: str, **delays: Any) -> None:
        """Script ``recipient``: ``replies`` for its successive attempts (last repeats),
        ``rcpt_delay=``/``data_delay=`` seconds for the first ``delay_attempts=`` attempts."""
        with self.lock:
            self.scripts[recipient.lower()] = Script(list(replies) or ["250 OK"], **delays)

    def reset(self) -> None:
        with self.lock:
            self.scripts.clear()
            self.attempts.clear()
            self.rcpt_waiting.clear()
            self.data_waiting.clear()
            self.received.clear()
            self.aborted.clear()
            self.rcpt_log.clear()
            self.messages = 0
            self.mail_reply = None
            self.mail_delay = 0.0
            self.data_without_rcpt = False
            self.data_reply = None
            self.final_reply = None
            self.data_for_nobody.clear()
            self.mail_log.clear()

    # --- reading --------------------------------------------------------------------------
    def snapshot(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def per_recipient(self) -> Counter[str]:
        with self.lock:
            return Counter(r.recipient for r in self.received)

    def per_job(self) -> Counter[str]:
        with self.lock:
            return Counter(r.job for r in self.received)

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``predicate`` every 20 ms; AssertionError naming ``what`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.02)
        if not predicate():
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def _main() -> None:
    parser = argparse.ArgumentParser(description="SMTP sink on 127.0.0.1 (counts messages)")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sink = SmtpSink(port=args.port or None, keep_data=False).start()
    print(f"READY {sink.port}", flush=True)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        sink.stop()


if __name__ == "__main__":
    _main()
