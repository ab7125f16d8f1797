"""A SendGroup the operator cannot act on: its spec passed the API server but not the
operator's own parse (an object stored before the CRD's current rules, a rule CEL cannot
express). Pure: the handler applies what :func:`refuse` decides.

Instead of a log line and a new event every pass (312 ``InvalidSpec`` events in 10 minutes
were seen), the group gets condition ``Ready=False`` with reason ``InvalidSpec`` and a
message naming each field and rule (never the rejected values: a URL may hold a password),
and ONE event, posted only when that condition appears or its message changes. A group whose
raw spec asks for a pause is paused (workers scaled to 0) even though the rest of the spec is
unusable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import pydantic

from sendgroup_operator import conditions, models

REASON_INVALID_SPEC: Final = conditions.REASON_INVALID_SPEC

#: Longest condition/event message (characters).
MESSAGE_MAX: Final = 1000


@dataclass(frozen=True, slots=True)
class Refusal:
    """What to do with an unusable group. ``status``: the status to write (merge patch), None
    when nothing changed; ``event``: post the one ``InvalidSpec`` event with ``message``;
    ``pause``: scale its workers to 0 (the raw spec says ``paused: true``)."""

    message: str
    status: dict[str, Any] | None
    event: bool
    pause: bool


def summary(error: pydantic.ValidationError) -> str:
    """``spec.<field>: <rule>`` for each error, ``; ``-joined, without the input values."""
    parts = []
    for err in error.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"spec.{where}: {err['msg']}" if where else f"spec: {err['msg']}")
    text = "; ".join(parts) or "spec does not parse"
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 1] + "\u2026"


def refuse(body: Mapping[str, Any], error: pydantic.ValidationError, now: datetime) -> Refusal:
    """Decide what an unusable group gets (see the module docstring). ``body``: the object as
    the API server returned it."""
    message = summary(error)
    meta = body.get("metadata") or {}
    generation = meta.get("generation")
    spec = body.get("spec") or {}
    try:
        status = models.SendGroupStatus.model_validate(dict(body.get("status") or {}))
    except pydantic.ValidationError:
        status = models.SendGroupStatus()
    before = conditions.find(status.conditions, conditions.READY)
    was = (before.reason, before.message) if before is not None else None
    changed = conditions.set_condition(
        status.conditions,
        conditions.READY,
        "False",
        REASON_INVALID_SPEC,
        message,
        now,
        int(generation) if isinstance(generation, int) else None,
    )
    status.phase = conditions.derive_phase(status.conditions)
    return Refusal(
        message=message,
        status=status.model_dump(mode="json", by_alias=True) if changed else None,
        event=was != (REASON_INVALID_SPEC, message),
        pause=spec.get("paused") is True,
    )


__all__ = ["MESSAGE_MAX", "REASON_INVALID_SPEC", "Refusal", "refuse", "summary"]
