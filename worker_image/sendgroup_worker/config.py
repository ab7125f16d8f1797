"""The worker's settings, read from environment variables (the operator sets them on the pod).

Every variable, its unit and default is listed in :data:`ENV_VARS` (also printed by
``sendgroup-worker work --help-env``). Durations accept seconds (``90``) or a pytimeparse2
expression (``10m``, ``1h30m``). ``*_FILE`` variants read the value from a file, the way a
Kubernetes Secret is mounted; the file wins over the plain variable.

Timeout ladder (Laravel's, see the seeds): SMTP client timeout < job ``timeout`` <
``retry_after`` < the pod's termination grace period. ``timeout < retry_after`` is enforced here
(the CRD enforces it too), the SMTP timeout is clamped below the job timeout.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

import pytimeparse2
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from sendgroup_worker import loopback, redisurl

SmtpTls = Literal["none", "starttls", "tls"]

#: (variable, default shown to users, meaning). The order is the documentation order.
ENV_VARS: Final[tuple[tuple[str, str, str], ...]] = (
    ("SENDGROUP_QUEUE", "required", "queue name (keys queues:<queue>...)"),
    (
        "SENDGROUP_KEY_PREFIX",
        '""',
        "client-side key prefix, e.g. laravel_database_ (QUEUE_PREFIX: deprecated alias)",
    ),
    (
        "REDIS_URL / REDIS_URL_FILE",
        "redis://127.0.0.1:6379/0",
        "Redis URL (password inside): "
        "redis[s]://, redis[s]+cluster://h1:p,h2:p/, redis[s]+sentinel://s1:p,s2:p/<master>",
    ),
    (
        "WORKER_REDIS_WAIT_REPLICAS",
        "0",
        "WAIT for this many replicas after each ack/release/"
        "fail (durable against a primary loss; 0 = asynchronous replication)",
    ),
    ("WORKER_REDIS_WAIT_TIMEOUT", "1", "longest WAIT, seconds; then a warning and go on"),
    ("SMTP_HOST", "127.0.0.1", "SMTP relay host"),
    ("SMTP_PORT", "25", "SMTP relay port"),
    ("SMTP_TLS", "none", "none | starttls | tls (implicit TLS)"),
    ("SMTP_CA_FILE", "system CAs", "PEM bundle that verifies the relay's certificate"),
    ("SMTP_USERNAME / SMTP_USERNAME_FILE", "none", "AUTH user (optional)"),
    ("SMTP_PASSWORD / SMTP_PASSWORD_FILE", "none", "AUTH password (optional)"),
    ("SMTP_TIMEOUT", "30", "seconds per SMTP command; clamped below the job timeout"),
    ("SMTP_HELO_NAME", "host name", "name sent in EHLO"),
    ("WORKER_TRIES", "3", "max attempts per job (payload maxTries wins)"),
    ("WORKER_BACKOFF", "10,60,300", "seconds before retry n; the last value repeats"),
    ("WORKER_TIMEOUT", "60", "one job's time limit, seconds (payload timeout wins)"),
    ("WORKER_RETRY_AFTER", "90", "reservation lifetime, seconds; must be > WORKER_TIMEOUT"),
    ("WORKER_CONCURRENCY", "4", "sends in flight per process (one SMTP connection each)"),
    ("WORKER_MAX_JOBS", "0", "exit 0 after this many jobs (0 = never)"),
    ("WORKER_MAX_TIME", "0", "exit 0 after this long, seconds/duration (0 = never)"),
    ("WORKER_BLOCK_FOR", "5", "idle BLPOP timeout on the notify list, seconds"),
    ("RATE_PER_MINUTE", "unlimited", "messages per minute for the whole group"),
    ("RATE_BURST", "ceil(perMinute/60)", "messages allowed at once"),
    ("WARMUP_START_PER_HOUR", "none", "warm-up: allowed per hour on day 0"),
    ("WARMUP_GROWTH_PER_DAY", "2.0", "warm-up: factor per day since WARMUP_SINCE"),
    ("WARMUP_SINCE", "process start", "warm-up start, ISO 8601 or unix seconds"),
    ("BACKPRESSURE_SUSPEND_AFTER", "20", "temporary failures in a row that suspend the group"),
    ("BACKPRESSURE_SUSPEND_FOR", "10m", "how long a suspension lasts"),
    ("BACKPRESSURE_PATTERNS", "none", "JSON list or one regex per line; a 4xx match suspends"),
    ("SENDGROUP_NAMESPACE", "default", "namespace: names the outcome stream and suppression set"),
    ("SENDGROUP_NAME", '""', "the SendGroup's name (field group of outcome entries)"),
    ("OUTCOME_STREAM", "sendgroups:<ns>:outcomes", "outcome stream key (key prefix applied)"),
    ("OUTCOME_STREAM_MAXLEN", "100000", "outcome stream cap, entries (MAXLEN ~); 0 = off"),
    ("SUPPRESSION_SET", "sendgroups:<ns>:suppressed", "suppression set key; off = no check"),
    ("METRICS_PORT", "9090", "Prometheus metrics port (0 = off)"),
    ("METRICS_HOST", "0.0.0.0", "address the metrics server binds"),
    ("LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING, ERROR"),
)


class ConfigError(ValueError):
    """The environment does not describe a usable worker; the message names the variable."""


#: The one variable naming the producers' client-side key prefix, for every command (worker,
#: push/stats/failed, dump/restore/purge) and the operator.
KEY_PREFIX_ENV: Final = "SENDGROUP_KEY_PREFIX"

#: Deprecated alias of :data:`KEY_PREFIX_ENV` (the CLI's old name), still read for one release.
KEY_PREFIX_ENV_DEPRECATED: Final = "QUEUE_PREFIX"

#: Default ``maxTries`` of a job that does not carry one: the worker's ``WORKER_TRIES`` default,
#: and what our producers write into every payload so that Laravel's ``queue:work`` (whose own
#: default is ``--tries=1``) and this worker allow the same number of attempts on one queue.
DEFAULT_TRIES: Final = 3

_log = logging.getLogger("sendgroup_worker.config")


def key_prefix_from_env(
    environ: Mapping[str, str] | None = None, warn: Callable[[str], None] | None = None
) -> str:
    """The key prefix from :data:`KEY_PREFIX_ENV`, else from the deprecated
    :data:`KEY_PREFIX_ENV_DEPRECATED` (with a warning passed to ``warn``, default: logged);
    ``""`` when neither is set.

    Raises :class:`ConfigError` when both are set to different values (the worker and the CLI
    would otherwise watch different keys)."""
    env = os.environ if environ is None else environ
    new, old = env.get(KEY_PREFIX_ENV), env.get(KEY_PREFIX_ENV_DEPRECATED)
    if new is not None and old is not None and new != old:
        raise ConfigError(
            f"{KEY_PREFIX_ENV}={new!r} and {KEY_PREFIX_ENV_DEPRECATED}={old!r} disagree: "
            f"set only {KEY_PREFIX_ENV} ({KEY_PREFIX_ENV_DEPRECATED} is a deprecated alias)"
        )
    if new is not None:
        return new
    if old is not None:
        (warn or _log.warning)(
            f"{KEY_PREFIX_ENV_DEPRECATED} is deprecated and will be removed: "
            f"set {KEY_PREFIX_ENV} instead"
        )
        return old
    return ""


def parse_duration(value: str | int | float) -> float:
    """Seconds from ``90``, ``"90"``, ``"1.5"``, ``"10m"``, ``"1h30m"``. Raises ValueError."""
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            parsed = pytimeparse2.parse(text)
            if parsed is None:
                raise ValueError(f"not a duration: {value!r} (use seconds or e.g. 10m)") from None
            seconds = float(parsed.total_seconds() if hasattr(parsed, "total_seconds") else parsed)
    if seconds < 0 or math.isnan(seconds):
        raise ValueError(f"duration must be >= 0, got {value!r}")
    return seconds


def parse_backoff(value: str | int | float | list[int | float] | None) -> list[float]:
    """Laravel's backoff: ``"10,60,300"`` (a comma-joined string, as Laravel writes it), a JSON
    list, or one number. Returns seconds, at least one value. Raises ValueError."""
    if value is None:
        raise ValueError("backoff is empty")
    items: list[str | int | float]
    if isinstance(value, list):
        items = list(value)
    elif isinstance(value, int | float):
        items = [value]
    else:
        items = [part for part in value.split(",") if part.strip()]
    out = [parse_duration(item) for item in items]
    if not out:
        raise ValueError(f"backoff is empty: {value!r}")
    return out


class WorkerConfig(BaseModel):
    """Validated worker settings. Build with :meth:`from_env`; field units are in the names or
    in :data:`ENV_VARS` (seconds for every duration)."""

    model_config = {"frozen": True}

    queue: str
    key_prefix: str = ""
    redis_url: str = "redis://127.0.0.1:6379/0"

    smtp_host: str = "127.0.0.1"
    smtp_port: int = Field(25, ge=1, le=65535)
    smtp_tls: SmtpTls = "none"
    smtp_ca_file: str | None = None
    smtp_username: str | None = None
    smtp_password: str | None = Field(None, repr=False)
    smtp_timeout: float = Field(30.0, gt=0)
    smtp_helo_name: str | None = None

    tries: int = Field(DEFAULT_TRIES, ge=1, le=100)
    backoff: list[float] = Field(default_factory=lambda: [10.0, 60.0, 300.0])
    timeout: float = Field(60.0, gt=0)
    retry_after: float = Field(90.0, gt=0)
    concurrency: int = Field(4, ge=1, le=256)
    max_jobs: int = Field(0, ge=0)
    max_time: float = Field(0.0, ge=0)
    block_for: float = Field(5.0, gt=0)
    redis_wait_replicas: int = Field(0, ge=0, le=16)
    redis_wait_timeout: float = Field(1.0, gt=0)

    rate_per_minute: int | None = Field(None, ge=1)
    rate_burst: int | None = Field(None, ge=1)
    warmup_start_per_hour: int | None = Field(None, ge=1)
    warmup_growth_per_day: float = Field(2.0, gt=1)
    warmup_since: datetime | None = None

    backpressure_suspend_after: int = Field(20, ge=1)
    backpressure_suspend_for: float = Field(600.0, ge=0)
    backpressure_patterns: list[str] = Field(default_factory=list)

    namespace: str = ""
    group: str = ""
    outcome_stream: str | None = None
    outcome_stream_maxlen: int = Field(loopback.DEFAULT_MAXLEN, ge=0)
    suppression_set: str | None = None

    metrics_port: int = Field(9090, ge=0, le=65535)
    metrics_host: str = "0.0.0.0"
    log_level: str = "INFO"

    @field_validator("redis_url")
    @classmethod
    def _redis_url_scheme(cls, value: str) -> str:
        # every form of sendgroup_worker.redisurl; the message never repeats the URL (password)
        try:
            return redisurl.check(value)
        except redisurl.RedisUrlError as exc:
            raise ValueError(redisurl.redact(str(exc), value)) from None

    @field_validator("backpressure_patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"BACKPRESSURE_PATTERNS: bad regex {pattern!r}: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _ladder(self) -> WorkerConfig:
        if not self.timeout < self.retry_after:
            raise ValueError(
                f"WORKER_TIMEOUT ({self.timeout:g}s) must be smaller than WORKER_RETRY_AFTER "
                f"({self.retry_after:g}s), or a job still running is handed to a second worker"
            )
        return self

    # --- derived values ----------------------------------------------------------------
    @property
    def burst(self) -> int | None:
        """Configured burst, default ``ceil(perMinute / 60)``; None when unlimited."""
        if self.rate_per_minute is None:
            return None
        return self.rate_burst or max(1, math.ceil(self.rate_per_minute / 60))

    @property
    def smtp_command_timeout(self) -> float:
        """SMTP per-command timeout, kept below the job timeout (the ladder's first rung)."""
        return min(self.smtp_timeout, self.timeout * 0.9)

    @property
    def outcome_stream_key(self) -> str | None:
        """The outcome stream's key with the prefix, None when off (maxlen 0)."""
        if self.outcome_stream_maxlen == 0:
            return None
        if self.outcome_stream:
            return self.key_prefix + self.outcome_stream
        return loopback.outcome_stream_key(self.namespace, self.key_prefix)

    @property
    def suppression_set_key(self) -> str | None:
        """The suppression set's key with the prefix, None when ``SUPPRESSION_SET=off``."""
        if self.suppression_set == "off":
            return None
        if self.suppression_set:
            return self.key_prefix + self.suppression_set
        return loopback.suppression_set_key(self.namespace, self.key_prefix)

    def patterns(self) -> list[re.Pattern[str]]:
        """The backpressure regexes, compiled (case-insensitive)."""
        return [re.compile(p, re.IGNORECASE) for p in self.backpressure_patterns]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerConfig:
        """Read :data:`ENV_VARS` from ``environ`` (default ``os.environ``).

        Raises :class:`ConfigError` with every problem, naming the variables.
        """
        env = os.environ if environ is None else environ
        raw: dict[str, object] = {}

        def get(name: str) -> str | None:
            file_name = env.get(f"{name}_FILE")
            if file_name:
                try:
                    return Path(file_name).read_text().strip()
                except OSError as exc:
                    raise ConfigError(
                        f"{name}_FILE: cannot read {file_name}: {exc.strerror or exc}"
                    ) from None
            value = env.get(name)
            return value if value not in (None, "") else None

        simple = {
            "SENDGROUP_QUEUE": "queue",
            "REDIS_URL": "redis_url",
            "SMTP_HOST": "smtp_host",
            "SMTP_PORT": "smtp_port",
            "SMTP_TLS": "smtp_tls",
            "SMTP_CA_FILE": "smtp_ca_file",
            "SMTP_USERNAME": "smtp_username",
            "SMTP_PASSWORD": "smtp_password",
            "SMTP_HELO_NAME": "smtp_helo_name",
            "WORKER_TRIES": "tries",
            "WORKER_CONCURRENCY": "concurrency",
            "WORKER_MAX_JOBS": "max_jobs",
            "WORKER_REDIS_WAIT_REPLICAS": "redis_wait_replicas",
            "RATE_PER_MINUTE": "rate_per_minute",
            "RATE_BURST": "rate_burst",
            "WARMUP_START_PER_HOUR": "warmup_start_per_hour",
            "WARMUP_GROWTH_PER_DAY": "warmup_growth_per_day",
            "BACKPRESSURE_SUSPEND_AFTER": "backpressure_suspend_after",
            "SENDGROUP_NAMESPACE": "namespace",
            "SENDGROUP_NAME": "group",
            "OUTCOME_STREAM": "outcome_stream",
            "OUTCOME_STREAM_MAXLEN": "outcome_stream_maxlen",
            "SUPPRESSION_SET": "suppression_set",
            "METRICS_PORT": "metrics_port",
            "METRICS_HOST": "metrics_host",
            "LOG_LEVEL": "log_level",
        }
        durations = {
            "SMTP_TIMEOUT": "smtp_timeout",
            "WORKER_TIMEOUT": "timeout",
            "WORKER_RETRY_AFTER": "retry_after",
            "WORKER_MAX_TIME": "max_time",
            "WORKER_BLOCK_FOR": "block_for",
            "WORKER_REDIS_WAIT_TIMEOUT": "redis_wait_timeout",
            "BACKPRESSURE_SUSPEND_FOR": "backpressure_suspend_for",
        }
        problems: list[str] = []
        try:
            raw["key_prefix"] = key_prefix_from_env(env)
        except ConfigError as exc:
            problems.append(str(exc))
        for var, field in simple.items():
            value = get(var)
            if value is not None:
                raw[field] = value
        for var, field in durations.items():
            value = get(var)
            if value is not None:
                try:
                    raw[field] = parse_duration(value)
                except ValueError as exc:
                    problems.append(f"{var}: {exc}")
        backoff = get("WORKER_BACKOFF")
        if backoff is not None:
            try:
                raw["backoff"] = parse_backoff(backoff)
            except ValueError as exc:
                problems.append(f"WORKER_BACKOFF: {exc}")
        since = get("WARMUP_SINCE")
        if since is not None:
            try:
                raw["warmup_since"] = parse_time(since)
            except ValueError as exc:
                problems.append(f"WARMUP_SINCE: {exc}")
        patterns = env.get("BACKPRESSURE_PATTERNS")
        if patterns:
            raw["backpressure_patterns"] = _parse_patterns(patterns)
        if problems:
            raise ConfigError("; ".join(problems))
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            lines = []
            for err in exc.errors():
                where = ".".join(str(p) for p in err["loc"]) or "config"
                lines.append(f"{_var_for(where)}: {err['msg']}")
            raise ConfigError("; ".join(lines)) from None


def parse_time(value: str) -> datetime:
    """A point in time from ISO 8601 (``2026-11-30T00:00:00Z``) or unix seconds (UTC)."""
    text = value.strip()
    try:
        return datetime.fromtimestamp(float(text), tz=UTC)
    except ValueError:
        pass
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _parse_patterns(text: str) -> list[str]:
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            loaded = json.loads(stripped)
        except ValueError as exc:
            raise ConfigError(f"BACKPRESSURE_PATTERNS: not a JSON list: {exc}") from None
        if not isinstance(loaded, list) or not all(isinstance(p, str) for p in loaded):
            raise ConfigError("BACKPRESSURE_PATTERNS: a JSON list of strings is expected")
        return list(loaded)
    return [line.strip() for line in stripped.splitlines() if line.strip()]


_FIELD_TO_VAR: Final = {
    "queue": "SENDGROUP_QUEUE",
    "tries": "WORKER_TRIES",
    "timeout": "WORKER_TIMEOUT",
    "retry_after": "WORKER_RETRY_AFTER",
    "concurrency": "WORKER_CONCURRENCY",
    "max_jobs": "WORKER_MAX_JOBS",
    "backoff": "WORKER_BACKOFF",
    "redis_url": "REDIS_URL",
    "redis_wait_replicas": "WORKER_REDIS_WAIT_REPLICAS",
    "redis_wait_timeout": "WORKER_REDIS_WAIT_TIMEOUT",
}


def _var_for(field: str) -> str:
    if field in _FIELD_TO_VAR:
        return _FIELD_TO_VAR[field]
    return field.upper()


def env_help() -> str:
    """The table of :data:`ENV_VARS` as plain text (for ``--help-env`` and the README)."""
    width = max(len(name) for name, _, _ in ENV_VARS)
    return "\n".join(f"{name:<{width}}  {default:<20}  {text}" for name, default, text in ENV_VARS)
