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


@pytest.mark.parametrize("raw", ["0", "2.99", "-5", "nan", "inf", "-inf", "1e309", "1e10", "301"])
def test_a_shard_lease_duration_out_of_3_to_300_seconds_is_refused_by_name(raw: str) -> None:
    """Before: inf and 1e309 passed and failed later without the variable's name; 1e10
    passed and no Lease could carry it (int32), so the replica never acted."""
    with pytest.raises(SettingsError, match=r"SENDGROUP_SHARD_LEASE_DURATION.*3 to 300"):
        Settings.from_env({"SENDGROUP_SHARD_LEASE_DURATION": raw})


def test_the_shard_lease_duration_bounds_are_the_charts() -> None:
    import json
    from pathlib import Path

    schema = json.loads(
        (Path(__file__).parents[2] / "helm/sendgroup-operator/values.schema.json").read_text()
    )
    lease = schema["properties"]["sharding"]["properties"]["leaseDuration"]
    for raw in (str(lease["minimum"]), str(lease["maximum"])):
        assert Settings.from_env({"SENDGROUP_SHARD_LEASE_DURATION": raw})
    assert Settings.from_env({"SENDGROUP_SHARD_LEASE_DURATION": "15"}).shard_lease_duration == 15


@pytest.mark.parametrize("raw", ["a b", "UPPER", "-bad-", "x" * 64, "a.b", "a_b"])
def test_a_shard_set_that_is_no_dns_label_is_refused_by_name(raw: str) -> None:
    """Before: any string passed; an invalid label value failed every poll (the replica
    never acted, looking healthy), and UPPER and upper shared their Lease names."""
    with pytest.raises(SettingsError, match="SENDGROUP_SHARD_SET"):
        Settings.from_env({"SENDGROUP_SHARD_SET": raw})
    assert Settings.from_env({"SENDGROUP_SHARD_SET": "sg-sendgroup-operator"}).shard_set == (
        "sg-sendgroup-operator"
    )


def test_the_operator_exits_1_with_the_settings_message_and_no_traceback() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "SENDGROUP_SHARD_LEASE_DURATION": "inf"}
    proc = subprocess.run(
        [sys.executable, "-m", "sendgroup_operator"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc
    assert "SENDGROUP_SHARD_LEASE_DURATION='inf'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
