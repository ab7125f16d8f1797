"""``sendgroup-worker work``: run the mail worker (the worker image's entrypoint)."""

from __future__ import annotations

import asyncio
import logging
import sys

import click

from sendgroup_worker.config import ConfigError, WorkerConfig, env_help
from sendgroup_worker.oneline import escape_controls


class OneLineFormatter(logging.Formatter):
    """One record, one line: control characters in the message (a job's uuid, class name or
    batch id comes from the producer) are written as escapes (``\\n``), so a payload cannot
    forge a log line; a traceback after the message keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


@click.command("work")
@click.option("--help-env", is_flag=True, help="List the environment variables and exit.")
def work(help_env: bool) -> None:
    """Drain the send group's queue through the SMTP relay, configured from environment
    variables (see --help-env). Exits 0 after SIGTERM, WORKER_MAX_JOBS or WORKER_MAX_TIME."""
    if help_env:
        click.echo(env_help())
        return
    try:
        config = WorkerConfig.from_env()
    except ConfigError as exc:
        raise click.UsageError(f"bad worker configuration: {exc}") from exc
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=config.log_level.upper(), handlers=[handler])
    from sendgroup_worker.redisclient import quiet_cluster_node_notices
    from sendgroup_worker.worker import build_worker

    async def main() -> int:
        quiet_cluster_node_notices(asyncio.get_running_loop())
        return await build_worker(config).run()

    sys.exit(asyncio.run(main()))
