"""Sending mail: build the MIME message from a job's ``data``, send it through the relay over a
pool of reused aiosmtplib connections, and classify the reply.

A relay whose EHLO offers PIPELINING (RFC 2920) gets each mail in two round trips: MAIL FROM,
every RCPT TO and DATA written as one group, then the message (``smtppipe``); any other relay
gets today's one command per round trip (MAIL, each RCPT, DATA, message).

Reply classes (RFC 5321 section 4.2.1, first digit of the reply code):

* ``2xx``: accepted, the job is done;
* ``4xx``: transient negative completion, the job is released with backoff and the group's
  backpressure counts it;
* ``5xx``: permanent negative completion, the job goes straight to failed;
* ``connection``: the relay could not be reached, dropped the connection or timed out; treated
  like ``4xx`` (released with backoff).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.errors
import email.policy
import enum
import re
import socket
import string
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from email.charset import QP, Charset
from email.header import Header
from email.message import EmailMessage, Message
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.utils import formataddr, formatdate, make_msgid
from typing import Any, Final

import aiosmtplib

from sendgroup_worker import smtppipe

#: Header carrying the job uuid on every message (lets a receiving side count per job).
JOB_HEADER: Final = "X-SendGroup-Job"

#: Seconds a pooled connection may sit idle before it is checked with NOOP before reuse.
IDLE_CHECK_AFTER: Final = 10.0

#: The suppression screen: given the envelope recipients, returns those that must not be mailed.
Screen = Callable[[Sequence[str]], Awaitable[Collection[str]]]


class ScreenRefused(Exception):
    """Raised by a :data:`Screen` to stop a send before anything is written (e.g. the job is no
    longer this worker's to send). :meth:`SmtpPool.send` lets it through and keeps the
    connection (no command of the transaction was written)."""


class ReplyClass(enum.StrEnum):
    """How a send ended; the value is the metrics label."""

    OK = "2xx"
    TEMPORARY = "4xx"
    PERMANENT = "5xx"
    CONNECTION = "connection"
    #: the worker stopped before DATA because it no longer holds the job (nothing was sent)
    FENCED = "fenced"
    #: every recipient is in the suppression set (nothing was sent; see ``loopback``)
    SUPPRESSED = "suppressed"


def classify_code(code: int) -> ReplyClass:
    """Reply class of an SMTP reply code (RFC 5321 4.2.1). Codes outside 200..599, which a
    broken relay or aiosmtplib's internal -1 may give, count as connection trouble."""
    if 200 <= code < 300:
        return ReplyClass.OK
    if 400 <= code < 500:
        return ReplyClass.TEMPORARY
    if 500 <= code < 600:
        return ReplyClass.PERMANENT
    return ReplyClass.CONNECTION


@dataclass(frozen=True, slots=True)
class SendResult:
    """Outcome of one SMTP transaction: class, reply code (None without a reply), reply text,
    recipients refused while others were accepted (address -> "code text"), recipients left
    out of the envelope by the suppression screen."""

    reply_class: ReplyClass
    code: int | None
    text: str
    refused: Mapping[str, str] = field(default_factory=dict)
    suppressed: tuple[str, ...] = ()

    @property
    def reply(self) -> str:
        """``"550 5.1.1 no such user"``, or the error text without a code."""
        return f"{self.code} {self.text}" if self.code is not None else self.text


class InvalidMailData(ValueError):
    """The job's ``data`` cannot become a message (no recipient, no sender, no body, ...).
    Permanent: retrying cannot help."""


@dataclass(frozen=True, slots=True)
class OutgoingMail:
    """A message ready for the wire: envelope sender, envelope recipients, RFC 5322 bytes."""

    sender: str
    recipients: list[str]
    body: bytes
    needs_utf8: bool


#: A mailbox: (display name, addr-spec); the name is "" when there is none.
Mailbox = tuple[str, str]

#: addr-spec as this worker sends it (RFC 5321 Mailbox without quoted local parts or address
#: literals): one ``@``, no white space, no control character, none of ``<>()[],;:"\``.
#: Non-ASCII (SMTPUTF8) is allowed.
_ATOMS: Final = r'[^\s<>()\[\],;:"\\@\x00-\x1f\x7f]+'
_ADDR_SPEC: Final = re.compile(f"{_ATOMS}@{_ATOMS}")

#: A control character (C0 or DEL), CR and LF included: refused anywhere in an address.
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")

#: ``Name <addr>`` or ``"Name" <addr>`` written as one string.
_NAME_ADDR: Final = re.compile(r"(?P<name>[^<>]*?)\s*<(?P<addr>[^<>]*)>")

#: Characters never allowed in a display name: a line break or any other control character
#: (header injection), and ``<``, ``>``, ``@`` (a second address hidden in the name).
_BAD_NAME: Final = re.compile(r"[\x00-\x1f\x7f<>@]")


@dataclass(frozen=True, slots=True)
class MailLimits:
    """Caps on one job's mail (``MAIL_MAX_BYTES``, ``MAIL_MAX_RECIPIENTS``): the message's
    size in bytes as sent (headers + body) and the envelope recipients (to + cc + bcc, each
    distinct address once). A job over a cap fails as ``InvalidMailData``."""

    max_bytes: int = 10 * 1024 * 1024
    max_recipients: int = 100


#: The caps when the worker's settings give none.
DEFAULT_LIMITS: Final = MailLimits()


def _mailbox(item: Any, field_name: str) -> Mailbox:
    """One address of ``data.<field_name>``, validated, never rewritten: ``"a@x"``,
    ``"Name <a@x>"``, ``'"Name, Jr." <a@x>'`` or ``{"address": "a@x", "name": "Name"}``.
    Raises InvalidMailData for anything else: a line break or control character anywhere, a
    second address, an address in the display name, an addr-spec this worker would not send
    to exactly as written."""
    if isinstance(item, Mapping):
        address, name = item.get("address"), item.get("name")
        if not isinstance(address, str) or not (name is None or isinstance(name, str)):
            raise InvalidMailData(f"data.{field_name}: not an address: {_show(item)}")
        name = name or ""
    elif isinstance(item, str):
        if _CONTROL.search(item):
            raise InvalidMailData(
                f"data.{field_name}: contains a line break or control character: {_show(item)}"
            )
        text = item.strip(" ")
        match = _NAME_ADDR.fullmatch(text) if text.endswith(">") else None
        if match is None:
            name, address = "", text
        else:
            name, address = match.group("name").strip(), match.group("addr").strip()
            if len(name) >= 2 and name[0] == name[-1] == '"':
                inner = name[1:-1]
                if re.search(r'(?<!\\)"', inner):
                    raise InvalidMailData(
                        f"data.{field_name}: badly quoted display name: {_show(item)}"
                    )
                name = re.sub(r"\\(.)", r"\1", inner)
            elif re.search(r'[,;"]', name):
                raise InvalidMailData(
                    f'data.{field_name}: a display name with , ; or " must be quoted: {_show(item)}'
                )
    else:
        raise InvalidMailData(f"data.{field_name}: not an address: {_show(item)}")
    if _BAD_NAME.search(name):
        raise InvalidMailData(
            f"data.{field_name}: display name contains a line break, a control character, "
            f"'<', '>' or '@': {_show(item)}"
        )
    if not _ADDR_SPEC.fullmatch(address):
        raise InvalidMailData(
            f"data.{field_name}: not a single valid address (one local@domain, no line "
            f"break, no second address): {_show(item)}"
        )
    return name, address


def _show(value: Any) -> str:
    """``value`` for an error message: repr (line breaks visible), cut to 200 characters."""
    text = repr(value)
    return text if len(text) <= 200 else text[:199] + "\u2026"


def _addresses(value: Any, field_name: str) -> list[Mailbox]:
    """``"a@x"``, ``["a@x", ...]``, ``{"address": "a@x", "name": "A"}`` or a list of those, as
    validated mailboxes (see :func:`_mailbox`)."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    return [_mailbox(item, field_name) for item in items]


def check_header_line(label: str, value: str) -> None:
    """A header's value must stay on its line: a CR or LF would end the header (or inject
    another, e.g. ``Bcc:``). Raises InvalidMailData ``"<label>: contains a line break ..."``."""
    if "\r" in value or "\n" in value:
        raise InvalidMailData(f"{label}: contains a line break (not allowed in a header)")


def render_part(template: Any, variables: Mapping[str, Any]) -> str | None:
    """One template part (``subject``/``text``/``html``) with ``$name`` placeholders filled
    from ``variables`` (Python's ``string.Template.safe_substitute``: an unknown placeholder
    stays as written). None for a missing part; InvalidMailData when it is not a string."""
    if template is None:
        return None
    if not isinstance(template, str):
        raise InvalidMailData(f"template part is not a string: {template!r}")
    return string.Template(template).safe_substitute({k: str(v) for k, v in variables.items()})


def build_message(
    data: Mapping[str, Any], job_uuid: str, limits: MailLimits | None = None
) -> OutgoingMail:
    """Build the message for a mail job.

    ``data`` fields: ``to`` (required), ``cc``, ``bcc``, ``from`` (required), ``reply_to``,
    ``subject``, ``text`` and/or ``html`` (at least one), or ``template`` (an object with
    ``subject``/``text``/``html`` using ``$name`` placeholders, Python's ``string.Template``)
    plus ``vars``; ``headers`` (name -> value). Adds ``X-SendGroup-Job: <uuid>`` and a
    ``Message-ID`` derived from the uuid unless ``headers`` sets one.

    Addresses are validated, never rewritten (:func:`_mailbox`): the envelope goes exactly to
    the addr-specs the job names. ``limits`` caps the size and the recipients.

    Raises :class:`InvalidMailData` when the data cannot make a message.
    """
    if not isinstance(data, Mapping):
        raise InvalidMailData("data is not an object")
    to = _addresses(data.get("to"), "to")
    cc = _addresses(data.get("cc"), "cc")
    bcc = _addresses(data.get("bcc"), "bcc")
    senders = _addresses(data.get("from"), "from")
    if not to and not cc and not bcc:
        raise InvalidMailData("data.to: no recipient")
    if len(senders) != 1:
        raise InvalidMailData("data.from: exactly one sender is required")
    limits = limits or DEFAULT_LIMITS
    recipients = list(dict.fromkeys(addr for _, addr in (*to, *cc, *bcc)))
    if len(recipients) > limits.max_recipients:
        raise InvalidMailData(
            f"data: {len(recipients)} recipients, more than MAIL_MAX_RECIPIENTS "
            f"({limits.max_recipients}) per job"
        )
    subject, text, html = data.get("subject"), data.get("text"), data.get("html")
    template = data.get("template")
    if template is not None:
        if not isinstance(template, Mapping):
            raise InvalidMailData("data.template must be an object with subject/text/html")
        variables = data.get("vars") or {}
        if not isinstance(variables, Mapping):
            raise InvalidMailData("data.vars must be an object")
        subject = render_part(template.get("subject"), variables) if subject is None else subject
        text = render_part(template.get("text"), variables) if text is None else text
        html = render_part(template.get("html"), variables) if html is None else html
    if text is None and html is None:
        raise InvalidMailData("data: one of text, html or template is required")
    for name, part in (("subject", subject), ("text", text), ("html", html)):
        if part is not None and not isinstance(part, str):
            raise InvalidMailData(f"data.{name} must be a string")
    # checked before building: encoding a huge body costs several copies of it in memory
    _check_size(sum(len(part) for part in (subject, text, html) if part), limits)

    headers = data.get("headers") or {}
    if not isinstance(headers, Mapping):
        raise InvalidMailData("data.headers must be an object")
    extra: list[tuple[str, str]] = []
    seen: set[str] = set()
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str | int | float):
            raise InvalidMailData(f"data.headers: bad header {name!r}")
        if not _HEADER_NAME.fullmatch(name):
            raise InvalidMailData(
                f"data.headers: {name!r} is not a header name (RFC 5322 3.6.8: printable "
                "ASCII, no space or colon)"
            )
        if name.lower() in _OWN_HEADERS:
            raise InvalidMailData(f"data.headers.{name}: {_OWN_HEADERS[name.lower()]}")
        if name.lower() in seen:
            raise InvalidMailData(f"data.headers.{name}: given twice (names are case-insensitive)")
        seen.add(name.lower())
        extra.append((name, str(value)))
    for name, value in (("subject", subject or ""), *((f"headers.{n}", v) for n, v in extra)):
        check_header_line(f"data.{name}", value)
    parts = _Parts(
        sender=senders[0],
        to=to,
        cc=cc,
        reply_to=_addresses(data.get("reply_to"), "reply_to"),
        subject=subject or "",
        text=text,
        html=html,
        headers=extra,
        job_uuid=job_uuid,
    )
    sender = senders[0][1]
    needs_utf8 = not all(a.isascii() for a in (sender, *recipients))
    try:
        body = _build_utf8(parts) if needs_utf8 else _build(parts)
    except (ValueError, TypeError, IndexError, UnicodeError, email.errors.MessageError) as exc:
        raise InvalidMailData(f"cannot build the message: {exc}") from exc
    _check_size(len(body), limits)
    return OutgoingMail(sender=sender, recipients=recipients, body=body, needs_utf8=needs_utf8)


def _check_size(size: int, limits: MailLimits) -> None:
    if size > limits.max_bytes:
        raise InvalidMailData(
            f"data: message of at least {size} bytes, more than MAIL_MAX_BYTES ({limits.max_bytes})"
        )


#: RFC 5322 field-name: printable ASCII, no ':'. Used with fullmatch: ``$`` alone also matches
#: before a final line break ("X-A\n" passed and broke the header block).
_HEADER_NAME: Final = re.compile(r"[!-9;-~]+")
#: Header fields the worker writes itself, each once (RFC 5322 3.6: at most one From, To, Cc,
#: Bcc, Reply-To, Subject), with where a job says them: a copy in ``data.headers`` would be a
#: second field (a second ``From:`` shown instead of the envelope's sender) and is refused,
#: never dropped or rewritten. ``Date`` and ``Message-ID`` given there replace the worker's.
_OWN_HEADERS: Final = {
    "from": "set from data.from (a second From field is not sent)",
    "to": "set from data.to",
    "cc": "set from data.cc",
    "bcc": "use data.bcc (a Bcc field would show the blind copies to every recipient)",
    "reply-to": "set from data.reply_to",
    "subject": "set from data.subject",
    "mime-version": "set by the worker from the parts (text, html)",
    "content-type": "set by the worker from the parts (text, html)",
    "content-transfer-encoding": "set by the worker from the parts (text, html)",
    JOB_HEADER.lower(): "set by the worker to the job's uuid",
}
_COMPAT_CRLF: Final = email.policy.compat32.clone(linesep="\r\n")


@dataclass(frozen=True, slots=True)
class _Parts:
    sender: Mailbox
    to: list[Mailbox]
    cc: list[Mailbox]
    reply_to: list[Mailbox]
    subject: str
    text: str | None
    html: str | None
    headers: list[tuple[str, str]]
    job_uuid: str


def _header(value: str, name: str) -> str:
    """``value``, or its RFC 2047 encoded words when it is not ASCII."""
    return value if value.isascii() else Header(value, "utf-8", header_name=name).encode()


def _address_list(mailboxes: list[Mailbox]) -> str:
    """An address header's value; non-ASCII names become RFC 2047 encoded words."""
    return ", ".join(formataddr(mailbox, charset="utf-8") for mailbox in mailboxes)


def _address_list_utf8(mailboxes: list[Mailbox]) -> str:
    """An address header's value with raw UTF-8 (SMTPUTF8); names quoted when needed."""
    out = []
    for name, addr in mailboxes:
        if not name:
            out.append(addr)
        else:
            quoted = name.replace("\\", "\\\\").replace('"', '\\"')
            out.append(f'"{quoted}" <{addr}>')
    return ", ".join(out)


def _text_part(content: str, subtype: str) -> MIMEText:
    if content.isascii() and all(len(line) <= 900 for line in content.splitlines()):
        return MIMEText(content, subtype, "us-ascii")
    charset = Charset("utf-8")
    charset.body_encoding = QP
    return MIMEText(content, subtype, charset)  # type: ignore[arg-type]


def _build(p: _Parts) -> bytes:
    """RFC 5322 bytes: :func:`_build_plain` when the message is the common one it writes,
    else :func:`_build_mime`; both give the same bytes where the first applies."""
    plain = _build_plain(p)
    return plain if plain is not None else _build_mime(p)


#: compat32's folding limit (``email.policy.Compat32.max_line_length``, RFC 5322 2.1.1's 78)
_FOLD_AT: Final = 78
#: ``email.generator.NLCRE``: the line ends the generator turns into CRLF
_LINE_END: Final = re.compile(r"\r\n|\r|\n")


def _plain_header_ok(name: str, value: str) -> bool:
    """Whether compat32 writes ``name: value`` unchanged: printable ASCII (no tab, no line
    break), no leading, trailing or doubled space (``email.header`` rewrites those), and the
    whole line within :data:`_FOLD_AT` characters (no folding)."""
    return (
        len(name) + 2 + len(value) <= _FOLD_AT
        and value.isascii()
        and value.isprintable()
        and value == value.strip()
        and "  " not in value
    )


def _build_plain(p: _Parts) -> bytes | None:
    """The bytes :func:`_build_mime` makes for a single-part message (text or html) whose body
    is ASCII with lines of at most 900 characters (sent 7bit) and whose every header line is
    short printable ASCII (:func:`_plain_header_ok`); None for any other message.

    Written out directly, as ``email.generator.BytesGenerator`` with compat32 and CRLF writes
    it for ``Message.as_bytes`` (same header order and line ends, no ``>From `` mangling),
    at about a fifth of the CPU (100 vs 490 us for a 1.5 KB mail here): that generator spends
    half its time folding headers that need no folding. The unit tests check byte equality
    with :func:`_build_mime` on generated messages."""
    if (p.text is None) == (p.html is None):
        return None
    content, subtype = (p.text, "plain") if p.text is not None else (p.html or "", "html")
    if not content.isascii() or any(len(line) > 900 for line in content.splitlines()):
        return None
    headers = [
        ("Content-Type", f'text/{subtype}; charset="us-ascii"'),
        ("MIME-Version", "1.0"),
        ("Content-Transfer-Encoding", "7bit"),
        ("From", _address_list([p.sender])),
    ]
    if p.to:
        headers.append(("To", _address_list(p.to)))
    if p.cc:
        headers.append(("Cc", _address_list(p.cc)))
    if p.reply_to:
        headers.append(("Reply-To", _address_list(p.reply_to)))
    headers.append(("Subject", _header(p.subject, "Subject")))
    headers += [(name, _header(value, name)) for name, value in p.headers]
    given = {name.lower() for name, _ in p.headers}
    if "date" not in given:
        headers.append(("Date", formatdate(usegmt=True)))
    if "message-id" not in given:
        headers.append(("Message-ID", f"<{p.job_uuid}@sendgroup>" if p.job_uuid else make_msgid()))
    headers.append((JOB_HEADER, p.job_uuid))
    if not all(_plain_header_ok(name, value) for name, value in headers):
        return None
    head = "".join(f"{name}: {value}\r\n" for name, value in headers)
    if "\r" in content:
        body = "\r\n".join(_LINE_END.split(content))
    else:  # the same: only LF line ends to make CRLF, ~1 us instead of ~13 for 1.5 KB
        body = content.replace("\n", "\r\n")
    return (head + "\r\n" + body).encode("ascii")


def _build_mime(p: _Parts) -> bytes:
    """RFC 5322 bytes with the stdlib's legacy (compat32) API: about 6x cheaper per message
    than ``EmailMessage``'s header registry, which matters at thousands of mails per second.
    Non-ASCII header text becomes RFC 2047 encoded words; bodies 7bit or quoted-printable."""
    msg: Message
    if p.text is not None and p.html is not None:
        msg = MIMEMultipart("alternative")
        msg.attach(_text_part(p.text, "plain"))
        msg.attach(_text_part(p.html, "html"))
    elif p.text is not None:
        msg = _text_part(p.text, "plain")
    else:
        msg = _text_part(p.html or "", "html")
    msg["From"] = _address_list([p.sender])
    if p.to:
        msg["To"] = _address_list(p.to)
    if p.cc:
        msg["Cc"] = _address_list(p.cc)
    if p.reply_to:
        msg["Reply-To"] = _address_list(p.reply_to)
    msg["Subject"] = _header(p.subject, "Subject")
    for name, value in p.headers:
        msg[name] = _header(value, name)
    if "Date" not in msg:
        msg["Date"] = formatdate(usegmt=True)
    if "Message-ID" not in msg:
        msg["Message-ID"] = f"<{p.job_uuid}@sendgroup>" if p.job_uuid else make_msgid()
    msg[JOB_HEADER] = p.job_uuid
    return msg.as_bytes(policy=_COMPAT_CRLF)


def _build_utf8(p: _Parts) -> bytes:
    """Internationalized addresses need SMTPUTF8 (RFC 6531) and raw UTF-8 headers: built with
    ``EmailMessage`` and the SMTPUTF8 policy (slower, rare)."""
    msg = EmailMessage(policy=email.policy.SMTPUTF8)
    msg["From"] = _address_list_utf8([p.sender])
    if p.to:
        msg["To"] = _address_list_utf8(p.to)
    if p.cc:
        msg["Cc"] = _address_list_utf8(p.cc)
    if p.reply_to:
        msg["Reply-To"] = _address_list_utf8(p.reply_to)
    msg["Subject"] = p.subject
    for name, value in p.headers:
        msg[name] = value
    if "Date" not in msg:
        msg["Date"] = formatdate(usegmt=True)
    if "Message-ID" not in msg:
        msg["Message-ID"] = f"<{p.job_uuid}@sendgroup>" if p.job_uuid else make_msgid()
    msg[JOB_HEADER] = p.job_uuid
    if p.text is not None:
        msg.set_content(p.text)
        if p.html is not None:
            msg.add_alternative(p.html, subtype="html")
    else:
        msg.set_content(p.html or "", subtype="html")
    return msg.as_bytes()


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    """Where and how to reach the relay. ``tls``: ``none``, ``starttls`` (required, not
    opportunistic) or ``tls`` (implicit TLS). ``timeout``: seconds per SMTP command (with
    PIPELINING: per reply awaited). ``ca_file``: PEM bundle to verify the relay's certificate
    (None = system CAs). ``pipelining``: use PIPELINING (RFC 2920) when the relay offers it;
    False sends one command per round trip whatever the relay offers."""

    host: str
    port: int
    tls: str = "none"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout: float = 30.0
    helo_name: str | None = None
    ca_file: str | None = None
    pipelining: bool = True


_CONNECTION_ERRORS: Final = (
    aiosmtplib.SMTPServerDisconnected,
    aiosmtplib.SMTPConnectError,
    aiosmtplib.SMTPTimeoutError,
    aiosmtplib.SMTPNotSupported,
    ConnectionError,
    OSError,
    TimeoutError,
)


@dataclass(slots=True)
class _Conn:
    client: aiosmtplib.SMTP
    last_used: float = 0.0


class SmtpPool:
    """Up to ``size`` reused SMTP connections to one relay.

    :meth:`send` borrows a connection (opening one when none is idle), runs one transaction
    (MAIL, RCPT per recipient, then DATA; pipelined in one group when the relay's EHLO offers
    PIPELINING, RFC 2920) and returns it to the pool; a connection that failed
    is closed, not reused. A connection idle for more than :data:`IDLE_CHECK_AFTER` seconds is
    checked with NOOP first (relays drop idle sessions). Connections open lazily (at most one
    per concurrent :meth:`send`); :meth:`trim` closes idle ones beyond a count. Never raises
    for SMTP or network trouble: every outcome is a :class:`SendResult`.
    """

    def __init__(self, settings: SmtpSettings, size: int) -> None:
        self.settings = settings
        self._idle: list[_Conn] = []
        self._slots = asyncio.Semaphore(size)
        self._helo = settings.helo_name or socket.gethostname()

    async def _open(self) -> _Conn:
        s = self.settings
        client = aiosmtplib.SMTP(
            hostname=s.host,
            port=s.port,
            use_tls=s.tls == "tls",
            start_tls=s.tls == "starttls",
            username=s.username,
            password=s.password,
            timeout=s.timeout,
            local_hostname=self._helo,
            cert_bundle=s.ca_file,
        )
        await client.connect()
        return _Conn(client)

    async def _borrow(self) -> _Conn:
        while self._idle:
            conn = self._idle.pop()
            if not conn.client.is_connected:
                continue
            if time.monotonic() - conn.last_used > IDLE_CHECK_AFTER:
                try:
                    await conn.client.noop()
                except (aiosmtplib.SMTPException, *_CONNECTION_ERRORS):
                    await _close(conn)
                    continue
            return conn
        return await self._open()

    def _give_back(self, conn: _Conn) -> None:
        conn.last_used = time.monotonic()
        self._idle.append(conn)

    async def send(
        self,
        mail: OutgoingMail,
        fence: Callable[[], bool] | None = None,
        screen: Screen | None = None,
    ) -> SendResult:
        """Send ``mail``; ``fence()`` is asked right before DATA and, when it returns False,
        the transaction is reset and :attr:`ReplyClass.FENCED` returned (nothing was sent).
        With PIPELINING (see :meth:`_pipelined`) it is asked before the command group is
        written and again once DATA got its 354: False there closes the connection without
        the final ``.``, so the relay delivers nothing (RFC 5321 section 4.1.1.4), and
        :attr:`ReplyClass.FENCED` is returned.

        ``screen(recipients)`` is awaited once the connection is ready, right before MAIL FROM:
        the recipients it returns are left out of the envelope (``SendResult.suppressed``);
        when none is left, :attr:`ReplyClass.SUPPRESSED` is returned and nothing is sent. An
        exception from ``screen`` propagates (the connection is closed; kept for
        :class:`ScreenRefused`): nothing goes out unchecked.

        Recipients refused while at least one was accepted are reported in ``refused`` with
        an ``OK`` result (sending again would duplicate the mail for the accepted ones).
        """
        async with self._slots:
            try:
                conn = await self._borrow()
            except aiosmtplib.SMTPResponseException as exc:
                return SendResult(_connect_class(exc.code), exc.code, exc.message)
            except (aiosmtplib.SMTPException, *_CONNECTION_ERRORS) as exc:
                # e.g. the relay does not offer AUTH or STARTTLS: the relay's fault, not the
                # message's, so the job is retried later
                return SendResult(ReplyClass.CONNECTION, None, _describe(exc))
            keep = False
            try:
                result, keep = await self._transaction(conn.client, mail, fence, screen)
                return result
            except ScreenRefused:
                keep = True  # refused before the transaction's first command
                raise
            except aiosmtplib.SMTPResponseException as exc:
                keep = exc.code != 421 and await _reset(conn.client)
                return SendResult(classify_code(exc.code), exc.code, exc.message)
            except (aiosmtplib.SMTPException, *_CONNECTION_ERRORS) as exc:
                return SendResult(ReplyClass.CONNECTION, None, _describe(exc))
            finally:
                if keep:
                    self._give_back(conn)
                else:
                    await _close(conn)

    async def _transaction(
        self,
        client: aiosmtplib.SMTP,
        mail: OutgoingMail,
        fence: Callable[[], bool] | None,
        screen: Screen | None = None,
    ) -> tuple[SendResult, bool]:
        recipients = list(mail.recipients)
        suppressed: tuple[str, ...] = ()
        if screen is not None:
            blocked = set(await screen(recipients))
            suppressed = tuple(r for r in recipients if r in blocked)
            recipients = [r for r in recipients if r not in blocked]
            if not recipients:
                text = "not sent: every recipient is in the suppression set"
                return SendResult(ReplyClass.SUPPRESSED, None, text, suppressed=suppressed), True
        options = ["SMTPUTF8"] if mail.needs_utf8 else []
        encoding = "utf-8" if mail.needs_utf8 else "ascii"
        if client.is_ehlo_or_helo_needed:  # aiosmtplib says EHLO on the first command
            await _ehlo(client)
        if self.settings.pipelining and client.supports_extension(smtppipe.EXTENSION):
            protocol = client.protocol
            if not isinstance(protocol, smtppipe.PipeliningProtocol):
                protocol = smtppipe.adopt(client)  # once per connection
            envelope = _Envelope(mail.sender, recipients, options, encoding, suppressed)
            return await self._pipelined(client, protocol, envelope, mail.body, fence)
        await client.mail(mail.sender, options=options, encoding=encoding)
        refused: dict[str, tuple[int, str]] = {}
        for rcpt in recipients:
            try:
                await client.rcpt(rcpt, encoding=encoding)
            except aiosmtplib.SMTPRecipientRefused as exc:
                refused[rcpt] = (exc.code, exc.message)
        if len(refused) == len(recipients):
            # every recipient refused: the "worst" reply decides (any 4xx means try again)
            codes = [code for code, _ in refused.values()]
            code = next((c for c in codes if 400 <= c < 500), codes[0])
            text = next(t for c, t in refused.values() if c == code)
            result = SendResult(classify_code(code), code, text, suppressed=suppressed)
            return result, await _reset(client)
        if fence is not None and not fence():
            return SendResult(ReplyClass.FENCED, None, "reservation lost before DATA"), (
                await _reset(client)
            )
        response = await client.data(mail.body)
        return SendResult(
            classify_code(response.code),
            response.code,
            response.message,
            {r: f"{c} {t}" for r, (c, t) in refused.items()},
            suppressed,
        ), True

    async def _pipelined(
        self,
        client: aiosmtplib.SMTP,
        protocol: smtppipe.PipeliningProtocol,
        envelope: _Envelope,
        body: bytes,
        fence: Callable[[], bool] | None,
    ) -> tuple[SendResult, bool]:
        """One transaction in two round trips (RFC 2920 section 3.1): MAIL FROM, RCPT TO per
        recipient and DATA written as one group, their replies read in order (every one of
        them checked, as section 3.1 requires), then the message and its reply. Returns
        (result, connection still usable). Outcomes are those of the one-command-at-a-time
        path:

        * MAIL refused: the RCPT and DATA replies (503 from a correct relay) are read, the
          transaction reset; the MAIL reply decides;
        * every recipient refused: the worst RCPT reply decides (any 4xx first); a DATA that
          got 354 anyway is ended with a lone ``.`` (section 3.1: no message for nobody);
        * some recipients refused: listed in ``refused``, the mail goes to the others;
        * DATA refused: its reply decides;
        * 421 to any command: the relay is closing; nothing more is read, the connection is
          dropped (RFC 5321 section 3.8);
        * ``fence()`` False before the group (nothing written) or after the 354 (connection
          closed without the final ``.``: only the end of mail data indication makes the
          relay process the transaction, RFC 5321 sections 3.3 and 4.1.1.4):
          :attr:`ReplyClass.FENCED`.

        Each reply is awaited at most ``settings.timeout`` seconds (``SMTPReadTimeoutError``,
        a connection outcome in :meth:`send`). A malformed reply closes the connection (the
        replies behind it cannot be paired) and is raised for :meth:`send` to classify.
        """
        if fence is not None and not fence():
            return SendResult(ReplyClass.FENCED, None, "reservation lost before MAIL FROM"), True
        timeout = self.settings.timeout
        commands = [
            smtppipe.mail_command(envelope.sender, envelope.options, envelope.encoding),
            *(smtppipe.rcpt_command(r, envelope.encoding) for r in envelope.recipients),
            b"DATA",
        ]
        protocol.send_group(commands)
        replies: list[aiosmtplib.SMTPResponse] = []
        try:
            for _ in commands:
                reply = await protocol.read_response(timeout)
                if reply.code == 421:  # closing: no further reply comes
                    client.close()
                    return SendResult(classify_code(421), 421, reply.message), False
                replies.append(reply)
        except aiosmtplib.SMTPResponseException:
            client.close()
            raise
        mail_reply, rcpt_replies, data_reply = replies[0], replies[1:-1], replies[-1]
        if mail_reply.code != 250:
            code, text = mail_reply.code, mail_reply.message
            keep = await _abandon(client, protocol, data_reply, timeout)
            return SendResult(classify_code(code), code, text), keep
        refused = {
            rcpt: (reply.code, reply.message)
            for rcpt, reply in zip(envelope.recipients, rcpt_replies, strict=True)
            if reply.code not in (250, 251)
        }
        if len(refused) == len(envelope.recipients):
            codes = [code for code, _ in refused.values()]
            code = next((c for c in codes if 400 <= c < 500), codes[0])
            text = next(t for c, t in refused.values() if c == code)
            result = SendResult(classify_code(code), code, text, suppressed=envelope.suppressed)
            return result, await _abandon(client, protocol, data_reply, timeout)
        if data_reply.code != 354:
            result = SendResult(classify_code(data_reply.code), data_reply.code, data_reply.message)
            return result, await _reset(client)
        if fence is not None and not fence():
            client.close()
            text = "reservation lost after DATA: connection closed before the final '.'"
            return SendResult(ReplyClass.FENCED, None, text), False
        protocol.send_content(body)
        try:
            final = await protocol.read_response(timeout)
        except aiosmtplib.SMTPResponseException:
            client.close()
            raise
        if final.code != 250:
            keep = final.code != 421 and await _reset(client)
            return SendResult(classify_code(final.code), final.code, final.message), keep
        return SendResult(
            ReplyClass.OK,
            final.code,
            final.message,
            {r: f"{c} {t}" for r, (c, t) in refused.items()},
            envelope.suppressed,
        ), True

    @property
    def idle(self) -> int:
        """Connections open and not in use now."""
        return len(self._idle)

    async def trim(self, keep: int) -> int:
        """QUIT idle connections beyond ``keep`` (best effort), the longest idle first: with
        fewer lanes (``WORKER_CONCURRENCY=auto`` shrank) the connections of retired lanes
        are closed, not kept until the relay drops them. A borrowed connection always goes
        back to the end of the idle list, so the front holds the least recently used.
        Returns how many were closed."""
        extra = max(0, len(self._idle) - max(0, keep))
        gone, self._idle = self._idle[:extra], self._idle[extra:]
        for conn in gone:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.client.quit(), 2)
            await _close(conn)
        return extra

    async def close(self) -> None:
        """QUIT every idle connection (best effort)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.client.quit(), 2)
            await _close(conn)


def _connect_class(code: int) -> ReplyClass:
    # a greeting/EHLO/AUTH refusal: 5xx is still permanent for this message? No: it is about
    # the relay, not the message, so anything but a clear 5xx is connection trouble.
    cls = classify_code(code)
    return ReplyClass.TEMPORARY if cls is ReplyClass.PERMANENT else cls


@dataclass(frozen=True, slots=True)
class _Envelope:
    """What :meth:`SmtpPool._pipelined` sends: sender, recipients left after the screen,
    MAIL FROM options (``SMTPUTF8``), address encoding, recipients the screen left out."""

    sender: str
    recipients: list[str]
    options: list[str]
    encoding: str
    suppressed: tuple[str, ...]


async def _ehlo(client: aiosmtplib.SMTP) -> None:
    """EHLO, or HELO when EHLO is refused on a live connection: what aiosmtplib's ``mail()``
    does before its first command, done here so the EHLO keywords (PIPELINING) are known
    before the transaction is written."""
    try:
        await client.ehlo()
    except aiosmtplib.SMTPHeloError:
        if not client.is_connected:
            raise
        await client.helo()


async def _abandon(
    client: aiosmtplib.SMTP,
    protocol: smtppipe.PipeliningProtocol,
    data_reply: aiosmtplib.SMTPResponse,
    timeout: float,
) -> bool:
    """End a pipelined transaction that must not carry the message (MAIL or every RCPT
    refused): when DATA got 354 anyway, a lone ``.`` (RFC 2920 section 3.1) and its reply;
    then RSET. True when the connection is still usable."""
    if data_reply.code == 354:
        try:
            protocol.send_end()
            end = await protocol.read_response(timeout)
        except (aiosmtplib.SMTPException, *_CONNECTION_ERRORS):
            client.close()
            return False
        if end.code == 421:
            client.close()
            return False
    return await _reset(client)


async def _reset(client: aiosmtplib.SMTP) -> bool:
    """RSET after a refusal; True when the connection is still usable."""
    try:
        await client.rset()
        return True
    except (aiosmtplib.SMTPException, *_CONNECTION_ERRORS):
        return False


async def _close(conn: _Conn) -> None:
    with contextlib.suppress(Exception):
        conn.client.close()


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text


__all__ = [
    "DEFAULT_LIMITS",
    "JOB_HEADER",
    "InvalidMailData",
    "MailLimits",
    "Mailbox",
    "OutgoingMail",
    "ReplyClass",
    "SendResult",
    "SmtpPool",
    "SmtpSettings",
    "build_message",
    "classify_code",
]
