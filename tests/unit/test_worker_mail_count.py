"""The recipients a mail job counts for in the rate limits (the group's and the provider's,
charged before the send) are exactly those its send goes to: the worker builds the message once
(``worker.prepared_mail``, with the worker's ``MAIL_MAX_*`` caps), counts its envelope, and the
mail handler sends that same message; invalid data counts 1 and sends nothing. Checked on
hypothesis-generated payloads, hostile ones included, against the handler's own path (the
message it builds when given none)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from sendgroup_worker import handlers as h
from sendgroup_worker import smtp
from sendgroup_worker.metrics import WorkerMetrics
from sendgroup_worker.queue.protocol import Reserved
from sendgroup_worker.worker import prepared_mail

UUID = "9f0c2d5e-1b7a-4c39-8e2f-6d4b1a0c7e55"


class _RecordingPool(smtp.SmtpPool):
    """The SMTP pool with the network left out: records each message handed to ``send`` and
    answers 250 (what is measured is the message the handler sends, not the relay)."""

    def __init__(self) -> None:
        super().__init__(smtp.SmtpSettings(host="127.0.0.1", port=25, tls="none"), size=1)
        self.sent: list[smtp.OutgoingMail] = []

    async def send(
        self,
        mail: smtp.OutgoingMail,
        fence: Callable[[], bool] | None = None,
        screen: smtp.Screen | None = None,
    ) -> smtp.SendResult:
        self.sent.append(mail)
        return smtp.SendResult(smtp.ReplyClass.OK, 250, "2.0.0 queued")


# addresses: good ones (repeated, so dedupe matters), different case, and hostile ones (line
# breaks, a second address, an address in a name, non-strings)
_GOOD = st.sampled_from(
    ["a@x.example", "b@x.example", "c@y.example", "A@x.example", "d@ü.example", "e+t@x.example"]
)
_HOSTILE = st.sampled_from(
    [
        "v@x.example\r\nRCPT TO:<evil@y.example>",
        "v@x.example, evil@y.example",
        "evil@y.example <v@x.example>",
        "Doe, John <john@x.example>",
        "",
        "no-at-sign",
        "v@x.example\n",
    ]
)
_ADDRESS = st.one_of(
    _GOOD,
    _GOOD.map(lambda a: f"Ann <{a}>"),
    _GOOD.map(lambda a: {"address": a, "name": "Ann"}),
    _HOSTILE,
    st.just({"address": "v@x.example", "name": "Ann\r\nBcc: evil@y.example"}),
    st.integers(),
    st.none(),
)
_FIELD = st.one_of(st.none(), _ADDRESS, st.lists(_ADDRESS, max_size=8))
# mostly good: the recipients of a message that can be built are the interesting part
_GOOD_FIELD = st.one_of(st.none(), _GOOD, st.lists(_GOOD, max_size=10))
_TEXT = st.one_of(st.none(), st.text(max_size=40), st.just("x" * 600), st.integers())
_BAD = st.fixed_dictionaries(
    {},
    optional={
        "cc": _FIELD,
        "bcc": _FIELD,
        "from": st.one_of(_HOSTILE, st.lists(_GOOD, max_size=2)),
        "subject": _TEXT,
        "text": _TEXT,
        "html": _TEXT,
        "headers": st.one_of(
            st.dictionaries(st.sampled_from(["X-A", "Bcc", "X B", "Date"]), _TEXT, max_size=2),
            st.just("not a mapping"),
        ),
        "template": st.one_of(st.just({"text": "hi $n"}), st.just("not a mapping")),
        "vars": st.one_of(st.just({"n": 1}), st.just([1])),
    },
)
_DATA = st.builds(
    lambda to, cc, bcc, text, bad, spoil: {
        "to": to, "cc": cc, "bcc": bcc, "from": "s@x.example", "text": text,
        **(bad if spoil else {}),
    },
    to=st.one_of(_GOOD_FIELD, _GOOD_FIELD, _FIELD),
    cc=_GOOD_FIELD,
    bcc=_GOOD_FIELD,
    text=st.one_of(st.just("Hello"), st.just("Grüße " * 40)),
    bad=_BAD,
    spoil=st.sampled_from([False, False, True]),
)  # fmt: skip
_PAYLOAD = st.fixed_dictionaries(
    {
        "job": st.sampled_from([*[h.SEND_MAIL] * 6, h.NOOP, "Other"]),
        "data": st.one_of(_DATA, st.one_of(st.none(), st.just([]), st.text(max_size=5))),
    }
)
_LIMITS = st.builds(
    smtp.MailLimits,
    max_bytes=st.sampled_from([600, 10 * 1024 * 1024, 10 * 1024 * 1024]),
    max_recipients=st.one_of(st.integers(min_value=1, max_value=8), st.just(100)),
)


def _job(payload: dict[str, Any]) -> Reserved:
    raw = json.dumps(payload).encode()
    return Reserved(raw=raw, reserved=raw, payload=payload, uuid=UUID, attempts=1)


def _handle(
    pool: _RecordingPool,
    limits: smtp.MailLimits,
    payload: dict[str, Any],
    mail: h.PreparedMail | None,
) -> h.HandlerResult:
    handler = h.default_registry(pool, WorkerMetrics("q"), limits).get(h.SEND_MAIL)
    assert handler is not None
    context = h.JobContext(payload=payload, uuid=UUID, attempts=1, fence=lambda: True, mail=mail)
    return asyncio.run(handler.run(context))


@settings(max_examples=1000, deadline=None)
@given(payload=_PAYLOAD, limits=_LIMITS)
def test_the_count_is_the_recipients_the_send_goes_to(
    payload: dict[str, Any], limits: smtp.MailLimits
) -> None:
    prepared = prepared_mail(_job(payload), limits)
    count = prepared.recipients if prepared is not None else 1  # what the worker charges
    if payload["job"] != h.SEND_MAIL:
        assert prepared is None and count == 1
        return
    assert prepared is not None
    # the handler's own path: the message it builds when the worker built none
    own = _RecordingPool()
    result = _handle(own, limits, payload, None)
    event(
        f"{result.outcome.value}, {min(count, 3)}+ recipients"
        if count >= 3
        else f"{result.outcome.value}, {count} recipient(s)"
    )
    if result.outcome is h.Outcome.PERMANENT:
        assert result.exception == "InvalidMailData" and own.sent == []
        assert count == 1 and prepared.mail is None
        assert str(prepared.error) == result.message
    else:
        assert result.outcome is h.Outcome.DONE
        assert [m.recipients for m in own.sent] == [list(result.recipients)]
        assert count == len(result.recipients) >= 1
        assert len(set(result.recipients)) == len(result.recipients) <= limits.max_recipients
    # the worker's path: the handler sends the message the count was taken from
    reused = _RecordingPool()
    again = _handle(reused, limits, payload, prepared)
    assert (again.outcome, again.recipients, again.message) == (
        result.outcome,
        result.recipients,
        result.message,
    )
    if prepared.mail is not None:
        assert reused.sent == [prepared.mail]  # the same object: built once


def test_a_message_built_for_other_caps_or_another_job_is_not_reused() -> None:
    """The handler sends a prepared message only when it was built for this job and with its
    own caps; else it builds its own (a registry with other caps than the worker's)."""
    payload = {"job": h.SEND_MAIL, "data": {"to": ["a@x.example", "b@x.example"],
               "from": "s@x.example", "text": "hi"}}  # fmt: skip
    wide = prepared_mail(_job(payload), smtp.MailLimits(max_recipients=5))
    assert wide is not None and wide.recipients == 2
    pool = _RecordingPool()
    result = _handle(pool, smtp.MailLimits(max_recipients=1), payload, wide)
    assert result.exception == "InvalidMailData" and pool.sent == []
    other = h.PreparedMail("another-uuid", smtp.DEFAULT_LIMITS, wide.mail)
    result = _handle(pool, smtp.DEFAULT_LIMITS, payload, other)
    assert result.outcome is h.Outcome.DONE and pool.sent[0] is not wide.mail
