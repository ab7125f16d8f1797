"""The worker image's console script, ``sendgroup-worker``.

One click group; each area registers its commands from its own module:

* ``work``                                  the mail worker (``worker.py``)
* ``push``, ``stats``, ``failed ...``        the producer client and queue inspection
* ``dump``, ``restore``, ``purge``, ``forget``, ``dumps``   dump/restore (``dumps/``)
"""

from __future__ import annotations

import click

from sendgroup_worker import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="sendgroup-worker")
def main() -> None:
    """Laravel-compatible Redis mail queue: worker, producer and dump/restore commands."""


# Command registration: one line per area (keep this list sorted).
from sendgroup_worker.producer_cli import register as _register_producer  # noqa: E402

_register_producer(main)
from sendgroup_worker.cli_work import work  # noqa: E402

main.add_command(work)
from sendgroup_worker.dumps.commands import register as _register_dumps  # noqa: E402

_register_dumps(main)
