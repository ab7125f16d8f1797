"""Job handlers: the payload's ``job`` field names one; an unknown name sends the job to failed.

| ``job`` | does |
|---|---|
| ``sendgroups.SendMail`` | builds the message from ``data`` and sends it through the relay |
| ``sendgroups.Noop`` | nothing (benchmarks and smoke tests) |

A handler is an async callable taking a :class:`JobContext` and returning a
:class:`HandlerResult`; it never raises for expected failures (SMTP replies, bad data). The
worker wraps it in the job's timeout. ``sends`` marks handlers with an external side effect:
the worker runs the queue's ``begin_send`` check before them (exactly-once).
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sendgroup_contract import jobs
from sendgroup_worker import smtp
from sendgroup_worker.metrics import WorkerMetrics

#: Job names (``sendgroup_contract.jobs``) under the names the worker and the bench use.
SEND_MAIL: Final = jobs.MAIL_JOB
NOOP: Final = jobs.NOOP_JOB


class Outcome(enum.StrEnum):
    """What the worker does with the job after the handler."""

    DONE = "done"  # delivered: acknowledge, record the idempotency marker
    TEMPORARY = "temporary"  # release with backoff (or fail when out of tries)
    PERMANENT = "permanent"  # straight to failed
    FENCED = "fenced"  # stopped because the job is no longer ours: touch nothing
    SUPPRESSED = "suppressed"  # every recipient is suppressed: delete unsent, count nothing


@dataclass(frozen=True, slots=True)
class HandlerResult:
    """``outcome``; ``exception``: class name for the failed record; ``message``: the reason
    (the SMTP reply for mail); ``reply_text``: a temporary reply's text for backpressure;
    ``from_provider``: whether a temporary outcome came from the provider (a 4xx reply, a
    connection or time-out) and so counts towards the group's backpressure suspension; False for
    the worker's own trouble (a handler that raised), which is retried but suspends nothing.
    ``recipients``: the envelope recipients (for the outcome stream and the rate limit, which
    counts recipients, not jobs: the worker charges the slots beyond the job's first);
    ``suppressed``: those left out by the suppression screen."""

    outcome: Outcome
    exception: str = ""
    message: str = ""
    reply_text: str = ""
    from_provider: bool = True
    recipients: tuple[str, ...] = ()
    suppressed: tuple[str, ...] = ()

    @property
    def sent_to(self) -> int:
        """Recipients the relay was given (suppressed ones excluded; 0 when fenced)."""
        if self.outcome is Outcome.FENCED:
            return 0
        return len(self.recipients) - len(self.suppressed)


@dataclass(frozen=True, slots=True)
class PreparedMail:
    """A mail job's message built once, before its handler runs: the worker counts its
    recipients for the rate limits (:attr:`recipients`) and :data:`SEND_MAIL`'s handler sends
    it instead of building it again (~20 us for a short plain mail, ~0.5 ms for a
    multipart one). ``uuid`` and ``limits``: what it was built for (the handler builds again
    for anything else); ``mail``: the message, or None with ``error``: why the job's data
    cannot make one (the job fails as ``InvalidMailData``)."""

    uuid: str
    limits: smtp.MailLimits
    mail: smtp.OutgoingMail | None
    error: smtp.InvalidMailData | None = None

    @property
    def recipients(self) -> int:
        """Recipients the job counts for in a rate: the envelope's (to + cc + bcc, each
        distinct address once, at most ``limits.max_recipients``); 1 when the data is invalid
        (the job takes its permit and fails unsent)."""
        return max(1, len(self.mail.recipients)) if self.mail is not None else 1


def prepare_mail(
    payload: Mapping[str, Any], uuid: str, limits: smtp.MailLimits = smtp.DEFAULT_LIMITS
) -> PreparedMail:
    """Build a :data:`SEND_MAIL` job's message from its ``payload["data"]`` exactly as its
    handler sends it (:func:`smtp.build_message` with the job's uuid and ``limits``)."""
    try:
        mail = smtp.build_message(payload.get("data") or {}, uuid, limits)
    except smtp.InvalidMailData as exc:
        return PreparedMail(uuid, limits, None, exc)
    return PreparedMail(uuid, limits, mail)


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a handler gets: the decoded payload, its uuid and attempt number (1 = first),
    ``fence()``: False once the job must no longer cause side effects (reservation about to
    expire or gone), and ``screen``: the suppression check for this job (the worker passes its
    lane's, on the lane's held Redis connection; None: no check, the set is off); ``mail``:
    the message the worker already built for a mail job (:func:`prepare_mail`; None: the
    handler builds it)."""

    payload: Mapping[str, Any]
    uuid: str
    attempts: int
    fence: Callable[[], bool]
    screen: smtp.Screen | None = None
    mail: PreparedMail | None = None


HandlerFn = Callable[[JobContext], Awaitable[HandlerResult]]


@dataclass(frozen=True, slots=True)
class Handler:
    """A registered handler: ``run``, whether it ``sends`` (has side effects), and whether it
    ``screens``: it awaits ``JobContext.screen`` (when given one) before its side effect, on
    every path that has one. The worker may then run its ``begin_send`` check inside the
    screen (one Redis round trip for both, see ``queue.protocol.begin_screen_call``) instead
    of before the handler; the screen raises ``smtp.ScreenRefused`` when the job is no longer
    this worker's to send."""

    run: HandlerFn
    sends: bool
    screens: bool = False


class Registry:
    """Handlers by name. :meth:`get` returns None for an unknown name."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, name: str, run: HandlerFn, sends: bool, screens: bool = False) -> None:
        """Add or replace the handler ``name`` (``sends``, ``screens``: see :class:`Handler`)."""
        self._handlers[name] = Handler(run, sends, screens)

    def get(self, name: object) -> Handler | None:
        """The handler called ``name`` (None when unknown or not a string)."""
        return self._handlers.get(name) if isinstance(name, str) else None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._handlers)


def default_registry(
    pool: smtp.SmtpPool,
    metrics: WorkerMetrics,
    limits: smtp.MailLimits = smtp.DEFAULT_LIMITS,
) -> Registry:
    """The worker's registry: :data:`SEND_MAIL` over ``pool`` (recipients checked right
    before the SMTP transaction with the job's ``JobContext.screen``, see ``loopback``; mails
    capped by ``limits``) and :data:`NOOP`."""
    registry = Registry()

    async def send_mail(job: JobContext) -> HandlerResult:
        prepared = job.mail
        if prepared is None or prepared.uuid != job.uuid or prepared.limits != limits:
            prepared = prepare_mail(job.payload, job.uuid, limits)
        mail = prepared.mail
        if mail is None:
            return HandlerResult(Outcome.PERMANENT, "InvalidMailData", str(prepared.error))
        started = time.monotonic()
        result = await pool.send(mail, job.fence, job.screen)
        metrics.reply(result.reply_class.value, time.monotonic() - started)
        return dataclasses.replace(
            from_send_result(result),
            recipients=tuple(mail.recipients),
            suppressed=result.suppressed,
        )

    async def noop(job: JobContext) -> HandlerResult:
        return HandlerResult(Outcome.DONE)

    # SmtpPool.send awaits the screen before MAIL FROM, on every path that writes to the relay
    registry.register(SEND_MAIL, send_mail, sends=True, screens=True)
    registry.register(NOOP, noop, sends=False)
    return registry


def from_send_result(result: smtp.SendResult) -> HandlerResult:
    """Map an SMTP outcome to what the worker does: 2xx done, 4xx and connection trouble
    temporary, 5xx permanent (failed record ``SmtpPermanentFailure`` with the reply)."""
    cls = smtp.ReplyClass
    if result.reply_class is cls.OK:
        return HandlerResult(Outcome.DONE, message=result.reply)
    if result.reply_class is cls.FENCED:
        return HandlerResult(Outcome.FENCED, message=result.text)
    if result.reply_class is cls.SUPPRESSED:
        return HandlerResult(Outcome.SUPPRESSED, message=result.text)
    if result.reply_class is cls.PERMANENT:
        return HandlerResult(Outcome.PERMANENT, "SmtpPermanentFailure", result.reply)
    if result.reply_class is cls.TEMPORARY:
        return HandlerResult(
            Outcome.TEMPORARY, "SmtpTemporaryFailure", result.reply, reply_text=result.reply
        )
    return HandlerResult(Outcome.TEMPORARY, "SmtpConnectionError", result.reply, reply_text="")
