"""The worker container of a ``spec.worker.runtime: laravel`` group (pure, no I/O).

The shop's app image runs Laravel's own worker on the group's queue::

    /bin/sh -c <PREPARE> queue-work <worker.laravel.artisan...> queue:work <connection>
        --queue=<spec.queue> --tries=<tries> --backoff=<b1,b2,..> --timeout=<timeout>
        --sleep=<sleep> --memory=<memory> [--max-jobs=N] [--max-time=S] --no-interaction

and reads the group's settings through the environment variables a Laravel skeleton's config
files already read (``config/database.php``, ``queue.php``, ``mail.php``, ``view.php``):

* ``QUEUE_CONNECTION``: ``worker.laravel.connection``;
* ``REDIS_URL``: the group's Redis (from ``redis.secretRef`` when set: no password in the pod
  spec); ``REDIS_PREFIX``: the operator's ``keyPrefix`` (the producers' prefix);
* ``REDIS_QUEUE``, ``REDIS_QUEUE_RETRY_AFTER``: ``spec.queue``, ``worker.retryAfter`` (Laravel
  11's skeleton names);
* ``MAIL_MAILER`` (``smtp``), ``MAIL_HOST``, ``MAIL_PORT``, ``MAIL_ENCRYPTION`` (tls none,
  starttls, tls -> null, tls, ssl: Laravel <= 10's ``mail.php``), ``MAIL_SCHEME`` (-> smtp,
  smtp, smtps: Laravel 11+'s skeleton reads this one instead; Symfony Mailer's ``smtp``
  scheme takes STARTTLS when the server offers it), ``MAIL_USERNAME``/``MAIL_PASSWORD`` (from
  ``smtp.secretRef``): the group's relay;
* ``LOG_CHANNEL``: ``stderr``;
* ``LARAVEL_STORAGE_PATH``, ``VIEW_COMPILED_PATH``, ``APP_SERVICES_CACHE``,
  ``APP_PACKAGES_CACHE``: under ``/tmp``, the only writable path (the root filesystem is
  read-only);
* ``SENDGROUP_QUEUE``, ``SENDGROUP_NAME``, ``SENDGROUP_NAMESPACE``: the group, for the app's logs.

``queue:work`` stops gracefully on SIGTERM (the current job finishes; the pod's grace period is
``worker.timeout`` + 30 s). Rate limits, provider backpressure, the warm-up ramp, the outcome
stream and the suppression set are features of the Python runtime; with Laravel use its
``RateLimited`` job middleware.
"""

from __future__ import annotations

from typing import Any, Final

from sendgroup_operator import models

#: Writable scratch space of the container (an emptyDir at /tmp).
STORAGE: Final = "/tmp/laravel"

#: The container command runs artisan through this ``sh -c`` script: it creates the writable
#: directories Laravel expects (an emptyDir starts empty; Laravel does not create them), then
#: ``exec``s artisan (SIGTERM reaches php directly).
PREPARE: Final = (
    'mkdir -p "$LARAVEL_STORAGE_PATH/framework/cache" "$LARAVEL_STORAGE_PATH/framework/views" '
    '"$LARAVEL_STORAGE_PATH/logs" "$VIEW_COMPILED_PATH" "${APP_SERVICES_CACHE%/*}" && exec "$@"'
)

#: SMTP TLS mode -> Laravel's ``MAIL_ENCRYPTION`` (``null`` is read as PHP null by env()).
MAIL_ENCRYPTION: Final = {"none": "null", "starttls": "tls", "tls": "ssl"}
#: SMTP TLS mode -> Laravel 11+'s ``MAIL_SCHEME`` (``smtps``: TLS from the first byte).
MAIL_SCHEME: Final = {"none": "smtp", "starttls": "smtp", "tls": "smtps"}


def queue_work_command(spec: models.SendGroupSpec, queue: str) -> list[str]:
    """The container command: ``/bin/sh -c PREPARE queue-work`` + artisan + ``queue:work`` with
    the group's options."""
    w = spec.worker
    lw = w.laravel or models.LaravelWorkerSpec()
    command = [
        "/bin/sh",
        "-c",
        PREPARE,
        "queue-work",
        *lw.artisan,
        "queue:work",
        lw.connection,
        f"--queue={queue}",
        f"--tries={w.tries}",
        f"--backoff={','.join(str(b) for b in w.backoff)}",
        f"--timeout={w.timeout}",
        f"--sleep={lw.sleep}",
        f"--memory={lw.memory}",
    ]
    if lw.max_jobs:
        command.append(f"--max-jobs={lw.max_jobs}")
    if lw.max_time:
        command.append(f"--max-time={lw.max_time}")
    command.append("--no-interaction")
    return command


def laravel_env(
    spec: models.SendGroupSpec,
    queue: str,
    redis_url: dict[str, Any],
    key_prefix: str,
    smtp_host: str,
    smtp_port: int,
    smtp_tls: str,
    identity: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The container environment (see the module table). ``redis_url``: the ``REDIS_URL`` env
    entry the Python runtime gets (value or secretKeyRef); ``identity``: the SENDGROUP_* entries."""
    lw = spec.worker.laravel or models.LaravelWorkerSpec()

    def value(name: str, v: object) -> dict[str, Any]:
        return {"name": name, "value": str(v)}

    env = [
        *identity,
        value("QUEUE_CONNECTION", lw.connection),
        redis_url,
        value("REDIS_PREFIX", key_prefix),
        value("REDIS_QUEUE", queue),
        value("REDIS_QUEUE_RETRY_AFTER", spec.worker.retry_after),
        value("MAIL_MAILER", "smtp"),
        value("MAIL_HOST", smtp_host),
        value("MAIL_PORT", smtp_port),
        value("MAIL_ENCRYPTION", MAIL_ENCRYPTION.get(smtp_tls, "null")),
        value("MAIL_SCHEME", MAIL_SCHEME.get(smtp_tls, "smtp")),
        value("LOG_CHANNEL", "stderr"),
        value("LARAVEL_STORAGE_PATH", f"{STORAGE}/storage"),
        value("VIEW_COMPILED_PATH", f"{STORAGE}/views"),
        value("APP_SERVICES_CACHE", f"{STORAGE}/cache/services.php"),
        value("APP_PACKAGES_CACHE", f"{STORAGE}/cache/packages.php"),
    ]
    smtp = spec.smtp
    if smtp is not None and smtp.secret_ref is not None:
        ref = smtp.secret_ref
        for name, key in (("MAIL_USERNAME", ref.username_key), ("MAIL_PASSWORD", ref.password_key)):
            secret = {"secretKeyRef": {"name": ref.name, "key": key}}
            env.append({"name": name, "valueFrom": secret})
    return env
