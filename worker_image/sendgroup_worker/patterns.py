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

#: Largest compiled pattern accepted, in RE2 instructions (``programsize``): RE2 is linear in
#: the text, but the cost per character grows with the program (``(\w+\s?){1,999}$``: 15,987
#: instructions, ~146 ms per 512-character reply; the default providers' patterns are <= 27,
#: an address-like ``[a-z0-9._%+-]{1,64}@[a-z0-9.-]{1,255}`` is 1,471).
MAX_PROGRAM_SIZE: Final = 2000

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


def _compile(pattern: str, case_sensitive: bool) -> tuple[Any, str | None]:
    """(compiled, None), or (None, why RE2 will not run ``pattern`` here, worded to follow the
    pattern: "is not an RE2 regular expression ...", "compiles to N RE2 instructions ...")."""
    options = re2.Options()
    options.case_sensitive = case_sensitive
    options.log_errors = False  # else RE2 also prints the error to stderr
    try:
        compiled = re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):  # google-re2 gives RE2's message as bytes
            reason = reason.decode("utf-8", "replace")
        return None, f"is not an RE2 regular expression (no backreferences or lookaround): {reason}"
    if compiled.programsize > MAX_PROGRAM_SIZE:
        return None, (
            f"compiles to {compiled.programsize} RE2 instructions, more than "
            f"{MAX_PROGRAM_SIZE} (matching would be slow): use smaller repetition counts"
        )
    return compiled, None


def re2_problem(pattern: str) -> str | None:
    """Why ``pattern`` (case-sensitive, as a provider's rule writes it) is refused, or None:
    RE2's own message, or a program above :data:`MAX_PROGRAM_SIZE`. The operator's model and
    the worker's configuration both ask this."""
    return _compile(pattern, case_sensitive=True)[1]


def compile_pattern(pattern: str) -> Pattern:
    """``pattern`` compiled by RE2, case-insensitive. Raises :class:`PatternError`."""
    if len(pattern) > MAX_PATTERN:
        raise PatternError(f"pattern longer than {MAX_PATTERN} characters")
    compiled, problem = _compile(pattern, case_sensitive=False)
    if problem is not None:
        raise PatternError(f"{pattern!r} {problem}")
    result: Pattern = compiled
    return result


__all__ = [
    "MAX_PATTERN",
    "MAX_PROGRAM_SIZE",
    "MAX_REPLY_SEARCHED",
    "Pattern",
    "PatternError",
    "compile_pattern",
    "re2_problem",
    "search",
]
