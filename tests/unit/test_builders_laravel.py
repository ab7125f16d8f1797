"""The worker Deployment of a ``runtime: laravel`` group: the shop's app image runs Laravel's own
``queue:work`` on the group's queue, its options generated from the spec, configured through the
variables a Laravel skeleton reads; the lifecycle (replicas, grace period, labels, security)
stays the one every group has."""

from __future__ import annotations

import dataclasses
from typing import Any

import pydantic
import pytest

from sendgroup_operator import builders, builders_laravel, models
from sendgroup_operator.settings import Settings

REF = builders.GroupRef("shop", "invoices", "uid-7", "billing", "gmail.com")
SETTINGS = Settings(
    default_image="sendgroup-worker:1",
    default_redis_url="redis://r:6379/0",
    allow_image_override=True,
    key_prefix="laravel_database_",
)


def _spec(worker: dict[str, Any], **kw: Any) -> models.SendGroupSpec:
    return models.SendGroupSpec.model_validate(
        {"campaign": "billing", "host": "gmail.com", "worker": worker, **kw}
    )


def _container(spec: models.SendGroupSpec, settings: Settings = SETTINGS) -> dict[str, Any]:
    dep = builders.deployment(REF, spec, settings, replicas=2)
    container: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_queue_work_command_line_comes_from_the_spec() -> None:
    spec = _spec(
        {
            "runtime": "laravel",
            "image": "shop/app:2026.11",
            "tries": 5,
            "backoff": [30, 120],
            "timeout": 100,
            "retryAfter": 150,
            "laravel": {"artisan": ["php", "/var/www/html/artisan"], "maxJobs": 500,
                        "maxTime": 3600, "memory": 256},
        },
        queue="{mail-invoices}",
    )  # fmt: skip
    c = _container(spec)
    assert c["image"] == "shop/app:2026.11"
    assert c["command"][:4] == ["/bin/sh", "-c", builders_laravel.PREPARE, "queue-work"]
    assert c["command"][4:] == [
        "php", "/var/www/html/artisan", "queue:work", "redis", "--queue={mail-invoices}",
        "--tries=5", "--backoff=30,120", "--timeout=100", "--sleep=3", "--memory=256",
        "--max-jobs=500", "--max-time=3600", "--no-interaction",
    ]  # fmt: skip
    assert c["ports"] == []  # no metrics endpoint in a Laravel worker


def test_defaults_and_laravel_environment() -> None:
    spec = _spec(
        {"runtime": "laravel", "image": "shop/app:1"},
        redis={"secretRef": {"name": "redis", "key": "url"}},
        smtp={"host": "relay.mail", "port": 587, "tls": "starttls",
              "secretRef": {"name": "relay", "usernameKey": "u", "passwordKey": "p"}},
    )  # fmt: skip
    c = _container(spec)
    assert c["command"][4:] == [
        "php", "artisan", "queue:work", "redis", "--queue=mail-invoices", "--tries=3",
        "--backoff=10,60,300", "--timeout=60", "--sleep=3", "--memory=128", "--no-interaction",
    ]  # fmt: skip
    env = _env(c)
    assert env["REDIS_URL"] == {"secretKeyRef": {"name": "redis", "key": "url"}}
    assert env["REDIS_PREFIX"] == "laravel_database_"
    assert (env["REDIS_QUEUE"], env["REDIS_QUEUE_RETRY_AFTER"]) == ("mail-invoices", "90")
    assert (env["QUEUE_CONNECTION"], env["MAIL_MAILER"]) == ("redis", "smtp")
    assert (env["MAIL_HOST"], env["MAIL_PORT"], env["MAIL_ENCRYPTION"]) == (
        "relay.mail",
        "587",
        "tls",
    )
    assert env["MAIL_PASSWORD"] == {"secretKeyRef": {"name": "relay", "key": "p"}}
    assert env["LOG_CHANNEL"] == "stderr"
    writable = ("LARAVEL_STORAGE_PATH", "VIEW_COMPILED_PATH", "APP_SERVICES_CACHE",
                "APP_PACKAGES_CACHE")  # fmt: skip
    assert all(env[k].startswith("/tmp/") for k in writable)
    assert (env["SENDGROUP_NAME"], env["SENDGROUP_NAMESPACE"]) == ("invoices", "shop")
    # the Python worker's settings do not leak into the app's environment
    assert not {k for k in env if k.startswith(("WORKER_", "RATE_", "BACKPRESSURE_", "SMTP_"))}


def test_lifecycle_is_the_same_as_every_group() -> None:
    spec = _spec({"runtime": "laravel", "image": "shop/app:1", "timeout": 100, "retryAfter": 150})
    dep = builders.deployment(REF, spec, SETTINGS, replicas=0)
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 0  # paused / idle / capped like any group
    assert pod["terminationGracePeriodSeconds"] == 130  # queue:work finishes its job on SIGTERM
    assert pod["shareProcessNamespace"] is True  # php is not PID 1
    c = pod["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    assert dep["metadata"]["labels"]["sendgroups.io/group"] == "invoices"
    python = builders.deployment(REF, _spec({"image": "shop/app:1"}), SETTINGS, replicas=0)
    assert builders.template_hash(REF, spec, SETTINGS) != builders.template_hash(
        REF, _spec({"image": "shop/app:1", "timeout": 100, "retryAfter": 150}), SETTINGS
    )
    assert python["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "sendgroup-worker", "work",
    ]  # fmt: skip


def test_mail_encryption_for_each_tls_mode() -> None:
    """Laravel <= 10 reads MAIL_ENCRYPTION, Laravel 11+'s skeleton MAIL_SCHEME (review of
    issue 18: only the first was set, so the TLS mode never reached a modern app)."""
    for tls, encryption, scheme in (
        ("none", "null", "smtp"),
        ("starttls", "tls", "smtp"),
        ("tls", "ssl", "smtps"),
    ):
        spec = _spec({"runtime": "laravel", "image": "a:1"}, smtp={"tls": tls})
        env = _env(_container(spec))
        assert (env["MAIL_ENCRYPTION"], env["MAIL_SCHEME"]) == (encryption, scheme)


def test_runtime_laravel_without_an_image_is_refused_by_the_schema() -> None:
    """The CEL rule (enforced by the API server) and the operator's own image rule."""
    rules = [v["rule"] for v in models.WorkerSpec.model_json_schema()["x-kubernetes-validations"]]
    assert "!has(self.runtime) || self.runtime != 'laravel' || has(self.image)" in rules
    with pytest.raises(pydantic.ValidationError):
        _spec({"runtime": "php"})
    no_override = dataclasses.replace(SETTINGS, allow_image_override=False)
    c = _container(_spec({"runtime": "laravel", "image": "shop/app:1"}), no_override)
    assert c["image"] == "sendgroup-worker:1"  # the operator's rule wins: see docs/laravel.md


def test_dump_restore_and_purge_jobs_run_the_operator_s_image_not_the_app_s() -> None:
    """The Jobs run ``sendgroup-worker dump|restore|purge``: the shop's app image has no such
    command (before, a laravel group's dump Job ran the app image and failed), so they run the
    operator's image; a Python-runtime group's overriding image (a build of our worker) keeps
    running its Jobs."""
    spec = _spec({"runtime": "laravel", "image": "shop/app:1"})
    python = _spec({"image": "shop/worker:2"})
    for kind in ("dump", "restore", "purge"):
        job = builders.job(REF, spec, SETTINGS, kind, 1)
        containers = job["spec"]["template"]["spec"]["containers"]
        assert [c["image"] for c in containers] == ["sendgroup-worker:1"], kind
        assert containers[0]["command"][0] == "sendgroup-worker"
        other = builders.job(REF, python, SETTINGS, kind, 1)["spec"]["template"]["spec"]
        assert [c["image"] for c in other["containers"]] == ["shop/worker:2"], kind
