"""Producer payloads and row parsing (pure functions, no Redis)."""

from __future__ import annotations

import io
import json

import pytest

from sendgroup_worker.producer import (
    InvalidRow,
    MailDefaults,
    backoff_text,
    make_mail_payload,
    payload_from_row,
    push_recipients,
    read_rows,
    validate_rows,
)
from sendgroup_worker.smtp import build_message

LARAVEL_ORDER = [
    "uuid", "displayName", "job", "maxTries", "maxExceptions", "failOnTimeout", "backoff",
    "timeout", "retryUntil", "data", "id", "attempts",
]  # fmt: skip


def test_envelope_has_laravel_key_order_and_fields() -> None:
    raw = make_mail_payload(
        "a@example.test", from_="news@example.test", subject="Grüße / hi", text="hello",
        max_tries=5, backoff=[10, 60], timeout=30, pushed_at=1796000000.5,
    )  # fmt: skip
    obj = json.loads(raw)
    assert list(obj) == [*LARAVEL_ORDER, "pushedAt"]
    assert obj["job"] == obj["displayName"] == "sendgroups.SendMail"
    assert obj["id"] == obj["uuid"] and len(obj["uuid"]) == 36
    assert (obj["maxTries"], obj["backoff"], obj["timeout"], obj["attempts"]) == (5, "10,60", 30, 0)
    assert obj["pushedAt"] == "1796000000.500000"  # a JSON string, as Horizon writes it
    assert obj["data"] == {
        "to": "a@example.test", "from": "news@example.test", "subject": "Grüße / hi",
        "text": "hello",
    }  # fmt: skip
    assert "Grüße".encode() in raw  # raw UTF-8, like Laravel's JSON_UNESCAPED_UNICODE


def test_every_payload_is_unique() -> None:
    a = make_mail_payload("a@example.test", text="x", pushed_at=1.0)
    b = make_mail_payload("a@example.test", text="x", pushed_at=1.0)
    assert a != b


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"to": ""}, "recipient"),
        ({"to": "a@example.test", "text": None}, "body"),
        ({"to": "bob.example.test"}, "to: 'bob.example.test' is not a valid address: .*@-sign"),
        ({"to": ["a@example.test", "c@@x.example"]}, "to: 'c@@x.example' is not a valid"),
        ({"to": "a@example.test", "from_": "news@"}, "from: 'news@' is not a valid address"),
        ({"to": "root@localhost"}, "to: 'root@localhost' is not a valid address"),
    ],
)
def test_payload_needs_recipient_and_body(kwargs: dict[str, object], error: str) -> None:
    args = {"text": "x", **kwargs}
    with pytest.raises(ValueError, match=error):
        make_mail_payload(**args)  # type: ignore[arg-type]


def test_addresses_with_display_names_unicode_and_test_domains_are_accepted() -> None:
    raw = make_mail_payload(
        ["Ann <ann@x.example>", "jörg@bücher.example", "z@big.gmail.test"], text="x"
    )
    assert json.loads(raw)["data"]["to"] == [
        "Ann <ann@x.example>",
        "jörg@bücher.example",
        "z@big.gmail.test",
    ]


def test_backoff_forms() -> None:
    assert backoff_text(None) is None
    assert backoff_text(10) == "10"
    assert backoff_text("5, 10") == "5,10"
    with pytest.raises(ValueError):
        backoff_text("soon")


def test_row_unknown_columns_become_template_vars_and_defaults_fill_gaps() -> None:
    defaults = MailDefaults(
        from_="d@example.test",
        subject="Default",
        template={"text": "Hi $name, your plan: ${plan}."},
        headers={"List-Unsubscribe": "<mailto:u@example.test>"},
    )
    raw = payload_from_row(
        {"to": " b@example.test ", "name": "Bo", "code": "", "vars": '{"plan":"pro"}',
         "headers": '{"X-Campaign":"c1"}'},
        defaults,
    )  # fmt: skip
    data = json.loads(raw)["data"]
    assert data == {
        "to": "b@example.test", "from": "d@example.test", "subject": "Default",
        "template": {"text": "Hi $name, your plan: ${plan}."},
        "vars": {"name": "Bo", "plan": "pro"},
        "headers": {"List-Unsubscribe": "<mailto:u@example.test>", "X-Campaign": "c1"},
    }  # fmt: skip


def test_what_the_producer_queues_is_what_the_worker_renders() -> None:
    """The producer's template rows and the worker's renderer agree (subject and body filled
    from the row's columns), so a pushed template job is a deliverable mail."""
    raw = payload_from_row(
        {"to": "ann@example.test", "first_name": "Ann", "code": "X-42"},
        MailDefaults(
            from_="news@shop.example",
            template={"subject": "$first_name, your code", "text": "Use ${code} (100$$ off)."},
        ),
    )
    job = json.loads(raw)
    mail = build_message(job["data"], job["uuid"])
    assert mail.recipients == ["ann@example.test"]
    assert b"Subject: Ann, your code" in mail.body
    assert b"Use X-42 (100$ off)." in mail.body


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ({"subject": "only a subject"}, "needs a 'text' or 'html' part"),
        ({"text": "Hi $name and $city"}, r"template.text uses \$city but the row has no value"),
        ({"text": "costs 5$"}, "a '\\$' that is not a placeholder"),
        ({"body": "x"}, "unknown part"),
        ({"text": 5}, "template.text must be text"),
    ],
)
def test_templates_the_worker_could_not_render_are_refused(
    template: dict[str, object], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        make_mail_payload("a@example.test", template=template, vars={"name": "A"})  # type: ignore[arg-type]


def test_csv_rows_with_line_numbers() -> None:
    text = 'to,subject,text\na@example.test,Hi,"multi\nline"\nb@example.test,Yo,hey\n'
    rows = list(read_rows(io.StringIO(text), "csv"))
    assert [(n, r["to"]) for n, r in rows] == [(2, "a@example.test"), (4, "b@example.test")]
    assert rows[0][1]["text"] == "multi\nline"
    assert validate_rows(rows, MailDefaults(from_="news@example.test")) == 2


def test_csv_row_with_more_fields_than_the_header_is_refused() -> None:
    # an unquoted comma shifts the columns: refuse the row instead of dropping a value
    text = "to,name,city\nalice@example.test,Smith, John,Lisbon\n"
    with pytest.raises(InvalidRow, match="line 2: 4 fields but the header has 3"):
        list(read_rows(io.StringIO(text), "csv"))


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ({"subject": "Hi\r\nBcc: x@evil.example"}, "subject: contains a line break"),
        ({"headers": '{"X-Tag":"a\\nBcc: x@evil.example"}'}, "header X-Tag: contains a line"),
        ({"name": "A\r\nBcc: x@evil.example", "template": '{"subject":"Hi $name","text":"x"}'},
         "subject: contains a line break"),
    ],
)  # fmt: skip
def test_line_breaks_that_would_end_a_header_are_refused(row: dict[str, str], error: str) -> None:
    full = {"to": "a@example.test", "from": "n@example.test", "text": "x", **row}
    with pytest.raises(ValueError, match=error):
        payload_from_row(full)


def test_csv_without_to_column_is_refused() -> None:
    with pytest.raises(InvalidRow, match="'to' column"):
        list(read_rows(io.StringIO("email,subject\nx,y\n"), "csv"))


def test_jsonl_bad_line_is_reported_with_its_number() -> None:
    text = '{"to":"a@example.test","text":"x"}\n\n{"to": \n'
    with pytest.raises(InvalidRow) as err:
        list(read_rows(io.StringIO(text), "jsonl"))
    assert err.value.line == 3
    rows = read_rows(io.StringIO('{"to":"a@example.test","text":"x"}\n{"to":"b@example.test"}\n'),
                     "jsonl")  # fmt: skip
    with pytest.raises(InvalidRow, match=r"line 2: .*body"):
        validate_rows(rows, MailDefaults(from_="news@example.test"))
    rows = read_rows(io.StringIO('{"to":"a@example.test","text":"x"}\n'), "jsonl")
    with pytest.raises(InvalidRow, match=r"line 1: no sender: give a 'from' column or --from"):
        validate_rows(rows)


class FakeTarget:
    """Records batches; stands in for Queue.push_many in this pure test of batching."""

    def __init__(self) -> None:
        self.batches: list[list[bytes]] = []

    def push_many(self, payloads: object) -> int:
        items = list(payloads)  # type: ignore[call-overload]
        self.batches.append(items)
        return len(items)


def test_push_recipients_batches() -> None:
    target = FakeTarget()
    rows = [{"to": f"u{i}@example.test", "text": "x"} for i in range(250)]
    report = push_recipients(
        target, rows, batch_size=100, progress=False, defaults=MailDefaults(from_="n@x.example")
    )
    assert (report.pushed, report.batches) == (250, 3)
    assert [len(b) for b in target.batches] == [100, 100, 50]
    assert json.loads(target.batches[2][-1])["data"]["to"] == "u249@example.test"


def test_payload_always_names_its_tries() -> None:
    """Laravel's queue:work gives a job without maxTries 1 try, our worker the group's tries:
    our producer writes maxTries (3, the worker's default) so both kinds of worker on one queue
    allow the same attempts; an explicit value wins, None is still possible on purpose."""

    def tries(**kw: int | None) -> object:
        raw = make_mail_payload("a@example.test", from_="n@example.test", text="hi", **kw)
        return json.loads(raw)["maxTries"]

    assert (tries(), tries(max_tries=7), tries(max_tries=None)) == (3, 7, None)
    row = payload_from_row({"to": "b@example.test", "from": "n@example.test", "text": "hi"})
    assert json.loads(row)["maxTries"] == 3
