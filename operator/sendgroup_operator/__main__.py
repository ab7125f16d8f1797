"""``python -m sendgroup_operator`` / ``sendgroup-operator``: run kopf with our handlers.

Namespaces from ``SENDGROUP_WATCH_NAMESPACES`` (default: ``POD_NAMESPACE``; ``*`` = all),
liveness endpoint on ``SENDGROUP_HEALTH_PORT`` (default 8081, ``/healthz``), peering priority
from ``SENDGROUP_PEERING_PRIORITY``, peering identity from ``POD_ID`` (kopf's own variable; the
chart sets it to the instance's name, stable across restarts, so a restarted instance finds
its own stale record instead of "conflicting operators with the same priority");
``SENDGROUP_STANDALONE=true`` disables peering (the chart sets it for a single replica);
``SENDGROUP_SHARDING=true`` too: the replicas share the groups through their Leases
(shardmember.py), every replica active.
"""

from __future__ import annotations

import logging
import os

import click
import kopf

from sendgroup_operator import gcfreeze, kopfpause, memtrace, slimbodies
from sendgroup_operator.settings import Settings, SettingsError

_ENV_HELP = """\b
Settings come from the environment (the Helm chart sets them):
  SENDGROUP_WATCH_NAMESPACES   namespaces to watch, comma-separated; '*' = all
                               (default: POD_NAMESPACE)
  SENDGROUP_DEFAULT_REDIS_URL  Redis for groups without spec.redis
  SENDGROUP_DEFAULT_IMAGE      worker image; SENDGROUP_ALLOW_IMAGE_OVERRIDE=true
                               honours spec.worker.image
  SENDGROUP_MAX_WORKERS_PER_GROUP, SENDGROUP_MAX_TOTAL_WORKERS   worker caps
  SENDGROUP_DUMPS_CLAIM_NAME   PersistentVolumeClaim the dump/restore Jobs mount
  SENDGROUP_REAPER_INTERVAL    seconds between reaper passes per group (10)
  SENDGROUP_DEFAULT_SMTP_HOST, _PORT, _TLS   relay for groups without spec.smtp
  SENDGROUP_METRICS_PORT, SENDGROUP_HEALTH_PORT (/healthz), SENDGROUP_LOG_LEVEL
  SENDGROUP_PEERING_PRIORITY, SENDGROUP_PEERING_NAME, SENDGROUP_STANDALONE   HA
  SENDGROUP_SHARDING, SENDGROUP_SHARD_LEASE_DURATION   groups sharded over replicas
The full list and defaults: docs/reference.md (generated from settings.py).
"""


@click.command(epilog=_ENV_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sendgroup-operator", prog_name="sendgroup-operator")
def main() -> None:
    """Run the SendGroup operator (kopf) until SIGTERM/SIGINT.

    A malformed setting exits 1 with its message (one line naming the variable, no
    traceback).
    """
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    # heap snapshots on SIGUSR2 (issue 15's measurement): nothing unless the path is set
    memtrace.install(
        os.environ.get("SENDGROUP_TRACEMALLOC", ""),
        int(os.environ.get("SENDGROUP_TRACEMALLOC_FRAMES", "10")),
    )
    logging.basicConfig(
        level=os.environ.get("SENDGROUP_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    # One line per reaper pass per group, or per watch event (on_event when sharded, the
    # Deployment and SendGroup maps always) would drown the log: keep kopf's other lines.
    quiet = (
        "Handler 'on_event' succeeded",
        "Handler 'on_worker_deployment' succeeded",
        "Handler 'provider_groups' succeeded",
    )
    logging.getLogger("kopf.objects").addFilter(
        lambda record: not record.getMessage().startswith(quiet)
    )
    from sendgroup_operator import handlers, provider_handlers  # noqa: F401  (registers them)

    gcfreeze.freeze_start()  # the imported modules: out of the start's full collections

    kopfpause.install()  # the reaper follows kopf's peering pause (it is no kopf daemon)
    if os.environ.get("SENDGROUP_SLIM_BODIES", "true").lower() not in ("0", "false", "no"):
        slimbodies.install()  # kopf keeps bodies without managedFields, strings shared

    host = os.environ.get("SENDGROUP_LISTEN_HOST", "0.0.0.0")
    port = int(os.environ.get("SENDGROUP_HEALTH_PORT", "8081"))
    standalone = os.environ.get("SENDGROUP_STANDALONE", "").lower() in ("1", "true", "yes")
    standalone = standalone or settings.sharding  # the shard Leases replace kopf peering
    kopf.run(
        clusterwide=settings.clusterwide,
        namespaces=() if settings.clusterwide else settings.namespaces,
        liveness_endpoint=f"http://{host}:{port}/healthz",
        priority=settings.peering_priority,
        peering_name=settings.peering_name,
        standalone=standalone,
    )


if __name__ == "__main__":
    main()
