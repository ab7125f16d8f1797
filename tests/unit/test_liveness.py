"""The liveness check fails when groups exist and the reaper made no progress."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from sendgroup_operator import startup
from sendgroup_operator.reconcile import Runtime
from sendgroup_operator.settings import Settings


def _memo(stalled_for: float, groups: int) -> Any:
    rt = Runtime(settings=Settings(liveness_stall=30), kube=None)  # type: ignore[arg-type]
    rt.heartbeat = time.monotonic() - stalled_for
    rt.demands = {f"ns/g{i}": 0 for i in range(groups)}
    return SimpleNamespace(runtime=rt)


def test_healthy_while_the_reaper_runs() -> None:
    assert startup.liveness(_memo(1, 3))["groups"] == 3
    assert startup.liveness(SimpleNamespace()) == {"reaper": "starting"}


def test_no_groups_is_healthy_however_long() -> None:
    startup.liveness(_memo(3600, 0))


def test_stalled_reaper_fails_the_probe() -> None:
    with pytest.raises(RuntimeError, match="no progress"):
        startup.liveness(_memo(31, 2))
