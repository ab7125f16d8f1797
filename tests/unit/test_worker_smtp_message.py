from __future__ import annotations

import email
import email.policy

import pytest

from sendgroup_worker import smtp
from sendgroup_worker.handlers import Outcome, from_send_result
from sendgroup_worker.smtp import (
    JOB_HEADER,
    InvalidMailData,
    ReplyClass,
    SendResult,
    build_message,
    classify_code,
)


def test_message_carries_parts_headers_and_the_job_uuid() -> None:
    mail = build_message(
        {
            "to": ["Ann <ann@x.example>", {"address": "bob@x.example", "name": "Bob B"}],
            "bcc": "hidden@x.example",
            "from": "news@sender.example",
            "subject": "Grüße 🎧",
            "text": "plain",
            "html": "<p>html</p>",
            "headers": {"List-Unsubscribe": "<mailto:u@sender.example>"},
        },
        "uuid-1",
    )
    assert mail.sender == "news@sender.example"
    assert mail.recipients == ["ann@x.example", "bob@x.example", "hidden@x.example"]
    msg = email.message_from_bytes(mail.body, policy=email.policy.default)
    assert msg[JOB_HEADER] == "uuid-1" and msg["Message-ID"] == "<uuid-1@sendgroup>"
    assert msg["Subject"] == "Grüße 🎧" and "Bcc" not in msg
    assert msg["List-Unsubscribe"] == "<mailto:u@sender.example>"
    assert msg.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]
    assert mail.body.isascii()


def test_template_with_vars() -> None:
    mail = build_message(
        {
            "to": "a@x.example",
            "from": "f@x.example",
            "template": {"subject": "Hi $name", "text": "Dear $name, $missing"},
            "vars": {"name": "Ann"},
        },
        "u",
    )
    msg = email.message_from_bytes(mail.body, policy=email.policy.default)
    assert msg["Subject"] == "Hi Ann"
    assert msg.get_content().strip() == "Dear Ann, $missing"


@pytest.mark.parametrize(
    "data",
    [
        {"from": "f@x", "text": "t"},
        {"to": "a@x", "text": "t"},
        {"to": "a@x", "from": "f@x"},
        {"to": 5, "from": "f@x", "text": "t"},
        "not an object",
    ],
)
def test_unusable_data_is_permanent(data: object) -> None:
    with pytest.raises(InvalidMailData):
        build_message(data, "u")  # type: ignore[arg-type]


def test_reply_classes_follow_rfc5321_first_digit() -> None:
    assert [classify_code(c) for c in (250, 451, 421, 550, 554, -1)] == [
        ReplyClass.OK,
        ReplyClass.TEMPORARY,
        ReplyClass.TEMPORARY,
        ReplyClass.PERMANENT,
        ReplyClass.PERMANENT,
        ReplyClass.CONNECTION,
    ]


def test_outcomes_of_send_results() -> None:
    assert from_send_result(SendResult(ReplyClass.OK, 250, "ok")).outcome is Outcome.DONE
    perm = from_send_result(SendResult(ReplyClass.PERMANENT, 550, "5.1.1 unknown"))
    assert (perm.outcome, perm.exception, perm.message) == (
        Outcome.PERMANENT,
        "SmtpPermanentFailure",
        "550 5.1.1 unknown",
    )
    temp = from_send_result(SendResult(ReplyClass.TEMPORARY, 451, "4.7.1 later"))
    assert (temp.outcome, temp.reply_text) == (Outcome.TEMPORARY, "451 4.7.1 later")
    conn = from_send_result(SendResult(ReplyClass.CONNECTION, None, "refused"))
    assert (conn.outcome, conn.exception) == (Outcome.TEMPORARY, "SmtpConnectionError")
    assert from_send_result(SendResult(ReplyClass.FENCED, None, "x")).outcome is Outcome.FENCED


def test_internationalized_addresses_need_smtputf8() -> None:
    mail = build_message(
        {"to": "jürgen@bücher.example", "from": "n@s.example", "subject": "é", "text": "ü"}, "u"
    )
    assert mail.needs_utf8 and mail.recipients == ["jürgen@bücher.example"]
    assert "To: jürgen@bücher.example".encode() in mail.body


def test_long_or_non_ascii_bodies_are_quoted_printable_and_lines_stay_short() -> None:
    mail = build_message(
        {"to": "a@x.example", "from": "f@x.example", "text": "x" * 5000 + "\nüber"}, "u"
    )
    assert b"Content-Transfer-Encoding: quoted-printable" in mail.body
    assert max(len(line) for line in mail.body.split(b"\r\n")) <= 998
    msg = email.message_from_bytes(mail.body, policy=email.policy.default)
    content = msg.get_content().replace("\r\n", "\n").rstrip("\n")
    assert content == "x" * 5000 + "\nüber"
    assert msg["Date"] and msg["Message-ID"] == "<u@sendgroup>"


@pytest.mark.parametrize(
    "data",
    [
        {"subject": "Hi\r\nBcc: x@evil.example"},
        {"headers": {"X-Tag": "a\nBcc: x@evil.example"}},
        {
            "template": {"subject": "Hi $name", "text": "x"},
            "vars": {"name": "A\r\nBcc: y@e.example"},
        },
    ],
)
def test_a_line_break_in_a_header_is_invalid_mail_data_not_a_crash(data: dict[str, object]) -> None:
    """A job whose subject or header would carry a line break is a permanent failure (the
    failed list), never an exception the worker would retry and count as provider pushback."""
    full = {"to": "a@example.test", "from": "n@example.test", "text": "x", **data}
    with pytest.raises(InvalidMailData, match="contains a line break"):
        build_message(full, "u-1")


@pytest.mark.parametrize(
    "to",
    [
        "a@x.example\r\nRCPT TO:<evil@y.example>",
        "a@x.example\n",
        "a@x.example, evil@y.example",
        "a@x.example;evil@y.example",
        "evil@y.example <a@x.example>",
        "a@x.example <evil@y.example>",
        "Doe, John <a@x.example>",
        '"Doe" John" <a@x.example>',
        {"address": "a@x.example", "name": "A\r\nBcc: evil@y.example"},
        {"address": "a@x.example", "name": "A <evil@y.example>"},
        {"address": "a@x.example evil@y.example"},
        "<>",
        "a@@x.example",
    ],
)
def test_an_address_is_validated_never_rewritten(to: object) -> None:
    """Issue 16: such values used to be parsed away, sending to a different address."""
    with pytest.raises(smtp.InvalidMailData):
        smtp.build_message({"to": to, "from": "s@x.example", "text": "t"}, "u")


@pytest.mark.parametrize(
    ("to", "envelope", "header"),
    [
        ("a@x.example", ["a@x.example"], "a@x.example"),
        ("Ann <a@x.example>", ["a@x.example"], "Ann <a@x.example>"),
        ('"Doe, John" <a@x.example>', ["a@x.example"], '"Doe, John" <a@x.example>'),
        ({"address": "a@x.example", "name": "Doe, John"}, ["a@x.example"], '"Doe, John"'),
        (["a@x.example", "A@x.example"], ["a@x.example", "A@x.example"], "a@x.example"),
    ],
)
def test_valid_addresses_go_to_exactly_what_the_job_named(
    to: object, envelope: list[str], header: str
) -> None:
    mail = smtp.build_message({"to": to, "from": "s@x.example", "text": "t"}, "u")
    assert mail.recipients == envelope
    assert header.encode() in mail.body


def test_caps_on_size_and_recipients() -> None:
    limits = smtp.MailLimits(max_bytes=10_000, max_recipients=3)
    data = {"to": [f"r{i}@x.example" for i in range(4)], "from": "s@x.example", "text": "t"}
    with pytest.raises(smtp.InvalidMailData, match="MAIL_MAX_RECIPIENTS"):
        smtp.build_message(data, "u", limits)
    with pytest.raises(smtp.InvalidMailData, match="MAIL_MAX_BYTES"):
        smtp.build_message({**data, "to": "a@x.example", "text": "x" * 20_000}, "u", limits)
    assert smtp.build_message({**data, "to": ["a@x.example"] * 5}, "u", limits).recipients == [
        "a@x.example"
    ]


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"From": "ceo@bank.example"}, "data.headers.From: set from data.from"),
        ({"subject": "other"}, "data.headers.subject: set from data.subject"),
        ({"To": "x@y.example"}, "data.headers.To: set from data.to"),
        ({"Bcc": "no"}, "data.headers.Bcc: use data.bcc"),
        ({"Content-Type": "text/html"}, "data.headers.Content-Type: set by the worker"),
        ({"X-SendGroup-Job": "forged"}, "data.headers.X-SendGroup-Job: set by the worker"),
        ({"X-A": "1", "x-a": "2"}, "data.headers.x-a: given twice"),
        ({"X-Bad\r\nBcc": "1"}, "is not a header name"),
        ({"Bad Name": "1"}, "is not a header name"),
        ({"X-A\n": "1"}, "is not a header name"),  # `$` also matches before a final \n
    ],
)
def test_headers_the_worker_writes_or_cannot_write_are_refused_not_dropped(
    headers: dict[str, str], reason: str
) -> None:
    """Review finding (issue 18): ``headers: {"From": ...}`` was sent as a second From field
    (Subject, To, Content-Type alike), while Bcc and bad names were dropped without a word.
    Mail data is validated, not rewritten: each is refused as InvalidMailData naming the
    field to use instead."""
    data = {"to": "a@x.example", "from": "news@shop.example", "text": "hi", "headers": headers}
    with pytest.raises(InvalidMailData) as exc:
        build_message(data, "u")
    assert reason in str(exc.value)


def test_date_and_message_id_given_in_headers_replace_the_workers() -> None:
    data = {
        "to": "a@x.example",
        "from": "news@shop.example",
        "text": "hi",
        "headers": {"Message-ID": "<thread-1@shop.example>", "X-Campaign": "spring"},
    }
    msg = email.message_from_bytes(build_message(data, "u").body, policy=email.policy.default)
    assert msg.get_all("Message-ID") == ["<thread-1@shop.example>"]
    assert msg.get_all("From") == ["news@shop.example"] and msg["X-Campaign"] == "spring"
