"""Producer text made safe for one log line or a failed reason."""

from __future__ import annotations


def escape_controls(text: str) -> str:
    """``text`` with every control character written as its escape (``\\n``, ``\\x1b``): a
    line break in a job name, batch id or uuid cannot forge a log line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
