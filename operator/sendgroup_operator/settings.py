"""Operator settings (api.md, "Operator settings"), read from the environment.

Every setting is ``SENDGROUP_<NAME>`` (the Helm chart sets them from its values):

=============================  ====================================  =======================
env                            api.md name                           default
=============================  ====================================  =======================
SENDGROUP_DEFAULT_REDIS_URL    defaultRedisUrl                       redis://redis:6379/0
SENDGROUP_DEFAULT_IMAGE        defaultImage                          sendgroup-worker:latest
SENDGROUP_KEY_PREFIX           producers' client-side key prefix     "" (e.g. laravel_database_)
SENDGROUP_IMAGE_PULL_POLICY    (image pull policy of children)       IfNotPresent
SENDGROUP_ALLOW_IMAGE_OVERRIDE allowImageOverride                    false
SENDGROUP_MAX_WORKERS_PER_GROUP maxWorkersPerGroup                   50
SENDGROUP_MAX_TOTAL_WORKERS    maxTotalWorkers (empty = no cap)      none
SENDGROUP_DUMPS_CLAIM_NAME     dumpsClaimName                        sendgroup-dumps
SENDGROUP_REAPER_INTERVAL      reaperInterval (seconds)              10
SENDGROUP_WATCH_NAMESPACES     watchNamespaces (comma list, ``*``)   own namespace
SENDGROUP_METRICS_PORT         metrics port                          8080
SENDGROUP_PEERING_PRIORITY     kopf peering priority of this replica 0
SENDGROUP_PEERING_NAME         kopf peering object name              sendgroup-operator
SENDGROUP_STATUS_REFRESH       min. seconds between status refreshes 60
SENDGROUP_WORKER_SERVICE_ACCOUNT ServiceAccount of worker/Job pods   (namespace default)
SENDGROUP_DEFAULT_SMTP_HOST/PORT/TLS  defaults for spec.smtp         localhost/25/none
SENDGROUP_JOB_TTL              ttlSecondsAfterFinished of Jobs       3600
SENDGROUP_JOB_DEADLINE         activeDeadlineSeconds of Jobs         3600
SENDGROUP_PURGE_TIMEOUT        seconds a deletion waits for Redis    300
SENDGROUP_ORPHAN_GRACE         seconds before "work, no workers"     120
SENDGROUP_LIVENESS_STALL       seconds without a reaper pass -> dead 120
SENDGROUP_PREFLIGHT_RETRY      seconds between preflight checks      10
POD_NAMESPACE                  the operator's own namespace          default
=============================  ====================================  =======================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from sendgroup_operator import models

DUMPS_MOUNT: Final = "/dumps"


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


@dataclass(frozen=True)
class Settings:
    """The operator's settings (see the module docstring for the env names)."""

    default_redis_url: str = "redis://redis:6379/0"
    default_image: str = "sendgroup-worker:latest"
    key_prefix: str = ""
    image_pull_policy: str = "IfNotPresent"
    allow_image_override: bool = False
    max_workers_per_group: int = models.MAX_WORKERS_PER_GROUP_DEFAULT
    max_total_workers: int | None = None
    dumps_claim_name: str = "sendgroup-dumps"
    reaper_interval: float = 10.0
    watch_namespaces: tuple[str, ...] = ()
    metrics_port: int = 8080
    peering_priority: int = 0
    peering_name: str = "sendgroup-operator"
    status_refresh: float = 60.0
    worker_service_account: str | None = None
    default_smtp_host: str = "localhost"
    default_smtp_port: int = 25
    default_smtp_tls: str = "none"
    job_ttl: int = 3600
    job_deadline: int = 3600
    job_backoff_limit: int = 3
    purge_timeout: float = 300.0
    orphan_grace: float = 120.0
    liveness_stall: float = 120.0
    preflight_retry: float = 10.0
    namespace: str = "default"

    @property
    def clusterwide(self) -> bool:
        """True when all namespaces are watched (``SENDGROUP_WATCH_NAMESPACES=*``)."""
        return "*" in self.watch_namespaces

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Namespaces to watch when not cluster-wide (default: the operator's own)."""
        return self.watch_namespaces or (self.namespace,)

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
        if tls not in ("none", "starttls", "tls"):
            raise SettingsError(f"SENDGROUP_DEFAULT_SMTP_TLS={tls!r}: none, starttls or tls")
        return cls(
            default_redis_url=e.get("SENDGROUP_DEFAULT_REDIS_URL") or d.default_redis_url,
            default_image=e.get("SENDGROUP_DEFAULT_IMAGE") or d.default_image,
            key_prefix=e.get("SENDGROUP_KEY_PREFIX", ""),
            image_pull_policy=e.get("SENDGROUP_IMAGE_PULL_POLICY") or d.image_pull_policy,
            allow_image_override=_bool(e, "SENDGROUP_ALLOW_IMAGE_OVERRIDE", False),
            max_workers_per_group=_req_int(
                e, "SENDGROUP_MAX_WORKERS_PER_GROUP", d.max_workers_per_group
            ),
            max_total_workers=_int(e, "SENDGROUP_MAX_TOTAL_WORKERS", None),
            dumps_claim_name=e.get("SENDGROUP_DUMPS_CLAIM_NAME") or d.dumps_claim_name,
            reaper_interval=float(_req_int(e, "SENDGROUP_REAPER_INTERVAL", 10) or 1),
            watch_namespaces=namespaces,
            metrics_port=_req_int(e, "SENDGROUP_METRICS_PORT", d.metrics_port),
            peering_priority=_req_int(e, "SENDGROUP_PEERING_PRIORITY", 0),
            peering_name=e.get("SENDGROUP_PEERING_NAME") or d.peering_name,
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
            namespace=e.get("POD_NAMESPACE") or d.namespace,
        )
