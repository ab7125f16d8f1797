"""Durations as written in a SendGroup (``90s``, ``30m``, ``1h30m``, ``2d``) -> seconds.

The syntax is the CRD's CEL rule (:data:`models.DURATION_PATTERN`); the arithmetic is
pytimeparse2's (``pytimeparse2.parse``), so we do not keep a parser of our own.
"""

from __future__ import annotations

import re
from typing import Final

import pytimeparse2

from sendgroup_operator import models

_PATTERN: Final = re.compile(models.DURATION_PATTERN)


class InvalidDuration(ValueError):
    """A duration string that the CRD would reject."""


def parse_seconds(text: str) -> float:
    """Seconds in ``text`` (``"1h30m"`` -> ``5400.0``).

    Raises :class:`InvalidDuration` unless ``text`` matches ``^([0-9]+(s|m|h|d))+$``.
    """
    if not _PATTERN.match(text):
        raise InvalidDuration(f"invalid duration {text!r}: use e.g. 90s, 30m, 1h30m or 2d")
    seconds = pytimeparse2.parse(text)
    if seconds is None:  # pragma: no cover - the pattern guarantees a parse
        raise InvalidDuration(f"invalid duration {text!r}")
    return float(seconds)
