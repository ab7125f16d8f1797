"""Console commands of the producer client and queue inspection:

* ``sendgroup-worker push FILE``     push one mail job per CSV / JSON-lines row, in batches
* ``sendgroup-worker stats``         a queue's counts (one atomic measurement)
* ``sendgroup-worker failed list|show|retry|forget``   the failed jobs of a queue

Connection options are shared: ``--redis-url`` (env ``REDIS_URL``) or ``--redis-url-file``
(env ``REDIS_URL_FILE``, e.g. a mounted Secret key), ``--queue`` (env ``SENDGROUP_QUEUE``),
``--prefix`` (env ``SENDGROUP_KEY_PREFIX``; ``QUEUE_PREFIX`` is a deprecated alias). The URL
is never printed.
"""

from __future__ import annotations

import functools
import itertools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TextIO, TypeVar, cast

import click
import redis

from sendgroup_worker import producer, redisclient, redisurl
from sendgroup_worker.cli_prefix import key_prefix_option
from sendgroup_worker.config import DEFAULT_TRIES
from sendgroup_worker.queue.client import Queue
from sendgroup_worker.queue.keys import InvalidQueueName, QueueKeys

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def _redacted(url: str) -> str:
    """A log-safe name of ``url``: its kind and hosts, never user, password or query."""
    return redisurl.describe(url)


def queue_options(f: F) -> F:
    """Add the connection options; the command receives ``queue: Queue`` instead."""

    @click.option(
        "--redis-url",
        envvar="REDIS_URL",
        default=None,
        help="redis[s]://[user:password@]host:port/db, redis[s]+cluster://h1:p1,h2:p2/ or "
        "redis[s]+sentinel://s1:p1,s2:p2/<master>[/db]. Env REDIS_URL. "
        f"[default: {DEFAULT_REDIS_URL}]",
    )
    @click.option(
        "--redis-url-file",
        envvar="REDIS_URL_FILE",
        default=None,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="File holding the Redis URL (a mounted Secret key). Env REDIS_URL_FILE.",
    )
    @click.option(
        "-q",
        "--queue",
        "queue_name",
        envvar="SENDGROUP_QUEUE",
        required=True,
        help="Queue name (keys queues:<queue>...). Env SENDGROUP_QUEUE.",
    )
    @key_prefix_option("--prefix")
    @functools.wraps(f)
    def wrapper(
        redis_url: str | None,
        redis_url_file: Path | None,
        queue_name: str,
        prefix: str,
        **kwargs: Any,
    ) -> Any:
        if redis_url_file is not None:
            url = redis_url_file.read_text(encoding="utf-8").strip()
        else:
            url = redis_url or DEFAULT_REDIS_URL
        try:
            keys = QueueKeys(queue_name, prefix=prefix)
        except InvalidQueueName as e:
            raise click.BadParameter(str(e), param_hint="--queue") from None
        try:
            target = redisurl.parse(url)
        except redisurl.RedisUrlError as e:
            message = redisurl.redact(str(e), url)
            raise click.ClickException(f"invalid Redis URL: {message}") from None
        with _redis_errors(url):
            client = redisclient.connect(target)
            try:
                if redisclient.is_cluster(client) and keys.slot_tag is None:
                    raise click.ClickException(
                        f"queue {queue_name!r} has no hash tag, so on Redis Cluster its keys "
                        f"land in different slots; name it like '{{{queue_name}}}'"
                    )
                return f(queue=Queue(client, keys), **kwargs)
            finally:
                client.close()

    return cast(F, wrapper)


@contextmanager
def _redis_errors(url: str) -> Iterator[None]:
    try:
        yield
    except redis.ConnectionError as e:
        raise click.ClickException(
            f"cannot reach Redis at {_redacted(url)}: {redisurl.redact(str(e), url)}"
        ) from None
    except redisclient.REDIS_ERRORS as e:
        raise click.ClickException(f"Redis error: {redisurl.redact(str(e), url)}") from None


def _fmt_time(ts: float) -> str:
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return "-"


def _recipient(payload: Any) -> Any:
    """``data.to`` of a failed job's payload, or None when the payload has no such field."""
    data = payload.get("data") if isinstance(payload, dict) else None
    return data.get("to") if isinstance(data, dict) else None


@contextmanager
def _open_rows(path: str, fmt: str | None) -> Iterator[tuple[IO[str], producer.RowFormat]]:
    if path == "-":
        if fmt is None:
            raise click.UsageError("reading stdin needs --format csv|jsonl")
        yield sys.stdin, cast(producer.RowFormat, fmt)
        return
    p = Path(path)
    try:
        chosen = cast(producer.RowFormat, fmt) if fmt else producer.detect_format(p)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    with p.open(encoding="utf-8-sig", newline="") as stream:
        yield stream, chosen


@click.command("push")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "jsonl"]),
    default=None,
    help="Row format; by default from the file name (.csv, .jsonl/.ndjson/.json).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 10_000),
    default=100,
    help="Jobs per Redis round trip (each batch is pushed atomically).",
)
@click.option("--from", "from_", default=None, help="Sender, for rows without 'from'.")
@click.option("--subject", default=None, help="Subject, for rows without 'subject'.")
@click.option("--text", default=None, help="Plain-text body, for rows without one.")
@click.option("--html", default=None, help="HTML body, for rows without one.")
@click.option(
    "--template",
    "template_file",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help='JSON file {"subject": ..., "text": ..., "html": ...} with $name placeholders filled '
    "from each row's other columns, for rows without a 'template'.",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="NAME:VALUE",
    help="Mail header added to every job (repeatable).",
)
@click.option(
    "--max-tries",
    type=click.IntRange(1),
    default=DEFAULT_TRIES,
    help="Payload maxTries, always written: any worker on the queue, ours or Laravel's "
    "queue:work (whose own default is 1 try), then allows the same number of attempts.",
)
@click.option("--backoff", default=None, help="Payload backoff, seconds: '10' or '10,60,300'.")
@click.option(
    "--timeout",
    type=click.IntRange(1),
    default=None,
    help="Payload timeout, seconds (default: the group's).",
)
@click.option(
    "--validate/--no-validate",
    default=True,
    help="Check every row before pushing any (reads the file twice).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar on stderr [default: when stderr is a terminal].",
)
@click.option(
    "--skip",
    type=click.IntRange(0),
    default=0,
    help="Skip the first N rows (already pushed: resume after an interrupted push).",
)
@queue_options
def push_command(
    queue: Queue,
    file: str,
    fmt: str | None,
    batch_size: int,
    from_: str | None,
    subject: str | None,
    text: str | None,
    html: str | None,
    template_file: TextIO | None,
    headers: tuple[str, ...],
    max_tries: int,
    backoff: str | None,
    timeout: int | None,
    validate: bool,
    progress: bool | None,
    skip: int,
) -> None:
    """Push one mail job per row of FILE (CSV with a header line, or JSON lines; '-' = stdin).

    Fields: to, from, subject, text, html, template, vars, headers (JSON in CSV); any other
    column becomes a template variable. Options give defaults for missing fields.
    """
    header_map: dict[str, str] = {}
    for h in headers:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            raise click.BadParameter(f"{h!r} is not NAME:VALUE", param_hint="--header")
        header_map[name.strip()] = value.strip()
    try:
        backoff_text = producer.backoff_text(backoff)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--backoff") from None
    template: dict[str, str] | None = None
    if template_file is not None:
        try:
            template = json.load(template_file)
        except ValueError as e:
            raise click.BadParameter(f"not JSON: {e}", param_hint="--template") from None
        if not isinstance(template, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--template")
    defaults = producer.MailDefaults(
        from_=from_,
        subject=subject,
        text=text,
        html=html,
        template=template,
        headers=header_map,
        max_tries=max_tries,
        backoff=backoff_text,
        timeout=timeout,
    )
    total: int | None = None
    if validate and file != "-":
        with _open_rows(file, fmt) as (stream, chosen):
            try:
                total = producer.validate_rows(producer.read_rows(stream, chosen), defaults)
            except producer.InvalidRow as e:
                raise click.ClickException(f"{file}: {e}; nothing was pushed") from None
    pushed = 0

    def note(n: int) -> None:
        nonlocal pushed
        pushed = n

    with _open_rows(file, fmt) as (stream, chosen):
        rows = itertools.islice((row for _, row in producer.read_rows(stream, chosen)), skip, None)
        try:
            report = producer.push_recipients(
                queue,
                rows,
                batch_size=batch_size,
                progress=progress,
                total=None if total is None else max(0, total - skip),
                defaults=defaults,
                on_batch=note,
            )
        except (ValueError, producer.InvalidRow) as e:
            raise click.ClickException(
                f"{file}: {e}; {pushed} jobs were pushed before it"
            ) from None
        except redis.RedisError as e:
            done = skip + pushed
            reason = (
                "Redis is out of memory (maxmemory reached)"
                if type(e).__name__ == "OutOfMemoryError"
                else f"{type(e).__name__}: {e}"
            )
            raise click.ClickException(
                f"{file}: push interrupted: {reason}. The first {done} rows are queued "
                f"({pushed} by this run), none after them; once Redis has room, resume with "
                f"--skip {done}"
            ) from None
    click.echo(
        f"pushed {report.pushed} jobs to queue {queue.keys.queue} in {report.batches} batches"
        + (f" (after skipping {skip} rows)" if skip else "")
    )


@click.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@queue_options
def stats_command(queue: Queue, as_json: bool) -> None:
    """Show a queue's counts, measured atomically in one round trip."""
    s = queue.measure()
    data = {
        "queue": queue.keys.queue,
        "ready": s.ready,
        "delayed": s.delayed,
        "reserved": s.reserved,
        "total": s.total,
        "failed": s.failed,
        "oldestJobAgeSeconds": s.oldest_job_age_seconds,
        "delivered": s.delivered,
        "failedTotal": s.failed_total,
        "released": s.released,
        "measuredAt": None if s.measured_at is None else _fmt_time(s.measured_at),
    }
    if as_json:
        click.echo(json.dumps(data))
        return
    age = "-" if s.oldest_job_age_seconds is None else f"{s.oldest_job_age_seconds:.1f}s"
    click.echo(f"queue      {queue.keys.queue}")
    click.echo(f"ready      {s.ready}")
    click.echo(f"delayed    {s.delayed}")
    click.echo(f"reserved   {s.reserved}")
    click.echo(f"total      {s.total}")
    click.echo(f"failed     {s.failed} (in the failed list; {s.failed_total} since start)")
    click.echo(f"delivered  {s.delivered}")
    click.echo(f"released   {s.released}")
    click.echo(f"oldest     {age}")


@click.group("failed")
def failed_group() -> None:
    """List, show, retry and forget a queue's failed jobs."""


@failed_group.command("list")
@click.option("--offset", type=click.IntRange(0), default=0, help="Skip this many (newest first).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, help="Jobs to show.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@queue_options
def failed_list_command(queue: Queue, offset: int, limit: int, as_json: bool) -> None:
    """Failed jobs, newest first."""
    page = queue.failed_list(offset, limit)
    for j in page.jobs:
        to = _recipient(j.payload_json())
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "uuid": j.uuid,
                        "failedAt": _fmt_time(j.failed_at),
                        "exception": j.exception,
                        "message": j.message,
                        "to": to,
                    }
                )
            )
        else:
            msg = j.message.replace("\n", " ")[:100]
            click.echo(f"{j.uuid}  {_fmt_time(j.failed_at)}  {j.exception}  {to or '-'}  {msg}")
    if not as_json:
        click.echo(f"{len(page.jobs)} of {page.total} failed jobs (offset {offset})", err=True)


@failed_group.command("show")
@click.argument("uuid")
@queue_options
def failed_show_command(queue: Queue, uuid: str) -> None:
    """Print one failed job: exception, message, and its payload as stored."""
    j = queue.failed_get(uuid)
    if j is None:
        raise click.ClickException(f"no failed job {uuid} in queue {queue.keys.queue}")
    click.echo(f"uuid       {j.uuid}\nfailedAt   {_fmt_time(j.failed_at)}")
    click.echo(f"exception  {j.exception}\nmessage    {j.message}")
    click.echo("payload    " + j.payload.decode("utf-8", "replace"))


@failed_group.command("retry")
@click.argument("uuids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Retry every failed job.")
@queue_options
def failed_retry_command(queue: Queue, uuids: tuple[str, ...], all_: bool) -> None:
    """Push failed jobs back to the ready list (attempts reset to 0)."""
    if bool(uuids) == all_:
        raise click.UsageError("give job uuids or --all (not both)")
    if all_:
        n = queue.failed_retry_all()
        click.echo(f"retried {n} jobs")
        return
    r = queue.failed_retry(*uuids)
    click.echo(f"retried {r.retried} jobs")
    if r.missing:
        raise click.ClickException("no failed job " + ", ".join(r.missing))


@failed_group.command("forget")
@click.argument("uuids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Delete every failed job record.")
@queue_options
def failed_forget_command(queue: Queue, uuids: tuple[str, ...], all_: bool) -> None:
    """Delete failed job records."""
    if bool(uuids) == all_:
        raise click.UsageError("give job uuids or --all (not both)")
    n = queue.failed_flush() if all_ else queue.failed_forget(*uuids)
    click.echo(f"forgot {n} failed jobs")
    if not all_ and n < len(set(uuids)):
        raise click.ClickException(f"{len(set(uuids)) - n} of the uuids had no failed job")


__all__ = [
    "failed_group",
    "push_command",
    "queue_options",
    "stats_command",
]
