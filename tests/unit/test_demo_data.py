"""The demo's sample data (examples/demo/) is usable as the demo uses it: every recipient row is
valid for the producer, routes to exactly one SendGroup by its domain, and renders with the
worker's message builder (so `hack/demo` cannot fail half-way on its own data)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sendgroup_operator import builders, models
from sendgroup_operator.settings import Settings
from sendgroup_worker.smtp import build_message

ROOT = Path(__file__).resolve().parents[2]


def _demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sg_demo", ROOT / "hack" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_recipient_routes_to_its_provider_group_and_renders() -> None:
    demo = _demo()
    groups = demo.load_groups()
    demo.route_recipients(groups)
    counts = {name: len(g.payloads) for name, g in groups.items()}
    assert counts == {
        "spring-sale-gmail": 3000,
        "spring-sale-outlook": 1000,
        "password-reset-urgent": 100,
    }
    recipients: Counter[str] = Counter()
    for group in groups.values():
        for raw in group.payloads:
            job = json.loads(raw)
            mail = build_message(job["data"], job["uuid"])
            assert [r.rsplit("@", 1)[1] for r in mail.recipients] == [group.host]
            assert b"$" not in mail.body.split(b"\r\n\r\n", 1)[1]  # no unfilled placeholder
            recipients.update(mail.recipients)
    assert max(recipients.values()) == 1, "a recipient appears twice in the sample files"


def _worker_pod(group: str, phase: str, ready: bool, deleting: bool = False) -> dict[str, Any]:
    """A pod as the API returns it for the operator's worker Deployment of GROUP: the labels of
    the Deployment's pod template (builders.deployment), a phase and a Ready condition."""
    spec = models.SendGroupSpec.model_validate(
        {"campaign": "spring-sale", "host": "gmail.com", "workers": 3}
    )
    ref = builders.GroupRef("sendgroups-demo", group, "uid-1", "spring-sale", "gmail.com")
    settings = Settings(default_image="img:1", default_redis_url="redis://r:6379/0")
    template = builders.deployment(ref, spec, settings, replicas=3)["spec"]["template"]
    meta: dict[str, Any] = {"name": f"sg-{group}-abc", "labels": template["metadata"]["labels"]}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": meta, "status": {"phase": phase, "conditions": [condition]}}


def test_the_progress_counts_worker_pods_running_and_ready() -> None:
    """Beside `kubectl get sg` (WORKERS = ready/desired, from the status, lagging), the demo
    prints the worker pods it sees now: three running pods whose probe did not pass yet read
    "3 running (0 ready)", not a contradictory 0/3 alone."""
    demo = _demo()
    groups = demo.load_groups()
    pods = [
        *(_worker_pod("spring-sale-gmail", "Running", ready=False) for _ in range(3)),
        _worker_pod("spring-sale-outlook", "Running", ready=True),
        _worker_pod("spring-sale-outlook", "Pending", ready=False),
        _worker_pod("spring-sale-outlook", "Running", ready=True, deleting=True),
        {"metadata": {"labels": {"app.kubernetes.io/component": "dump"}}},
    ]
    counts = demo.worker_pods(pods)
    assert counts == {"spring-sale-gmail": (3, 0), "spring-sale-outlook": (1, 1)}
    assert demo.pods_line(groups, counts) == (
        "worker pods now: spring-sale-gmail 3 running (0 ready), "
        "spring-sale-outlook 1 running (1 ready), password-reset-urgent 0 running (0 ready)"
    )
    assert "ready/desired" in demo.WORKERS_LEGEND


def test_the_demo_refuses_a_timeout_that_could_never_or_only_late_fail(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--timeout`` is checked before anything is built: ``nan`` would never time out, a
    negative one would fail only after the cluster and images were up."""
    demo = _demo()
    assert demo.parse_args(["--timeout", "90"]).timeout == 90.0
    for bad in ("-5", "0", "nan", "inf", "abc"):
        with pytest.raises(SystemExit) as exc:
            demo.parse_args(["--timeout", bad])
        assert exc.value.code == 2
        assert "--timeout" in capsys.readouterr().err
