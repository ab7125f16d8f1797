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

import copy
import hashlib
import re
from collections.abc import Callable
from datetime import date, datetime, timedelta
from enum import Enum, StrEnum
from typing import Annotated, Any, Final, Literal, TypeVar, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

# Defined by the contract, re-exported (``X as X``) for the CRD generator and the operator.
from sendgroup_contract import durations as _durations
from sendgroup_contract.durations import DURATION_PATTERN as DURATION_PATTERN
from sendgroup_contract.durations import ZERO_DURATION_PATTERN as ZERO_DURATION_PATTERN
from sendgroup_contract.keys import QUEUE_NAME_MAX
from sendgroup_contract.keys import QUEUE_NAME_PATTERN as QUEUE_NAME_PATTERN
from sendgroup_contract.tls import SmtpTls as SmtpTls
from sendgroup_operator import quantities
from sendgroup_operator.quantities import QUANTITY_INT_MAX as QUANTITY_INT_MAX
from sendgroup_operator.quantities import QUANTITY_PATTERN as QUANTITY_PATTERN
from sendgroup_worker import redisurl
from sendgroup_worker.patterns import PatternError, compile_pattern
from sendgroup_worker.redisurl import PASSWORD_PATTERNS, SPEC_URL_PATTERN, URL_SCHEME_PATTERN

GROUP: Final = "sendgroups.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "SendGroup"
PLURAL: Final = "sendgroups"
#: ``status`` field holding kopf's bookkeeping on every kind the operator watches (issue 15):
#: ``last-handled-configuration`` (its diff base: the spec, labels and annotations last handled,
#: as JSON), ``progress`` (a handler's retries, only while one is retried) and ``dummy`` (its
#: touch field). In status, kopf writes them in the same request as the operator's own status;
#: in annotations they cost a separate write of the object per new group.
KOPF_STATUS_FIELD: Final = "kopf"
#: the key of kopf's diff base, in ``status.kopf`` (kopf's default) and formerly in annotations
DIFFBASE_KEY: Final = "last-handled-configuration"
#: the annotation kopf kept its diff base in before (objects handled by an older operator)
LEGACY_DIFFBASE_ANNOTATION: Final = f"{GROUP}/{DIFFBASE_KEY}"
SINGULAR: Final = "sendgroup"
SHORT_NAMES: Final = ("sg",)
CATEGORIES: Final = ("mail",)

#: Upper bound of ``spec.workers`` written into the CRD (operator setting ``maxWorkersPerGroup``
#: defaults to the same value; the operator also clamps to its own setting at run time).
MAX_WORKERS_PER_GROUP_DEFAULT: Final = 50


def _cel(rule: str, message: str, **extra: str) -> dict[str, str]:
    return {"rule": rule, "message": message, **extra}


def _validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


def _duration_rule(field: str, positive: bool = False) -> dict[str, Any]:
    """CEL rules of a duration field: well-formed (:data:`DURATION_PATTERN`), at most 36500
    days (the contract's ``CAP_CEL``), and with ``positive`` also longer than zero
    (:data:`ZERO_DURATION_PATTERN` refused). The model's side: :func:`_duration_value`."""
    rules = [
        _cel(
            f"self.matches('{DURATION_PATTERN}')",
            f"{field} must be a duration like 90s, 30m, 1h30m or 2d "
            f"(rule: duration well-formed, {DURATION_PATTERN})",
        ),
        _cel(
            _durations.CAP_CEL,
            f"{field} must be at most {_durations.MAX_DAYS}d "
            f"(rule: duration at most {_durations.MAX_DAYS}d)",
        ),
    ]
    if positive:
        rules.append(
            _cel(
                f"!self.matches('{ZERO_DURATION_PATTERN}')",
                f"{field} must be longer than 0s (rule: duration above zero)",
            )
        )
    return _validations(*rules)


def _duration_value(value: str | None) -> str | None:
    """The model's side of :func:`_duration_rule`'s first two rules: the contract's parser
    (well-formed, at most 36500 days), so an object stored before the cap is refused by the
    operator's parse (InvalidSpec) instead of failing later on a date out of range."""
    if value is not None:
        try:
            _durations.parse_seconds(value)
        except _durations.InvalidDuration as exc:
            raise ValueError(str(exc)) from None
    return value


#: A Kubernetes quantity (``100m``, ``64Mi``, ``1``): int or string in the manifest, as core/v1
#: declares it; held (and rendered) as the string, since the Kubernetes client's models take
#: only strings.
Quantity = Annotated[
    StrictInt | StrictStr,
    AfterValidator(quantities.check_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "pattern": QUANTITY_PATTERN,
            "maxLength": quantities.QUANTITY_MAX_LENGTH,
            "minimum": 0,
        }
    ),
]


#: A core/v1 object this project passes through unchanged (affinity, a label selector): an
#: object the API server keeps as given.
FreeObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]

#: Largest count of an int-or-string field: Kubernetes' IntOrString holds an int32 (a larger
#: count cannot be decoded into a PodDisruptionBudget at all).
INT_OR_STRING_INT_MAX: Final = 2**31 - 1
#: A percentage of 0% to 100% (no sign, no leading zero, no fraction).
PERCENT_PATTERN: Final = r"^(100|[1-9]?[0-9])%$"


def _percent(value: str) -> str:
    """The model's side of :data:`PERCENT_PATTERN` (``fullmatch``: Python's ``$`` would take a
    trailing newline, the API server's does not)."""
    if re.fullmatch(PERCENT_PATTERN[1:-1], value) is None:
        raise ValueError(f"must be a count or a percentage from 0% to 100%, not {value!r}")
    return value


#: A count or a percentage (``2``, ``"50%"``), as policy/v1 PodDisruptionBudget takes it: a
#: count of at least 0 (a JSON integer, int32), a percentage of 0% to 100%
#: (``ValidatePositiveIntOrPercent`` and ``IsNotMoreThan100Percent`` of its validation). Strict:
#: the API server refuses ``"5"`` (not a percentage) and ``true``.
IntOrPercent = Annotated[
    Annotated[StrictInt, Field(ge=0, le=INT_OR_STRING_INT_MAX)]
    | Annotated[StrictStr, AfterValidator(_percent)],
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "pattern": PERCENT_PATTERN,
            "minimum": 0,
            "maximum": INT_OR_STRING_INT_MAX,
        }
    ),
]

#: A Kubernetes qualified name (k8s.io/apimachinery/pkg/util/validation IsQualifiedName): an
#: optional prefix, a lower-case DNS subdomain of at most :data:`QUALIFIED_PREFIX_MAX`
#: characters, and ``/``; then a name of 1 to 63 of ``A-Za-z0-9-_.``, alphanumeric at both
#: ends. Label keys, toleration keys and (lower-cased) annotation keys. ``[.]`` for a dot: the
#: same text is a CEL string literal without escapes.
QUALIFIED_NAME_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
QUALIFIED_PREFIX_MAX: Final = 253
#: A label value (IsValidLabelValue): empty, or 1 to 63 of ``A-Za-z0-9-_.``, alphanumeric at
#: both ends.
LABEL_VALUE_PATTERN: Final = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
LABEL_VALUE_MAX: Final = 63
#: Entries of a label, annotation or nodeSelector map of spec.podTemplate (a bound the CEL
#: cost estimate of the key rule needs; the API server has none).
POD_MAP_MAX: Final = 64
#: Pod labels the API server sets on a Job's pods and refuses when a template carries another
#: value (the Job's name and uid): refused in podTemplate.metadata.labels.
JOB_POD_LABELS: Final = (
    "controller-uid",
    "job-name",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
)
#: Pod annotations the API server reads as pod settings and validates against the pod spec
#: (the legacy tolerations, seccomp and AppArmor annotations, the mirror pod marker, the
#: deletion cost): refused in podTemplate.metadata.annotations (exact keys, then prefixes).
POD_SETTING_ANNOTATIONS: Final = (
    "scheduler.alpha.kubernetes.io/tolerations",
    "seccomp.security.alpha.kubernetes.io/pod",
    "kubernetes.io/config.mirror",
    "controller.kubernetes.io/pod-deletion-cost",
)
POD_SETTING_ANNOTATION_PREFIXES: Final = (
    "container.seccomp.security.alpha.kubernetes.io/",
    "container.apparmor.security.beta.kubernetes.io/",
)
_QUALIFIED_HELP: Final = (
    "a qualified name: an optional lower-case DNS subdomain prefix (at most 253 characters) "
    "and '/', then 1 to 63 of A-Z a-z 0-9 - _ . beginning and ending with a letter or digit, "
    "e.g. kubernetes.io/hostname"
)
_LABEL_VALUE_HELP: Final = (
    "empty or 1 to 63 of A-Z a-z 0-9 - _ . beginning and ending with a letter or digit"
)


def _qualified_cel(name: str) -> str:
    """CEL: the string ``name`` is a qualified name (the pattern, and the prefix's length)."""
    return (
        f"(!{name}.contains('/') || {name}.indexOf('/') <= {QUALIFIED_PREFIX_MAX}) "
        f"&& {name}.matches('{QUALIFIED_NAME_PATTERN}')"
    )


def is_qualified_name(text: str) -> bool:
    """The model's side of :func:`_qualified_cel` (whole string, ASCII only as RE2 reads it)."""
    prefix, slash, _ = text.partition("/")
    return bool(
        text.isascii()
        and re.fullmatch(QUALIFIED_NAME_PATTERN, text)
        and (not slash or len(prefix) <= QUALIFIED_PREFIX_MAX)
    )


def is_label_value(text: str) -> bool:
    """The label value rule (:data:`LABEL_VALUE_PATTERN`) on the whole string."""
    return bool(text.isascii() and re.fullmatch(LABEL_VALUE_PATTERN, text))


def _ascii_lower(text: str) -> str:
    """CEL's ``lowerAscii()``: only A-Z change."""
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in text)


def _label_map_schema(field: str, reserved: tuple[str, ...] = ()) -> dict[str, Any]:
    """Schema of a label map (``ValidateLabels``: keys qualified names, values label values),
    as pod labels and nodeSelector take it; ``reserved`` keys are refused too."""
    rules = [
        _cel(
            f"self.all(k, {_qualified_cel('k')})",
            f"{field}: every key must be {_QUALIFIED_HELP} (rule: label key)",
        )
    ]
    if reserved:
        rules.append(
            _cel(
                f"self.all(k, !(k in {list(reserved)!r}))",
                f"{field}: {', '.join(reserved)} are the Job's own pod labels, set by the API "
                "server (rule: no Job pod labels)",
            )
        )
    return {
        "type": "object",
        "maxProperties": POD_MAP_MAX,
        "additionalProperties": {
            "type": "string",
            "maxLength": LABEL_VALUE_MAX,
            "pattern": LABEL_VALUE_PATTERN,
        },
        **_validations(*rules),
    }


def _label_map_check(
    field: str, reserved: tuple[str, ...] = ()
) -> Callable[[dict[str, str]], dict[str, str]]:
    """The model's side of :func:`_label_map_schema`."""

    def check(value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not is_qualified_name(key):
                raise ValueError(
                    f"{field}: key {key!r} must be {_QUALIFIED_HELP} (rule: label key)"
                )
            if key in reserved:
                raise ValueError(
                    f"{field}: {key} is the Job's own pod label (rule: no Job pod labels)"
                )
            if not is_label_value(text):
                raise ValueError(f"{field}.{key}: value {text!r} must be {_LABEL_VALUE_HELP}")
        return value

    return check


#: podTemplate.nodeSelector: a label map.
NodeSelectorMap = Annotated[
    dict[str, StrictStr],
    Field(max_length=POD_MAP_MAX),
    AfterValidator(_label_map_check("podTemplate.nodeSelector")),
    WithJsonSchema(_label_map_schema("podTemplate.nodeSelector")),
]
#: podTemplate.metadata.labels: a label map without the Job's own pod labels.
PodLabelMap = Annotated[
    dict[str, StrictStr],
    Field(max_length=POD_MAP_MAX),
    AfterValidator(_label_map_check("podTemplate.metadata.labels", JOB_POD_LABELS)),
    WithJsonSchema(_label_map_schema("podTemplate.metadata.labels", JOB_POD_LABELS)),
]


def _annotation_keys_ok(value: dict[str, str]) -> dict[str, str]:
    field = "podTemplate.metadata.annotations"
    for key in value:
        if not is_qualified_name(_ascii_lower(key)):
            raise ValueError(
                f"{field}: key {key!r} must be {_QUALIFIED_HELP}, upper case allowed "
                "(rule: annotation key)"
            )
        if key in POD_SETTING_ANNOTATIONS or key.startswith(POD_SETTING_ANNOTATION_PREFIXES):
            raise ValueError(f"{field}: {key} is a pod setting (rule: no pod setting annotations)")
    return value


#: Pod annotations: keys qualified names once lower-cased (ValidateAnnotations), values free;
#: the annotations the API server reads as pod settings refused. The API server's limit on
#: the total size of a pod's annotations (256 KiB) is not checked.
AnnotationMap = Annotated[
    dict[str, StrictStr],
    Field(max_length=POD_MAP_MAX),
    AfterValidator(_annotation_keys_ok),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": POD_MAP_MAX,
            "additionalProperties": {"type": "string"},
            **_validations(
                _cel(
                    f"self.all(k, {_qualified_cel('k.lowerAscii()')})",
                    f"podTemplate.metadata.annotations: every key must be {_QUALIFIED_HELP}, "
                    "upper case allowed (rule: annotation key)",
                ),
                _cel(
                    f"self.all(k, !(k in {list(POD_SETTING_ANNOTATIONS)!r}) && "
                    + " && ".join(f"!k.startsWith('{p}')" for p in POD_SETTING_ANNOTATION_PREFIXES)
                    + ")",
                    "podTemplate.metadata.annotations: "
                    f"{', '.join(POD_SETTING_ANNOTATIONS)} and keys starting with "
                    f"{', '.join(POD_SETTING_ANNOTATION_PREFIXES)} are pod settings the API "
                    "server checks against the pod spec; set them on the pod spec or not at all "
                    "(rule: no pod setting annotations)",
                ),
            ),
        }
    ),
]
#: Longest default queue name (the queue rule's limit, sendgroup_contract.keys).
DEFAULT_QUEUE_MAX: Final = QUEUE_NAME_MAX


#: Values :func:`clone` shares instead of copying (immutable): these exact types, then any
#: instance of :data:`_IMMUTABLE` (enums, subclasses).
_ATOMIC: Final = frozenset({str, int, float, bool, type(None), datetime, date, timedelta})
_IMMUTABLE: Final = (str, int, float, type(None), datetime, date, timedelta, Enum)
_T = TypeVar("_T")


def clone(value: _T) -> _T:
    """A deep copy of a model tree (pydantic models, lists, dicts, immutable scalars), equal to
    ``model_copy(deep=True)`` but without ``copy.deepcopy``'s memo and reduce protocol: ~2.8x
    faster on a status with two conditions, a dump segment and a provider (26 vs 72 us). The
    planner copies the group's status on every pass: that copy was ~40-55 % of an idle group's
    pass (1,000 groups in-process, cProfile; issue 15). Unlike
    deepcopy it does not keep aliasing (an object reached twice is copied twice: a validated
    model has none). Any other value is deep-copied with ``copy.deepcopy``."""
    return cast(_T, _clone(value))


def _clone(value: Any) -> Any:
    kind = type(value)
    if kind in _ATOMIC:
        return value
    if kind is list:
        return [_clone(v) for v in value]
    if kind is dict:
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, BaseModel):
        model = type(value)
        new = model.__new__(model)
        # as pydantic's BaseModel.__deepcopy__, field by field
        object.__setattr__(new, "__dict__", {k: _clone(v) for k, v in value.__dict__.items()})
        object.__setattr__(new, "__pydantic_extra__", _clone(value.__pydantic_extra__))
        object.__setattr__(new, "__pydantic_fields_set__", set(value.__pydantic_fields_set__))
        private = getattr(value, "__pydantic_private__", None)
        object.__setattr__(
            new, "__pydantic_private__", None if private is None else copy.deepcopy(private)
        )
        return new
    if isinstance(value, _IMMUTABLE):  # enums, subclasses of the atomic types
        return value
    return copy.deepcopy(value)


class _Model(BaseModel):
    """Base: camelCase aliases, accept both names, ignore unknown fields (forward compatible:
    an older operator reading a newer object must not crash)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=False,
        # Attribute docstrings become the schema's descriptions (CRD, `kubectl explain`,
        # docs/reference.md): one text per field, next to the field.
        use_attribute_docstrings=True,
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
    CANCELLING = "Cancelling"
    CANCELLED = "Cancelled"
    DELETING = "Deleting"
    FAILED = "Failed"


#: Kinds of the provider API (:mod:`sendgroup_operator.provider_models`).
PROVIDER_KIND: Final = "SendProvider"
CLUSTER_PROVIDER_KIND: Final = "ClusterSendProvider"


class Priority(StrEnum):
    """``spec.priority``: ``high`` groups are served first from their provider's budget;
    ``normal`` groups share what is left, max-min fair by ``spec.weight``."""

    HIGH = "high"
    NORMAL = "normal"


class ProviderKind(StrEnum):
    """Kind of a provider reference: namespaced SendProvider or ClusterSendProvider."""

    SEND_PROVIDER = PROVIDER_KIND
    CLUSTER_SEND_PROVIDER = CLUSTER_PROVIDER_KIND


class ProviderRef(_Model):
    """A SendProvider in the group's namespace or a ClusterSendProvider."""

    kind: ProviderKind = ProviderKind.CLUSTER_SEND_PROVIDER
    """SendProvider (same namespace as the group) or ClusterSendProvider."""
    name: str = Field(min_length=1, max_length=253)
    """Name of the provider object."""


class ResolvedProvider(_Model):
    """The provider the operator resolved for the group, and why."""

    kind: ProviderKind
    """SendProvider or ClusterSendProvider."""
    name: str
    """Name of the provider object (namespaced ones live in the group's namespace)."""
    via: str
    """Why: "spec.provider", "domain gmail.com" or "mx aspmx.l.google.com"."""


class SecretKeyRef(_Model):
    """A key of a Secret in the SendGroup's namespace."""

    name: str = Field(min_length=1, max_length=253)
    """Name of the Secret."""
    key: str = Field(min_length=1, max_length=253)
    """Key inside the Secret whose value is used."""


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
                f"self.matches('{URL_SCHEME_PATTERN}')",
                "redis.url must start with redis://, rediss://, redis+cluster://, "
                "rediss+cluster://, redis+sentinel:// or rediss+sentinel://",
            ),
            _cel(
                f"self.matches(r'{SPEC_URL_PATTERN}')",
                "redis.url does not fit the grammar: redis[s]://host[:port][/db], "
                "redis[s]+cluster://h1:p1,h2:p2/ or redis[s]+sentinel://s1:p1,s2:p2/<master>[/db], "
                "with known options only (rule: redis.url grammar)",
            ),
            _cel(
                " && ".join(
                    [f"!self.matches('{p}')" for p in PASSWORD_PATTERNS]
                    + [
                        # any user info (redis-py reads "secret@host" as a password), and a
                        # percent-encoded option name (?pass%77ord= is ?password=)
                        "!self.matches('^[a-z+]+://[^?#]*@')",
                        "!self.matches('[?&][^=&]*%')",
                    ]
                ),
                "redis.url must not contain a password (user info before '@', or a query such "
                "as ?password=, percent-encoded or not): put the full URL in a Secret and "
                "reference it with redis.secretRef (rule: no password in redis.url)",
            ),
        ),
    )
    """Redis URL without password: redis[s]://host:port/db (standalone, or a cluster node:
    detected), redis[s]+cluster://h1:p1,h2:p2/ (Redis Cluster seed nodes) or
    redis[s]+sentinel://s1:26379,s2:26379/<master>[/db] (Sentinel); default: the operator's
    defaultRedisUrl."""
    secret_ref: SecretKeyRef | None = None
    """Secret key holding the full Redis URL, password inside; never copied into spec, status,
    events or logs."""

    @field_validator("url")
    @classmethod
    def _url_without_credentials(cls, value: str | None) -> str | None:
        # the operator's own check, read by the same parser every client uses: whatever
        # slips past the CEL rule (an older CRD) never carries a credential into pod env
        if value is None:
            return value
        try:
            target = redisurl.parse(value)
        except redisurl.RedisUrlError as exc:
            raise ValueError(str(exc)) from None
        before_query = value.partition("?")[0].partition("#")[0]
        if "@" in before_query or target.password is not None or target.username is not None:
            raise ValueError(
                "redis.url must not contain a password: use redis.secretRef "
                "(rule: no password in redis.url)"
            )
        try:  # the CRD's grammar rule, the same regex (a spec the API server accepted passes)
            redisurl.check_spec_url(value)
        except redisurl.RedisUrlError as exc:
            raise ValueError(str(exc)) from None
        return value


class ResourceRequirements(_Model):
    """core/v1 ResourceRequirements (limits and requests only) of cpu, memory and
    ephemeral-storage. Every request is at most the limit of the same resource, compared as
    quantities (``1500m`` < ``2``), as the API server checks a container's resources: refused
    here rather than at the Deployment or Job."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(quantities.RESOURCE_NAMES_RULE, quantities.RESOURCE_NAMES_MESSAGE),
            _cel(
                quantities.REQUESTS_WITHIN_LIMITS_RULE,
                quantities.REQUESTS_WITHIN_LIMITS_MESSAGE,
            ),
        )
    )

    limits: dict[str, Quantity] | None = Field(default=None, max_length=quantities.RESOURCES_MAX)
    """Maximum resources of the container (cpu, memory, ephemeral-storage)."""
    requests: dict[str, Quantity] | None = Field(default=None, max_length=quantities.RESOURCES_MAX)
    """Resources reserved for the container (cpu, memory, ephemeral-storage)."""

    @model_validator(mode="after")
    def _names_and_requests_within_limits(self) -> ResourceRequirements:
        requests, limits = self.requests or {}, self.limits or {}
        unknown = quantities.unknown_resources(requests, limits)
        if unknown:
            raise ValueError(f"{quantities.RESOURCE_NAMES_MESSAGE}: not {', '.join(unknown)}")
        over = quantities.requests_over_limits(requests, limits)
        if over:
            detail = ", ".join(f"requests.{r} {requests[r]} > limits.{r} {limits[r]}" for r in over)
            raise ValueError(f"{quantities.REQUESTS_WITHIN_LIMITS_MESSAGE}: {detail}")
        return self


class WorkerRuntime(StrEnum):
    """What runs a group's jobs: our Python mail worker, or the shop's Laravel app image running
    ``php artisan queue:work`` (its own Mailables, Notifications and job classes)."""

    PYTHON = "python"
    LARAVEL = "laravel"


class LaravelWorkerSpec(_Model):
    """The ``queue:work`` command line of a ``runtime: laravel`` group (tries, backoff and
    timeout come from ``worker``; the queue from ``spec.queue``)."""

    artisan: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: ["php", "artisan"],
        min_length=1,
        max_length=8,
        json_schema_extra={"default": ["php", "artisan"]},
    )
    """How to run artisan in the app image (the container's working directory is the image's),
    e.g. ["php", "/var/www/html/artisan"]."""
    connection: str = Field(default="redis", min_length=1, max_length=63)
    """The app's queue connection (config/queue.php) that uses the group's Redis."""
    sleep: int = Field(default=3, ge=0, le=60)
    """Seconds queue:work sleeps when the queue is empty (--sleep)."""
    memory: int = Field(default=128, ge=16, le=65536)
    """Megabytes after which queue:work exits to be restarted (--memory)."""
    max_jobs: int = Field(default=0, ge=0)
    """Exit after this many jobs, 0 = never (--max-jobs); the pod restarts the worker."""
    max_time: int = Field(default=0, ge=0)
    """Exit after this many seconds, 0 = never (--max-time); the pod restarts the worker."""


class ProbeSpec(_Model):
    """Timing of one kubelet probe of the worker container (core/v1 Probe's timing fields)."""

    period_seconds: int = Field(default=10, ge=1, le=300)
    """Seconds between two probes."""
    timeout_seconds: int = Field(default=5, ge=1, le=60)
    """Seconds one probe may take; no answer in time counts as a failure."""
    failure_threshold: int = Field(default=3, ge=1, le=30)
    """Failures in a row before the kubelet acts (restarts for liveness, takes the pod out of
    Ready for readiness)."""


class WorkerProbesSpec(_Model):
    """The worker's health probes: liveness on ``/livez`` (the event loop and the lanes make
    progress), readiness on ``/readyz`` (Redis answers PING and the SMTP relay its greeting)."""

    enabled: bool = True
    """false: the pods get no probes (the health server still answers)."""
    stall_after: int = Field(default=30, ge=2, le=3600)
    """Seconds the worker's event loop may leave a liveness probe's call unanswered (or a job
    may run past its limit) before /livez fails."""
    liveness: ProbeSpec | None = None
    """Liveness probe timing; default period 10 s, timeout 5 s, 3 failures (a hung worker is
    restarted within about stallAfter + 30 s)."""
    readiness: ProbeSpec | None = None
    """Readiness probe timing; default period 10 s, timeout 5 s, 3 failures."""


INT32_MAX: Final = 2**31 - 1


class Toleration(_Model):
    """core/v1 Toleration, with the API server's rules (ValidateTolerations): a key is a
    qualified name; without a key the operator is Exists; Exists has no value, Equal a label
    value; tolerationSeconds only with effect NoExecute."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "(has(self.key) && self.key != '') "
                "|| (has(self.operator) && self.operator == 'Exists')",
                "podTemplate.tolerations: a toleration without key must have operator Exists "
                "(it then tolerates every taint) (rule: empty key needs Exists)",
            ),
            _cel(
                "!has(self.operator) || self.operator != 'Exists' "
                "|| !has(self.value) || self.value == ''",
                "podTemplate.tolerations: a toleration with operator Exists must have no value "
                "(rule: Exists has no value)",
            ),
            _cel(
                "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                "podTemplate.tolerations: tolerationSeconds needs effect NoExecute "
                "(rule: tolerationSeconds with NoExecute)",
            ),
        )
    )

    key: str | None = Field(
        default=None,
        max_length=316,
        json_schema_extra=_validations(
            _cel(
                f"self == '' || ({_qualified_cel('self')})",
                f"podTemplate.tolerations[].key must be {_QUALIFIED_HELP} (rule: toleration key)",
            )
        ),
    )
    """Taint key; empty with operator Exists = every taint."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists or Equal (default Equal)."""
    value: str | None = Field(default=None, max_length=LABEL_VALUE_MAX, pattern=LABEL_VALUE_PATTERN)
    """Taint value (operator Equal), a label value; none with operator Exists."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect; empty = all effects."""
    toleration_seconds: int | None = Field(
        default=None, ge=0, le=_durations.MAX_DAYS * 86400, strict=True
    )
    """NoExecute only: how long the pod stays bound after the taint appears, 0 to 36500 days
    (the cap of every duration; Kubernetes reads a negative value as 0)."""

    @model_validator(mode="after")
    def _api_server_rules(self) -> Toleration:
        where = "podTemplate.tolerations"
        if self.key and not is_qualified_name(self.key):
            raise ValueError(f"{where}: key {self.key!r} must be {_QUALIFIED_HELP}")
        if not self.key and self.operator != "Exists":
            raise ValueError(f"{where}: a toleration without key must have operator Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError(f"{where}: a toleration with operator Exists must have no value")
        if self.value is not None and not is_label_value(self.value):
            raise ValueError(f"{where}: value {self.value!r} must be {_LABEL_VALUE_HELP}")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError(f"{where}: tolerationSeconds needs effect NoExecute")
        return self


class TopologySpreadConstraint(_Model):
    """core/v1 TopologySpreadConstraint; without labelSelector the operator selects the pod's own
    group and component (its workers, or its Job's pods)."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "!has(self.minDomains) || self.whenUnsatisfiable == 'DoNotSchedule'",
                "podTemplate.topologySpreadConstraints: minDomains needs whenUnsatisfiable "
                "DoNotSchedule (rule: minDomains with DoNotSchedule)",
            )
        )
    )

    max_skew: int = Field(ge=1, le=INT32_MAX)
    """Largest allowed difference of matching pods between two topology domains."""
    topology_key: str = Field(min_length=1, max_length=316)
    """Node label that defines the domains (kubernetes.io/hostname, topology.kubernetes.io/zone)."""
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = "DoNotSchedule"
    """DoNotSchedule or ScheduleAnyway."""
    label_selector: FreeObject | None = None
    """Pods counted (metav1.LabelSelector); default: this group's pods of the same component."""
    min_domains: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Minimum number of eligible domains (DoNotSchedule only)."""
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    """Whether nodeAffinity/nodeSelector limit the domains counted."""
    node_taints_policy: Literal["Honor", "Ignore"] | None = None
    """Whether node taints limit the domains counted."""
    match_label_keys: (
        list[
            Annotated[
                str,
                Field(max_length=316),
                WithJsonSchema(
                    {
                        "type": "string",
                        "maxLength": 316,
                        **_validations(
                            _cel(
                                _qualified_cel("self"),
                                "podTemplate.topologySpreadConstraints[].matchLabelKeys: each "
                                f"must be {_QUALIFIED_HELP} (rule: label key)",
                            )
                        ),
                    }
                ),
            ]
        ]
        | None
    ) = Field(default=None, max_length=16)
    """Pod label keys whose values further narrow the pods counted (e.g. pod-template-hash)."""

    @model_validator(mode="after")
    def _api_server_rules(self) -> TopologySpreadConstraint:
        where = "podTemplate.topologySpreadConstraints"
        if self.min_domains is not None and self.when_unsatisfiable != "DoNotSchedule":
            raise ValueError(f"{where}: minDomains needs whenUnsatisfiable DoNotSchedule")
        for key in self.match_label_keys or []:
            if not is_qualified_name(key):
                raise ValueError(f"{where}: matchLabelKeys {key!r} must be {_QUALIFIED_HELP}")
        return self


class LocalObjectReference(_Model):
    """A Secret in the group's namespace, by name (core/v1 LocalObjectReference)."""

    name: str = Field(min_length=1, max_length=253)
    """Name of the Secret."""


class PodMetadata(_Model):
    """Labels and annotations added to the pods (the operator's own labels always win)."""

    labels: PodLabelMap | None = None
    """Extra pod labels: keys qualified names, values label values; not the Job's own
    (controller-uid, job-name and their batch.kubernetes.io/ forms)."""
    annotations: AnnotationMap | None = None
    """Extra pod annotations: keys qualified names (upper case allowed); not the ones the API
    server reads as pod settings (legacy tolerations, seccomp, AppArmor, mirror pod, deletion
    cost)."""


class PodTemplateSpec(_Model):
    """Where and how the pods of a group run: the worker pods and the dump/restore/purge Job
    pods. Merged over the operator's default (setting podTemplate): maps (nodeSelector, labels,
    annotations) key by key with the group's value winning; every other field, when set here,
    replaces the default."""

    metadata: PodMetadata | None = None
    """Extra labels and annotations of the pods."""
    node_selector: NodeSelectorMap | None = None
    """Node labels the pods require (keys qualified names, values label values)."""
    tolerations: list[Toleration] | None = Field(default=None, max_length=64)
    """Taints the pods tolerate."""
    affinity: FreeObject | None = None
    """core/v1 Affinity (node, pod and pod anti-affinity), passed as given."""
    topology_spread_constraints: list[TopologySpreadConstraint] | None = Field(
        default=None,
        max_length=16,
        json_schema_extra=_validations(
            _cel(
                "self.all(c, self.exists_one(d, d.topologyKey == c.topologyKey "
                "&& d.whenUnsatisfiable == c.whenUnsatisfiable))",
                "podTemplate.topologySpreadConstraints: at most one constraint per topologyKey "
                "and whenUnsatisfiable (rule: no repeated constraint)",
            )
        ),
    )
    """How the pods spread over nodes or zones (a node drain then stops only part of a group);
    one constraint per topologyKey and whenUnsatisfiable."""

    @field_validator("topology_spread_constraints")
    @classmethod
    def _constraints_not_repeated(
        cls, value: list[TopologySpreadConstraint] | None
    ) -> list[TopologySpreadConstraint] | None:
        pairs = [(c.topology_key, c.when_unsatisfiable) for c in value or []]
        if len(set(pairs)) != len(pairs):
            raise ValueError(
                "podTemplate.topologySpreadConstraints: at most one constraint per topologyKey "
                "and whenUnsatisfiable (rule: no repeated constraint)"
            )
        return value

    priority_class_name: str | None = Field(default=None, min_length=1, max_length=253)
    """PriorityClass of the pods."""
    image_pull_secrets: list[LocalObjectReference] | None = Field(default=None, max_length=16)
    """Secrets (in the group's namespace) the kubelet pulls the image with."""


class JobsSpec(_Model):
    """The dump/restore/purge Jobs of the group."""

    resources: ResourceRequirements | None = None
    """Resources of the Job container; default: the operator's jobResources (requests cpu 50m,
    memory 64Mi; limits cpu 1, memory 512Mi)."""


class DisruptionBudgetSpec(_Model):
    """A PodDisruptionBudget for the worker pods (policy/v1): voluntary evictions (a node drain)
    keep this many workers. Exactly one of minAvailable or maxUnavailable."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "has(self.minAvailable) != has(self.maxUnavailable)",
                "disruptionBudget: set exactly one of minAvailable or maxUnavailable",
            )
        )
    )

    min_available: IntOrPercent | None = None
    """Workers that must stay up: a count (0 or more) or a percentage from 0% to 100% (50%)."""
    max_unavailable: IntOrPercent | None = None
    """Workers that may be evicted at once: a count (0 or more) or a percentage from 0% to 100%
    (50%)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> DisruptionBudgetSpec:
        """The model's side of the CEL rule (the API server refuses a PodDisruptionBudget with
        both; with neither the operator would render one without a budget)."""
        if (self.min_available is None) == (self.max_unavailable is None):
            raise ValueError("disruptionBudget: set exactly one of minAvailable or maxUnavailable")
        return self


class WorkerSpec(_Model):
    """How each worker runs jobs. ``timeout < retryAfter`` is enforced by the API server."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "self.timeout < self.retryAfter",
                "worker.timeout must be less than worker.retryAfter (rule: timeout < "
                "retryAfter), otherwise a job still running is handed to a second worker",
            ),
            _cel(
                "!has(self.runtime) || self.runtime != 'laravel' || has(self.image)",
                "worker.runtime laravel needs worker.image: the shop's Laravel app image "
                "(the operator must allow it: allowedImages or allowImageOverride)",
            ),
        )
    )

    runtime: WorkerRuntime = WorkerRuntime.PYTHON
    """What runs the jobs: python (our mail worker: sendgroups.SendMail jobs, rate limit,
    backpressure, outcome stream) or laravel (worker.image runs php artisan queue:work: the
    app's own Mailables, Notifications and job classes; see docs/laravel.md)."""
    laravel: LaravelWorkerSpec | None = None
    """The queue:work command line of runtime laravel (defaults when absent)."""
    image: str | None = Field(default=None, min_length=1, max_length=1024)
    """Worker image; only honoured when the operator allows it for the group's namespace
    (allowedImages, or allowImageOverride for every image), else the operator's defaultImage.
    Required by runtime laravel (the app image)."""
    tries: int = Field(default=3, ge=1, le=100)
    """Maximum attempts per job (a payload's maxTries wins)."""
    backoff: list[Annotated[int, Field(ge=0, le=86400)]] = Field(
        default_factory=lambda: [10, 60, 300],
        min_length=1,
        max_length=20,
        json_schema_extra={"default": [10, 60, 300]},
    )
    """Seconds to wait before retry n; the last value repeats (a payload's backoff wins)."""
    timeout: int = Field(default=60, ge=1, le=3600)
    """One job's time limit, seconds (a payload's timeout wins, never past the reservation)."""
    retry_after: int = Field(default=90, ge=2, le=86400)
    """Reservation lifetime, seconds: a reserved job whose worker vanished is handed out again
    after this. Must be greater than timeout."""
    resources: ResourceRequirements | None = None
    """Resources of each worker container; default requests cpu 50m, memory 64Mi, limit memory
    256Mi."""
    probes: WorkerProbesSpec | None = None
    """Liveness and readiness probes of each worker container; default: enabled, defaults of
    WorkerProbesSpec."""


class RateSpec(_Model):
    """Messages per minute for the whole group, shared by all its workers."""

    per_minute: int | None = Field(default=None, ge=1)
    """Messages per minute for the whole group, shared by all its workers (GCRA in Redis); unset =
    unlimited."""
    burst: int | None = Field(default=None, ge=1)
    """Messages allowed at once; default perMinute/60 rounded up."""


class WarmupSpec(_Model):
    """Ramp for a new sender domain: starts at ``startPerHour``, times ``growthPerDay`` a day."""

    start_per_hour: int | None = Field(default=None, ge=1)
    """Messages per hour allowed on day 0 of the ramp; unset = no warm-up."""
    growth_per_day: float = Field(default=2.0, gt=1)
    """Factor the allowed rate is multiplied by per day since `since`, never above
    rate.perMinute."""
    since: datetime | None = None
    """Start of the ramp (RFC 3339); default: the SendGroup's creation time."""


class BackpressureSpec(_Model):
    """Suspend the group after a run of temporary failures from the provider."""

    suspend_after: int = Field(default=20, ge=1)
    """Temporary failures (4xx, connection errors, timeouts) in a row that suspend the whole group
    (condition Suspended; workers stay, stop sending)."""
    suspend_for: str = Field(
        default="10m", max_length=32, json_schema_extra=_duration_rule("backpressure.suspendFor")
    )
    """How long a suspension lasts (duration)."""
    patterns: list[Annotated[str, Field(max_length=512)]] | None = Field(
        default=None, max_length=50
    )
    """Regular expressions (RE2 syntax: Python's without backreferences and lookaround;
    case-insensitive, matched in linear time): a 4xx reply whose text matches one suspends the
    group at once (providers' deferral codes). The operator refuses a group whose pattern does
    not compile (event InvalidSpec) instead of starting workers that would exit on it."""

    @field_validator("patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str] | None) -> list[str] | None:
        for i, pattern in enumerate(value or []):
            try:
                compile_pattern(pattern)
            except PatternError as exc:
                raise ValueError(f"backpressure.patterns[{i}]: {exc}") from None
        return value

    _suspend_for_value = field_validator("suspend_for")(_duration_value)


class SmtpSecretRef(_Model):
    """A Secret in the SendGroup's namespace with the relay's username and password."""

    name: str = Field(min_length=1, max_length=253)
    """Name of the Secret."""
    username_key: str = Field(default="username", min_length=1, max_length=253)
    """Key of the SMTP AUTH username in the Secret."""
    password_key: str = Field(default="password", min_length=1, max_length=253)
    """Key of the SMTP AUTH password in the Secret."""


class SmtpSpec(_Model):
    """The relay the workers send through; credentials only from a Secret."""

    host: str | None = Field(default=None, min_length=1, max_length=253)
    """SMTP relay host; default: the operator's defaultSmtp.host."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """SMTP relay port; default: the operator's defaultSmtp.port."""
    tls: SmtpTls | None = None
    """none, starttls (required, not opportunistic) or tls (implicit TLS); default: the operator's
    defaultSmtp.tls."""
    secret_ref: SmtpSecretRef | None = None
    """Secret with the relay's AUTH username and password (credentials only from a Secret)."""


class ReaperSpec(_Model):
    """The reaper's clocks: how long an empty queue keeps workers, a paused queue its keys."""

    idle_after: str = Field(
        default="30m", max_length=32, json_schema_extra=_duration_rule("reaper.idleAfter")
    )
    """Queue empty this long: the worker Deployment is deleted (phase Idle); work arriving later
    brings the workers back (duration)."""
    dump_after: str = Field(
        default="30m", max_length=32, json_schema_extra=_duration_rule("reaper.dumpAfter")
    )
    """Paused and queue unchanged this long: a dump Job moves the queue to the dumps volume and
    removes its Redis keys (duration)."""

    _durations_value = field_validator("idle_after", "dump_after")(_duration_value)


_QUEUE_RULES = _validations(
    _cel("self == oldSelf", "queue is immutable (rule: self == oldSelf)"),
)

_SPEC_RULES = _validations(
    _cel(
        "has(self.queue) == has(oldSelf.queue)",
        "queue is immutable: it cannot be added or removed after creation (rule: self == oldSelf)",
    ),
    _cel(
        "!has(self.redis) || !has(self.redis.url) "
        "|| !self.redis.url.matches('^rediss?[+]cluster://') "
        "|| (has(self.queue) && self.queue.matches('[{][^{}]+[}]'))",
        "a queue on Redis Cluster needs a hash tag so all of its keys share one slot: set "
        "spec.queue, e.g. '{mail-<name>}' (rule: hash tag on a cluster)",
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
    """Campaign id; copied to the label sendgroups.io/campaign on every child object."""
    host: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
        r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$",
    )
    """Receiving provider, a DNS name (gmail.com); label sendgroups.io/host."""
    queue: str | None = Field(
        default=None,
        min_length=1,
        max_length=QUEUE_NAME_MAX,
        pattern=QUEUE_NAME_PATTERN,
        json_schema_extra=_QUEUE_RULES,
    )
    """Queue name in the Laravel sense (keys queues:<queue>...); default mail-<metadata.name>. May
    carry a Redis Cluster hash tag ({mail-x}). Immutable once set."""
    workers: int = Field(default=1, ge=0, le=MAX_WORKERS_PER_GROUP_DEFAULT)
    """Desired worker pods while the group has work and is not paused; the operator clamps it to
    maxWorkersPerGroup and shares maxTotalWorkers fairly."""
    paused: bool = False
    """True: worker pods go to 0 at once; after reaper.dumpAfter of an unchanged queue the queue is
    dumped to the volume. False again: the dump is restored, then workers start."""
    state: State = State.ACTIVE
    """Active; Completed: no more jobs will be pushed, workers drain the queue and are removed
    without waiting for idleAfter; Cancelled: workers stop, then the queue and any dump are
    purged. Cancelled is final."""
    redis: RedisSpec | None = None
    """Which Redis holds the queue; default: the operator's defaultRedisUrl."""
    worker: WorkerSpec = Field(default_factory=WorkerSpec)
    """How each worker runs jobs (Laravel's tries, backoff, timeout, retry_after)."""
    rate: RateSpec | None = None
    """The group's shared send rate; unset = unlimited."""
    warmup: WarmupSpec | None = None
    """Rate ramp for a new sender domain; unset = none."""
    backpressure: BackpressureSpec = Field(default_factory=BackpressureSpec)
    """When provider pushback suspends the whole group."""
    smtp: SmtpSpec | None = None
    """The relay the workers send through; unset fields come from the operator's defaults."""
    reaper: ReaperSpec = Field(default_factory=ReaperSpec)
    """The reaper's clocks: how long an empty queue keeps workers, a paused queue its Redis keys."""
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, le=_durations.MAX_DAYS * 86400, strict=True
    )
    """Delete the SendGroup this many seconds after it became Completed (queue drained) or
    Cancelled (purged), at most 36500 days (the cap of every duration); unset = keep."""
    deletion_policy: DeletionPolicy = DeletionPolicy.PURGE
    """On delete: Purge removes the queue's keys and dump segments (after the workers are gone);
    Retain leaves them."""
    pod_template: PodTemplateSpec | None = None
    """Placement and pull settings of the worker and Job pods, merged over the operator's
    podTemplate setting (group wins)."""
    jobs: JobsSpec | None = None
    """Settings of the dump/restore/purge Jobs."""
    disruption_budget: DisruptionBudgetSpec | None = None
    """A PodDisruptionBudget for the worker pods; unset = none."""
    provider: ProviderRef | None = None
    """The provider whose shared budget this group sends under; unset = resolved from host
    (namespaced SendProviders first, then ClusterSendProviders; domains, then MX suffixes)."""
    priority: Priority = Priority.NORMAL
    """high: served first from the provider's budget (password resets); normal: shares what
    high groups leave, max-min fair by weight."""
    weight: int = Field(default=1, ge=1, le=1000)
    """Share among the provider's groups of the same priority that have work."""

    def queue_name(self, name: str) -> str:
        """The effective queue: ``spec.queue`` or ``mail-<metadata.name>``; a name too long
        for the queue rule (200 characters) is shortened to its first 180 characters, ``-``
        and 8 hex digits of its SHA-256, stable and distinct."""
        if self.queue:
            return self.queue
        queue = f"mail-{name}"
        if len(queue) > DEFAULT_QUEUE_MAX:
            digest = hashlib.sha256(name.encode()).hexdigest()[:8]
            queue = f"mail-{name[:180].rstrip('.-')}-{digest}"
        return queue


# ----------------------------------------------------------------------------- status


class Condition(_Model):
    """A Kubernetes condition (metav1.Condition)."""

    type: str = Field(max_length=316)
    """Ready, Paused, Suspended, QueueReachable, Dumped, Throttled or Degraded."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str = Field(max_length=1024)
    """One CamelCase word for machines (e.g. WorkersReady, RedisUnreachable, GlobalCap)."""
    message: str = Field(default="", max_length=32768)
    """Details for humans."""
    last_transition_time: datetime
    """When status last changed."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation the condition was computed for."""


class WorkersStatus(_Model):
    """Worker pods: desired by spec, ready, allowed by the global cap, and "ready/desired"."""

    desired: int = 0
    """Worker pods the spec asks for (spec.workers clamped to maxWorkersPerGroup)."""
    ready: int = 0
    """Worker pods ready."""
    allowed: int = 0
    """Worker pods the global cap (maxTotalWorkers) allows now."""
    summary: str = "0/0"
    """ready/desired, for the WORKERS column."""


class QueueStatus(_Model):
    """One atomic measurement of the queue (jobs; ages in seconds)."""

    ready: int = 0
    """Jobs waiting to be sent (queues:<queue>)."""
    delayed: int = 0
    """Jobs released with a backoff or pushed with a delay (queues:<queue>:delayed)."""
    reserved: int = 0
    """Jobs a worker is sending now (queues:<queue>:reserved)."""
    failed: int = 0
    """Jobs in the failed list (not counted in total)."""
    total: int = 0
    """ready + delayed + reserved."""
    oldest_job_age_seconds: int | None = None
    """Age of the oldest job in the queue, seconds (from its pushedAt)."""
    oldest_job_pushed_at: datetime | None = None
    """When the oldest job in the queue was pushed (the OLDEST column)."""
    measured_at: datetime | None = None
    """When these counts were measured (one atomic Redis call)."""


class ProgressStatus(_Model):
    """From the workers' counters;
    ``percent = 100 * delivered / (delivered + failed + total + dump.totalJobs)``."""

    delivered: int = 0
    """Jobs delivered (2xx from the relay), from the workers' counter in Redis."""
    failed: int = 0
    """Jobs that went to the failed list, from the workers' counter in Redis."""
    percent: float = 0.0
    """100 * delivered / (delivered + failed + queue.total + dump.totalJobs): jobs dumped to
    the volume are still to be sent."""


class DumpSegment(_Model):
    """One dump segment on the volume."""

    path: str
    """Segment file on the dumps volume."""
    bytes: int | None = None
    """Size of the segment file."""
    jobs: int = 0
    """Jobs in the segment (ready + delayed + reserved + failed records)."""
    created_at: datetime | None = None
    """When the dump wrote the segment."""
    redis_version: str | None = None
    """Version of the Redis server the jobs were dumped from."""


class DumpStatus(_Model):
    """What lies on the dumps volume for this group."""

    segments: list[DumpSegment] = Field(default_factory=list)
    """Segments on the volume, oldest first."""
    total_jobs: int = 0
    """Jobs in all segments (the DUMPED column)."""


class OperationStatus(_Model):
    """A dump/restore/purge Job the operator started: kind, sequence number, Job name, and
    the measured queue total when it started (the baseline its outcome is judged against)."""

    kind: Literal["dump", "restore", "purge"]
    """dump, restore or purge."""
    number: int = Field(ge=1)
    """Sequence number (the Job is named sg-<name>-<kind>-<number>)."""
    job_name: str
    """Name of the Job."""
    started_at: datetime
    """When the operator created the Job."""
    baseline_total: int = 0
    """queue.total when the Job started: the baseline its outcome is judged against."""
    attempts: int = 1
    """Jobs started for this operation (a failed Job is retried up to 3 times)."""


class SendGroupStatus(_Model):
    """``status`` of a SendGroup (api.md, table "status"), written only by the operator."""

    observed_generation: int | None = None
    """metadata.generation the operator last acted on."""
    phase: Phase | None = None
    """Summary for humans and kubectl get, derived from the conditions (automation reads
    conditions)."""
    workers: WorkersStatus = Field(default_factory=WorkersStatus)
    """Worker pods: desired, ready, allowed by the global cap."""
    queue: QueueStatus = Field(default_factory=QueueStatus)
    """The queue, measured atomically in one Redis round trip."""
    progress: ProgressStatus = Field(default_factory=ProgressStatus)
    """Delivery progress from the workers' counters."""
    idle_since: datetime | None = None
    """Since when the queue is empty (reaper clock for idleAfter); kept across operator restarts."""
    unchanged_since: datetime | None = None
    """Since when a paused queue is unchanged (reaper clock for dumpAfter); kept across operator
    restarts."""
    dump: DumpStatus = Field(default_factory=DumpStatus)
    """What lies on the dumps volume for this group."""
    operation: OperationStatus | None = None
    """The dump, restore or purge Job in progress, if any."""
    provider: ResolvedProvider | None = None
    """The provider this group sends under and why (condition ProviderResolved); unset = none
    matched, the group's own limits only."""
    operations_started: int = 0
    """Dump/restore/purge Jobs started so far (numbers the Job names)."""
    finished_at: datetime | None = None
    """When the group became Completed (queue drained) or Cancelled (purged);
    ttlSecondsAfterFinished counts from here."""
    last_refresh: datetime | None = None
    """Last status write for small count drifts (at most every statusRefresh seconds)."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    """Kubernetes conditions, one per type (metav1.Condition semantics)."""


class SendGroup(_Model):
    """The whole object as the operator reads it (metadata stays a plain mapping)."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SendGroupSpec
    status: SendGroupStatus = Field(default_factory=SendGroupStatus)
