"""SMTP PIPELINING (RFC 2920) in the worker's send path (``SmtpPool``), against real servers:
the project's aiosmtpd sink (PIPELINING offered or not, scripted refusals) and Postfix's
``smtp-sink`` (offers PIPELINING unless ``-p``; ``-Q RCPT`` answers 421 and hangs up).

What a user checks: each mail arrives once with its content intact, refusals are classified
exactly as without PIPELINING, a connection is reused or dropped as before, and the pipelined
path waits twice per mail where the plain path waits 3 + recipients times. Round trips are
counted exactly by a relay in front of the server (``tests.support.turn_relay``: how often the
client spoke after the server), not by timing. No Redis: this tier's real-server tests.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import aiosmtplib
import pytest

from sendgroup_worker import smtppipe
from sendgroup_worker.smtp import (
    OutgoingMail,
    ReplyClass,
    SendResult,
    SmtpPool,
    SmtpSettings,
    build_message,
)
from tests.support.postfix_sink import PostfixSink
from tests.support.smtp_sink import SmtpSink
from tests.support.smtp_transport import NoClient, RecordingTransport
from tests.support.turn_relay import TurnRelay

pytestmark = pytest.mark.timeout(60)

#: a body line that starts with "." (dot-stuffed on the wire, RFC 5321 4.5.2) and one that is
#: only "." (would end the message early if it were not stuffed)
BODY = "Hello,\n.starts with a dot\n.\nbye\n"


def _mail(*recipients: str, job: str | None = None) -> OutgoingMail:
    data = {"to": list(recipients), "from": "shop@sender.example", "subject": "s", "text": BODY}
    return build_message(data, job or str(uuid.uuid4()))


def _pool(port: int, timeout: float = 5.0, pipelining: bool = True) -> SmtpPool:
    settings = SmtpSettings(
        host="127.0.0.1", port=port, timeout=timeout, helo_name="t", pipelining=pipelining
    )
    return SmtpPool(settings, 1)


def _pipelined(pool: SmtpPool) -> bool:
    """Whether the pool's idle connection runs the pipelining protocol."""
    (conn,) = pool._idle
    return isinstance(conn.client.protocol, smtppipe.PipeliningProtocol)


@pytest.fixture
def sink() -> Iterator[SmtpSink]:
    """A fresh aiosmtpd sink per test (``pipelining`` is set by the test before connecting)."""
    with SmtpSink() as s:
        yield s


def _run_mails(port: int, mails: list[OutgoingMail], **send: object) -> list[SendResult]:
    async def go() -> list[SendResult]:
        pool = _pool(port)
        try:
            return [await pool.send(m, **send) for m in mails]  # type: ignore[arg-type]
        finally:
            await pool.close()

    return asyncio.run(go())


# --- round trips and delivery -------------------------------------------------------------
@pytest.mark.parametrize(
    ("offered", "wanted", "turns_per_mail"),
    [(True, True, 2), (False, True, 3 + 3), (True, False, 3 + 3)],
    ids=["pipelined", "not-offered", "SMTP_PIPELINING=off"],
)
def test_round_trips_per_mail_and_each_mail_arrives_once(
    sink: SmtpSink, offered: bool, wanted: bool, turns_per_mail: int
) -> None:
    sink.pipelining = offered
    recipients = ("a@x.example", "b@x.example", "c@y.example")
    with TurnRelay(sink.port) as relay:

        async def go() -> tuple[list[SendResult], int, bool]:
            pool = _pool(relay.port, pipelining=wanted)
            try:
                first = await pool.send(_mail(*recipients))  # opens: greeting, EHLO
                before = relay.turns
                rest = [await pool.send(_mail(*recipients)) for _ in range(5)]
                used = _pipelined(pool)
                return [first, *rest], relay.turns - before, used
            finally:
                await pool.close()

        results, turns, used = asyncio.run(go())
        assert relay.connections == 1  # one connection reused for all six
    assert used is (offered and wanted)
    assert [r.reply_class for r in results] == [ReplyClass.OK] * 6
    assert all(r.code == 250 and not r.refused for r in results)
    assert turns == 5 * turns_per_mail
    per_job = sink.per_job()
    assert len(per_job) == 6 and set(per_job.values()) == {3}  # once per recipient
    for received in sink.snapshot():
        assert received.data.replace(b"\r\n", b"\n").endswith(BODY.encode())


@pytest.mark.parametrize(("options", "turns_per_mail"), [((), 2), (("-p",), 3 + 2)])
def test_postfix_smtp_sink_with_and_without_pipelining(
    options: tuple[str, ...], turns_per_mail: int
) -> None:
    with PostfixSink(*options) as postfix, TurnRelay(postfix.port) as relay:
        jobs = [str(uuid.uuid4()) for _ in range(8)]

        async def go() -> tuple[list[SendResult], int, bool]:
            pool = _pool(relay.port)
            try:
                first = await pool.send(_mail("a@x.example", "b@y.example", job=jobs[0]))
                before = relay.turns
                rest = [
                    await pool.send(_mail("a@x.example", "b@y.example", job=job))
                    for job in jobs[1:]
                ]
                return [first, *rest], relay.turns - before, _pipelined(pool)
            finally:
                await pool.close()

        results, turns, used = asyncio.run(go())
        dumped = postfix.messages()
    assert used is (options == ())
    assert [r.reply_class for r in results] == [ReplyClass.OK] * 8
    assert turns == 7 * turns_per_mail
    assert len(dumped) == 8
    assert all(d.recipients == ("a@x.example", "b@y.example") for d in dumped)
    assert all(d.sender == "shop@sender.example" for d in dumped)
    arrived = Counter(
        line.split(b":", 1)[1].strip().decode()
        for d in dumped
        for line in d.content.split(b"\n")
        if line.startswith(b"X-SendGroup-Job:")
    )
    assert arrived == Counter(jobs)
    # the body as written, dots and all (smtp-sink undoes the dot-stuffing; its dump adds a
    # blank line after the content)
    assert all(d.content.split(b"\n\n", 1)[1] == BODY.encode() + b"\n" for d in dumped)


def test_smtputf8_mail_goes_through_the_pipelined_group(sink: SmtpSink) -> None:
    sink.pipelining = True
    results = _run_mails(sink.port, [_mail("j\u00fcrgen@b\u00fccher.example")])
    assert results[0].reply_class is ReplyClass.OK
    assert sink.per_recipient() == Counter({"j\u00fcrgen@b\u00fccher.example": 1})


# --- refusals: the same outcome with and without PIPELINING --------------------------------
BOTH = pytest.mark.parametrize("pipelining", [True, False], ids=["pipelined", "plain"])


@BOTH
def test_some_recipients_refused_mail_goes_to_the_others(sink: SmtpSink, pipelining: bool) -> None:
    sink.pipelining = pipelining
    sink.script("gone@x.example", "550 5.1.1 no such user")
    sink.script("full@x.example", "452 4.2.2 mailbox full")
    (result, after) = _run_mails(
        sink.port,
        [_mail("gone@x.example", "ok@x.example", "full@x.example"), _mail("next@x.example")],
    )
    assert result.reply_class is ReplyClass.OK and result.code == 250
    assert dict(result.refused) == {
        "gone@x.example": "550 5.1.1 no such user",
        "full@x.example": "452 4.2.2 mailbox full",
    }
    assert after.reply_class is ReplyClass.OK
    assert sink.per_recipient() == Counter({"ok@x.example": 1, "next@x.example": 1})


@BOTH
@pytest.mark.parametrize(
    ("replies", "expected"),
    [
        (("550 5.1.1 no such user", "551 5.1.6 moved"), (ReplyClass.PERMANENT, 550)),
        (("550 5.1.1 no such user", "451 4.7.1 greylisted"), (ReplyClass.TEMPORARY, 451)),
    ],
)
def test_every_recipient_refused_nothing_sent_connection_reused(
    sink: SmtpSink,
    pipelining: bool,
    replies: tuple[str, str],
    expected: tuple[ReplyClass, int],
) -> None:
    sink.pipelining = pipelining
    sink.script("one@x.example", replies[0])
    sink.script("two@x.example", replies[1])
    with TurnRelay(sink.port) as relay:
        result, after = _run_mails(
            relay.port, [_mail("one@x.example", "two@x.example"), _mail("next@x.example")]
        )
        assert relay.connections == 1  # RSET, then the next mail on the same connection
    assert (result.reply_class, result.code) == expected
    assert sink.messages == 1 and sink.per_recipient() == Counter({"next@x.example": 1})
    assert after.reply_class is ReplyClass.OK


def test_every_recipient_refused_but_data_accepted_ends_with_a_lone_dot(sink: SmtpSink) -> None:
    """RFC 2920 3.1: a relay may answer 354 to the pipelined DATA although no RCPT was
    accepted; the client then sends "." alone (an empty message for nobody), never the mail."""
    sink.pipelining = True
    sink.data_without_rcpt = True
    sink.script("one@x.example", "550 5.1.1 no such user")
    result, after = _run_mails(sink.port, [_mail("one@x.example"), _mail("next@x.example")])
    assert (result.reply_class, result.code, result.text) == (
        ReplyClass.PERMANENT,
        550,
        "5.1.1 no such user",
    )
    assert sink.data_for_nobody == [b""]  # the lone dot: not one byte of the message
    assert after.reply_class is ReplyClass.OK
    assert sink.per_recipient() == Counter({"next@x.example": 1})


@BOTH
def test_mail_from_refused_classified_by_its_reply(sink: SmtpSink, pipelining: bool) -> None:
    sink.pipelining = pipelining
    sink.mail_reply = "451 4.3.0 try later"

    async def go() -> tuple[SendResult, SendResult]:
        pool = _pool(sink.port)
        try:
            refused = await pool.send(_mail("a@x.example"))
            sink.mail_reply = None
            return refused, await pool.send(_mail("a@x.example"))
        finally:
            await pool.close()

    refused, after = asyncio.run(go())
    assert (refused.reply_class, refused.code, refused.text) == (
        ReplyClass.TEMPORARY,
        451,
        "4.3.0 try later",
    )
    assert after.reply_class is ReplyClass.OK
    assert sink.per_recipient() == Counter({"a@x.example": 1})
    assert len(sink.mail_log) == 2


@pytest.mark.parametrize(
    ("options", "turns", "outcome"),
    [
        ((), 1 + 1, (ReplyClass.TEMPORARY, 421)),
        # the plain path files the 421 as one refused recipient and learns of the closed
        # connection at the next RCPT: a connection outcome (also retried with backoff)
        (("-p",), 1 + 2, (ReplyClass.CONNECTION, None)),
    ],
    ids=["pipelined", "plain"],
)
def test_421_mid_pipeline_drops_the_connection(
    options: tuple[str, ...], turns: int, outcome: tuple[ReplyClass, int | None]
) -> None:
    """smtp-sink -Q RCPT: "421" and a hang-up after the first RCPT (with PIPELINING, in the
    middle of the group: the second RCPT and the DATA behind it are never answered)."""
    with PostfixSink("-Q", "RCPT", *options) as postfix, TurnRelay(postfix.port) as relay:

        async def go() -> tuple[SendResult, int]:
            pool = _pool(relay.port)
            try:
                result = await pool.send(_mail("a@x.example", "b@x.example"))
                return result, len(pool._idle)
            finally:
                await pool.close()

        result, idle = asyncio.run(go())
        dumped = postfix.messages()
        assert relay.turns == turns  # EHLO, then the group (or MAIL, RCPT)
    assert (result.reply_class, result.code) == outcome
    assert idle == 0  # closed, not returned to the pool
    # smtp-sink leaves a dump file for the transaction it cut short at RCPT (no content, its
    # records written or not yet): no message content reached it
    assert [d.content for d in dumped if d.content] == []


@BOTH
@pytest.mark.parametrize(
    ("setting", "reply", "expected"),
    [
        ("data_reply", "554 5.7.1 DATA not accepted", (ReplyClass.PERMANENT, 554)),
        ("data_reply", "451 4.3.0 DATA later", (ReplyClass.TEMPORARY, 451)),
        ("final_reply", "552 5.3.4 message too big", (ReplyClass.PERMANENT, 552)),
        ("final_reply", "451 4.3.0 queue full", (ReplyClass.TEMPORARY, 451)),
    ],
)
def test_data_or_message_refused_its_reply_decides_connection_reused(
    sink: SmtpSink, pipelining: bool, setting: str, reply: str, expected: tuple[ReplyClass, int]
) -> None:
    sink.pipelining = pipelining
    setattr(sink, setting, reply)

    async def go(port: int) -> tuple[SendResult, SendResult]:
        pool = _pool(port)
        try:
            refused = await pool.send(_mail("a@x.example", "b@x.example"))
            setattr(sink, setting, None)
            return refused, await pool.send(_mail("c@x.example"))
        finally:
            await pool.close()

    with TurnRelay(sink.port) as relay:
        refused, after = asyncio.run(go(relay.port))
        assert relay.connections == 1  # RSET, then the next mail on the same connection
    assert (refused.reply_class, refused.code) == expected
    assert refused.text == reply.split(" ", 1)[1]
    assert after.reply_class is ReplyClass.OK
    assert sink.per_recipient() == Counter({"c@x.example": 1})


# --- the fence --------------------------------------------------------------------------
def test_fence_lost_before_the_group_sends_nothing(sink: SmtpSink) -> None:
    sink.pipelining = True
    results = _run_mails(sink.port, [_mail("a@x.example")], fence=lambda: False)
    assert results[0].reply_class is ReplyClass.FENCED
    assert sink.mail_log == [] and sink.messages == 0


def test_fence_lost_after_354_closes_without_the_final_dot(sink: SmtpSink) -> None:
    """Asked before the group (True) and after the 354 (False): the connection is closed
    before the terminating ".", so the relay delivers nothing (RFC 5321 4.1.1.4)."""
    sink.pipelining = True
    answers = iter([True, False])

    def fence() -> bool:
        return next(answers)

    async def go() -> tuple[SendResult, int, SendResult]:
        pool = _pool(sink.port)
        try:
            fenced = await pool.send(_mail("a@x.example"), fence=fence)
            idle = len(pool._idle)
            return fenced, idle, await pool.send(_mail("b@x.example"))
        finally:
            await pool.close()

    fenced, idle, after = asyncio.run(go())
    assert fenced.reply_class is ReplyClass.FENCED and fenced.code is None
    assert idle == 0
    assert after.reply_class is ReplyClass.OK  # a new connection
    assert sink.per_recipient() == Counter({"b@x.example": 1})


# --- timeouts, suppression, TLS -----------------------------------------------------------
@BOTH
def test_a_reply_slower_than_the_timeout_is_a_connection_outcome(
    sink: SmtpSink, pipelining: bool
) -> None:
    sink.pipelining = pipelining
    sink.script("slow@x.example", "250 OK", rcpt_delay=3.0)

    async def go() -> tuple[SendResult, int]:
        pool = _pool(sink.port, timeout=0.5)
        try:
            result = await pool.send(_mail("slow@x.example"))
            return result, len(pool._idle)
        finally:
            await pool.close()

    result, idle = asyncio.run(go())
    assert result.reply_class is ReplyClass.CONNECTION and "Timed out" in result.text
    assert idle == 0
    assert sink.messages == 0


def test_suppressed_recipients_left_out_of_the_pipelined_envelope(sink: SmtpSink) -> None:
    sink.pipelining = True

    async def screen(recipients: object) -> set[str]:
        return {"blocked@x.example"}

    results = _run_mails(sink.port, [_mail("blocked@x.example", "ok@x.example")], screen=screen)
    assert results[0].reply_class is ReplyClass.OK
    assert results[0].suppressed == ("blocked@x.example",)
    assert sink.per_recipient() == Counter({"ok@x.example": 1})
    assert [a for _, a in sink.rcpt_log] == ["ok@x.example"]


@pytest.fixture(scope="module")
def tls_context(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, Path]:
    """(server context, CA file) for a self-signed 127.0.0.1 certificate."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "relay.pem", folder / "relay.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, cert


@pytest.mark.parametrize("mode", ["starttls", "tls"])
def test_pipelining_over_tls(tls_context: tuple[ssl.SSLContext, Path], mode: str) -> None:
    """The pipelining protocol is put under the TLS transport (after STARTTLS or with
    implicit TLS) and still makes two round trips per mail."""
    context, ca_file = tls_context
    with SmtpSink(tls=mode, ssl_context=context, pipelining=True) as tls_sink:
        with TurnRelay(tls_sink.port) as relay:

            async def go() -> tuple[list[SendResult], int, bool]:
                settings = SmtpSettings(
                    host="127.0.0.1", port=relay.port, tls=mode, ca_file=str(ca_file), timeout=5
                )
                pool = SmtpPool(settings, 1)
                try:
                    first = await pool.send(_mail("a@x.example"))
                    before = relay.turns
                    rest = [await pool.send(_mail("a@x.example")) for _ in range(3)]
                    return [first, *rest], relay.turns - before, _pipelined(pool)
                finally:
                    await pool.close()

            results, turns, used = asyncio.run(go())
        assert used
        assert [r.reply_class for r in results] == [ReplyClass.OK] * 4
        assert turns == 3 * 2
        assert tls_sink.per_recipient() == Counter({"a@x.example": 4})


# --- the reply queue itself ---------------------------------------------------------------
def test_replies_arriving_together_or_split_are_handed_out_in_order() -> None:
    """Several replies in one segment, one reply split over segments, a multi-line reply, and
    bytes when nothing is owed (dropped, as aiosmtplib drops them)."""

    async def go() -> list[tuple[int, str]]:
        loop = asyncio.get_running_loop()
        protocol = smtppipe.PipeliningProtocol(loop, client=NoClient())  # type: ignore[arg-type]
        protocol.connection_made(RecordingTransport())  # type: ignore[arg-type]
        protocol._response_pending = False
        protocol.data_received(b"250 unsolicited\r\n")  # nothing owed: dropped
        protocol.send_group([b"MAIL FROM:<a@x>", b"RCPT TO:<b@x>", b"DATA"])
        protocol.data_received(b"250 2.1.0 ok\r\n250-first\r\n250 sec")
        protocol.data_received(b"ond\r\n354 go on\r\n")
        got = [await protocol.read_response(1) for _ in range(3)]
        return [(r.code, r.message) for r in got]

    assert asyncio.run(go()) == [(250, "2.1.0 ok"), (250, "first\nsecond"), (354, "go on")]


def test_a_malformed_reply_and_a_lost_connection_come_after_the_replies_before_them() -> None:
    async def go() -> list[object]:
        loop = asyncio.get_running_loop()
        protocol = smtppipe.PipeliningProtocol(loop, client=NoClient())  # type: ignore[arg-type]
        protocol.connection_made(RecordingTransport())  # type: ignore[arg-type]
        protocol._response_pending = False
        protocol.send_group([b"MAIL FROM:<a@x>", b"RCPT TO:<b@x>", b"RCPT TO:<c@x>", b"DATA"])
        protocol.data_received(b"250 ok\r\nnonsense\r\n")
        out: list[object] = []
        for _ in range(2):
            try:
                out.append((await protocol.read_response(1)).code)
            except aiosmtplib.SMTPResponseException as exc:
                out.append(exc.code)
        protocol.data_received(b"250 late\r\n354 go\r\n")  # queued behind the error
        protocol.connection_lost(None)
        for _ in range(3):
            try:
                out.append((await protocol.read_response(1)).code)
            except aiosmtplib.SMTPServerDisconnected:
                out.append("disconnected")
        return out

    assert asyncio.run(go()) == [250, -1, 250, 354, "disconnected"]


def test_a_command_with_a_line_break_is_refused_before_anything_is_written() -> None:
    async def go() -> list[bytes]:
        loop = asyncio.get_running_loop()
        protocol = smtppipe.PipeliningProtocol(loop, client=NoClient())  # type: ignore[arg-type]
        transport = RecordingTransport()
        protocol.connection_made(transport)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="control character"):
            protocol.send_group([b"MAIL FROM:<a@x>", b"RCPT TO:<b@x>\r\nRCPT TO:<evil@x>"])
        return transport.written

    assert asyncio.run(go()) == []
