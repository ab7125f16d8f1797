"""Operator settings from env (durations: tests/unit/test_contract.py)."""

from __future__ import annotations

import pytest

from sendgroup_operator.settings import Settings, SettingsError


def test_settings_defaults_and_env() -> None:
    d = Settings.from_env({})
    assert d.max_workers_per_group == 50 and d.max_total_workers is None
    assert d.namespaces == ("default",) and not d.clusterwide
    s = Settings.from_env(
        {
            "SENDGROUP_MAX_TOTAL_WORKERS": "20",
            "SENDGROUP_WATCH_NAMESPACES": "a, b",
            "SENDGROUP_ALLOW_IMAGE_OVERRIDE": "true",
            "POD_NAMESPACE": "ops",
        }
    )
    assert s.max_total_workers == 20 and s.namespaces == ("a", "b") and s.allow_image_override
    assert Settings.from_env({"SENDGROUP_WATCH_NAMESPACES": "*"}).clusterwide


def test_bad_setting_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="SENDGROUP_MAX_TOTAL_WORKERS"):
        Settings.from_env({"SENDGROUP_MAX_TOTAL_WORKERS": "lots"})
