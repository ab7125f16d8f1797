"""The jobs a SendGroup queue carries: their names (the payload's ``job`` and
``displayName``) and the envelope every producer writes (:func:`envelope`, Laravel's layout).

Producers (``sendgroup_worker.producer``, a Laravel application, the tests and benchmarks)
write them; the worker's handler table (``sendgroup_worker.handlers``) dispatches on them.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping
from typing import Any, Final

#: The mail job: ``data`` holds the message (see ``docs/queue-protocol.md``).
MAIL_JOB: Final = "sendgroups.SendMail"

#: A job that does nothing (benchmarks and smoke tests).
NOOP_JOB: Final = "sendgroups.Noop"


def envelope(
    data: Mapping[str, Any],
    *,
    job: str = MAIL_JOB,
    display_name: str | None = None,
    uuid: str | None = None,
    job_id: str | None = None,
    max_tries: int | None = None,
    max_exceptions: int | None = None,
    fail_on_timeout: bool = False,
    backoff: str | None = None,
    timeout: int | None = None,
    retry_until: int | None = None,
    pushed_at: float | None = None,
) -> dict[str, Any]:
    """A job envelope in Laravel's key order (``Queue::createPayloadArray``: ``uuid,
    displayName, job, maxTries, maxExceptions, failOnTimeout, backoff, timeout, retryUntil,
    data, id, attempts``) plus Horizon's ``pushedAt`` (unix seconds as a JSON string with 6
    decimals) when ``pushed_at`` is given. No check of ``data``: the producer
    (``sendgroup_worker.producer.make_mail_payload``) checks a mail first; tests and benchmarks
    build odd payloads with this on purpose.

    ``uuid`` defaults to a random one, ``job_id`` (``id``) to ``uuid``, ``display_name`` to
    ``job``; ``backoff`` is Laravel's text (``"10,60"``) or None.
    """
    job_uuid = uuid or str(uuidlib.uuid4())
    out: dict[str, Any] = {
        "uuid": job_uuid,
        "displayName": display_name or job,
        "job": job,
        "maxTries": max_tries,
        "maxExceptions": max_exceptions,
        "failOnTimeout": fail_on_timeout,
        "backoff": backoff,
        "timeout": timeout,
        "retryUntil": retry_until,
        "data": dict(data),
        "id": job_id or job_uuid,
        "attempts": 0,
    }
    if pushed_at is not None:
        out["pushedAt"] = f"{pushed_at:.6f}"
    return out
