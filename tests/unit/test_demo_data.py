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
