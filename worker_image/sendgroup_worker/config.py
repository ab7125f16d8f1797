"""The worker's settings, read from environment variables (the operator sets them on the pod).

Every variable, its field, kind, default and meaning is a row of
:data:`sendgroup_contract.worker_settings.WORKER_SETTINGS` (also printed by
``sendgroup-worker work --help-env``); the operator's builder writes the same rows. Durations
accept seconds (``90``) or the CRD's duration language (``10m``, ``1h30m``). ``*_FILE`` variants
read the value from a file, the way a Kubernetes Secret is mounted; the file wins over the
plain variable.

Timeout ladder (Laravel's, see the seeds): SMTP client timeout < job ``timeout`` <
``retry_after`` < the pod's termination grace period. ``timeout < retry_after`` is enforced here
(the CRD enforces it too), the SMTP timeout is clamped below the job timeout.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Final

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from sendgroup_contract import durations, timestamps
from sendgroup_contract import worker_settings as ws
from sendgroup_contract.tls import SmtpTls
from sendgroup_worker import lanes, loopback, patterns, redisurl
from sendgroup_worker.keyprefix import ConfigError as ConfigError  # its home is light
from sendgroup_worker.keyprefix import key_prefix_from_env
from sendgroup_worker.provider import ProviderConfig

#: (variable, default shown to users, meaning), in documentation order: a view of the one
#: table, :data:`sendgroup_contract.worker_settings.WORKER_SETTINGS`.
ENV_VARS: Final[tuple[tuple[str, str, str], ...]] = tuple(
    (setting.shown, setting.default, setting.doc) for setting in ws.WORKER_SETTINGS
)


#: Default ``maxTries`` of a job that does not carry one: the worker's ``WORKER_TRIES`` default,
#: and what our producers write into every payload so that Laravel's ``queue:work`` (whose own
#: default is ``--tries=1``) and this worker allow the same number of attempts on one queue.
DEFAULT_TRIES: Final = 3

#: Seconds from ``90``, ``"1.5"``, ``"10m"``, ``"1h30m"`` (the contract's one parser).
parse_duration: Final = durations.parse_env_seconds


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
    smtp_tls: SmtpTls = SmtpTls.NONE
    smtp_ca_file: str | None = None
    smtp_username: str | None = None
    smtp_password: str | None = Field(None, repr=False)
    smtp_timeout: float = Field(30.0, gt=0)
    smtp_helo_name: str | None = None
    smtp_pipelining: bool = True

    tries: int = Field(DEFAULT_TRIES, ge=1, le=100)
    backoff: list[float] = Field(default_factory=lambda: [10.0, 60.0, 300.0])
    timeout: float = Field(60.0, gt=0)
    retry_after: float = Field(90.0, gt=0)
    #: lanes per process; None = auto (:mod:`sendgroup_worker.lanes` tunes the count, from
    #: :data:`~sendgroup_worker.lanes.START_LANES` up to ``concurrency_max``)
    concurrency: int | None = Field(None, ge=1, le=256)
    concurrency_max: int = Field(32, ge=1, le=256)
    max_jobs: int = Field(0, ge=0)
    max_time: float = Field(0.0, ge=0)
    block_for: float = Field(5.0, gt=0)
    reserve_batch: int = Field(32, ge=1, le=1000)
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
    mail_max_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    mail_max_recipients: int = Field(100, ge=1, le=100_000)

    provider: ProviderConfig | None = None
    provider_redis_url: str | None = None

    metrics_port: int = Field(9090, ge=0, le=65535)
    metrics_host: str = "0.0.0.0"
    health_port: int = Field(8080, ge=0, le=65535)
    health_host: str = "0.0.0.0"
    stall_after: float = Field(30.0, gt=0)
    log_level: str = "INFO"

    @field_validator("redis_url", "provider_redis_url")
    @classmethod
    def _redis_url_scheme(cls, value: str | None) -> str | None:
        # every form of sendgroup_worker.redisurl; the message never repeats the URL (password)
        if value is None:
            return None
        try:
            return redisurl.check(value)
        except redisurl.RedisUrlError as exc:
            raise ValueError(redisurl.redact(str(exc), value)) from None

    @field_validator("concurrency", mode="before")
    @classmethod
    def _lanes_auto(cls, value: object) -> object:
        # "auto" as written in WORKER_CONCURRENCY, also when the model is built directly
        return ws.parse_lanes(value) if isinstance(value, str) else value

    @field_validator("backpressure_patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                patterns.compile_pattern(pattern)
            except patterns.PatternError as exc:
                raise ValueError(f"BACKPRESSURE_PATTERNS: {exc}") from None
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
    def auto_lanes(self) -> bool:
        """Whether the lane count is tuned while running (``WORKER_CONCURRENCY=auto``)."""
        return self.concurrency is None

    @property
    def max_lanes(self) -> int:
        """Most lanes this process may run: the fixed ``WORKER_CONCURRENCY``; with auto,
        ``WORKER_CONCURRENCY_MAX``, and never more than the provider's concurrency (its
        SMTP transactions in flight across all its groups) when one is set."""
        if self.concurrency is not None:
            return self.concurrency
        cap = self.provider.concurrency if self.provider is not None else None
        return min(self.concurrency_max, cap or self.concurrency_max)

    @property
    def start_lanes(self) -> int:
        """Lanes at start: the fixed count, or with auto
        :data:`~sendgroup_worker.lanes.START_LANES` (16) within :attr:`max_lanes`."""
        if self.concurrency is not None:
            return self.concurrency
        return min(lanes.START_LANES, self.max_lanes)

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

    def patterns(self) -> list[patterns.Pattern]:
        """The backpressure regexes, compiled by RE2 (case-insensitive, linear time)."""
        return [patterns.compile_pattern(p) for p in self.backpressure_patterns]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerConfig:
        """Read :data:`ENV_VARS` from ``environ`` (default ``os.environ``).

        Raises :class:`ConfigError` with every problem, naming the variables.
        """
        env = os.environ if environ is None else environ
        raw: dict[str, object] = {}

        def get(setting: ws.WorkerSetting) -> str | None:
            # The current name before the deprecated ones; for each, ``<NAME>_FILE`` (documented
            # for the secrets, read for every variable) wins over the plain variable.
            for name in (setting.env, *setting.deprecated):
                file_name = env.get(f"{name}_FILE")
                if file_name:
                    try:
                        return Path(file_name).read_text().strip()
                    except OSError as exc:
                        raise ConfigError(
                            f"{name}_FILE: cannot read {file_name}: {exc.strerror or exc}"
                        ) from None
                value = env.get(name)
                if value not in (None, ""):
                    return value
            return None

        problems: list[str] = []
        try:
            raw["key_prefix"] = key_prefix_from_env(env)  # its alias rule: see the function
        except ConfigError as exc:
            problems.append(str(exc))
        for setting in ws.WORKER_SETTINGS:
            if setting is ws.KEY_PREFIX:
                continue
            value = get(setting)
            if value is None:
                continue
            parse = _PARSERS.get(setting.kind)
            if parse is None:
                raw[setting.field] = value
                continue
            try:
                raw[setting.field] = parse(value)
            except ValueError as exc:
                problems.append(f"{setting.env}: {exc}")
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


#: A point in time from ISO 8601 or unix seconds (the contract's one parser).
parse_time: Final = timestamps.parse_time


def _parse_patterns(text: str) -> list[str]:
    """A JSON list of strings, or one pattern per non-blank line. Raises ValueError."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            loaded = json.loads(stripped)
        except ValueError as exc:
            raise ValueError(f"not a JSON list: {exc}") from None
        if not isinstance(loaded, list) or not all(isinstance(p, str) for p in loaded):
            raise ValueError("a JSON list of strings is expected")
        return list(loaded)
    return [line.strip() for line in stripped.splitlines() if line.strip()]


#: How each kind of :data:`~sendgroup_contract.worker_settings.WORKER_SETTINGS` row is parsed
#: before validation (``str``, ``int``, ``float``, ``bool`` and ``tls`` are left to pydantic).
_PARSERS: Final[dict[str, Callable[[str], object]]] = {
    "duration": parse_duration,
    "backoff": lambda text: parse_backoff(text),
    "time": parse_time,
    "patterns": _parse_patterns,
    "provider": ProviderConfig.model_validate_json,
    "lanes": ws.parse_lanes,
}


def _var_for(field: str) -> str:
    setting = ws.BY_FIELD.get(field)
    return setting.env if setting is not None else field.upper()


def env_help() -> str:
    """The table of :data:`ENV_VARS` as plain text (for ``--help-env`` and the README)."""
    width = max(len(name) for name, _, _ in ENV_VARS)
    return "\n".join(f"{name:<{width}}  {default:<20}  {text}" for name, default, text in ENV_VARS)
