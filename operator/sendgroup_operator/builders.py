"""Pure builders of the children of a SendGroup: names, labels, the worker Deployment and the
dump/restore/purge Jobs. Plain dicts in the Kubernetes API's JSON shape; no client calls.

The worker's environment variables are the rows of
:data:`sendgroup_contract.worker_settings.WORKER_SETTINGS` (the worker's config reads the same
table); this module is the one place that spells the dump/restore commands' arguments.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from sendgroup_contract import durations
from sendgroup_contract import worker_settings as ws
from sendgroup_operator import builders_laravel, models
from sendgroup_operator.settings import DUMPS_MOUNT, Settings, image_allowed

MAX_NAME: Final = 63
HASH_LEN: Final = 8

#: the dump segments' signing key (``sendgroup_worker.dumps.format.KEY_ENV``), a Job variable
ENV_DUMP_SIGNING_KEY: Final = "DUMP_SIGNING_KEY"

WORKER_COMMAND: Final = ("sendgroup-worker", "work")
#: ``sendgroup-worker <cmd> --queue Q --dumps-dir DIR`` per Job kind; Redis from $REDIS_URL.
#: ``purge --dumps-dir`` deletes the queue's keys and its dump segments.
JOB_COMMANDS: Final = {"dump": "dump", "restore": "restore", "purge": "purge"}
WORKER_METRICS_PORT: Final = 9090
#: The worker's /livez and /readyz port (sendgroup_worker.health).
WORKER_HEALTH_PORT: Final = 8080
#: A liveness failure means the worker is hung: it will not finish its job, so the kubelet
#: kills it after this many seconds instead of the pod's (job-sized) grace period.
LIVENESS_GRACE_SECONDS: Final = 10
GRACE_MARGIN_SECONDS: Final = 30
DEFAULT_RESOURCES: Final = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"memory": "256Mi"},
}
#: Resources of a dump/restore/purge Job container unless the group (spec.jobs.resources) or
#: the operator (setting jobResources) says otherwise. A CPU limit, so that a namespace quota
#: on limits.cpu admits the Jobs.
DEFAULT_JOB_RESOURCES: Final = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"cpu": "1", "memory": "512Mi"},
}

LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_CAMPAIGN: Final = "sendgroups.io/campaign"
LABEL_HOST: Final = "sendgroups.io/host"
LABEL_GROUP: Final = "sendgroups.io/group"
ANNOTATION_TEMPLATE_HASH: Final = "sendgroups.io/template-hash"
APP_NAME: Final = "sendgroup-worker"
PART_OF: Final = "sendgroup-operator"
MANAGED_BY: Final = "sendgroup-operator"

JobKind = Literal["dump", "restore", "purge"]

_LABEL_BAD: Final = re.compile(r"[^A-Za-z0-9._-]+")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LEN]


def shorten(base: str, suffix: str = "", limit: int = MAX_NAME) -> str:
    """``base + suffix`` if it fits in ``limit`` characters, else ``base`` cut and followed by
    ``-<8 hex of sha256(base)>`` so that the result plus ``suffix`` is exactly ``limit`` long.
    Stable: the same input always gives the same name; two long names that share a prefix
    differ by their hash."""
    if len(base) + len(suffix) <= limit:
        return base + suffix
    keep = limit - len(suffix) - HASH_LEN - 1
    return f"{base[:keep].rstrip('-.')}-{_digest(base)}{suffix}"


def label_value(text: str) -> str:
    """``text`` as a valid label value (<= 63 chars of ``[A-Za-z0-9._-]``, alphanumeric at
    both ends); characters outside that set become ``-`` and a hash keeps it unique."""
    clean = _LABEL_BAD.sub("-", text).strip("-._")
    if clean == text and len(clean) <= MAX_NAME:
        return clean
    keep = MAX_NAME - HASH_LEN - 1
    head = clean[:keep].strip("-._")
    return f"{head}-{_digest(text)}" if head else _digest(text)


def deployment_name(group: str) -> str:
    """``sg-<group>``, shortened with a hash beyond 63 characters."""
    return shorten(f"sg-{group}")


def job_name(group: str, kind: JobKind, number: int) -> str:
    """``sg-<group>-<kind>-<n>``, the group part shortened so the suffix stays readable."""
    return shorten(f"sg-{group}", f"-{kind}-{number}")


@dataclass(frozen=True)
class GroupRef:
    """Identity of a SendGroup as its children need it."""

    namespace: str
    name: str
    uid: str
    campaign: str
    host: str
    created_at: str | None = None


def labels(ref: GroupRef, component: str) -> dict[str, str]:
    """Labels of every child: app.kubernetes.io/* and sendgroups.io/*."""
    return {
        LABEL_NAME: APP_NAME,
        LABEL_INSTANCE: label_value(ref.name),
        LABEL_COMPONENT: component,
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_CAMPAIGN: label_value(ref.campaign),
        LABEL_HOST: label_value(ref.host),
        LABEL_GROUP: label_value(ref.name),
    }


#: Labels every worker Deployment of ours carries (a watch filter), and the same as a selector.
WORKER_LABELS: Final = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "worker"}
WORKER_SELECTOR: Final = ",".join(f"{k}={v}" for k, v in WORKER_LABELS.items())


def group_selector(ref: GroupRef) -> str:
    """Label selector of all pods/Jobs/Deployments of one group."""
    return f"{LABEL_GROUP}={label_value(ref.name)},{LABEL_PART_OF}={PART_OF}"


def worker_selector(ref: GroupRef) -> str:
    """Label selector of the group's worker pods."""
    return f"{group_selector(ref)},{LABEL_COMPONENT}=worker"


def owner_reference(ref: GroupRef) -> dict[str, Any]:
    """ownerReference to the SendGroup (controller, blocks owner deletion)."""
    return {
        "apiVersion": models.API_VERSION,
        "kind": models.KIND,
        "name": ref.name,
        "uid": ref.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(ref: GroupRef, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": labels(ref, component),
        "ownerReferences": [owner_reference(ref)],
    }


def container_security_context() -> dict[str, Any]:
    """Restricted Pod Security Standard, container level."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context() -> dict[str, Any]:
    """Restricted Pod Security Standard, pod level (uid/gid 10001, group-owned volumes)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def image(spec: models.SendGroupSpec, settings: Settings, namespace: str) -> str:
    """The worker image: ``spec.worker.image`` only if the operator allows it for the group's
    ``namespace`` (:func:`~sendgroup_operator.settings.image_allowed`), else ``defaultImage``."""
    if spec.worker.image and image_allowed(settings, spec.worker.image, namespace):
        return spec.worker.image
    return settings.default_image


def job_image(spec: models.SendGroupSpec, settings: Settings, namespace: str) -> str:
    """The dump/restore/purge Job's image: the worker image of a Python-runtime group (an
    overriding image is a build of our worker, with its CLI), the operator's own image for
    ``runtime: laravel`` (the shop's app image has no ``sendgroup-worker``; the Job works on
    the queue's keys whatever worker kind drains them)."""
    if spec.worker.runtime is models.WorkerRuntime.LARAVEL:
        return settings.default_image
    return image(spec, settings, namespace)


def env_value(setting: ws.WorkerSetting, value: object) -> dict[str, Any]:
    """A container env entry for ``setting`` with a plain value."""
    return {"name": setting.env, "value": str(value)}


def env_secret(setting: ws.WorkerSetting, secret: str, key: str) -> dict[str, Any]:
    """A container env entry for ``setting`` read from a Secret's key."""
    return {"name": setting.env, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def default_redis_env(setting: ws.WorkerSetting, settings: Settings) -> dict[str, Any]:
    """``setting`` (``REDIS_URL``, ``PROVIDER_REDIS_URL``) from the operator's default Redis:
    its Secret (``defaultRedisSecretRef``, same name in the group's namespace) when set, the
    plain ``defaultRedisUrl`` otherwise."""
    default_secret = settings.default_redis_secret_ref
    if default_secret is not None:
        return env_secret(setting, *default_secret)
    return env_value(setting, settings.default_redis_url)


def redis_env(spec: models.SendGroupSpec, settings: Settings) -> dict[str, Any]:
    """``REDIS_URL``: from the Secret when ``redis.secretRef`` is set (the password never
    appears in the pod spec), else the password-less ``redis.url``, else the operator default:
    its Secret (``defaultRedisSecretRef``, same name in the group's namespace) when set, the
    plain ``defaultRedisUrl`` otherwise."""
    redis = spec.redis
    if redis is not None and redis.secret_ref is not None:
        return env_secret(ws.REDIS_URL, redis.secret_ref.name, redis.secret_ref.key)
    if redis is not None and redis.url:
        return env_value(ws.REDIS_URL, redis.url)
    return default_redis_env(ws.REDIS_URL, settings)


def worker_env(
    ref: GroupRef,
    spec: models.SendGroupSpec,
    settings: Settings,
    provider_env: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Environment of a worker container: rows of the contract's ``WORKER_SETTINGS``;
    ``provider_env``: the entries for the group's provider
    (``provider_plan.worker_provider_env``), if any."""
    w = spec.worker
    smtp = spec.smtp or models.SmtpSpec()
    env = [
        env_value(ws.QUEUE, spec.queue_name(ref.name)),
        env_value(ws.KEY_PREFIX, settings.key_prefix),
        env_value(ws.GROUP, ref.name),
        env_value(ws.NAMESPACE, ref.namespace),
        redis_env(spec, settings),
        env_value(ws.SMTP_HOST, smtp.host or settings.default_smtp_host),
        env_value(ws.SMTP_PORT, smtp.port or settings.default_smtp_port),
        env_value(ws.SMTP_TLS, (smtp.tls.value if smtp.tls else settings.default_smtp_tls)),
        env_value(ws.TRIES, w.tries),
        env_value(ws.BACKOFF, ",".join(str(b) for b in w.backoff)),
        env_value(ws.TIMEOUT, w.timeout),
        env_value(ws.RETRY_AFTER, w.retry_after),
        env_value(ws.BACKPRESSURE_SUSPEND_AFTER, spec.backpressure.suspend_after),
        env_value(
            ws.BACKPRESSURE_SUSPEND_FOR,
            int(durations.parse_seconds(spec.backpressure.suspend_for)),
        ),
        env_value(ws.METRICS_PORT, WORKER_METRICS_PORT),
        env_value(ws.HEALTH_PORT, WORKER_HEALTH_PORT),
        env_value(ws.STALL_AFTER, (w.probes or models.WorkerProbesSpec()).stall_after),
    ]
    if smtp.secret_ref is not None:
        env.append(env_secret(ws.SMTP_USERNAME, smtp.secret_ref.name, smtp.secret_ref.username_key))
        env.append(env_secret(ws.SMTP_PASSWORD, smtp.secret_ref.name, smtp.secret_ref.password_key))
    if spec.rate is not None and spec.rate.per_minute is not None:
        env.append(env_value(ws.RATE_PER_MINUTE, spec.rate.per_minute))
        burst = spec.rate.burst or -(-spec.rate.per_minute // 60)
        env.append(env_value(ws.RATE_BURST, burst))
    if spec.warmup is not None and spec.warmup.start_per_hour is not None:
        env.append(env_value(ws.WARMUP_START_PER_HOUR, spec.warmup.start_per_hour))
        env.append(env_value(ws.WARMUP_GROWTH_PER_DAY, spec.warmup.growth_per_day))
        since = spec.warmup.since.isoformat() if spec.warmup.since else ref.created_at
        if since:
            env.append(env_value(ws.WARMUP_SINCE, since))
    if spec.backpressure.patterns:
        env.append(env_value(ws.BACKPRESSURE_PATTERNS, "\n".join(spec.backpressure.patterns)))
    env.extend(dict(entry) for entry in provider_env)
    return env


def _probe(path: str, timing: models.ProbeSpec | None) -> dict[str, Any]:
    t = timing or models.ProbeSpec()
    return {
        "httpGet": {"path": path, "port": "health"},
        "periodSeconds": t.period_seconds,
        "timeoutSeconds": t.timeout_seconds,
        "failureThreshold": t.failure_threshold,
    }


def worker_probes(spec: models.SendGroupSpec) -> dict[str, Any]:
    """``livenessProbe`` and ``readinessProbe`` of the worker container (``{}`` when
    ``worker.probes.enabled`` is false, and for ``runtime: laravel``). Liveness: ``GET /livez``,
    killed within :data:`LIVENESS_GRACE_SECONDS` when it fails; readiness: ``GET /readyz``."""
    probes = spec.worker.probes or models.WorkerProbesSpec()
    if not probes.enabled or spec.worker.runtime is models.WorkerRuntime.LARAVEL:
        return {}  # php artisan queue:work serves no /livez or /readyz
    liveness = _probe("/livez", probes.liveness)
    liveness["terminationGracePeriodSeconds"] = LIVENESS_GRACE_SECONDS
    return {"livenessProbe": liveness, "readinessProbe": _probe("/readyz", probes.readiness)}


def _resources(spec: models.SendGroupSpec) -> dict[str, Any]:
    """The container's resources; every quantity as a string (``cpu: 1`` in a manifest is an
    integer, which core/v1 accepts but the Kubernetes client's models do not)."""
    res = spec.worker.resources
    if res is None:
        return {k: dict(v) for k, v in DEFAULT_RESOURCES.items()}
    dumped: dict[str, dict[str, Any]] = res.model_dump(by_alias=True, exclude_none=True)
    return {section: {k: str(q) for k, q in values.items()} for section, values in dumped.items()}


def _merged_map(default: dict[str, str] | None, group: dict[str, str] | None) -> dict[str, str]:
    return {**(default or {}), **(group or {})}


def pod_template(spec: models.SendGroupSpec, settings: Settings) -> models.PodTemplateSpec:
    """The group's ``spec.podTemplate`` merged over the operator's ``podTemplate`` setting:
    nodeSelector, labels and annotations key by key (the group's value wins); tolerations,
    affinity, topologySpreadConstraints, priorityClassName and imagePullSecrets from the group
    when it sets them, else from the default."""
    base = settings.pod_template or models.PodTemplateSpec()
    group = spec.pod_template or models.PodTemplateSpec()
    base_meta = base.metadata or models.PodMetadata()
    group_meta = group.metadata or models.PodMetadata()
    return models.PodTemplateSpec(
        metadata=models.PodMetadata(
            labels=_merged_map(base_meta.labels, group_meta.labels) or None,
            annotations=_merged_map(base_meta.annotations, group_meta.annotations) or None,
        ),
        node_selector=_merged_map(base.node_selector, group.node_selector) or None,
        tolerations=group.tolerations if group.tolerations is not None else base.tolerations,
        affinity=group.affinity if group.affinity is not None else base.affinity,
        topology_spread_constraints=(
            group.topology_spread_constraints
            if group.topology_spread_constraints is not None
            else base.topology_spread_constraints
        ),
        priority_class_name=group.priority_class_name or base.priority_class_name,
        image_pull_secrets=(
            group.image_pull_secrets
            if group.image_pull_secrets is not None
            else base.image_pull_secrets
        ),
    )


def _dump(items: list[Any]) -> list[dict[str, Any]]:
    return [i.model_dump(by_alias=True, exclude_none=True) for i in items]


def _template_metadata(own: dict[str, str], template: models.PodTemplateSpec) -> dict[str, Any]:
    """Pod template metadata: the extra labels under the operator's own (which always win:
    selectors and the operator's lookups rely on them), and the extra annotations."""
    meta = template.metadata or models.PodMetadata()
    out: dict[str, Any] = {"labels": {**(meta.labels or {}), **own}}
    if meta.annotations:
        out["annotations"] = dict(meta.annotations)
    return out


def _pod_spec(
    ref: GroupRef,
    spec: models.SendGroupSpec,
    settings: Settings,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    own_labels: dict[str, str],
) -> dict[str, Any]:
    """The pod spec workers and Jobs share. ``shareProcessNamespace``: the pod's pause
    container is PID 1, so our process is not, and a SIGTERM that arrives before Python has
    installed its handlers still ends it (the kernel drops unhandled signals only for PID 1);
    the pause container also reaps zombies (Kubernetes docs, "Share Process Namespace between
    Containers in a Pod")."""
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "shareProcessNamespace": True,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}, *volumes],
    }
    if settings.worker_service_account:
        pod["serviceAccountName"] = settings.worker_service_account
    t = pod_template(spec, settings)
    if t.node_selector:
        pod["nodeSelector"] = dict(t.node_selector)
    if t.tolerations:
        pod["tolerations"] = _dump(t.tolerations)
    if t.affinity:
        pod["affinity"] = t.affinity
    if t.topology_spread_constraints:
        spread = _dump(t.topology_spread_constraints)
        for constraint in spread:  # default: this group's pods of the same component
            constraint.setdefault(
                "labelSelector",
                {
                    "matchLabels": {
                        LABEL_GROUP: own_labels[LABEL_GROUP],
                        LABEL_COMPONENT: own_labels[LABEL_COMPONENT],
                    }
                },
            )
        pod["topologySpreadConstraints"] = spread
    if t.priority_class_name:
        pod["priorityClassName"] = t.priority_class_name
    if t.image_pull_secrets:
        pod["imagePullSecrets"] = _dump(t.image_pull_secrets)
    return pod


def job_resources(spec: models.SendGroupSpec, settings: Settings) -> dict[str, Any]:
    """Resources of a Job container: ``spec.jobs.resources``, else the operator's
    ``jobResources``, else :data:`DEFAULT_JOB_RESOURCES`."""
    res = (spec.jobs.resources if spec.jobs else None) or settings.job_resources
    if res is None:
        return {k: dict(v) for k, v in DEFAULT_JOB_RESOURCES.items()}
    dumped: dict[str, dict[str, Any]] = res.model_dump(by_alias=True, exclude_none=True)
    return {section: {k: str(q) for k, q in values.items()} for section, values in dumped.items()}


def pod_disruption_budget(ref: GroupRef, spec: models.SendGroupSpec) -> dict[str, Any] | None:
    """PodDisruptionBudget ``sg-<name>`` over the group's worker pods when
    ``spec.disruptionBudget`` is set, else None. ``unhealthyPodEvictionPolicy: AlwaysAllow``:
    a worker that is not Ready (Redis down) never blocks a node drain."""
    budget = spec.disruption_budget
    if budget is None:
        return None
    meta = _metadata(ref, deployment_name(ref.name), "worker")
    body: dict[str, Any] = {
        "selector": {
            "matchLabels": {LABEL_GROUP: meta["labels"][LABEL_GROUP], LABEL_COMPONENT: "worker"}
        },
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
    if budget.min_available is not None:
        body["minAvailable"] = budget.min_available
    else:
        body["maxUnavailable"] = budget.max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta,
        "spec": body,
    }


def budget_pending_hash(template_hash: str) -> str:
    """The template-hash annotation of a Deployment applied while its PodDisruptionBudget was
    refused (:func:`deployment` with ``budget_applied`` False): never the wanted hash, so the
    planner plans the Deployment again (and with it the budget) and knows why."""
    return _digest(f"budget-pending:{template_hash}")


def deployment(
    ref: GroupRef,
    spec: models.SendGroupSpec,
    settings: Settings,
    replicas: int,
    provider_env: Sequence[Mapping[str, Any]] = (),
    budget_applied: bool = True,
) -> dict[str, Any]:
    """The worker Deployment ``sg-<name>`` with ``replicas`` pods; ``provider_env`` as in
    :func:`worker_env` (part of the template, so a provider change rolls the workers).
    ``budget_applied`` False: the PodDisruptionBudget the spec asks for was refused, so the
    template-hash annotation is :func:`budget_pending_hash` of the wanted one (the next pass
    sees it and applies both again) instead of claiming the budget.

    Grace period = ``worker.timeout`` + 30 s, so a stopping worker finishes its job.
    """
    meta = _metadata(ref, deployment_name(ref.name), "worker")
    selector = {LABEL_GROUP: meta["labels"][LABEL_GROUP], LABEL_COMPONENT: "worker"}
    container = {
        "name": "worker",
        "image": image(spec, settings, ref.namespace),
        "imagePullPolicy": settings.image_pull_policy,
        "command": list(WORKER_COMMAND),
        "env": worker_env(ref, spec, settings, provider_env),
        "ports": [
            {"name": "metrics", "containerPort": WORKER_METRICS_PORT},
            {"name": "health", "containerPort": WORKER_HEALTH_PORT},
        ],
        **worker_probes(spec),
        "resources": _resources(spec),
        "securityContext": container_security_context(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if spec.worker.runtime is models.WorkerRuntime.LARAVEL:
        container.update(_laravel_container(ref, spec, settings))
    pod = _pod_spec(ref, spec, settings, container, [], meta["labels"])
    pod["terminationGracePeriodSeconds"] = spec.worker.timeout + GRACE_MARGIN_SECONDS
    template = {
        "metadata": _template_metadata(meta["labels"], pod_template(spec, settings)),
        "spec": pod,
    }
    # The hash also covers the PodDisruptionBudget, so changing only spec.disruptionBudget is
    # noticed and applied with the Deployment (reconcile's EnsureDeployment).
    budget = pod_disruption_budget(ref, spec)
    hashed: Any = template if budget is None else [template, budget["spec"]]
    want = _digest(json.dumps(hashed, sort_keys=True))
    meta["annotations"] = {
        ANNOTATION_TEMPLATE_HASH: want if budget_applied else budget_pending_hash(want)
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 2,
            "selector": {"matchLabels": selector},
            "template": template,
        },
    }


def _laravel_container(
    ref: GroupRef, spec: models.SendGroupSpec, settings: Settings
) -> dict[str, Any]:
    """What differs for ``runtime: laravel`` (see :mod:`sendgroup_operator.builders_laravel`):
    the app's ``queue:work`` command, Laravel's environment variables, no metrics port."""
    queue = spec.queue_name(ref.name)
    smtp = spec.smtp or models.SmtpSpec()
    identity = [
        env_value(ws.QUEUE, queue),
        env_value(ws.GROUP, ref.name),
        env_value(ws.NAMESPACE, ref.namespace),
    ]
    return {
        "command": builders_laravel.queue_work_command(spec, queue),
        "env": builders_laravel.laravel_env(
            spec,
            queue,
            redis_env(spec, settings),
            settings.key_prefix,
            smtp.host or settings.default_smtp_host,
            smtp.port or settings.default_smtp_port,
            smtp.tls.value if smtp.tls else settings.default_smtp_tls,
            identity,
        ),
        "ports": [],
    }


def _env_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One env entry as the API server keeps it, whatever defaults it filled in: a missing
    ``value`` is ``""``; ``fieldRef.apiVersion`` (default ``v1``) and ``secretKeyRef.optional``
    (default false) are dropped unless set otherwise."""
    out: dict[str, Any] = {"name": entry.get("name")}
    source = entry.get("valueFrom")
    if not isinstance(source, Mapping):
        out["value"] = entry.get("value") or ""
        return out
    norm: dict[str, Any] = {}
    for kind, ref in source.items():
        if not isinstance(ref, Mapping):
            norm[kind] = ref
            continue
        ref = dict(ref)
        if kind == "fieldRef" and ref.get("apiVersion") == "v1":
            ref.pop("apiVersion")
        if ref.get("optional") is False:
            ref.pop("optional")
        norm[kind] = ref
    out["valueFrom"] = norm
    return out


def owned_fingerprint(template: Mapping[str, Any]) -> str:
    """Hash of what the operator owns in a worker pod template and the API server never
    defaults: each container's name, image, command, args, env (:func:`_env_entry`), envFrom
    and volume mounts, and each volume's name and kind. Computed alike from the template the
    operator builds and from the Deployment it reads back: a difference means someone edited
    the Deployment (a namespace admin's ``kubectl edit`` of ``SENDGROUP_QUEUE`` or ``REDIS_URL``, an
    added container or hostPath volume), which the template-hash annotation alone cannot see
    (security review, issue 16). Shape: 12 hex characters."""
    spec = template.get("spec") or {}

    def container(c: Mapping[str, Any]) -> dict[str, Any]:
        mounts = [
            {
                "name": m.get("name"),
                "mountPath": m.get("mountPath"),
                "subPath": m.get("subPath") or "",
                "readOnly": bool(m.get("readOnly")),
            }
            for m in c.get("volumeMounts") or []
        ]
        return {
            "name": c.get("name"),
            "image": c.get("image"),
            "command": list(c.get("command") or []),
            "args": list(c.get("args") or []),
            "env": [_env_entry(e) for e in c.get("env") or []],
            "envFrom": list(c.get("envFrom") or []),
            "volumeMounts": mounts,
        }

    owned = {
        "containers": [container(c) for c in spec.get("containers") or []],
        "initContainers": [container(c) for c in spec.get("initContainers") or []],
        "volumes": [
            [v.get("name"), sorted(k for k in v if k != "name")] for v in spec.get("volumes") or []
        ],
    }
    return _digest(json.dumps(owned, sort_keys=True))


def template_hash(
    ref: GroupRef,
    spec: models.SendGroupSpec,
    settings: Settings,
    provider_env: Sequence[Mapping[str, Any]] = (),
) -> str:
    """Hash of the worker pod template the spec asks for (annotation on the Deployment), so a
    spec change is noticed without comparing whole objects."""
    annotations: dict[str, str] = deployment(ref, spec, settings, 0, provider_env)["metadata"][
        "annotations"
    ]
    return annotations[ANNOTATION_TEMPLATE_HASH]


def template_fingerprints(
    ref: GroupRef,
    spec: models.SendGroupSpec,
    settings: Settings,
    provider_env: Sequence[Mapping[str, Any]] = (),
) -> tuple[str, str]:
    """``(template hash, owned fingerprint)`` of the worker Deployment the spec asks for
    (:func:`template_hash`, :func:`owned_fingerprint`), built once."""
    dep = deployment(ref, spec, settings, 0, provider_env)
    return (
        dep["metadata"]["annotations"][ANNOTATION_TEMPLATE_HASH],
        owned_fingerprint(dep["spec"]["template"]),
    )


def dumps_dir(ref: GroupRef) -> str:
    """The group's directory on the dumps volume: ``/dumps/<namespace>/<name>``. Namespace
    and name are DNS labels/subdomains (no ``/``, no ``..``), so two namespaces never share a
    directory."""
    for part in (ref.namespace, ref.name):
        if not part or "/" in part or ".." in part or part.startswith("."):
            raise ValueError(f"unsafe path segment {part!r}")
    return f"{DUMPS_MOUNT}/{ref.namespace}/{ref.name}"


def job_command(ref: GroupRef, spec: models.SendGroupSpec, kind: JobKind) -> list[str]:
    """``sendgroup-worker dump|restore|purge --queue Q --dumps-dir DIR``."""
    return [
        "sendgroup-worker",
        JOB_COMMANDS[kind],
        "--queue",
        spec.queue_name(ref.name),
        "--dumps-dir",
        dumps_dir(ref),
    ]


# os.makedirs, not mkdir(1): BASE_IMAGE only promises CPython (the Dockerfile's contract).
MAKE_DUMPS_DIR = "import os, sys; os.makedirs(sys.argv[1], mode=0o750, exist_ok=True)"


def dumps_dir_container(
    ref: GroupRef, spec: models.SendGroupSpec, settings: Settings
) -> dict[str, Any]:
    """Init container ``dumps-dir``: creates the group's directory on the claim
    (``/dumps/<namespace>/<name>``, mode 0750 as docs/dumps.md says) as the Job's own non-root
    user, before the Job's container mounts only that directory by subPath. Without it the
    kubelet would create the missing subPath directory owned by root, where the non-root Job
    cannot write. It mounts the whole claim, so it always runs the operator's own image (never
    ``spec.worker.image``) and this fixed command."""
    return {
        "name": "dumps-dir",
        "image": settings.default_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["python3", "-c", MAKE_DUMPS_DIR, dumps_dir(ref)],
        "resources": job_resources(spec, settings),
        "securityContext": container_security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "dumps", "mountPath": DUMPS_MOUNT}],
    }


def job(
    ref: GroupRef, spec: models.SendGroupSpec, settings: Settings, kind: JobKind, number: int
) -> dict[str, Any]:
    """Job ``sg-<name>-<kind>-<n>`` mounting the dumps PVC, with bounded retries
    (``backoffLimit``), a deadline (``activeDeadlineSeconds``) and ``ttlSecondsAfterFinished``.
    The command's JSON summary goes to stdout; its last line also becomes the termination
    message (``FallbackToLogsOnError``) when it fails."""
    meta = _metadata(ref, job_name(ref.name, kind, number), kind)
    env = [
        env_value(ws.QUEUE, spec.queue_name(ref.name)),
        env_value(ws.KEY_PREFIX, settings.key_prefix),
        redis_env(spec, settings),
    ]
    key_ref = settings.dump_signing_secret_ref
    if key_ref is not None:
        name, key = key_ref
        env.append(
            {
                "name": ENV_DUMP_SIGNING_KEY,
                "valueFrom": {"secretKeyRef": {"name": name, "key": key}},
            }
        )
    container = {
        "name": kind,
        "image": job_image(spec, settings, ref.namespace),
        "imagePullPolicy": settings.image_pull_policy,
        "command": job_command(ref, spec, kind),
        "env": env,
        "resources": job_resources(spec, settings),
        "securityContext": container_security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            # Only the group's own directory of the claim (the kubelet resolves subPath without
            # following links out of the volume): the Job, whatever its image, never sees
            # another group's or another namespace's dumps.
            {
                "name": "dumps",
                "mountPath": dumps_dir(ref),
                "subPath": f"{ref.namespace}/{ref.name}",
            },
        ],
    }
    volumes = [{"name": "dumps", "persistentVolumeClaim": {"claimName": settings.dumps_claim_name}}]
    pod = _pod_spec(ref, spec, settings, container, volumes, meta["labels"])
    pod["initContainers"] = [dumps_dir_container(ref, spec, settings)]
    pod["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": settings.job_backoff_limit,
            "activeDeadlineSeconds": settings.job_deadline,
            "ttlSecondsAfterFinished": settings.job_ttl,
            "template": {
                "metadata": _template_metadata(meta["labels"], pod_template(spec, settings)),
                "spec": pod,
            },
        },
    }
