"""The failed reason of a Laravel job the Python worker cannot run: what it is, what consuming it
would break (batch, chain, unique lock), and the fix. Real Laravel 11 payloads from the
fixtures, plus serialized commands carrying the traits' properties as PHP's ``serialize()``
writes them (``Batchable::$batchId``, ``Queueable::$chained``, ``ShouldBeUnique``'s
``uniqueFor``)."""

from __future__ import annotations

import json

import pytest

from sendgroup_worker.laravel import (
    CALL_QUEUED_HANDLER,
    is_laravel_job,
    unrunnable_reason,
)
from tests.support import laravel_fixtures as lf


def _class_job(command: str, name: str = "App\\Jobs\\SendReport") -> dict[str, object]:
    return {
        "uuid": "u-1",
        "displayName": name,
        "job": CALL_QUEUED_HANDLER,
        "data": {"commandName": name, "command": command},
        "attempts": 1,
    }


BATCH = (
    'O:19:"App\\Jobs\\SendReport":1:{s:7:"batchId";s:36:"9d2f5c1e-0b7a-4c1e-9a51-3f3e6f1d2a10";}'
)
CHAIN = (
    'O:19:"App\\Jobs\\SendReport":1:{s:7:"chained";a:2:{i:0;s:24:"O:8:\\"App\\Next\\":0:{}";'
    'i:1;s:24:"O:8:\\"App\\Last\\":0:{}";}}'
)
UNIQUE = 'O:19:"App\\Jobs\\SendReport":1:{s:9:"uniqueFor";i:3600;}'
PLAIN = 'O:19:"App\\Jobs\\SendReport":1:{s:2:"id";i:7;}'
ENCRYPTED = "eyJpdiI6IkZ3a2x5b3dQV2R4d1E9PSIsInZhbHVlIjoiYWJjIn0="


@pytest.mark.parametrize(
    ("command", "name", "expected", "absent"),
    [
        (PLAIN, "App\\Jobs\\SendReport", ["App\\Jobs\\SendReport is a Laravel job class"],
         ["batch", "chained", "unique", "encrypted"]),
        (BATCH, "App\\Jobs\\SendReport",
         ["belongs to batch 9d2f5c1e-0b7a-4c1e-9a51-3f3e6f1d2a10",
          "then()/catch()/finally() callbacks fire only when Laravel's worker runs its jobs"],
         ["chained", "unique"]),
        (CHAIN, "App\\Jobs\\SendReport",
         ["it has 2 chained job(s) that only Laravel's worker dispatches"], ["batch", "unique"]),
        (UNIQUE, "App\\Jobs\\SendReport",
         ["unique job (ShouldBeUnique) whose lock only Laravel's worker releases"],
         ["batch", "chained"]),
        (ENCRYPTED, "App\\Jobs\\SendReport", ["its command is encrypted (ShouldBeEncrypted)"],
         ["batch"]),
        (PLAIN, "Illuminate\\Mail\\SendQueuedMailable",
         ["Illuminate\\Mail\\SendQueuedMailable is a queued Mailable"], []),
        (PLAIN, "Illuminate\\Notifications\\SendQueuedNotifications",
         ["is a queued notification"], []),
    ],
)  # fmt: skip
def test_reason_names_what_would_break_and_the_fix(
    command: str, name: str, expected: list[str], absent: list[str]
) -> None:
    reason = unrunnable_reason(_class_job(command, name), "{mail-x}")
    for text in expected:
        assert text in reason
    for word in absent:
        assert word not in reason.split("fix:")[0]
    assert reason.endswith(
        "fix: run this group with the Laravel runtime (spec.worker.runtime: laravel) or another "
        "Laravel worker on this queue (php artisan queue:work redis --queue={mail-x} "
        "--tries=N), or push sendgroups.SendMail jobs instead (docs/laravel.md)"
    )
    assert "\n" not in reason


def test_an_empty_chain_is_not_reported() -> None:
    reason = unrunnable_reason(_class_job('O:1:"A":1:{s:7:"chained";a:0:{}}'), "q")
    assert "chained" not in reason


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (CALL_QUEUED_HANDLER, True),
        ("App\\Jobs\\RawHandler@handle", True),
        ("App\\Handlers\\Mailer", True),
        ("sendgroups.SendMail", False),
        ("sendgroups.Typo", False),
        ("", False),
        (None, False),
        (42, False),
    ],
)
def test_which_jobs_are_laravel_jobs(job: object, expected: bool) -> None:
    assert is_laravel_job(job) is expected


def test_every_payload_laravel_itself_wrote_is_recognised() -> None:
    """Each payload in the push fixture (dispatch, delay, bulk, pushRaw) is a Laravel job and
    gets a reason naming its class."""
    scenario = lf.load("01-push.json")["scenarios"]["prefixed"]
    payloads = [
        json.loads(event["event_payload"])
        for step in scenario["step1_push"]
        for event in step.get("queued_events", [])
    ]
    assert payloads
    for payload in payloads:
        assert is_laravel_job(payload["job"])
        name = payload["data"].get("commandName", payload["job"]) if isinstance(
            payload["data"], dict) else payload["job"]  # fmt: skip
        assert unrunnable_reason(payload, "default").startswith(f"{name} is a Laravel")


@pytest.mark.parametrize(
    "job", ["sendgroups\\SendMail", "sendgroups.SendMail@handle", "SendGroups.sendmail@x"]
)
def test_our_handler_written_the_php_way_is_named_a_misspelling_not_a_laravel_job(
    job: str,
) -> None:
    """Review finding (issue 18): these were reported as "a Laravel string job" whose fix is
    to run Laravel's worker, which would not help."""
    assert is_laravel_job(job)
    reason = unrunnable_reason({"job": job, "data": {}}, "mail-x")
    assert "is not a handler of this worker" in reason and "sendgroups.SendMail" in reason
    assert "Laravel runtime" not in reason


def test_a_line_break_in_a_class_name_cannot_forge_a_log_line() -> None:
    payload = {
        "job": "Illuminate\\Queue\\CallQueuedHandler@call",
        "data": {"commandName": "App\\Jobs\\X\n2026-01-01 INFO forged line", "command": ""},
    }
    reason = unrunnable_reason(payload, "mail-x")
    assert "\n" not in reason and "App\\Jobs\\X\\n2026-01-01 INFO forged line" in reason
    long = unrunnable_reason({"job": "App\\" + "A" * 5000, "data": {}}, "mail-x")
    assert len(long) < 1000


def test_a_line_break_in_a_batch_id_or_a_log_message_stays_on_one_line() -> None:
    """Review finding: the batch id went into the reason raw, and UnknownHandler's job name
    and a job's uuid reach the log from other places: the worker's log formatter writes
    every control character of a message as an escape."""
    import logging

    from sendgroup_worker.cli_work import OneLineFormatter

    command = 'O:8:"App\\\\Jobs":1:{s:7:"batchId";s:9:"a\nFAKE LOG";}'
    payload = {
        "job": "Illuminate\\Queue\\CallQueuedHandler@call",
        "data": {"commandName": "App\\Jobs\\X", "command": command},
    }
    assert "\n" not in unrunnable_reason(payload, "mail-x")
    record = logging.LogRecord("w", logging.INFO, "f", 1, "job %s: %s", ("u\r\n1", "x\ny"), None)
    line = OneLineFormatter("%(levelname)s %(message)s").format(record)
    assert line == "INFO job u\\r\\n1: x\\ny"


def test_a_shops_own_job_class_under_a_sendgroups_namespace_is_a_laravel_job() -> None:
    reason = unrunnable_reason({"job": "SendGroups\\Jobs\\Invoice@handle", "data": {}}, "q")
    assert "is a Laravel string job" in reason and "not a handler of this worker" not in reason
