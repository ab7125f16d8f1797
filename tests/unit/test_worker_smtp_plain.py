"""The worker's direct writer of common messages (``smtp._build_plain``) gives exactly the bytes
of the stdlib path (``smtp._build_mime``: compat32's generator), and steps aside for anything
else; a mail client parses what it writes as the job asked."""

from __future__ import annotations

import email
import email.policy
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from sendgroup_worker import smtp
from sendgroup_worker.smtp import build_message

FIXED_DATE = "Wed, 02 Dec 2026 22:40:00 GMT"

# printable ASCII and the characters a body or header may carry that the writer must handle
# (spaces, tabs, line ends, "From " at a line start, dots, non-ASCII that sends it elsewhere)
_TEXT = st.text(
    alphabet=st.sampled_from([*'ab Fromxyz.=?\t\r\n,;:"<>@-', "é", "\x0b", "\x85"]),
    max_size=120,
)
_LONG_LINE = st.integers(min_value=60, max_value=1000).map(lambda n: "y" * n)
_BODY = st.one_of(_TEXT, st.lists(st.one_of(_TEXT, _LONG_LINE), max_size=4).map("\n".join))
_NAME = st.text(alphabet=st.sampled_from(list("Ann Bob,.\"'é")), max_size=30)
_LOCAL = st.text(alphabet=st.sampled_from(list("abcxyz09.+-")), min_size=1, max_size=40).filter(
    lambda s: not s.startswith(".") and not s.endswith(".") and ".." not in s
)
_MAILBOX = st.builds(lambda n, local: {"name": n, "address": f"{local}@example.com"}, _NAME, _LOCAL)


@contextmanager
def _fixed_clock() -> Iterator[None]:
    with (
        mock.patch.object(smtp, "formatdate", return_value=FIXED_DATE),
        mock.patch.object(smtp, "make_msgid", return_value="<fixed@sendgroup.test>"),
    ):
        yield


def _parts(data: dict[str, object], uuid: str) -> smtp._Parts:
    """The parts build_message would hand the writers (captured from its call)."""
    seen: list[smtp._Parts] = []
    real = smtp._build

    def spy(p: smtp._Parts) -> bytes:
        seen.append(p)
        return real(p)

    with mock.patch.object(smtp, "_build", spy):
        build_message(data, uuid)
    return seen[0]


@settings(max_examples=400, deadline=None)
@given(
    to=st.lists(_MAILBOX, min_size=1, max_size=3),
    sender=_MAILBOX,
    subject=_TEXT,
    body=_BODY,
    html=st.booleans(),
    header=st.one_of(
        st.none(), st.tuples(st.sampled_from(["X-Campaign", "date", "Message-Id"]), _TEXT)
    ),
    uuid=st.sampled_from(["", "9f0c2d5e-1b7a-4c39-8e2f-6d4b1a0c7e55"]),
)
def test_the_direct_writer_gives_the_stdlib_bytes_or_steps_aside(
    to: list[dict[str, str]],
    sender: dict[str, str],
    subject: str,
    body: str,
    html: bool,
    header: tuple[str, str] | None,
    uuid: str,
) -> None:
    data: dict[str, object] = {
        "to": to,
        "from": sender,
        "subject": subject.replace("\r", "").replace("\n", ""),
        ("html" if html else "text"): body,
    }
    if header is not None:
        data["headers"] = {header[0]: header[1].replace("\r", "").replace("\n", "")}
    with _fixed_clock():
        try:
            p = _parts(data, uuid)
        except smtp.InvalidMailData:
            return  # refused before any writer runs (e.g. a header value of its own)
        plain = smtp._build_plain(p)
        if plain is not None:
            assert plain == smtp._build_mime(p)


def test_a_common_campaign_mail_takes_the_direct_writer_and_parses_back() -> None:
    data = {
        "to": [{"name": "Ann Example", "address": "ann@example.com"}],
        "from": "campaign@sender.example",
        "subject": "Spring sale: 20% off",
        "text": "Hello Ann,\n\nFrom today, everything is 20% off.\n.\nBye\n",
        "headers": {"List-Unsubscribe": "<mailto:unsub@sender.example>"},
    }
    with _fixed_clock():
        p = _parts(data, "9f0c2d5e-1b7a-4c39-8e2f-6d4b1a0c7e55")
        plain = smtp._build_plain(p)
        assert plain is not None, "a short ASCII text mail should not need the stdlib path"
        assert plain == smtp._build_mime(p)
        assert build_message(data, "9f0c2d5e-1b7a-4c39-8e2f-6d4b1a0c7e55").body == plain
    parsed = email.message_from_bytes(plain, policy=email.policy.default)
    assert parsed["To"] == "Ann Example <ann@example.com>"
    assert parsed["Subject"] == "Spring sale: 20% off"
    assert parsed["List-Unsubscribe"] == "<mailto:unsub@sender.example>"
    assert parsed["X-SendGroup-Job"] == "9f0c2d5e-1b7a-4c39-8e2f-6d4b1a0c7e55"
    assert f"\r\nDate: {FIXED_DATE}\r\n".encode() in plain
    # as_bytes does not mangle: a body line starting "From " stays as written (SMTP is no mbox)
    assert (
        parsed.get_content().replace("\r\n", "\n")
        == "Hello Ann,\n\nFrom today, everything is 20% off.\n.\nBye\n"
    )
    assert b"\r\n" in plain and b"\n" not in plain.replace(b"\r\n", b"")


def test_what_needs_encoding_or_folding_goes_the_stdlib_way() -> None:
    base = {"to": "ann@example.com", "from": "campaign@sender.example", "subject": "Hi"}
    cases: list[dict[str, object]] = [
        {**base, "text": "Grüße"},  # non-ASCII body: quoted-printable
        {**base, "text": "z" * 901},  # a line over 900: quoted-printable
        {**base, "subject": "Grüße " * 8, "text": "x"},  # RFC 2047 encoded words, folded
        {**base, "subject": "word " * 20 + "end", "text": "x"},  # folded
        {**base, "text": "x", "html": "<p>x</p>"},  # multipart/alternative
    ]
    with _fixed_clock():
        for data in cases:
            assert smtp._build_plain(_parts(data, "u")) is None, data
