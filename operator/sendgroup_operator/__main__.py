"""``python -m sendgroup_operator`` / ``sendgroup-operator``: run kopf with our handlers.

Namespaces from ``SENDGROUP_WATCH_NAMESPACES`` (default: ``POD_NAMESPACE``; ``*`` = all),
liveness endpoint on ``SENDGROUP_HEALTH_PORT`` (default 8081, ``/healthz``), peering priority
from ``SENDGROUP_PEERING_PRIORITY``; ``SENDGROUP_STANDALONE=true`` disables peering.
"""

from __future__ import annotations

import logging
import os

import kopf

from sendgroup_operator.settings import Settings


def main() -> None:
    """Run the operator until SIGTERM/SIGINT."""
    settings = Settings.from_env()
    logging.basicConfig(
        level=os.environ.get("SENDGROUP_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    # One line per reaper pass per group would drown the log: keep kopf's other lines.
    logging.getLogger("kopf.objects").addFilter(
        lambda record: not record.getMessage().startswith("Timer 'reaper' succeeded")
    )
    from sendgroup_operator import handlers  # noqa: F401  (registers the handlers)

    host = os.environ.get("SENDGROUP_LISTEN_HOST", "0.0.0.0")
    port = int(os.environ.get("SENDGROUP_HEALTH_PORT", "8081"))
    standalone = os.environ.get("SENDGROUP_STANDALONE", "").lower() in ("1", "true", "yes")
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
