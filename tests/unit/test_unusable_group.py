"""A group the operator cannot parse gets a condition and ONE event, never one per pass, and
a pause in its raw spec is still applied (issue 16, item 2). Pure decisions of
``sendgroup_operator.unusable``; the handler only applies them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest

from sendgroup_operator import models, unusable

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _body(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "g", "namespace": "mail", "generation": 3},
        "spec": spec,
        "status": status or {},
    }


def _error(spec: dict[str, Any]) -> pydantic.ValidationError:
    with pytest.raises(pydantic.ValidationError) as err:
        models.SendGroupSpec.model_validate(spec)
    return err.value


BAD = {
    "campaign": "c",
    "host": "gmail.com",
    "paused": True,
    "redis": {"url": "redis://hunter2@redis:6379/0"},
    "backpressure": {"patterns": ["(a)\\1"]},
}


def test_one_event_across_passes_and_a_condition_without_the_values() -> None:
    body = _body(BAD)
    error = _error(BAD)
    first = unusable.refuse(body, error, NOW)
    assert first.event and first.pause and first.status is not None
    [ready] = first.status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "InvalidSpec")
    assert ready["observedGeneration"] == 3
    assert "spec.redis.url" in ready["message"] and "spec.backpressure.patterns" in ready["message"]
    assert "hunter2" not in ready["message"] and "hunter2" not in first.message
    # the next passes see the status written: no event, no write
    for minutes in range(1, 30):
        again = unusable.refuse(_body(BAD, first.status), error, NOW + timedelta(minutes=minutes))
        assert not again.event and again.status is None and again.pause
    # a different problem: one new event
    other = {**BAD, "redis": {"url": "redis://redis:6379/0"}}
    changed = unusable.refuse(_body(other, first.status), _error(other), NOW)
    assert changed.event and changed.status is not None


def test_no_pause_asked_no_pause_applied() -> None:
    spec = {**BAD, "paused": False}
    assert not unusable.refuse(_body(spec), _error(spec), NOW).pause
