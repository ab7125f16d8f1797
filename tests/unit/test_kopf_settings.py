"""The operator's settings reach kopf's: SENDGROUP_WORKER_LIMIT caps kopf's per-object workers
(and shortens how long an idle one holds its slot); 0, kopf keeps its own defaults."""

from __future__ import annotations

import kopf
import pytest

from sendgroup_operator.settings import Settings, SettingsError
from sendgroup_operator.startup import IDLE_WORKER_TIMEOUT, configure_kopf


def _kopf(env: dict[str, str]) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    configure_kopf(settings, Settings.from_env(env))
    return settings


def test_worker_limit_caps_kopfs_workers_and_frees_idle_slots_sooner() -> None:
    settings = _kopf({"SENDGROUP_WORKER_LIMIT": "150"})
    assert settings.queueing.worker_limit == 150
    assert settings.queueing.idle_timeout == IDLE_WORKER_TIMEOUT < 5


def test_zero_leaves_kopfs_queueing_as_it_is() -> None:
    default = kopf.OperatorSettings().queueing
    queueing = _kopf({"SENDGROUP_WORKER_LIMIT": "0"}).queueing
    assert queueing.worker_limit is None
    assert queueing.idle_timeout == default.idle_timeout


def test_the_default_caps_a_cold_start() -> None:
    assert _kopf({}).queueing.worker_limit == Settings().worker_limit > 0


def test_a_negative_limit_is_refused_at_start_naming_the_variable() -> None:
    with pytest.raises(SettingsError, match="SENDGROUP_WORKER_LIMIT='-3': expected >= 0"):
        Settings.from_env({"SENDGROUP_WORKER_LIMIT": "-3"})
