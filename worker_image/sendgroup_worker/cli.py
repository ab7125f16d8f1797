"""The worker image's console script, ``sendgroup-worker``.

One click group; each area's commands live in its own module, imported only when one of them
runs (or ``--help`` lists them):

* ``work``                                  the mail worker (``cli_work.py``, ``worker.py``)
* ``push``, ``stats``, ``failed ...``        the producer client and queue inspection
* ``dump``, ``restore``, ``purge``, ``forget``, ``dumps``   dump/restore (``dumps/``)

Lazy loading is click's documented pattern ("Lazily Loading Subcommands",
https://click.palletsprojects.com/en/stable/complex/#lazily-loading-subcommands): every module
at start cost each dump or restore process (the operator's Jobs) ~0.4 s of imports (the worker,
the producer, pydantic, email validation) that it never used (bench scenario 5: ours 0.43 s from
spawn to work, a plain redis-py script 0.19 s).
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from sendgroup_worker import __version__

#: command name -> "module:attribute" of its click command (keep sorted by module).
COMMANDS: dict[str, str] = {
    "work": "sendgroup_worker.cli_work:work",
    "dump": "sendgroup_worker.dumps.commands:dump_command",
    "dumps": "sendgroup_worker.dumps.commands:dumps_command",
    "forget": "sendgroup_worker.dumps.commands:forget_command",
    "purge": "sendgroup_worker.dumps.commands:purge_command",
    "restore": "sendgroup_worker.dumps.commands:restore_command",
    "failed": "sendgroup_worker.producer_cli:failed_group",
    "push": "sendgroup_worker.producer_cli:push_command",
    "stats": "sendgroup_worker.producer_cli:stats_command",
}


class LazyGroup(click.Group):
    """A click group whose commands (:data:`COMMANDS`) are imported when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        command: Any = getattr(importlib.import_module(module), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(__version__, prog_name="sendgroup-worker")
def main() -> None:
    """Laravel-compatible Redis mail queue: worker, producer and dump/restore commands."""
