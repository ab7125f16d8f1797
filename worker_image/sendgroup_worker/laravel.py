"""What the Python worker says about a Laravel job it cannot run (pure, no I/O).

A Laravel app queues PHP work as ``"job": "Illuminate\\Queue\\CallQueuedHandler@call"`` with
``data.commandName`` (the class) and ``data.command`` (PHP ``serialize()`` of the object, or an
encrypted string for ``ShouldBeEncrypted`` jobs); ``Queue::push('App\\Handler@fire', $data)``
queues a string job naming a PHP class. The Python worker runs only its registered handlers
(``sendgroups.SendMail``, ...), so such a job goes to the failed list once, with a reason that
says what it is, what would be lost by consuming it anyway (a batch's counters, a chain's next
jobs, a unique lock), and the fix: run the group with the Laravel runtime (or any Laravel
worker on the queue), or push ``sendgroups.SendMail`` envelopes (docs/laravel.md).

What the payload reveals, from ``Illuminate/Queue/Queue.php`` (``createObjectPayload``) and the
traits' properties as ``SerializesModels::__serialize`` writes them (a property equal to its
declared default is left out, Laravel 11+):

* ``batchId`` (``Batchable``): the job belongs to a ``Bus::batch()``; the batch's
  ``then()``/``catch()``/``finally()`` fire only when Laravel's worker updates its counters;
* ``chained`` (``Queueable``), a non-empty array: ``Bus::chain()``; Laravel's worker dispatches
  the next job after this one;
* ``uniqueId`` / ``uniqueFor``: a ``ShouldBeUnique`` job; Laravel's worker releases its cache
  lock (else the lock stays until ``uniqueFor`` passes).

A unique job that keeps both properties at their defaults cannot be told apart from a plain
job by its payload (the interface is not serialized); the reason then mentions the lock as a
possibility only through the generic fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from sendgroup_worker.oneline import escape_controls

#: Laravel's handler for queued objects (jobs, Mailables, notifications, listeners, closures).
CALL_QUEUED_HANDLER: Final = "Illuminate\\Queue\\CallQueuedHandler@call"

#: Failed-record exception name of a Laravel job the Python worker cannot run.
LARAVEL_JOB_EXCEPTION: Final = "LaravelJobNotSupported"

#: The fix, as the failed reason states it.
FIX: Final = (
    "fix: run this group with the Laravel runtime (spec.worker.runtime: laravel) or another "
    "Laravel worker on this queue (php artisan queue:work redis --queue={queue} --tries=N), "
    "or push sendgroups.SendMail jobs instead (docs/laravel.md)"
)

#: What well-known Laravel wrapper classes carry, for the reason text.
WRAPPERS: Final[Mapping[str, str]] = {
    "Illuminate\\Mail\\SendQueuedMailable": "a queued Mailable (Mail::queue / ShouldQueue)",
    "Illuminate\\Notifications\\SendQueuedNotifications": "a queued notification",
    "Illuminate\\Events\\CallQueuedListener": "a queued event listener",
    "Illuminate\\Queue\\CallQueuedClosure": "a queued closure",
    "Illuminate\\Broadcasting\\BroadcastEvent": "a queued broadcast event",
}

_BATCH_ID: Final = re.compile(r's:7:"batchId";s:\d+:"([^"]*)"')
_CHAINED: Final = re.compile(r's:7:"chained";a:(\d+):')
_UNIQUE: Final = re.compile(r's:(?:8:"uniqueId"|9:"uniqueFor");')
#: Laravel's Encrypter output is base64 of ``{"iv":...``.
_ENCRYPTED_PREFIX: Final = "eyJpdiI6"


def is_laravel_job(job: object) -> bool:
    """True when ``job`` (the payload's ``job`` field) names PHP code: Laravel's
    :data:`CALL_QUEUED_HANDLER`, or a string job ``Class@method`` / ``Namespace\\Class``."""
    if not isinstance(job, str) or not job:
        return False
    return job == CALL_QUEUED_HANDLER or "\\" in job or "@" in job


def _printable(text: str, limit: int = 200) -> str:
    """``text`` for a failed reason: at most ``limit`` characters of it, control characters
    (a line break would forge a log line) written as escapes."""
    return escape_controls(text if len(text) <= limit else text[: limit - 3] + "...")


def _misspelled_handler(job: str) -> bool:
    """Whether a string job looks like one of ours written the PHP way
    (``sendgroups\\SendMail``, ``sendgroups.SendMail@handle``, another case)."""
    parts = job.split("@")[0].replace("\\", ".").lower().split(".")
    return len(parts) == 2 and parts[0] == "sendgroups"


def unrunnable_reason(payload: Mapping[str, Any], queue: str) -> str:
    """The failed reason for a Laravel job (see :func:`is_laravel_job`): what it is (class and
    kind), what consuming it here would break (batch, chain, unique lock) and the fix (with
    ``queue``, the bare queue name, in the ``queue:work`` command line). One line."""
    job = _printable(str(payload.get("job")))
    data = payload.get("data")
    data = data if isinstance(data, Mapping) else {}
    if job != CALL_QUEUED_HANDLER and _misspelled_handler(job):
        return (
            f"job '{job}' is not a handler of this worker: the handler names are exact, "
            "e.g. sendgroups.SendMail (a dot, no @method); fix the producer and push these "
            f"mails again (their bytes stay in `sendgroup-worker failed list -q {queue}`)"
        )
    if job != CALL_QUEUED_HANDLER:
        what = f"{job} is a Laravel string job (a PHP handler class)"
        return f"{what}; the Python worker runs only sendgroups.* handlers; " + FIX.format(
            queue=queue
        )
    name = _printable(str(data.get("commandName") or payload.get("displayName") or "the job"))
    kind = WRAPPERS.get(name, "a Laravel job class")
    parts = [f"{name} is {kind} ({CALL_QUEUED_HANDLER} with a serialized PHP command)"]
    command = data.get("command")
    command = command if isinstance(command, str) else ""
    if command.startswith(_ENCRYPTED_PREFIX):
        parts.append("its command is encrypted (ShouldBeEncrypted)")
    batch = _BATCH_ID.search(command)
    if batch:
        parts.append(
            f"it belongs to batch {_printable(batch.group(1), 64)}, whose "
            "then()/catch()/finally() callbacks fire only when Laravel's worker runs its jobs"
        )
    chained = _CHAINED.search(command)
    if chained and int(chained.group(1)) > 0:
        parts.append(
            f"it has {chained.group(1)} chained job(s) that only Laravel's worker dispatches"
        )
    if _UNIQUE.search(command):
        parts.append(
            "it is a unique job (ShouldBeUnique) whose lock only Laravel's worker releases"
        )
    parts.append("the Python worker cannot run PHP and left it unrun")
    parts.append(FIX.format(queue=queue))
    return "; ".join(parts)
