"""The ``--prefix`` option every queue command shares (push, stats, failed, dump, restore,
purge, forget): the producers' client-side key prefix, read from the same variable as the
worker, ``SENDGROUP_KEY_PREFIX`` (``QUEUE_PREFIX`` still works, deprecated: see
:func:`sendgroup_worker.keyprefix.key_prefix_from_env`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from sendgroup_worker.keyprefix import (
    KEY_PREFIX_ENV,
    KEY_PREFIX_ENV_DEPRECATED,
    ConfigError,
    key_prefix_from_env,
)

F = TypeVar("F", bound=Callable[..., Any])


def _resolve(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    if value is not None:
        return value
    try:
        return key_prefix_from_env(warn=lambda text: click.echo(f"warning: {text}", err=True))
    except ConfigError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


def key_prefix_option(*decls: str) -> Callable[[F], F]:
    """``click.option(*decls)`` for the key prefix: the command line wins, else the
    environment (``SENDGROUP_KEY_PREFIX``, else the deprecated ``QUEUE_PREFIX``), else ``""``."""
    return click.option(
        *decls,
        default=None,
        callback=_resolve,
        help=f"Client-side key prefix of the producers, e.g. laravel_database_. "
        f"Env {KEY_PREFIX_ENV} ({KEY_PREFIX_ENV_DEPRECATED}: deprecated alias).",
    )
