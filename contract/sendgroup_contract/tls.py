"""How a worker talks TLS to its SMTP relay: ``spec.smtp.tls``, the worker's ``SMTP_TLS`` and
the operator's ``SENDGROUP_DEFAULT_SMTP_TLS`` all take these values."""

from __future__ import annotations

from enum import StrEnum


# No class docstring: pydantic would write it into the CRD's schema (the field documents it).
# ``none``: plain SMTP; ``starttls``: upgrade with STARTTLS (RFC 3207), required;
# ``tls``: implicit TLS from the first byte (RFC 8314, usually port 465).
class SmtpTls(StrEnum):
    NONE = "none"
    STARTTLS = "starttls"
    TLS = "tls"


def parse_tls(text: str) -> SmtpTls:
    """``text`` as a :class:`SmtpTls`; raises ValueError naming the accepted values."""
    try:
        return SmtpTls(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a TLS mode: use {', '.join(m.value for m in SmtpTls)}"
        ) from None
