"""The producers' key prefix variable and the settings' error, apart from the worker's settings
model (:mod:`sendgroup_worker.config`, which re-exports both): the queue commands (dump,
restore, purge, forget, push, stats, failed) read only the prefix, and importing the whole
model (pydantic, the loopback and provider settings) cost each dump or restore process ~0.3 s
of its start-up (``python -X importtime``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Final

from sendgroup_contract import worker_settings as ws


class ConfigError(ValueError):
    """The environment does not describe a usable worker; the message names the variable."""


#: The one variable naming the producers' client-side key prefix, for every command (worker,
#: push/stats/failed, dump/restore/purge) and the operator.
KEY_PREFIX_ENV: Final = ws.KEY_PREFIX.env

#: Deprecated alias of :data:`KEY_PREFIX_ENV` (the CLI's old name), still read for one release.
KEY_PREFIX_ENV_DEPRECATED: Final = ws.KEY_PREFIX.deprecated[0]

_log = logging.getLogger("sendgroup_worker.config")


def key_prefix_from_env(
    environ: Mapping[str, str] | None = None, warn: Callable[[str], None] | None = None
) -> str:
    """The key prefix from :data:`KEY_PREFIX_ENV`, else from the deprecated
    :data:`KEY_PREFIX_ENV_DEPRECATED` (with a warning passed to ``warn``, default: logged);
    ``""`` when neither is set.

    Raises :class:`ConfigError` when both are set to different values (the worker and the CLI
    would otherwise watch different keys)."""
    env = os.environ if environ is None else environ
    new, old = env.get(KEY_PREFIX_ENV), env.get(KEY_PREFIX_ENV_DEPRECATED)
    if new is not None and old is not None and new != old:
        raise ConfigError(
            f"{KEY_PREFIX_ENV}={new!r} and {KEY_PREFIX_ENV_DEPRECATED}={old!r} disagree: "
            f"set only {KEY_PREFIX_ENV} ({KEY_PREFIX_ENV_DEPRECATED} is a deprecated alias)"
        )
    if new is not None:
        return new
    if old is not None:
        (warn or _log.warning)(
            f"{KEY_PREFIX_ENV_DEPRECATED} is deprecated and will be removed: "
            f"set {KEY_PREFIX_ENV} instead"
        )
        return old
    return ""
