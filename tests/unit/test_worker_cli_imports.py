"""The worker image's console script imports a command's module only when that command runs:
a dump or restore process (the operator's Jobs) no longer loads the mail worker, the producer
and pydantic first (~0.3 s of its start-up, bench scenario 5)."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from sendgroup_worker import cli

HEAVY = ("pydantic", "sendgroup_worker.worker", "sendgroup_worker.producer", "email_validator")


def _loaded_after(argv: list[str]) -> list[str]:
    """Modules of HEAVY loaded by a fresh interpreter that ran ``sendgroup-worker ARGV``."""
    code = (
        "import json, sys\n"
        "from sendgroup_worker.cli import main\n"
        f"main({argv!r}, standalone_mode=False)\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("command", ["dump", "restore", "purge", "forget", "dumps"])
def test_a_dump_command_loads_neither_the_worker_nor_pydantic(command: str) -> None:
    assert _loaded_after([command, "--help"]) == []


def test_the_worker_command_still_loads_its_settings_model() -> None:
    assert "pydantic" in _loaded_after(["work", "--help"])


def test_every_listed_command_resolves_to_its_click_command() -> None:
    ctx = click.Context(cli.main)
    names = cli.main.list_commands(ctx)
    assert names == sorted(["work", "dump", "restore", "purge", "forget", "dumps", "push",
                            "stats", "failed"])  # fmt: skip
    for name in names:
        command = cli.main.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name
    assert cli.main.get_command(ctx, "nope") is None


def test_help_lists_every_command_and_an_unknown_one_is_refused() -> None:
    helped = subprocess.run(
        [sys.executable, "-c", "from sendgroup_worker.cli import main; main(['--help'])"],
        capture_output=True,
        text=True,
    )
    assert helped.returncode == 0
    for name in cli.COMMANDS:
        assert f"  {name} " in helped.stdout
    refused = subprocess.run(
        [sys.executable, "-c", "from sendgroup_worker.cli import main; main(['nope'])"],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "No such command 'nope'" in refused.stderr
