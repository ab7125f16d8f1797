"""The worker's settings: ONE table of (field, environment variable, kind, default, doc).

The operator's builder (``sendgroup_operator.builders.worker_env``) writes these variables on
the worker container by their :attr:`WorkerSetting.env`; the worker's loader
(``sendgroup_worker.config.WorkerConfig.from_env``) reads every row into the field of the same
:attr:`WorkerSetting.field`, parsing it by :attr:`WorkerSetting.kind`; ``sendgroup-worker work
--help-env`` prints the table. Renaming a variable is an edit here, and both sides follow.

Kinds (what the text of the variable holds):

* ``str``, ``int``, ``float``: as written; ``tls``: a :class:`~sendgroup_contract.tls.SmtpTls`;
* ``bool``: ``on``/``off`` (also ``true``/``false``, ``yes``/``no``, ``1``/``0``);
* ``duration``: seconds (``90``, ``1.5``) or a duration like ``10m``, ``1h30m``
  (:func:`sendgroup_contract.durations.parse_env_seconds`);
* ``backoff``: Laravel's comma-joined seconds (``10,60,300``) or a JSON list;
* ``time``: ISO 8601 or unix seconds (:func:`sendgroup_contract.timestamps.parse_time`);
* ``patterns``: a JSON list of regexes or one regex per line;
* ``lanes``: ``auto`` or a whole number (:func:`parse_lanes`);
* ``provider``: the JSON of ``sendgroup_worker.provider.ProviderConfig`` (the group's provider,
  built by the operator from a SendProvider/ClusterSendProvider).

``secret``: the variable may also be given as ``<NAME>_FILE`` (a mounted Secret's path; the file
wins). ``deprecated``: older names still read for one release (the new name wins).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Kind = Literal[
    "str",
    "int",
    "float",
    "bool",
    "tls",
    "duration",
    "backoff",
    "time",
    "patterns",
    "provider",
    "lanes",
]


#: The ``lanes`` value that lets the worker tune its lane count (``WORKER_CONCURRENCY``).
AUTO: Final = "auto"


def parse_lanes(text: str) -> int | None:
    """A ``lanes`` value: ``auto`` (any case, spaces around allowed) -> None, else the whole
    number written (its range is the reader's to check). Raises ValueError naming the text."""
    value = text.strip()
    if value.lower() == AUTO:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{text!r} is neither {AUTO!r} nor a whole number") from None


@dataclass(frozen=True, slots=True)
class WorkerSetting:
    """One row of :data:`WORKER_SETTINGS` (see the module docstring)."""

    field: str
    env: str
    kind: Kind
    default: str
    doc: str
    secret: bool = False
    deprecated: tuple[str, ...] = ()

    @property
    def shown(self) -> str:
        """The variable as documented: ``REDIS_URL / REDIS_URL_FILE`` for secrets."""
        return f"{self.env} / {self.env}_FILE" if self.secret else self.env


QUEUE: Final = WorkerSetting(
    "queue", "SENDGROUP_QUEUE", "str", "required", "queue name (keys queues:<queue>...)"
)
KEY_PREFIX: Final = WorkerSetting(
    "key_prefix",
    "SENDGROUP_KEY_PREFIX",
    "str",
    '""',
    "client-side key prefix, e.g. laravel_database_ (QUEUE_PREFIX: deprecated alias)",
    deprecated=("QUEUE_PREFIX",),
)
REDIS_URL: Final = WorkerSetting(
    "redis_url",
    "REDIS_URL",
    "str",
    "redis://127.0.0.1:6379/0",
    "Redis URL (password inside): "
    "redis[s]://, redis[s]+cluster://h1:p,h2:p/, redis[s]+sentinel://s1:p,s2:p/<master>",
    secret=True,
)
REDIS_WAIT_REPLICAS: Final = WorkerSetting(
    "redis_wait_replicas",
    "WORKER_REDIS_WAIT_REPLICAS",
    "int",
    "0",
    "WAIT for this many replicas after each ack/release/"
    "fail (durable against a primary loss; 0 = asynchronous replication)",
)
REDIS_WAIT_TIMEOUT: Final = WorkerSetting(
    "redis_wait_timeout",
    "WORKER_REDIS_WAIT_TIMEOUT",
    "duration",
    "1",
    "longest WAIT, seconds; then a warning and go on",
)
SMTP_HOST: Final = WorkerSetting("smtp_host", "SMTP_HOST", "str", "127.0.0.1", "SMTP relay host")
SMTP_PORT: Final = WorkerSetting("smtp_port", "SMTP_PORT", "int", "25", "SMTP relay port")
SMTP_TLS: Final = WorkerSetting(
    "smtp_tls", "SMTP_TLS", "tls", "none", "none | starttls | tls (implicit TLS)"
)
SMTP_CA_FILE: Final = WorkerSetting(
    "smtp_ca_file",
    "SMTP_CA_FILE",
    "str",
    "system CAs",
    "PEM bundle that verifies the relay's certificate",
)
SMTP_USERNAME: Final = WorkerSetting(
    "smtp_username", "SMTP_USERNAME", "str", "none", "AUTH user (optional)", secret=True
)
SMTP_PASSWORD: Final = WorkerSetting(
    "smtp_password", "SMTP_PASSWORD", "str", "none", "AUTH password (optional)", secret=True
)
SMTP_TIMEOUT: Final = WorkerSetting(
    "smtp_timeout",
    "SMTP_TIMEOUT",
    "duration",
    "30",
    "seconds per SMTP command; clamped below the job timeout",
)
SMTP_HELO_NAME: Final = WorkerSetting(
    "smtp_helo_name", "SMTP_HELO_NAME", "str", "host name", "name sent in EHLO"
)
SMTP_PIPELINING: Final = WorkerSetting(
    "smtp_pipelining",
    "SMTP_PIPELINING",
    "bool",
    "on",
    "on: MAIL, RCPTs and DATA sent as one group when the relay offers PIPELINING (RFC 2920); "
    "off: one command per round trip",
)
TRIES: Final = WorkerSetting(
    "tries", "WORKER_TRIES", "int", "3", "max attempts per job (payload maxTries wins)"
)
BACKOFF: Final = WorkerSetting(
    "backoff",
    "WORKER_BACKOFF",
    "backoff",
    "10,60,300",
    "seconds before retry n; the last value repeats",
)
TIMEOUT: Final = WorkerSetting(
    "timeout",
    "WORKER_TIMEOUT",
    "duration",
    "60",
    "one job's time limit, seconds (payload timeout wins)",
)
RETRY_AFTER: Final = WorkerSetting(
    "retry_after",
    "WORKER_RETRY_AFTER",
    "duration",
    "90",
    "reservation lifetime, seconds; must be > WORKER_TIMEOUT",
)
CONCURRENCY: Final = WorkerSetting(
    "concurrency",
    "WORKER_CONCURRENCY",
    "lanes",
    AUTO,
    "lanes per process (sends in flight, one SMTP connection each): auto = start at 16 and "
    "tune from the relay's answers, up to WORKER_CONCURRENCY_MAX (which also caps the start); "
    "or a fixed number 1-256",
)
CONCURRENCY_MAX: Final = WorkerSetting(
    "concurrency_max",
    "WORKER_CONCURRENCY_MAX",
    "int",
    "32",
    "ceiling of WORKER_CONCURRENCY=auto, lanes (1-256)",
)
MAX_JOBS: Final = WorkerSetting(
    "max_jobs", "WORKER_MAX_JOBS", "int", "0", "exit 0 after this many jobs (0 = never)"
)
MAX_TIME: Final = WorkerSetting(
    "max_time",
    "WORKER_MAX_TIME",
    "duration",
    "0",
    "exit 0 after this long, seconds/duration (0 = never)",
)
BLOCK_FOR: Final = WorkerSetting(
    "block_for",
    "WORKER_BLOCK_FOR",
    "duration",
    "5",
    "idle BLPOP timeout on the notify list, seconds",
)
RESERVE_BATCH: Final = WorkerSetting(
    "reserve_batch",
    "WORKER_RESERVE_BATCH",
    "int",
    "32",
    "jobs a lane reserves per queue call (1-1000; 1 with a provider)",
)
RATE_PER_MINUTE: Final = WorkerSetting(
    "rate_per_minute",
    "RATE_PER_MINUTE",
    "int",
    "unlimited",
    "messages per minute for the whole group",
)
RATE_BURST: Final = WorkerSetting(
    "rate_burst", "RATE_BURST", "int", "ceil(perMinute/60)", "messages allowed at once"
)
WARMUP_START_PER_HOUR: Final = WorkerSetting(
    "warmup_start_per_hour",
    "WARMUP_START_PER_HOUR",
    "int",
    "none",
    "warm-up: allowed per hour on day 0",
)
WARMUP_GROWTH_PER_DAY: Final = WorkerSetting(
    "warmup_growth_per_day",
    "WARMUP_GROWTH_PER_DAY",
    "float",
    "2.0",
    "warm-up: factor per day since WARMUP_SINCE",
)
WARMUP_SINCE: Final = WorkerSetting(
    "warmup_since",
    "WARMUP_SINCE",
    "time",
    "process start",
    "warm-up start, ISO 8601 or unix seconds",
)
BACKPRESSURE_SUSPEND_AFTER: Final = WorkerSetting(
    "backpressure_suspend_after",
    "BACKPRESSURE_SUSPEND_AFTER",
    "int",
    "20",
    "temporary failures in a row that suspend the group",
)
BACKPRESSURE_SUSPEND_FOR: Final = WorkerSetting(
    "backpressure_suspend_for",
    "BACKPRESSURE_SUSPEND_FOR",
    "duration",
    "10m",
    "how long a suspension lasts",
)
BACKPRESSURE_PATTERNS: Final = WorkerSetting(
    "backpressure_patterns",
    "BACKPRESSURE_PATTERNS",
    "patterns",
    "none",
    "JSON list or one regex per line; a 4xx match suspends",
)
MAIL_MAX_BYTES: Final = WorkerSetting(
    "mail_max_bytes",
    "MAIL_MAX_BYTES",
    "int",
    "10485760",
    "largest message per job, bytes; larger: InvalidMailData",
)
MAIL_MAX_RECIPIENTS: Final = WorkerSetting(
    "mail_max_recipients",
    "MAIL_MAX_RECIPIENTS",
    "int",
    "100",
    "most recipients (to+cc+bcc) per job; more: InvalidMailData",
)
NAMESPACE: Final = WorkerSetting(
    "namespace",
    "SENDGROUP_NAMESPACE",
    "str",
    "default",
    "namespace: names the outcome stream and suppression set",
)
GROUP: Final = WorkerSetting(
    "group",
    "SENDGROUP_NAME",
    "str",
    '""',
    "the SendGroup's name (field group of outcome entries; the `sendgroup` metric label, "
    "else the queue name)",
)
OUTCOME_STREAM: Final = WorkerSetting(
    "outcome_stream",
    "OUTCOME_STREAM",
    "str",
    "sendgroups:<ns>:outcomes",
    "outcome stream key (key prefix applied)",
)
OUTCOME_STREAM_MAXLEN: Final = WorkerSetting(
    "outcome_stream_maxlen",
    "OUTCOME_STREAM_MAXLEN",
    "int",
    "100000",
    "outcome stream cap, entries (MAXLEN ~); 0 = off",
)
SUPPRESSION_SET: Final = WorkerSetting(
    "suppression_set",
    "SUPPRESSION_SET",
    "str",
    "sendgroups:<ns>:suppressed",
    "suppression set key; off = no check",
)
PROVIDER: Final = WorkerSetting(
    "provider",
    "SENDGROUP_PROVIDER",
    "provider",
    "none",
    "JSON: the provider whose shared budget the group sends under (set by the operator)",
)
PROVIDER_REDIS_URL: Final = WorkerSetting(
    "provider_redis_url",
    "PROVIDER_REDIS_URL",
    "str",
    "REDIS_URL",
    "Redis of the provider's shared state, the same for every group of the provider (the "
    "operator always sets it: the provider's spec.redis, else the operator's defaultRedisUrl; "
    "unset, by hand: REDIS_URL)",
    secret=True,
)
METRICS_PORT: Final = WorkerSetting(
    "metrics_port", "METRICS_PORT", "int", "9090", "Prometheus metrics port (0 = off)"
)
METRICS_HOST: Final = WorkerSetting(
    "metrics_host", "METRICS_HOST", "str", "0.0.0.0", "address the metrics server binds"
)
HEALTH_PORT: Final = WorkerSetting(
    "health_port",
    "HEALTH_PORT",
    "int",
    "8080",
    "/livez and /readyz port for the kubelet's probes (0 = off)",
)
HEALTH_HOST: Final = WorkerSetting(
    "health_host", "HEALTH_HOST", "str", "0.0.0.0", "address the health server binds"
)
STALL_AFTER: Final = WorkerSetting(
    "stall_after",
    "WORKER_STALL_AFTER",
    "duration",
    "30",
    "liveness: event loop silent (or a job over its limit) this long",
)
LOG_LEVEL: Final = WorkerSetting(
    "log_level", "LOG_LEVEL", "str", "INFO", "DEBUG, INFO, WARNING, ERROR"
)

#: Every worker setting, in documentation order.
WORKER_SETTINGS: Final = (
    QUEUE,
    KEY_PREFIX,
    REDIS_URL,
    REDIS_WAIT_REPLICAS,
    REDIS_WAIT_TIMEOUT,
    SMTP_HOST,
    SMTP_PORT,
    SMTP_TLS,
    SMTP_CA_FILE,
    SMTP_USERNAME,
    SMTP_PASSWORD,
    SMTP_TIMEOUT,
    SMTP_HELO_NAME,
    SMTP_PIPELINING,
    TRIES,
    BACKOFF,
    TIMEOUT,
    RETRY_AFTER,
    CONCURRENCY,
    CONCURRENCY_MAX,
    MAX_JOBS,
    MAX_TIME,
    BLOCK_FOR,
    RESERVE_BATCH,
    RATE_PER_MINUTE,
    RATE_BURST,
    WARMUP_START_PER_HOUR,
    WARMUP_GROWTH_PER_DAY,
    WARMUP_SINCE,
    BACKPRESSURE_SUSPEND_AFTER,
    BACKPRESSURE_SUSPEND_FOR,
    BACKPRESSURE_PATTERNS,
    MAIL_MAX_BYTES,
    MAIL_MAX_RECIPIENTS,
    NAMESPACE,
    GROUP,
    OUTCOME_STREAM,
    OUTCOME_STREAM_MAXLEN,
    SUPPRESSION_SET,
    PROVIDER,
    PROVIDER_REDIS_URL,
    METRICS_PORT,
    METRICS_HOST,
    HEALTH_PORT,
    HEALTH_HOST,
    STALL_AFTER,
    LOG_LEVEL,
)

#: The row of each field name.
BY_FIELD: Final = {s.field: s for s in WORKER_SETTINGS}
