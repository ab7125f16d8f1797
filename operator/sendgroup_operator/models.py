"""The SendGroup API as pydantic v2 models: the one source of truth for the CRD.

``crds/sendgroups.yaml`` is generated from these classes by :mod:`sendgroup_operator.crdgen`
(a unit test checks that regenerating gives the committed file). Field names are the
camelCase names of ``docs/api.md`` (the contract); Python attributes are snake_case with
camelCase aliases. CEL rules (``x-kubernetes-validations``) live next to the field they guard,
each with a message that names the rule, so the API server's rejection says what to fix.

Units: durations are strings like ``30m``/``90s``/``1h30m`` (see :mod:`durations`); every
other time is integer seconds; counts are jobs.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

GROUP: Final = "sendgroups.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "SendGroup"
PLURAL: Final = "sendgroups"
SINGULAR: Final = "sendgroup"
SHORT_NAMES: Final = ("sg",)
CATEGORIES: Final = ("mail",)

#: Upper bound of ``spec.workers`` written into the CRD (operator setting ``maxWorkersPerGroup``
#: defaults to the same value; the operator also clamps to its own setting at run time).
MAX_WORKERS_PER_GROUP_DEFAULT: Final = 50

#: Well-formed duration: one or more ``<digits><unit>`` with unit s, m, h or d (``1h30m``).
DURATION_PATTERN: Final = r"^([0-9]+(s|m|h|d))+$"


def _cel(rule: str, message: str, **extra: str) -> dict[str, str]:
    return {"rule": rule, "message": message, **extra}


def _validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


def _duration_rule(field: str) -> dict[str, Any]:
    return _validations(
        _cel(
            f"self.matches('{DURATION_PATTERN}')",
            f"{field} must be a duration like 90s, 30m, 1h30m or 2d "
            f"(rule: duration well-formed, {DURATION_PATTERN})",
        )
    )


#: A Kubernetes quantity (``100m``, ``64Mi``, ``1``): int or string, as core/v1 declares it.
Quantity = Annotated[
    int | str,
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
            r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
        }
    ),
]


class _Model(BaseModel):
    """Base: camelCase aliases, accept both names, ignore unknown fields (forward compatible:
    an older operator reading a newer object must not crash)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=False
    )


class State(StrEnum):
    """`spec.state`: Active, then Completed or Cancelled; Cancelled is final."""

    ACTIVE = "Active"
    COMPLETED = "Completed"
    CANCELLED = "Cancelled"


class DeletionPolicy(StrEnum):
    """What ``kubectl delete`` does with the queue's keys and dumps."""

    PURGE = "Purge"
    RETAIN = "Retain"


class SmtpTls(StrEnum):
    NONE = "none"
    STARTTLS = "starttls"
    TLS = "tls"


class Phase(StrEnum):
    """`status.phase`: a summary for humans, derived from the conditions."""

    PENDING = "Pending"
    RUNNING = "Running"
    PAUSED = "Paused"
    DUMPING = "Dumping"
    DUMPED = "Dumped"
    RESTORING = "Restoring"
    IDLE = "Idle"
    COMPLETED = "Completed"
    CANCELLED = "Cancelled"
    FAILED = "Failed"


class SecretKeyRef(_Model):
    """A key of a Secret in the SendGroup's namespace."""

    name: str = Field(min_length=1, max_length=253)
    key: str = Field(min_length=1, max_length=253)


class RedisSpec(_Model):
    """Which Redis holds the queue: a password-less URL, or a Secret holding the full URL."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "!(has(self.url) && has(self.secretRef))",
                "redis: set either redis.url or redis.secretRef, not both",
            )
        )
    )

    url: str | None = Field(
        default=None,
        max_length=2048,
        json_schema_extra=_validations(
            _cel(
                "self.startsWith('redis://') || self.startsWith('rediss://')",
                "redis.url must start with redis:// or rediss://",
            ),
            _cel(
                "!self.matches('^rediss?://[^/@]*:[^/@]*@')",
                "redis.url must not contain a password: put the full URL in a Secret and "
                "reference it with redis.secretRef (rule: no password in redis.url)",
            ),
        ),
    )
    secret_ref: SecretKeyRef | None = None


class ResourceRequirements(_Model):
    """core/v1 ResourceRequirements (limits and requests only)."""

    limits: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None


class WorkerSpec(_Model):
    """How each worker runs jobs. ``timeout < retryAfter`` is enforced by the API server."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "self.timeout < self.retryAfter",
                "worker.timeout must be less than worker.retryAfter (rule: timeout < "
                "retryAfter), otherwise a job still running is handed to a second worker",
            )
        )
    )

    image: str | None = Field(default=None, min_length=1, max_length=1024)
    tries: int = Field(default=3, ge=1, le=100)
    backoff: list[Annotated[int, Field(ge=0, le=86400)]] = Field(
        default_factory=lambda: [10, 60, 300],
        min_length=1,
        max_length=20,
        json_schema_extra={"default": [10, 60, 300]},
    )
    timeout: int = Field(default=60, ge=1, le=3600)
    retry_after: int = Field(default=90, ge=2, le=86400)
    resources: ResourceRequirements | None = None


class RateSpec(_Model):
    """Messages per minute for the whole group, shared by all its workers."""

    per_minute: int | None = Field(default=None, ge=1)
    burst: int | None = Field(default=None, ge=1)


class WarmupSpec(_Model):
    """Ramp for a new sender domain: starts at ``startPerHour``, times ``growthPerDay`` a day."""

    start_per_hour: int | None = Field(default=None, ge=1)
    growth_per_day: float = Field(default=2.0, gt=1)
    since: datetime | None = None


class BackpressureSpec(_Model):
    """Suspend the group after a run of temporary failures from the provider."""

    suspend_after: int = Field(default=20, ge=1)
    suspend_for: str = Field(
        default="10m", max_length=32, json_schema_extra=_duration_rule("backpressure.suspendFor")
    )
    patterns: list[Annotated[str, Field(max_length=512)]] | None = Field(
        default=None, max_length=50
    )


class SmtpSecretRef(_Model):
    """A Secret in the SendGroup's namespace with the relay's username and password."""

    name: str = Field(min_length=1, max_length=253)
    username_key: str = Field(default="username", min_length=1, max_length=253)
    password_key: str = Field(default="password", min_length=1, max_length=253)


class SmtpSpec(_Model):
    """The relay the workers send through; credentials only from a Secret."""

    host: str | None = Field(default=None, min_length=1, max_length=253)
    port: int | None = Field(default=None, ge=1, le=65535)
    tls: SmtpTls | None = None
    secret_ref: SmtpSecretRef | None = None


class ReaperSpec(_Model):
    """The reaper's clocks: how long an empty queue keeps workers, a paused queue its keys."""

    idle_after: str = Field(
        default="30m", max_length=32, json_schema_extra=_duration_rule("reaper.idleAfter")
    )
    dump_after: str = Field(
        default="30m", max_length=32, json_schema_extra=_duration_rule("reaper.dumpAfter")
    )


_QUEUE_RULES = _validations(
    _cel("self == oldSelf", "queue is immutable (rule: self == oldSelf)"),
)

_SPEC_RULES = _validations(
    _cel(
        "has(self.queue) == has(oldSelf.queue)",
        "queue is immutable: it cannot be added or removed after creation (rule: self == oldSelf)",
    ),
    _cel(
        "oldSelf.state != 'Cancelled' || self.state == 'Cancelled'",
        "state: no way back from Cancelled (rule: Cancelled is final)",
    ),
)


class SendGroupSpec(_Model):
    """``spec`` of a SendGroup (api.md, table "spec"). The operator never writes it."""

    model_config = ConfigDict(json_schema_extra=_SPEC_RULES)

    campaign: str = Field(min_length=1, max_length=63)
    host: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
        r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$",
    )
    queue: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9{}][A-Za-z0-9._:{}\-]{0,199}$",
        json_schema_extra=_QUEUE_RULES,
    )
    workers: int = Field(default=1, ge=0, le=MAX_WORKERS_PER_GROUP_DEFAULT)
    paused: bool = False
    state: State = State.ACTIVE
    redis: RedisSpec | None = None
    worker: WorkerSpec = Field(default_factory=WorkerSpec)
    rate: RateSpec | None = None
    warmup: WarmupSpec | None = None
    backpressure: BackpressureSpec = Field(default_factory=BackpressureSpec)
    smtp: SmtpSpec | None = None
    reaper: ReaperSpec = Field(default_factory=ReaperSpec)
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    deletion_policy: DeletionPolicy = DeletionPolicy.PURGE

    def queue_name(self, name: str) -> str:
        """The effective queue: ``spec.queue`` or ``mail-<metadata.name>``."""
        return self.queue if self.queue else f"mail-{name}"


# ----------------------------------------------------------------------------- status


class Condition(_Model):
    """A Kubernetes condition (metav1.Condition)."""

    type: str = Field(max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: datetime
    observed_generation: int | None = Field(default=None, ge=0)


class WorkersStatus(_Model):
    """Worker pods: desired by spec, ready, allowed by the global cap, and "ready/desired"."""

    desired: int = 0
    ready: int = 0
    allowed: int = 0
    summary: str = "0/0"


class QueueStatus(_Model):
    """One atomic measurement of the queue (jobs; ages in seconds)."""

    ready: int = 0
    delayed: int = 0
    reserved: int = 0
    failed: int = 0
    total: int = 0
    oldest_job_age_seconds: int | None = None
    oldest_job_pushed_at: datetime | None = None
    measured_at: datetime | None = None


class ProgressStatus(_Model):
    """From the workers' counters; ``percent = 100 * delivered / (delivered + failed + total)``."""

    delivered: int = 0
    failed: int = 0
    percent: float = 0.0


class DumpSegment(_Model):
    """One dump segment on the volume."""

    path: str
    bytes: int | None = None
    jobs: int = 0
    created_at: datetime | None = None
    redis_version: str | None = None


class DumpStatus(_Model):
    """What lies on the dumps volume for this group."""

    segments: list[DumpSegment] = Field(default_factory=list)
    total_jobs: int = 0


class OperationStatus(_Model):
    """A dump/restore/purge Job the operator started: kind, sequence number, Job name, and
    the measured queue total when it started (the baseline its outcome is judged against)."""

    kind: Literal["dump", "restore", "purge"]
    number: int = Field(ge=1)
    job_name: str
    started_at: datetime
    baseline_total: int = 0
    attempts: int = 1


class SendGroupStatus(_Model):
    """``status`` of a SendGroup (api.md, table "status"), written only by the operator."""

    observed_generation: int | None = None
    phase: Phase | None = None
    workers: WorkersStatus = Field(default_factory=WorkersStatus)
    queue: QueueStatus = Field(default_factory=QueueStatus)
    progress: ProgressStatus = Field(default_factory=ProgressStatus)
    idle_since: datetime | None = None
    unchanged_since: datetime | None = None
    dump: DumpStatus = Field(default_factory=DumpStatus)
    operation: OperationStatus | None = None
    operations_started: int = 0
    finished_at: datetime | None = None
    last_refresh: datetime | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )


class SendGroup(_Model):
    """The whole object as the operator reads it (metadata stays a plain mapping)."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SendGroupSpec
    status: SendGroupStatus = Field(default_factory=SendGroupStatus)
