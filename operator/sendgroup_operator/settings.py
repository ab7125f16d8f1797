"""Operator settings (api.md, "Operator settings"), read from the environment.

Every setting is ``SENDGROUP_<NAME>`` (the Helm chart sets them from its values). Each field of
:class:`Settings` names its variable, its Helm value and its meaning in the field's metadata;
``docs/reference.md`` is generated from them (``python -m sendgroup_operator.refgen``), and
:data:`PROCESS_ENV` lists the few variables read outside :class:`Settings`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ValidationError

from sendgroup_contract.tls import SmtpTls
from sendgroup_operator import models
from sendgroup_worker import redisurl

DUMPS_MOUNT: Final = "/dumps"

M = TypeVar("M", bound=BaseModel)


class SettingsError(ValueError):
    """A setting that cannot be parsed; the message names the variable."""


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name}={raw!r}: expected true or false")


def _int(env: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise SettingsError(f"{name}={raw!r}: expected an integer") from exc
    if value < 0:
        raise SettingsError(f"{name}={raw!r}: expected >= 0")
    return value


def _req_int(env: Mapping[str, str], name: str, default: int) -> int:
    value = _int(env, name, default)
    assert value is not None
    return value


def _json_model(env: Mapping[str, str], name: str, model: type[M]) -> M | None:
    """``$name`` as JSON validated by ``model`` (None when unset or empty)."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return model.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        why = " ".join(str(exc).splitlines()[:3])
        raise SettingsError(f"{name}: not a valid {model.__name__}: {why}") from None


def _meta(env: str, value: str, doc: str) -> dict[str, str]:
    """Metadata of a :class:`Settings` field whose default is built with ``field`` itself."""
    return {"env": env, "value": value, "doc": doc}


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = env.get(name, "").strip() or default
    if raw not in choices:
        raise SettingsError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
    return raw


def _secret_ref(env: Mapping[str, str], name: str) -> str:
    """A ``<secret name>/<key>`` setting, or ""; raises :class:`SettingsError` otherwise."""
    raw = env.get(name, "").strip()
    if raw:
        secret, slash, key = raw.partition("/")
        if not (slash and secret and key and "/" not in key):
            raise SettingsError(f"{name}={raw!r}: expected <secret name>/<key>")
    return raw


#: Bounds of ``SENDGROUP_SHARD_LEASE_DURATION`` (seconds), the chart's too
#: (``sharding.leaseDuration``): renewed every third, so 3 is a renewal a second; above 300 a
#: killed replica's groups would wait over 6 minutes, and a Lease's ``leaseDurationSeconds`` is
#: an int32 (an infinite or huge value could never be written: the replica would never act).
LEASE_DURATION_MIN: Final = 3.0
LEASE_DURATION_MAX: Final = 300.0

#: ``SENDGROUP_SHARD_SET``: a DNS label (RFC 1123, lowercase, at most 63), so it is a valid
#: label value of the Leases and two sets never map to one Lease name by case.
SHARD_SET_PATTERN: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _lease_duration(env: Mapping[str, str]) -> float:
    """``SENDGROUP_SHARD_LEASE_DURATION``: seconds, 3 to 300 (renewed every third)."""
    name = "SENDGROUP_SHARD_LEASE_DURATION"
    raw = env.get(name, "").strip()
    if not raw:
        return 15.0
    try:
        value = float(raw)
    except ValueError as exc:
        raise SettingsError(f"{name}={raw!r}: expected seconds") from exc
    if not LEASE_DURATION_MIN <= value <= LEASE_DURATION_MAX:  # nan and inf fail too
        raise SettingsError(
            f"{name}={raw!r}: expected {LEASE_DURATION_MIN:g} to {LEASE_DURATION_MAX:g} seconds"
        )
    return value


def _shard_set(env: Mapping[str, str], default: str) -> str:
    """``SENDGROUP_SHARD_SET``: see :data:`SHARD_SET_PATTERN`."""
    name = "SENDGROUP_SHARD_SET"
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not SHARD_SET_PATTERN.fullmatch(raw):
        raise SettingsError(
            f"{name}={raw!r}: expected a DNS label (lowercase letters, digits and '-', at "
            "most 63, starting and ending with a letter or digit)"
        )
    return raw


def _setting(default: Any, env: str, value: str, doc: str) -> Any:
    """A :class:`Settings` field: its default, environment variable, Helm value (``""`` when
    the chart has none) and meaning (the text of docs/reference.md)."""
    return field(default=default, metadata={"env": env, "value": value, "doc": doc})


#: Variables read outside :class:`Settings` (by ``__main__``/``startup``):
#: (name, Helm value, default, meaning).
PROCESS_ENV: Final[tuple[tuple[str, str, str, str], ...]] = (
    ("SENDGROUP_HEALTH_PORT", "healthPort", "8081", "port of kopf's liveness endpoint /healthz"),
    ("SENDGROUP_LOG_LEVEL", "logLevel", "INFO", "DEBUG, INFO, WARNING or ERROR"),
    (
        "SENDGROUP_LISTEN_HOST",
        "",
        "0.0.0.0",
        "address the metrics and health endpoints bind",
    ),
    (
        "SENDGROUP_STANDALONE",
        "",
        "false",
        "true: no kopf peering (one instance, no KopfPeering object needed)",
    ),
    (
        "SENDGROUP_MALLOC_TRIM",
        "",
        "true",
        "true: every 30 s the C heap's free pages go back to the system (glibc malloc_trim; "
        "gcfreeze.py); false: they stay in the process",
    ),
    (
        "SENDGROUP_SLIM_BODIES",
        "",
        "true",
        "false: kopf keeps every watched body as the API server sent it; true: without "
        "metadata.managedFields and with its keys and short strings shared (slimbodies.py)",
    ),
    (
        "SENDGROUP_TRACEMALLOC",
        "",
        "",
        "a path: trace allocations (tracemalloc, SENDGROUP_TRACEMALLOC_FRAMES frames, default "
        "10; 0: figures only) and write a heap snapshot to PATH.K.snap and PATH.K.json on each "
        "SIGUSR2 (memtrace.py); a measuring tool, about twice the memory",
    ),
)


@dataclass(frozen=True)
class Settings:
    """The operator's settings; each field's metadata names its environment variable."""

    default_redis_url: str = _setting(
        "redis://redis:6379/0",
        "SENDGROUP_DEFAULT_REDIS_URL",
        "defaultRedisUrl",
        "Redis for groups without spec.redis",
    )
    default_redis_secret: str = _setting(
        "",
        "SENDGROUP_DEFAULT_REDIS_SECRET",
        "defaultRedisSecretRef",
        "Secret `name/key` holding the default Redis URL (password inside): worker pods and "
        "Jobs of groups without spec.redis read REDIS_URL from it (the Secret must exist in "
        "each group's namespace), the operator from its own namespace's copy; empty = "
        "defaultRedisUrl as plain env",
    )
    dump_signing_secret: str = _setting(
        "",
        "SENDGROUP_DUMP_SIGNING_SECRET",
        "dumpSigningSecretRef",
        "Secret `name/key` of the key that signs dump segments (HMAC-SHA256): dump and restore "
        "Jobs read it through secretKeyRef (a Secret of that name in each group's namespace); "
        "a restore then refuses any segment not signed with it; empty = checksums only",
    )
    allowed_redis_hosts: tuple[str, ...] = _setting(
        (),
        "SENDGROUP_ALLOWED_REDIS_HOSTS",
        "allowedRedisHosts",
        "Redis hosts (`host` or `host:port`, comma-separated) tenants may name in spec.redis, "
        "besides the default Redis; any other is refused before it is contacted",
    )
    queue_name_policy: str = _setting(
        "auto",
        "SENDGROUP_QUEUE_NAME_POLICY",
        "queueNamePolicy",
        "`namespace`: every queue name starts with its namespace and a dot; `off`; `auto` "
        "(default): `namespace` when the operator watches several or all namespaces",
    )
    default_image: str = _setting(
        "sendgroup-worker:latest",
        "SENDGROUP_DEFAULT_IMAGE",
        "defaultImage",
        "worker image of Deployments and Jobs",
    )
    key_prefix: str = _setting(
        "",
        "SENDGROUP_KEY_PREFIX",
        "keyPrefix",
        "producers' client-side key prefix (Laravel 11: laravel_database_)",
    )
    image_pull_policy: str = _setting(
        "IfNotPresent",
        "SENDGROUP_IMAGE_PULL_POLICY",
        "workerImagePullPolicy",
        "imagePullPolicy of worker and Job pods",
    )
    allow_image_override: bool = _setting(
        False,
        "SENDGROUP_ALLOW_IMAGE_OVERRIDE",
        "allowImageOverride",
        "honour spec.worker.image",
    )
    allowed_images: tuple[str, ...] = _setting(
        (),
        "SENDGROUP_ALLOWED_IMAGES",
        "allowedImages",
        "worker images SendGroups may name (spec.worker.image, the app image of runtime "
        "laravel), comma-separated `prefix` (any namespace) or `namespace=prefix` entries: an "
        "image is allowed when it starts with the prefix at a reference boundary (`/`, `:` or "
        "`@` next); "
        "allowImageOverride true allows every image everywhere",
    )
    max_workers_per_group: int = _setting(
        models.MAX_WORKERS_PER_GROUP_DEFAULT,
        "SENDGROUP_MAX_WORKERS_PER_GROUP",
        "maxWorkersPerGroup",
        "clamp of spec.workers (the CRD's own maximum is 50)",
    )
    max_total_workers: int | None = _setting(
        None,
        "SENDGROUP_MAX_TOTAL_WORKERS",
        "maxTotalWorkers",
        "global worker cap shared max-min fairly by the groups with work (empty = no cap); "
        "sharded, split evenly over the live replicas first",
    )
    dumps_claim_name: str = _setting(
        "sendgroup-dumps",
        "SENDGROUP_DUMPS_CLAIM_NAME",
        "dumpsClaimName",
        "PersistentVolumeClaim the dump/restore/purge Jobs mount at /dumps",
    )
    reaper_interval: float = _setting(
        10.0,
        "SENDGROUP_REAPER_INTERVAL",
        "reaperInterval",
        "seconds between reaper passes per group",
    )
    idle_pass_interval: float = _setting(
        60.0,
        "SENDGROUP_IDLE_PASS_INTERVAL",
        "",
        "seconds between reaper passes of an idle group (empty queue, no Deployment, nothing "
        "in motion; at least reaperInterval, at most half of SENDGROUP_LIVENESS_STALL): jobs "
        "pushed to it, a spec change and a provider change wake it at once, a "
        "ttlSecondsAfterFinished deadline is kept",
    )
    redis_client_tracking: bool = _setting(
        True,
        "SENDGROUP_REDIS_CLIENT_TRACKING",
        "",
        "true: the idle groups of a standalone or Sentinel Redis (>= 6.0) are watched with "
        "client tracking (Redis names a key when it changes: jobs pushed to an idle group wake "
        "it within milliseconds, no command at rest but a check every 60 s); false, or where "
        "Redis refuses it (logged once) and on Redis Cluster: one EXISTS per 500 idle groups "
        "every 0.5 s (observer.py)",
    )
    watch_namespaces: tuple[str, ...] = _setting(
        (),
        "SENDGROUP_WATCH_NAMESPACES",
        "watchNamespaces",
        "comma list of namespaces to watch; * = all; empty = POD_NAMESPACE",
    )
    metrics_port: int = _setting(
        8080, "SENDGROUP_METRICS_PORT", "metrics.port", "Prometheus /metrics port"
    )
    peering_priority: int = _setting(
        0,
        "SENDGROUP_PEERING_PRIORITY",
        "peering.priority",
        "kopf peering priority of this instance (give each replica its own)",
    )
    peering_name: str = _setting(
        "sendgroup-operator",
        "SENDGROUP_PEERING_NAME",
        "peering.name",
        "KopfPeering object the instances meet in",
    )
    peering_lifetime: int = _setting(
        20,
        "SENDGROUP_PEERING_LIFETIME",
        "peering.lifetime",
        "seconds a peering record lives without keepalive: the longest a standby waits after "
        "the active instance died",
    )
    sharding: bool = _setting(
        False,
        "SENDGROUP_SHARDING",
        "sharding.enabled",
        "true: the groups are sharded over the replicas (one Lease per replica in the "
        "operator's namespace, no kopf peering); false: kopf peering (one active replica)",
    )
    shard_lease_duration: float = _setting(
        15.0,
        "SENDGROUP_SHARD_LEASE_DURATION",
        "sharding.leaseDuration",
        "seconds a replica's Lease lives unrenewed, 3 to 300 (renewed every third of it): a "
        "killed replica's groups are taken over within about 4/3 of it; a new replica acts "
        "after one",
    )
    shard_set: str = _setting(
        "sendgroup-operator",
        "SENDGROUP_SHARD_SET",
        "",
        "name of the shard set, a DNS label (label of its Leases; the chart sets the "
        "release's full name)",
    )
    worker_limit: int = _setting(
        100,
        "SENDGROUP_WORKER_LIMIT",
        "workerLimit",
        "at most this many objects handled at once per watch stream (kopf's "
        "queueing.worker_limit; an idle one frees its slot after 0.05 s instead of kopf's 5 s); "
        "0 = no limit: every group of a cold start gets a worker at once (1,000 groups: 566 "
        "MiB and 40.6 s to reconcile all, against 272 MiB and 33.7 s with 100)",
    )
    status_refresh: float = _setting(
        60.0,
        "SENDGROUP_STATUS_REFRESH",
        "",
        "minimum seconds between status writes for small count drifts",
    )
    worker_service_account: str | None = _setting(
        None,
        "SENDGROUP_WORKER_SERVICE_ACCOUNT",
        "workerServiceAccount.*",
        "ServiceAccount of worker and Job pods (empty = the namespace's default)",
    )
    default_smtp_host: str = _setting(
        "localhost",
        "SENDGROUP_DEFAULT_SMTP_HOST",
        "defaultSmtp.host",
        "relay host for groups without spec.smtp.host",
    )
    default_smtp_port: int = _setting(
        25,
        "SENDGROUP_DEFAULT_SMTP_PORT",
        "defaultSmtp.port",
        "relay port for groups without spec.smtp.port",
    )
    default_smtp_tls: str = _setting(
        "none",
        "SENDGROUP_DEFAULT_SMTP_TLS",
        "defaultSmtp.tls",
        "none, starttls or tls for groups without spec.smtp.tls",
    )
    job_ttl: int = _setting(
        3600, "SENDGROUP_JOB_TTL", "", "ttlSecondsAfterFinished of dump/restore/purge Jobs"
    )
    job_deadline: int = _setting(
        3600, "SENDGROUP_JOB_DEADLINE", "", "activeDeadlineSeconds of dump/restore/purge Jobs"
    )
    job_backoff_limit: int = _setting(
        3, "SENDGROUP_JOB_BACKOFF_LIMIT", "", "backoffLimit of dump/restore/purge Jobs"
    )
    purge_timeout: float = _setting(
        300.0,
        "SENDGROUP_PURGE_TIMEOUT",
        "",
        "seconds a deletion waits for an unreachable Redis before it gives up the purge",
    )
    orphan_grace: float = _setting(
        120.0,
        "SENDGROUP_ORPHAN_GRACE",
        "",
        "seconds a group may have work but no ready worker before it counts as orphaned "
        "(metric sendgroup_orphans); also the period of the orphan-Deployment count",
    )
    liveness_stall: float = _setting(
        120.0,
        "SENDGROUP_LIVENESS_STALL",
        "",
        "seconds without a reaper pass before /healthz fails",
    )
    preflight_retry: float = _setting(
        10.0,
        "SENDGROUP_PREFLIGHT_RETRY",
        "",
        "seconds between start-up checks for a missing CRD or permission",
    )
    pod_template: models.PodTemplateSpec | None = field(
        default=None,
        metadata=_meta(
            "SENDGROUP_POD_TEMPLATE",
            "podTemplate",
            "default placement and pull settings of worker and Job pods (JSON of "
            "spec.podTemplate); a group's spec.podTemplate is merged over it",
        ),
    )
    job_resources: models.ResourceRequirements | None = field(
        default=None,
        metadata=_meta(
            "SENDGROUP_JOB_RESOURCES",
            "jobResources",
            "resources of dump/restore/purge Job containers (JSON; default requests cpu 50m, "
            "memory 64Mi, limits cpu 1, memory 512Mi); a group's spec.jobs.resources wins",
        ),
    )
    namespace: str = _setting(
        "default",
        "POD_NAMESPACE",
        "",
        "the operator's own namespace (the chart sets it from the pod)",
    )

    @property
    def dump_signing_secret_ref(self) -> tuple[str, str] | None:
        """(Secret name, key) of the segment signing key, or None (not signed)."""
        if not self.dump_signing_secret:
            return None
        name, _, key = self.dump_signing_secret.partition("/")
        return name, key

    @property
    def default_redis_secret_ref(self) -> tuple[str, str] | None:
        """(Secret name, key) of the default Redis URL, or None (plain ``defaultRedisUrl``)."""
        if not self.default_redis_secret:
            return None
        name, _, key = self.default_redis_secret.partition("/")
        return name, key

    @property
    def clusterwide(self) -> bool:
        """True when all namespaces are watched (``SENDGROUP_WATCH_NAMESPACES=*``)."""
        return "*" in self.watch_namespaces

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Namespaces to watch when not cluster-wide (default: the operator's own)."""
        return self.watch_namespaces or (self.namespace,)

    @property
    def list_scopes(self) -> tuple[str | None, ...]:
        """Where a LIST of everything watched goes: ``(None,)`` (all namespaces) when
        cluster-wide, else each watched namespace."""
        return (None,) if self.clusterwide else self.namespaces

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``env`` (default ``os.environ``).

        Raises :class:`SettingsError` naming the variable that cannot be parsed.
        """
        e = os.environ if env is None else env
        d = cls()
        namespaces = tuple(
            n.strip() for n in e.get("SENDGROUP_WATCH_NAMESPACES", "").split(",") if n.strip()
        )
        tls = e.get("SENDGROUP_DEFAULT_SMTP_TLS", d.default_smtp_tls) or d.default_smtp_tls
        if tls not in set(SmtpTls):
            raise SettingsError(f"SENDGROUP_DEFAULT_SMTP_TLS={tls!r}: none, starttls or tls")
        redis_url = e.get("SENDGROUP_DEFAULT_REDIS_URL") or d.default_redis_url
        try:
            redisurl.check(redis_url)
        except redisurl.RedisUrlError as exc:
            raise SettingsError(
                f"SENDGROUP_DEFAULT_REDIS_URL: {redisurl.redact(str(exc), redis_url)}"
            ) from None
        secret = _secret_ref(e, "SENDGROUP_DEFAULT_REDIS_SECRET")
        return cls(
            default_redis_url=redis_url,
            default_redis_secret=secret,
            dump_signing_secret=_secret_ref(e, "SENDGROUP_DUMP_SIGNING_SECRET"),
            allowed_redis_hosts=tuple(
                h.strip()
                for h in e.get("SENDGROUP_ALLOWED_REDIS_HOSTS", "").split(",")
                if h.strip()
            ),
            queue_name_policy=_choice(
                e, "SENDGROUP_QUEUE_NAME_POLICY", ("auto", "namespace", "off"), "auto"
            ),
            default_image=e.get("SENDGROUP_DEFAULT_IMAGE") or d.default_image,
            key_prefix=e.get("SENDGROUP_KEY_PREFIX", ""),
            image_pull_policy=e.get("SENDGROUP_IMAGE_PULL_POLICY") or d.image_pull_policy,
            allow_image_override=_bool(e, "SENDGROUP_ALLOW_IMAGE_OVERRIDE", False),
            allowed_images=tuple(
                i.strip() for i in e.get("SENDGROUP_ALLOWED_IMAGES", "").split(",") if i.strip()
            ),
            max_workers_per_group=_req_int(
                e, "SENDGROUP_MAX_WORKERS_PER_GROUP", d.max_workers_per_group
            ),
            max_total_workers=_int(e, "SENDGROUP_MAX_TOTAL_WORKERS", None),
            dumps_claim_name=e.get("SENDGROUP_DUMPS_CLAIM_NAME") or d.dumps_claim_name,
            reaper_interval=float(_req_int(e, "SENDGROUP_REAPER_INTERVAL", 10) or 1),
            idle_pass_interval=float(_req_int(e, "SENDGROUP_IDLE_PASS_INTERVAL", 60) or 1),
            redis_client_tracking=_bool(e, "SENDGROUP_REDIS_CLIENT_TRACKING", True),
            watch_namespaces=namespaces,
            metrics_port=_req_int(e, "SENDGROUP_METRICS_PORT", d.metrics_port),
            peering_priority=_req_int(e, "SENDGROUP_PEERING_PRIORITY", 0),
            peering_name=e.get("SENDGROUP_PEERING_NAME") or d.peering_name,
            peering_lifetime=_req_int(e, "SENDGROUP_PEERING_LIFETIME", d.peering_lifetime),
            sharding=_bool(e, "SENDGROUP_SHARDING", False),
            shard_lease_duration=_lease_duration(e),
            shard_set=_shard_set(e, d.shard_set),
            worker_limit=_req_int(e, "SENDGROUP_WORKER_LIMIT", d.worker_limit),
            status_refresh=float(_req_int(e, "SENDGROUP_STATUS_REFRESH", 60)),
            worker_service_account=e.get("SENDGROUP_WORKER_SERVICE_ACCOUNT") or None,
            default_smtp_host=e.get("SENDGROUP_DEFAULT_SMTP_HOST") or d.default_smtp_host,
            default_smtp_port=_req_int(e, "SENDGROUP_DEFAULT_SMTP_PORT", d.default_smtp_port),
            default_smtp_tls=tls,
            job_ttl=_req_int(e, "SENDGROUP_JOB_TTL", d.job_ttl),
            job_deadline=_req_int(e, "SENDGROUP_JOB_DEADLINE", d.job_deadline),
            job_backoff_limit=_req_int(e, "SENDGROUP_JOB_BACKOFF_LIMIT", d.job_backoff_limit),
            purge_timeout=float(_req_int(e, "SENDGROUP_PURGE_TIMEOUT", 300)),
            orphan_grace=float(_req_int(e, "SENDGROUP_ORPHAN_GRACE", 120)),
            liveness_stall=float(_req_int(e, "SENDGROUP_LIVENESS_STALL", 120)),
            preflight_retry=float(_req_int(e, "SENDGROUP_PREFLIGHT_RETRY", 10) or 1),
            pod_template=_json_model(e, "SENDGROUP_POD_TEMPLATE", models.PodTemplateSpec),
            job_resources=_json_model(e, "SENDGROUP_JOB_RESOURCES", models.ResourceRequirements),
            namespace=e.get("POD_NAMESPACE") or d.namespace,
        )


def image_allowed(settings: Settings, image: str, namespace: str) -> bool:
    """Whether a SendGroup of ``namespace`` may run ``image``: ``allowImageOverride`` allows
    every image; else an ``allowedImages`` entry ``prefix`` (any namespace) or
    ``namespace=prefix`` (that namespace only) that starts the image at a reference boundary:
    the prefix ends with ``/``, ``:`` or ``@``, or the image goes on with one of them (or ends)
    right after it. So ``ghcr.io/shop`` allows ``ghcr.io/shop/app:1`` and ``ghcr.io/shop:1``,
    never ``ghcr.io/shopevil/x``; ``registry.example`` never ``registry.example.evil.net/x``;
    ``registry.example:5000`` never ``registry.example:50001/x``. An entry ``=prefix`` (empty
    namespace) allows nothing."""
    if settings.allow_image_override:
        return True
    for entry in settings.allowed_images:
        ns, sep, prefix = entry.partition("=")
        if not sep:
            ns, prefix = "", entry
        elif not ns:
            continue
        if not prefix or (ns and ns != namespace) or not image.startswith(prefix):
            continue
        rest = image[len(prefix) :]
        if prefix[-1] in "/:@" or rest == "" or rest[0] in "/:@":
            return True
    return False
