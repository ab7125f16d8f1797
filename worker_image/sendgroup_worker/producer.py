"""Producer client: build Laravel-compatible mail job payloads and push them in batches.

A payload is the JSON envelope Laravel's ``RedisQueue::createPayloadArray`` writes (key order
``uuid, displayName, job, maxTries, maxExceptions, failOnTimeout, backoff, timeout, retryUntil,
data, id, attempts``) plus Horizon's ``pushedAt`` (a JSON string of unix seconds, as Horizon
writes it). ``job`` names the worker's handler (``sendgroups.SendMail``); ``data`` holds the
mail: ``to``, ``from``, ``subject``, ``text`` and/or ``html`` or ``template`` + ``vars``,
``headers``. Every payload gets a fresh ``uuid`` (``id`` = ``uuid``, as Horizon), so no two
payload strings are identical (identical strings collide in Laravel's sorted sets).
"""

from __future__ import annotations

import csv
import io
import json
import string
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from email_validator import EmailNotValidError, validate_email
from tqdm import tqdm

from sendgroup_contract import jobs
from sendgroup_contract.jobs import MAIL_JOB as MAIL_JOB
from sendgroup_worker import smtp
from sendgroup_worker.config import DEFAULT_TRIES
from sendgroup_worker.queue.protocol import PUSH_CHUNK

#: Row fields that map onto ``data`` directly; any other CSV column / JSON key becomes a
#: template variable in ``data.vars`` (mail merge).
MAIL_FIELDS: Final = ("to", "from", "subject", "text", "html", "template", "vars", "headers")

RowFormat = Literal["csv", "jsonl"]


class InvalidRow(ValueError):
    """A recipient row that cannot become a mail job; ``line`` is 1-based (file line)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


def backoff_text(backoff: int | float | str | Sequence[int | float] | None) -> str | None:
    """Laravel writes ``backoff`` as a comma-joined string (``"5,10"``) or null."""
    if backoff is None:
        return None
    if isinstance(backoff, str):
        parts = [p.strip() for p in backoff.split(",") if p.strip()]
    elif isinstance(backoff, int | float):
        parts = [str(backoff)]
    else:
        parts = [str(b) for b in backoff]
    for p in parts:
        if not p.replace(".", "", 1).isdigit():
            raise ValueError(f"backoff must be seconds like '5,10', got {backoff!r}")
    return ",".join(parts) or None


def check_address(address: str, field: str = "to") -> None:
    """Refuse an address a relay would refuse anyway, before it is queued: RFC 5321/5322 syntax
    (an optional display name, ``Ann <ann@x.example>``, is allowed) as checked by the
    ``email-validator`` library, without DNS lookups. The special-use ``.test`` domain is
    accepted (test campaigns use it); ``localhost`` and dotless domains are not.

    Raises ValueError naming ``field``, the address and the reason."""
    try:
        validate_email(
            address,
            check_deliverability=False,
            allow_display_name=True,
            test_environment=True,
        )
    except EmailNotValidError as e:
        raise ValueError(f"{field}: {address!r} is not a valid address: {e}") from None


TEMPLATE_PARTS: Final = ("subject", "text", "html")


def check_template(
    template: Mapping[str, Any], variables: Mapping[str, Any], *, has_body: bool = False
) -> None:
    """Refuse a template the worker would fail on or render with holes, before it is queued.

    ``template``: ``{"subject"?, "text"?, "html"?}`` strings with ``$name``/``${name}``
    placeholders (Python's ``string.Template``, what the worker renders with: see
    ``smtp.build_message``); ``text`` or ``html`` is required unless the job has its own body
    (``has_body``). Every placeholder must have a value in ``variables`` (the row's extra
    columns and ``vars``); ``$$`` is a literal dollar.

    Raises ValueError naming the part and the missing or malformed placeholder."""
    if not isinstance(template, Mapping):
        raise ValueError("'template' must be an object with subject/text/html")
    unknown = sorted(set(template) - set(TEMPLATE_PARTS))
    if unknown:
        raise ValueError(f"template: unknown part(s) {', '.join(unknown)} (use subject/text/html)")
    if not has_body and not (template.get("text") or template.get("html")):
        raise ValueError("template: needs a 'text' or 'html' part")
    for part, source in template.items():
        if not isinstance(source, str):
            raise ValueError(f"template.{part} must be text")
        tpl = string.Template(source)
        if not tpl.is_valid():
            raise ValueError(f"template.{part}: a '$' that is not a placeholder (write $$)")
        missing = sorted(set(tpl.get_identifiers()) - set(variables))
        if missing:
            names = ", ".join(f"${m}" for m in missing)
            raise ValueError(f"template.{part} uses {names} but the row has no value for it")


def make_mail_payload(
    to: str | Sequence[str],
    from_: str | None = None,
    subject: str | None = None,
    text: str | None = None,
    html: str | None = None,
    template: Mapping[str, str] | None = None,
    vars: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    max_tries: int | None = DEFAULT_TRIES,
    max_exceptions: int | None = None,
    fail_on_timeout: bool = False,
    backoff: int | float | str | Sequence[int | float] | None = None,
    timeout: int | None = None,
    retry_until: int | None = None,
    job: str = MAIL_JOB,
    display_name: str | None = None,
    uuid: str | None = None,
    pushed_at: float | None = None,
    extra_data: Mapping[str, Any] | None = None,
) -> bytes:
    """One mail job as Laravel-compatible JSON bytes (UTF-8, compact, ``attempts`` 0).

    ``to``: recipient address or list of addresses; a body is required: ``text`` and/or
    ``html``, or a ``template`` (an object with ``subject``/``text``/``html`` holding
    ``$name`` placeholders, rendered by the worker with ``vars``: see :func:`check_template`).
    ``max_tries``,
    ``max_exceptions``, ``backoff`` (seconds: ``5``, ``[5, 10]`` or ``"5,10"``), ``timeout``
    (seconds), ``retry_until`` (unix seconds) override the group's defaults, as in Laravel;
    None leaves them to the group. ``max_tries`` defaults to :data:`DEFAULT_TRIES` (3), not
    None: Laravel's ``queue:work`` allows 1 try to a job without ``maxTries`` and our worker
    the group's ``tries``, so a payload that names its tries is handled alike by both kinds
    of worker on one queue. ``pushed_at`` defaults to now (unix seconds).
    Raises ValueError on a missing recipient, sender or body, a line break in the subject
    (as given or rendered) or a header value, an invalid address (``to`` or ``from``,
    see :func:`check_address`), a template the worker could not render, or a malformed
    backoff.
    """
    recipients = [to] if isinstance(to, str) else list(to)
    if not recipients or not all(isinstance(r, str) and r.strip() for r in recipients):
        raise ValueError("a mail job needs a recipient ('to')")
    for recipient in recipients:
        check_address(recipient, "to")
    if from_:
        check_address(from_, "from")
    if template is not None:
        check_template(template, vars or {}, has_body=bool(text or html))
    elif not (text or html):
        raise ValueError("a mail job needs a body: 'text', 'html' or 'template'")
    # the subject as the worker will render it (smtp.render_part), checked as the worker does
    rendered_subject = subject
    if rendered_subject is None and template is not None:
        rendered_subject = smtp.render_part(template.get("subject"), vars or {})
    smtp.check_header_line("subject", rendered_subject or "")
    for name, v in (headers or {}).items():
        smtp.check_header_line(f"header {name}", str(v))
    data: dict[str, Any] = {"to": to if isinstance(to, str) else recipients}
    for name, value in (
        ("from", from_),
        ("subject", subject),
        ("text", text),
        ("html", html),
        ("template", dict(template) if template else None),
    ):
        if value is not None and value != "":
            data[name] = value
    if vars:
        data["vars"] = dict(vars)
    if headers:
        data["headers"] = dict(headers)
    if extra_data:
        for k, v in extra_data.items():
            data.setdefault(k, v)
    body = jobs.envelope(
        data,
        job=job,
        display_name=display_name,
        uuid=uuid,
        max_tries=max_tries,
        max_exceptions=max_exceptions,
        fail_on_timeout=fail_on_timeout,
        backoff=backoff_text(backoff),
        timeout=timeout,
        retry_until=retry_until,
        pushed_at=time.time() if pushed_at is None else pushed_at,
    )
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True, slots=True)
class MailDefaults:
    """Campaign-wide values used when a row lacks them, and the job options of every job."""

    from_: str | None = None
    subject: str | None = None
    text: str | None = None
    html: str | None = None
    template: Mapping[str, str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    max_tries: int | None = DEFAULT_TRIES
    backoff: str | None = None
    timeout: int | None = None


def _json_field(value: Any, name: str) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise ValueError(f"'{name}' is not a JSON object: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"'{name}' must be a JSON object")
    return value


def _opt_str(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {type(value).__name__}")
    return value or None


def payload_from_row(
    row: Mapping[str, Any], defaults: MailDefaults = MailDefaults(), pushed_at: float | None = None
) -> bytes:
    """A mail payload from one recipient row (CSV columns or a JSON object).

    Known fields: :data:`MAIL_FIELDS` (``vars``/``headers`` may be JSON text in CSV). Other
    non-empty fields become template variables (``data.vars``). Row values win over
    ``defaults``. Raises ValueError with the reason for an unusable row.
    """
    extra_vars = {
        k: v for k, v in row.items() if k not in MAIL_FIELDS and k and v not in (None, "")
    }
    vars_ = {**extra_vars, **_json_field(row.get("vars"), "vars")}
    headers = {**defaults.headers, **_json_field(row.get("headers"), "headers")}
    to = row.get("to")
    if isinstance(to, str):
        to = to.strip()
    if not to:
        raise ValueError("no recipient ('to')")
    if not isinstance(to, str | list):
        raise ValueError("'to' must be an address or a list of addresses")
    sender = _opt_str(row.get("from")) or defaults.from_
    if not sender:
        # the worker fails a mail without one; refuse it before it is queued
        raise ValueError("no sender: give a 'from' column or --from")
    return make_mail_payload(
        to,
        from_=sender,
        subject=_opt_str(row.get("subject")) or defaults.subject,
        text=_opt_str(row.get("text")) or defaults.text,
        html=_opt_str(row.get("html")) or defaults.html,
        template=_json_field(row.get("template"), "template") or defaults.template,
        vars=vars_,
        headers=headers,
        max_tries=defaults.max_tries,
        backoff=defaults.backoff,
        timeout=defaults.timeout,
        pushed_at=pushed_at,
    )


def detect_format(path: Path) -> RowFormat:
    """``csv`` for ``*.csv``, ``jsonl`` for ``*.jsonl``/``*.ndjson``/``*.json``; ValueError
    otherwise (pass the format explicitly)."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    raise ValueError(f"cannot tell the format of {path.name!r}: use --format csv|jsonl")


def read_rows(
    stream: io.TextIOBase | Iterable[str], fmt: RowFormat
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line, row)`` from a CSV (header line required) or JSON-lines text stream.

    ``line`` is the 1-based line where the row starts. Blank JSON lines are skipped.
    Raises :class:`InvalidRow` for a line that is not a JSON object, a CSV without ``to``, or a
    CSV row with more fields than its header.
    """
    if fmt == "csv":
        reader = csv.DictReader(stream)
        if reader.fieldnames is None or "to" not in reader.fieldnames:
            raise InvalidRow(1, "the CSV header has no 'to' column")
        line = reader.line_num
        width = len(reader.fieldnames)
        for row in reader:
            extra = row.get(None)
            if extra:
                # an unquoted comma shifted the columns: refuse, rather than drop a value
                raise InvalidRow(
                    line + 1, f"{width + len(extra)} fields but the header has {width}"
                )
            yield line + 1, {k: v for k, v in row.items() if k is not None}
            line = reader.line_num
        return
    for n, text in enumerate(stream, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise InvalidRow(n, f"not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise InvalidRow(n, "not a JSON object")
        yield n, obj


class PushTarget(Protocol):
    """What :func:`push_recipients` needs: a queue's ``push_many`` (see ``Queue``)."""

    def push_many(self, payloads: Iterable[bytes]) -> int:
        """Push payloads; returns how many were pushed."""
        ...


@dataclass(frozen=True, slots=True)
class PushReport:
    """Result of :func:`push_recipients`: jobs pushed and round trips (batches) used."""

    pushed: int
    batches: int


def push_recipients(
    queue: PushTarget,
    rows: Iterable[Mapping[str, Any] | bytes],
    batch_size: int = 100,
    progress: bool | None = True,
    total: int | None = None,
    defaults: MailDefaults = MailDefaults(),
    on_batch: Callable[[int], None] | None = None,
) -> PushReport:
    """Push one mail job per row, ``batch_size`` jobs per round trip (each batch atomic).

    ``rows``: recipient rows (see :func:`payload_from_row`) or ready payload bytes.
    ``progress``: show a tqdm bar on stderr (None: only on a terminal); ``total`` rows, if
    known, sizes the bar. ``on_batch(pushed_so_far)`` runs after each atomic push (a batch, or
    each :data:`~sendgroup_worker.queue.protocol.PUSH_CHUNK` of a bigger one), so after an
    error ``pushed_so_far`` is exactly the number of leading rows queued. Raises ValueError
    for an unusable row (jobs of earlier batches are already pushed; validate first with
    :func:`validate_rows` when that matters) and ``redis.RedisError`` on Redis errors (e.g.
    out of memory).
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    pushed = batches = 0
    batch: list[bytes] = []
    with tqdm(
        total=total,
        unit="job",
        disable=None if progress is None else not progress,
        desc="push",
        dynamic_ncols=True,
    ) as bar:

        def flush() -> None:
            nonlocal pushed, batches
            if batch:
                for start in range(0, len(batch), PUSH_CHUNK):
                    chunk = batch[start : start + PUSH_CHUNK]
                    pushed += queue.push_many(chunk)
                    bar.update(len(chunk))
                    if on_batch is not None:
                        on_batch(pushed)
                batches += 1
                batch.clear()

        for row in rows:
            batch.append(row if isinstance(row, bytes) else payload_from_row(row, defaults))
            if len(batch) >= batch_size:
                flush()
        flush()
    return PushReport(pushed=pushed, batches=batches)


def validate_rows(
    rows: Iterable[tuple[int, Mapping[str, Any]]], defaults: MailDefaults = MailDefaults()
) -> int:
    """Build (and drop) every row's payload; returns the row count. Raises
    :class:`InvalidRow` naming the first bad line."""
    count = 0
    for line, row in rows:
        try:
            payload_from_row(row, defaults, pushed_at=0)
        except ValueError as e:
            raise InvalidRow(line, str(e)) from None
        count += 1
    return count


__all__ = [
    "MAIL_FIELDS",
    "MAIL_JOB",
    "InvalidRow",
    "MailDefaults",
    "PushReport",
    "PushTarget",
    "backoff_text",
    "check_address",
    "check_template",
    "detect_format",
    "make_mail_payload",
    "payload_from_row",
    "push_recipients",
    "read_rows",
    "validate_rows",
]
