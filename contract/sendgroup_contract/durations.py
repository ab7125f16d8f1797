"""Durations as a SendGroup spells them (``90s``, ``30m``, ``1h30m``, ``2d``) -> seconds.

One language, one parser: :data:`DURATION_PATTERN` is written into the CRD's CEL rules
(``sendgroup_operator.models``), and :func:`parse_seconds` accepts exactly the strings that
pattern accepts, read the way the API server's RE2 reads it (whole string, no trailing newline),
and that add up to at most :data:`MAX_SECONDS` (36,500 days, 100 years: the CRD's rule
:data:`CAP_CEL`; a longer duration, ``10000000d``, would overflow the dates the operator
computes from it).
Property tests (``tests/unit/test_contract.py``; against the API server,
``tests/cluster/test_spec_grammar_agreement.py``) check the two agree.

The worker's environment also takes a plain number of seconds (``90``, ``1.5``): see
:func:`parse_env_seconds`, which the operator relies on when it writes whole seconds.
"""

from __future__ import annotations

import math
import re
from typing import Final

#: Well-formed duration: one or more ``<digits><unit>`` with unit s, m, h or d (``1h30m``).
#: Units may repeat and come in any order (``1m1m`` = 120 s), as the pattern allows.
DURATION_PATTERN: Final = r"^([0-9]+(s|m|h|d))+$"

#: A well-formed duration that adds up to nothing (``0s``, ``00m0s``): refused where a
#: duration must be longer than zero (a provider rule's duration, window and recovery step:
#: the worker refuses 0 there, so the API server must too).
ZERO_DURATION_PATTERN: Final = r"^(0+(s|m|h|d))+$"

#: Seconds per unit letter.
UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}

#: The longest duration anywhere in the CRDs: 36,500 days, 100 years (3,153,600,000 s). Every
#: duration there is a time to wait or to hold an action (reaper, suspension, pushback rules);
#: the cap keeps every date computed from one (now + duration) far inside Python's range (year
#: 9999), and is loose enough for the "never" people write (3650d, 9999d, 36500d): a stored
#: object above it turns InvalidSpec on upgrade, so it must not be stricter than needed.
MAX_DAYS: Final = 36500
MAX_SECONDS: Final = MAX_DAYS * UNIT_SECONDS["d"]

#: The CRD's side of :data:`MAX_SECONDS` (a CEL rule on every duration field, next to the
#: :data:`DURATION_PATTERN` rule): the sum of the parts, as :func:`parse_seconds` takes it.
#: A run of digits with a nonzero digit and 10 more after it is at least 10^10 s (> the cap
#: in any unit) and is refused before ``int()``, which would overflow on longer runs; leading
#: zeros (``0001s``) are read as the parser reads them.
CAP_CEL: Final = (
    "!self.matches('[1-9][0-9]{10}') && self.findAll('[0-9]+[smhd]').map(p, "
    "int(p.substring(0, p.size() - 1)) * (p.endsWith('d') ? 86400 : p.endsWith('h') ? 3600 "
    f": p.endsWith('m') ? 60 : 1)).sum() <= {MAX_SECONDS}"
)

_WHOLE: Final = re.compile(DURATION_PATTERN)
_PART: Final = re.compile(r"([0-9]+)([smhd])")


class InvalidDuration(ValueError):
    """A duration string that the CRD would reject."""


def parse_seconds(text: str) -> int:
    """Whole seconds in ``text`` (``"1h30m"`` -> ``5400``); the sum of every part.

    Raises :class:`InvalidDuration` unless ``text`` is matched whole by
    :data:`DURATION_PATTERN` and adds up to at most :data:`MAX_SECONDS`.
    """
    if not _WHOLE.fullmatch(text):
        raise InvalidDuration(f"invalid duration {text!r}: use e.g. 90s, 30m, 1h30m or 2d")
    seconds = sum(int(number) * UNIT_SECONDS[unit] for number, unit in _PART.findall(text))
    if seconds > MAX_SECONDS:
        raise InvalidDuration(
            f"duration {text!r} is longer than {MAX_DAYS}d (rule: duration at most {MAX_DAYS}d)"
        )
    return seconds


def parse_env_seconds(value: str | int | float) -> float:
    """Seconds from a worker environment value: a number of seconds (``90``, ``"1.5"``) or a
    duration in the CRD's language (``"10m"``, ``"1h30m"``). Surrounding blanks are ignored.

    Raises :class:`InvalidDuration` (a ValueError) for anything else, NaN, infinities and
    negative numbers.
    """
    if isinstance(value, bool):
        raise InvalidDuration(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                return float(parse_seconds(text))
            except InvalidDuration:
                raise InvalidDuration(
                    f"not a duration: {value!r} (use seconds, or e.g. 90s, 10m, 1h30m, 2d)"
                ) from None
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise InvalidDuration(f"duration must be a finite number of seconds >= 0, got {value!r}")
    return seconds
