"""The provider API as pydantic v2 models: ``SendProvider`` (namespaced, short name ``sp``) and
``ClusterSendProvider`` (cluster-scoped, ``csp``), one spec for both (the Issuer/ClusterIssuer
pattern of cert-manager). Contract: ``docs/`` and the design page ``providers.md``.

``crds/sendproviders.yaml`` and ``crds/clustersendproviders.yaml`` are generated from these
classes by :mod:`sendgroup_operator.crdgen`. Every CEL rule's message names the rule, so the API
server's refusal says what to fix. What CEL cannot check (RE2 syntax of a reply pattern) the
operator checks with the same library the workers match with (``google-re2``), see
:func:`check_pattern`.

Units: ``rate.perMinute`` is recipients per minute (each RCPT TO counts one), shared by every
group resolved to the provider; ``concurrency`` is SMTP transactions in flight, all groups and
workers together; durations are strings like ``10m``/``1h30m`` (:mod:`durations`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

import pydantic
from pydantic import ConfigDict, Field, field_validator

from sendgroup_operator.models import (
    CLUSTER_PROVIDER_KIND,
    DURATION_PATTERN,
    GROUP,
    PROVIDER_KIND,
    VERSION,
    ZERO_DURATION_PATTERN,
    Condition,
    Priority,
    ProviderKind,
    RedisSpec,
    _cel,
    _duration_rule,
    _duration_value,
    _Model,
    _validations,
)

KIND: Final = PROVIDER_KIND
PLURAL: Final = "sendproviders"
SINGULAR: Final = "sendprovider"
SHORT_NAMES: Final = ("sp",)
CLUSTER_KIND: Final = CLUSTER_PROVIDER_KIND
CLUSTER_PLURAL: Final = "clustersendproviders"
CLUSTER_SINGULAR: Final = "clustersendprovider"
CLUSTER_SHORT_NAMES: Final = ("csp",)
CATEGORIES: Final = ("mail",)
API_VERSION: Final = f"{GROUP}/{VERSION}"

#: An exact recipient domain, lower case (``gmail.com``).
DOMAIN_PATTERN: Final = (
    r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$"
)
#: An MX host suffix, lower case, starting with a dot (``.google.com``): a label boundary, so
#: ``.google.com`` never matches ``evilgoogle.com``.
MX_SUFFIX_PATTERN: Final = r"^(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$"
#: A rule name: a DNS label (it appears in conditions, events and status).
RULE_NAME_PATTERN: Final = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


def _above_zero(value: str | None) -> str | None:
    """The model's side of ``_duration_rule(..., positive=True)``: well-formed, at most 36500
    days (:func:`_duration_value`) and ``0s`` refused alike."""
    if value is not None and re.fullmatch(ZERO_DURATION_PATTERN, value):
        raise ValueError("must be longer than 0s (rule: duration above zero)")
    return _duration_value(value)


def check_pattern(pattern: str) -> str | None:
    """Why ``pattern`` is not a usable RE2 pattern (None when it is): RE2's own message for
    what it refuses (backreferences, lookaround), or a compiled program too large to match
    quickly (:func:`sendgroup_worker.patterns.re2_problem`, which the worker asks too)."""
    from sendgroup_worker.patterns import re2_problem  # imports re2: kept out of import time

    return re2_problem(pattern)


class ProviderMatch(_Model):
    """Which recipient domains belong to the provider: exact domains first, then any domain
    whose MX host ends with one of ``mxSuffixes`` (a Google Workspace domain is Google)."""

    domains: list[Annotated[str, Field(max_length=253, pattern=DOMAIN_PATTERN)]] | None = Field(
        default=None, max_length=1000
    )
    """Exact recipient domains, lower case (gmail.com, googlemail.com)."""
    mx_suffixes: list[Annotated[str, Field(max_length=253, pattern=MX_SUFFIX_PATTERN)]] | None = (
        Field(default=None, max_length=100)
    )
    """MX host suffixes, lower case, starting with a dot (.google.com): a domain whose MX host
    ends so belongs to this provider."""


class ProviderRate(_Model):
    """The provider's budget, shared by every group resolved to it."""

    per_minute: int = Field(ge=1, le=10_000_000)
    """Recipients per minute to this provider, all groups and workers together (hierarchical
    GCRA in Redis; each group's own rate still applies inside its share)."""
    burst: int | None = Field(default=None, ge=1, le=1_000_000)
    """Recipients allowed at once after an idle period; default perMinute/60 rounded up."""


class PushbackTrigger(_Model):
    """When a rule fires: at the first matching reply (``immediate``), or after ``count``
    matching replies within ``window``, counted across all workers of all groups."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "(has(self.immediate) && self.immediate) != has(self.count)",
                "trigger: set either immediate: true or count (with window), not both "
                "(rule: one trigger)",
            ),
            _cel(
                "has(self.count) == has(self.window)",
                "trigger: count and window go together (rule: count within window)",
            ),
        )
    )

    immediate: bool | None = None
    """True: the first matching reply fires the rule."""
    count: int | None = Field(default=None, ge=1, le=100_000)
    """Matching replies within window that fire the rule (all workers of all groups)."""
    window: str | None = Field(
        default=None,
        max_length=32,
        json_schema_extra=_duration_rule("trigger.window", positive=True),
    )
    """Sliding window the count is taken over (duration)."""

    _window_above_zero = field_validator("window")(_above_zero)


class PushbackAction(_Model):
    """What a fired rule does to the provider's budget, for ``duration``."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "(has(self.suspend) && self.suspend ? 1 : 0) + (has(self.scaleRate) ? 1 : 0)"
                " + (has(self.capConcurrency) ? 1 : 0) == 1",
                "action: set exactly one of suspend: true, scaleRate or capConcurrency "
                "(rule: one action)",
            ),
        )
    )

    suspend: bool | None = None
    """True: no mail to the provider while the rule is active."""
    scale_rate: int | None = Field(default=None, ge=1, le=99)
    """Percent of spec.rate.perMinute allowed while the rule is active."""
    cap_concurrency: int | None = Field(default=None, ge=1, le=10_000)
    """SMTP transactions in flight allowed while the rule is active."""

    def describe(self) -> str:
        """``Suspend``, ``ScaleRate(20%)`` or ``CapConcurrency(2)``."""
        if self.suspend:
            return "Suspend"
        if self.scale_rate is not None:
            return f"ScaleRate({self.scale_rate}%)"
        return f"CapConcurrency({self.cap_concurrency})"


class PushbackRecovery(_Model):
    """Additive recovery after a ScaleRate rule's duration: the allowed rate climbs back by
    ``stepPercent`` of spec.rate every ``every`` until it is full again."""

    step_percent: int = Field(default=10, ge=1, le=100)
    """Percent of spec.rate.perMinute added at every step."""
    every: str = Field(
        default="1m", max_length=32, json_schema_extra=_duration_rule("every", positive=True)
    )
    """Time between two steps (duration)."""

    _every_above_zero = field_validator("every")(_above_zero)


class PushbackRule(_Model):
    """One graded reaction to the provider's replies."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "has(self.codes) || has(self.pattern)",
                "pushback rule: set codes, pattern or both (rule: a rule matches replies)",
            ),
        )
    )

    name: str = Field(min_length=1, max_length=63, pattern=RULE_NAME_PATTERN)
    """Rule name (a DNS label): shown in conditions, events and status."""
    codes: list[Annotated[int, Field(ge=400, le=599)]] | None = Field(default=None, max_length=50)
    """SMTP reply codes (4xx, 5xx) that match; with pattern, both must match."""
    pattern: str | None = Field(default=None, min_length=1, max_length=1024)
    """RE2 pattern searched in the reply text (code, enhanced code and text), e.g.
    (?i)unusual rate; RE2 matches in linear time. The operator refuses a provider whose pattern
    RE2 does not accept (condition Ready False, reason InvalidSpec)."""
    trigger: PushbackTrigger
    """Fire at once, or after count matching replies within window."""
    action: PushbackAction
    """Suspend, ScaleRate or CapConcurrency."""
    duration: str = Field(
        max_length=32, json_schema_extra=_duration_rule("rule.duration", positive=True)
    )
    """How long the action holds (duration); it ends on its own."""
    recovery: PushbackRecovery = Field(default_factory=PushbackRecovery)
    """How a scaled rate climbs back once duration has passed."""

    _duration_above_zero = field_validator("duration")(_above_zero)

    @field_validator("pattern")
    @classmethod
    def _pattern_is_re2(cls, value: str | None) -> str | None:
        if value is not None:
            problem = check_pattern(value)
            if problem is not None:
                raise ValueError(f"pattern {value!r} {problem}")
        return value


class PushbackSpec(_Model):
    """Graded reactions to the provider's replies, counted across every worker."""

    rules: list[PushbackRule] = Field(
        default_factory=list,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Rules, each with a unique name; the first rule that matches a reply counts it."""


class ShareBy(StrEnum):
    """``spec.shareBy``: how the provider's budget is split among the groups with work.

    ``Namespace`` (default): first max-min fair among the namespaces that have groups with
    work, one equal part each (a namespace that needs less leaves the rest to the others), then
    inside each namespace ``high`` first and by ``weight``: a tenant's priorities and weights
    order its own groups and never take from another namespace (the two-level class tree of
    Linux HTB, ``tc-htb(8)``: a class per namespace, a leaf per group). ``Group``: one pool
    for every group of every namespace, ``high`` first cluster-wide: for a cluster whose
    namespaces all belong to one team. A namespaced SendProvider serves one namespace, where
    both are the same."""

    NAMESPACE = "Namespace"
    GROUP = "Group"


class SendProviderSpec(_Model):
    """``spec`` of a SendProvider or ClusterSendProvider (one spec for both)."""

    match: ProviderMatch = Field(default_factory=ProviderMatch)
    """Which recipient domains belong to the provider."""
    rate: ProviderRate | None = None
    """Budget shared by every group resolved here; unset = no provider-wide rate."""
    concurrency: int | None = Field(default=None, ge=1, le=100_000)
    """SMTP transactions in flight to the provider, all groups and workers together (leases
    that expire: a killed worker cannot keep one); unset = no limit."""
    redis: RedisSpec | None = None
    """Where the provider's shared counters live; default: the operator's defaultRedisUrl. On a
    Redis Cluster every key of a provider shares one hash tag."""
    pushback: PushbackSpec = Field(default_factory=PushbackSpec)
    """Reactions to the provider's replies."""
    share_by: ShareBy = ShareBy.NAMESPACE
    """How the budget is split among groups with work: ``Namespace`` (each namespace with
    work an equal part first, max-min fair, then its own groups by priority and weight: one
    tenant's priorities never take from another's) or ``Group`` (one pool, ``high`` first
    across namespaces, for namespaces of one team)."""


# ----------------------------------------------------------------------------- status


class ProviderShare(_Model):
    """One group's share of the provider's budget now."""

    group: str
    """namespace/name of the SendGroup."""
    per_minute: float = Field(ge=0)
    """Recipients per minute this group may send now."""
    priority: Priority = Priority.NORMAL
    """high or normal."""
    weight: int = 1
    """The group's weight among groups of its priority."""


class ActiveRule(_Model):
    """A pushback rule in force."""

    rule: str
    """Name of the rule."""
    since: datetime
    """When it fired."""
    until: datetime
    """When its action ends (recovery follows for ScaleRate)."""
    reply: str = Field(default="", max_length=1024)
    """The reply that fired it (code and text)."""
    action: str
    """Suspend, ScaleRate(n%) or CapConcurrency(n)."""


class EffectiveRate(_Model):
    """The provider's allowed rate now, after active rules and recovery."""

    per_minute: float | None = None
    """Recipients per minute allowed now; unset = no provider-wide rate."""


class SendProviderStatus(_Model):
    """``status`` of a provider, written only by the operator."""

    observed_generation: int | None = None
    """metadata.generation the operator last acted on."""
    groups: int = 0
    """Groups resolved to this provider that are sending (have work, not paused)."""
    effective_rate: EffectiveRate = Field(default_factory=EffectiveRate)
    """Allowed rate now, after rules and recovery."""
    shares: list[ProviderShare] = Field(default_factory=list)
    """Each sending group's share now."""
    active_rules: list[ActiveRule] = Field(default_factory=list)
    """Rules in force, with since/until, the reply that fired them and the action."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    """Ready, Throttled (a ScaleRate/CapConcurrency rule holds), Suspended (a Suspend rule
    holds); one per type."""


class SendProvider(_Model):
    """A provider object as the operator reads it (either kind)."""

    api_version: str = API_VERSION
    kind: Literal["SendProvider", "ClusterSendProvider"] = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SendProviderSpec = Field(default_factory=SendProviderSpec)
    status: SendProviderStatus = Field(default_factory=SendProviderStatus)
    #: Set by :func:`parse_provider` (never read from the object): why the spec cannot be used,
    #: each field and rule named. Such a provider keeps only its ``match`` (read on its own)
    #: so that its groups still resolve to it, and are held instead of sending unlimited.
    invalid: str | None = Field(default=None, exclude=True)


def invalid_summary(error: pydantic.ValidationError, raw_spec: Mapping[str, Any]) -> str:
    """``spec.<field>: <rule>`` for each error, ``; ``-joined, a pushback rule named by its
    index and name (``spec.pushback.rules[0] (unusual-rate).pattern: ...``); never the input
    values (a Redis URL may hold a password), only the validators' own texts."""
    rules = (raw_spec.get("pushback") or {}).get("rules") if isinstance(raw_spec, Mapping) else []
    parts = []
    for err in error.errors(include_input=False, include_url=False):
        loc = [str(p) for p in err["loc"]]
        if loc[:1] == ["spec"]:
            loc = loc[1:]
        where = "spec"
        i = 0
        while i < len(loc):
            rule_index = i + 2 < len(loc) and loc[i + 2].isdigit()
            if loc[i : i + 2] == ["pushback", "rules"] and rule_index:
                n = int(loc[i + 2])
                name = ""
                if isinstance(rules, list) and n < len(rules) and isinstance(rules[n], Mapping):
                    name = f" ({rules[n].get('name')})" if rules[n].get("name") else ""
                where += f".pushback.rules[{n}]{name}"
                i += 3
                continue
            where += f".{loc[i]}"
            i += 1
        parts.append(f"{where}: {err['msg']}")
    text = "; ".join(parts) or "spec does not parse"
    return text if len(text) <= 1000 else text[:999] + "\u2026"


_DOMAIN: Final = pydantic.TypeAdapter(Annotated[str, Field(max_length=253, pattern=DOMAIN_PATTERN)])
_MX_SUFFIX: Final = pydantic.TypeAdapter(
    Annotated[str, Field(max_length=253, pattern=MX_SUFFIX_PATTERN)]
)


def _valid_entries(raw: Any, adapter: pydantic.TypeAdapter[str], limit: int) -> list[str] | None:
    """The entries of ``raw`` that are valid once written the way the CRD now asks (lower
    case, no trailing dot, no surrounding blanks; a single string read as a list of one):
    ``Gmail.com`` claims ``gmail.com``, as resolution (which lower-cases the group's host)
    always meant. Anything else (a number, an object, a bad pattern) is dropped."""
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return None
    kept: list[str] = []
    for entry in raw[:limit]:
        if isinstance(entry, str):
            entry = entry.strip().lower().rstrip(".")
        try:
            kept.append(adapter.validate_python(entry))
        except pydantic.ValidationError:
            continue
    return kept or None


def _salvage_match(raw: Any) -> ProviderMatch:
    """The valid entries of a ``match`` that does not validate as a whole (an object stored
    before the CRD's rules): one bad entry must not drop the provider's other claims, or a
    group of a claimed domain would resolve to no provider and send without its limits."""
    if not isinstance(raw, Mapping):
        return ProviderMatch()
    return ProviderMatch(
        domains=_valid_entries(raw.get("domains"), _DOMAIN, 1000),
        mx_suffixes=_valid_entries(raw.get("mxSuffixes"), _MX_SUFFIX, 100),
    )


def parse_provider(item: Mapping[str, Any]) -> SendProvider:
    """The provider ``item`` (a SendProvider or ClusterSendProvider object), never raising: a
    spec the operator cannot use (a pattern RE2 refuses, a rule the CRD did not have when the
    object was stored) gives a provider with ``invalid`` set (:func:`invalid_summary`), its
    ``match`` read on its own (entry by entry when it fails as a whole) and nothing else of
    its spec."""
    try:
        return SendProvider.model_validate(item)
    except pydantic.ValidationError as exc:
        raw_spec = item.get("spec") or {}
        message = invalid_summary(exc, raw_spec if isinstance(raw_spec, Mapping) else {})
    raw_match = raw_spec.get("match") if isinstance(raw_spec, Mapping) else None
    try:
        match = ProviderMatch.model_validate(raw_match or {})
    except pydantic.ValidationError:
        match = _salvage_match(raw_match)
    kind = item.get("kind")
    metadata = item.get("metadata")
    status = item.get("status") or {}
    try:
        parsed_status = SendProviderStatus.model_validate(status)
    except pydantic.ValidationError:
        parsed_status = SendProviderStatus()
    return SendProvider(
        kind=kind if kind in (KIND, CLUSTER_KIND) else KIND,
        metadata=dict(metadata) if isinstance(metadata, Mapping) else {},
        spec=SendProviderSpec(match=match),
        status=parsed_status,
        invalid=message,
    )


__all__ = [
    "DURATION_PATTERN",
    "ActiveRule",
    "EffectiveRate",
    "Priority",
    "ProviderKind",
    "ProviderMatch",
    "ProviderRate",
    "ProviderShare",
    "PushbackAction",
    "PushbackRecovery",
    "PushbackRule",
    "PushbackSpec",
    "PushbackTrigger",
    "SendProvider",
    "SendProviderSpec",
    "SendProviderStatus",
    "check_pattern",
    "invalid_summary",
    "parse_provider",
]
