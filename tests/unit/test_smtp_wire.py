"""What the pipelined send path (``smtppipe``) writes for a message is exactly what
aiosmtplib's own rewriting gives (line ends made CRLF, a final CRLF, lines starting with ``.``
dot-stuffed, then the end-of-data ``.``), whether the message takes the shortcut for
already-canonical messages or not; and the mails the worker builds take the shortcut. The
MAIL FROM and RCPT TO commands quote addresses exactly as aiosmtplib's ``quote_address``
does, including its refusals, whether the address takes the shortcut for plain ones or not."""

from __future__ import annotations

import asyncio

import pytest
from aiosmtplib.email import quote_address
from aiosmtplib.protocol import PERIOD_REGEX, normalize_message_line_endings
from hypothesis import example, given
from hypothesis import strategies as st

from sendgroup_worker import smtppipe
from sendgroup_worker.smtp import build_message
from tests.support.smtp_transport import NoClient, RecordingTransport

#: bytes a message may carry around its line ends and line starts
_BYTES = st.lists(st.sampled_from([b"a", b" ", b".", b"\r", b"\n", b"\r\n", b"\xc3\xa9"])).map(
    b"".join
)


def _sent(message: bytes) -> bytes:
    """The bytes ``send_content`` writes for ``message``."""

    async def go() -> bytes:
        loop = asyncio.get_running_loop()
        protocol = smtppipe.PipeliningProtocol(loop, client=NoClient())  # type: ignore[arg-type]
        transport = RecordingTransport()
        protocol.connection_made(transport)  # type: ignore[arg-type]
        protocol.send_content(message)
        return b"".join(transport.written)

    return asyncio.run(go())


def _aiosmtplib(message: bytes) -> bytes:
    """aiosmtplib's rewriting of a DATA body (``SMTPProtocol.execute_data_command``)."""
    return PERIOD_REGEX.sub(b"..", normalize_message_line_endings(message)) + b".\r\n"


@given(_BYTES)
@example(b"")
@example(b"a\r\nb")
@example(b"a\r\nb\r\n")
@example(b".a\r\n")
@example(b"a\r\n.\r\n")
@example(b"a\rb\r\n")
@example(b"a\nb\r\n")
@example(b"a\r")
def test_the_message_on_the_wire_is_aiosmtplibs_rewriting(message: bytes) -> None:
    assert _sent(message) == _aiosmtplib(message)


def test_a_built_mail_needs_no_rewriting_unless_a_line_starts_with_a_dot() -> None:
    data = {"to": "a@x.example", "from": "shop@x.example", "subject": "s"}
    plain = build_message({**data, "text": "Hello,\nsecond line\n\nbye"}, "j1").body
    both = build_message({**data, "text": "Hello\n", "html": "<p>é</p>"}, "j2").body
    dotted = build_message({**data, "text": "Hello,\n.starts with a dot"}, "j3").body
    assert smtppipe.wire_ready(plain)
    assert smtppipe.wire_ready(both)
    assert not smtppipe.wire_ready(dotted)
    assert _sent(dotted) == _aiosmtplib(dotted)
    assert b"\r\n..starts with a dot\r\n.\r\n" in _sent(dotted)


_ATEXT = "abzAZ09!#$%&'*+/=?^_`{|}~.-"
_PLAIN = st.builds(
    "{}@{}".format,
    st.text(alphabet=st.sampled_from(list(_ATEXT)), min_size=1, max_size=12),
    st.text(alphabet=st.sampled_from(list("abz09.-")), min_size=1, max_size=12),
)
#: addresses beside the plain ones: non-ASCII, quoted local parts, display names, brackets
_OTHER = st.sampled_from(
    [
        "é@x.example",
        '"a b"@x.example',
        "Ann <a@x.example>",
        "a@[10.0.0.1]",
        "a@x_y.example",
        "a@x.example> NOTIFY=NEVER",
        "a@x.example NOTIFY=NEVER",
    ]
)


@given(st.one_of(_PLAIN, _OTHER))
def test_mail_and_rcpt_commands_quote_addresses_as_aiosmtplib_does(address: str) -> None:
    encoding = "ascii" if address.isascii() else "utf-8"
    quoted = quote_address(address).encode(encoding)
    assert smtppipe.mail_command(address, [], encoding) == b"MAIL FROM:" + quoted
    assert smtppipe.rcpt_command(address, encoding) == b"RCPT TO:" + quoted


def test_an_address_with_a_space_is_refused_as_aiosmtplib_refuses_it() -> None:
    with pytest.raises(ValueError, match="not permitted"):
        smtppipe.rcpt_command("a b@x.example", "ascii")
    with pytest.raises(ValueError, match="not permitted"):
        smtppipe.mail_command("a b@x.example", [], "ascii")
