"""Deferral patterns (``spec.backpressure.patterns`` / ``BACKPRESSURE_PATTERNS``), compiled
with RE2 (google-re2): matching time is linear in the reply's length whatever the pattern,
so a tenant's pattern such as ``(a+)+$`` cannot freeze a worker (Python's backtracking ``re``
took 15 s on one reply). RE2 syntax is Python's without backreferences and lookaround
(https://github.com/google/re2/wiki/Syntax); matching is case-insensitive.

One module so the operator (refusing a spec) and the worker (matching replies) agree.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

import re2

#: Longest pattern accepted (characters), as the CRD's maxLength.
MAX_PATTERN: Final = 512

#: Characters of a reply a pattern is searched in: RE2 is linear in the text, but the cost per
#: character grows with the pattern (``(\w+\s?){1,999}$`` took 8.5 s on a 64 KB reply), and a
#: server controls its replies' length. 512 is one SMTP reply line at most (RFC 5321,
#: 4.5.3.1.5, CRLF included): the code, the enhanced code and the text that names the cause.
MAX_REPLY_SEARCHED: Final = 512


class PatternError(ValueError):
    """A pattern RE2 cannot compile; the message names the pattern and RE2's reason."""


class Pattern(Protocol):
    """What the worker uses of a compiled pattern."""

    def search(self, text: str) -> Any:
        """A match object (truthy) or None."""


def search(pattern: Pattern, reply: str) -> bool:
    """Whether ``pattern`` matches within the first :data:`MAX_REPLY_SEARCHED` characters of
    ``reply``."""
    return pattern.search(reply[:MAX_REPLY_SEARCHED]) is not None


def compile_pattern(pattern: str) -> Pattern:
    """``pattern`` compiled by RE2, case-insensitive. Raises :class:`PatternError`."""
    if len(pattern) > MAX_PATTERN:
        raise PatternError(f"pattern longer than {MAX_PATTERN} characters")
    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False
    try:
        compiled: Pattern = re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(
            f"{pattern!r} is not an RE2 regular expression (no backreferences or "
            f"lookaround): {reason}"
        ) from None
    return compiled


__all__ = [
    "MAX_PATTERN",
    "MAX_REPLY_SEARCHED",
    "Pattern",
    "PatternError",
    "compile_pattern",
    "search",
]
