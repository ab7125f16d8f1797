"""Kubernetes resource quantities: the grammar the CRD publishes, the value the API server
reads, and the requests-within-limits rule, in one place (issue 16, item 2).

The CRD (:mod:`sendgroup_operator.crdgen`, through :mod:`sendgroup_operator.models`) carries
:data:`QUANTITY_PATTERN` and the CEL rule :data:`REQUESTS_WITHIN_LIMITS_RULE`; the model runs
:func:`check_quantity` and :func:`requests_over_limits`, which read a quantity the way
apimachinery's ``resource.ParseQuantity`` does (the function both the CEL ``quantity()``
library and the Deployment's validation use), so that a spec the API server accepts is one
whose Deployment and Jobs it accepts too, and the model refuses exactly what the CRD refuses.

No I/O; the standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Final

#: The quantity grammar of core/v1 as its parser reads it (apimachinery
#: ``resource/quantity.go``, ``ParseQuantity``: an exponent is an integer, so ``1e.5``, which
#: the pattern core/v1's OpenAPI publishes allows, is refused at the Deployment) less the minus
#: sign (every quantity a SendGroup carries is a container's request or limit, which the API
#: server refuses below zero) and with an exponent of at most two digits: ``1E571510852``
#: passes core/v1's grammar, but a Deployment carrying it kept the API server busy past its
#: 60 s request timeout (504) in tests/cluster/test_spec_grammar_agreement.py. The CRD's
#: pattern and :func:`check_quantity` use this one text.
QUANTITY_PATTERN: Final = (
    r"^[+]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
    r"|([eE][+-]?[0-9]{1,2}))?$"
)
_QUANTITY_RE: Final = re.compile(QUANTITY_PATTERN)
#: Longest quantity string, and most resources in one requests or limits map: bounds the API
#: server needs to admit the CEL rule below (its cost estimate is refused without them); far
#: above any real quantity (``9223372036854775807`` is 19 characters) or container.
QUANTITY_MAX_LENGTH: Final = 64
RESOURCES_MAX: Final = 16
#: Largest integer quantity: the API server reads an integer into an int64; it is also the cap
#: ``ParseQuantity`` applies on its exact (slow) path.
QUANTITY_INT_MAX: Final = 2**63 - 1

#: CEL rule on a ResourceRequirements object: every request is at most the limit of the same
#: resource (core/v1 ``ValidateResourceRequirements``: "must be less than or equal to cpu
#: limit"). ``string()`` because a quantity may be an integer in the manifest; ``isQuantity``
#: so that a malformed value is left to the pattern's message. ``quantity()`` and
#: ``compareTo`` exist in the API server's CEL since Kubernetes 1.29.
REQUESTS_WITHIN_LIMITS_RULE: Final = (
    "!has(self.requests) || !has(self.limits) || self.requests.all(r, !(r in self.limits) "
    "|| !isQuantity(string(self.requests[r])) || !isQuantity(string(self.limits[r])) "
    "|| quantity(string(self.requests[r])).compareTo(quantity(string(self.limits[r]))) <= 0)"
)
REQUESTS_WITHIN_LIMITS_MESSAGE: Final = (
    "resources: every request must be at most the limit of the same resource (rule: "
    "requests[r] <= limits[r], e.g. requests.cpu 2 with limits.cpu 1 is refused: the API "
    "server would refuse the group's Deployment or Job)"
)

#: The resources a worker or Job container may name. The API server refuses any other plain
#: name ("must be a standard resource for containers"), and extended resources
#: (``example.com/gpu``) and huge pages each carry rules of their own (integer, request equal
#: to the limit, a limit required): none is of use to a mail worker, so the CRD and the model
#: take these three only, rather than a spec whose Deployment the API server would refuse.
RESOURCE_NAMES: Final = ("cpu", "memory", "ephemeral-storage")
_NAMES_CEL: Final = "[" + ", ".join(f"'{n}'" for n in RESOURCE_NAMES) + "]"
RESOURCE_NAMES_RULE: Final = (
    f"(!has(self.requests) || self.requests.all(r, r in {_NAMES_CEL})) && "
    f"(!has(self.limits) || self.limits.all(r, r in {_NAMES_CEL}))"
)
RESOURCE_NAMES_MESSAGE: Final = (
    "resources: requests and limits name only cpu, memory and ephemeral-storage (rule: "
    "resource names; the API server refuses other names, extended resources and huge pages "
    "in the worker and Job containers as this operator builds them)"
)

#: Suffix -> (base, exponent), apimachinery's ``suffixer``.
_SUFFIXES: Final[dict[str, tuple[int, int]]] = {
    "": (10, 0),
    "n": (10, -9),
    "u": (10, -6),
    "m": (10, -3),
    "k": (10, 3),
    "M": (10, 6),
    "G": (10, 9),
    "T": (10, 12),
    "P": (10, 15),
    "E": (10, 18),
    **{f"{p}i": (2, 10 * (i + 1)) for i, p in enumerate("KMGTPE")},
}
_NANO: Final = 10**9
#: apimachinery's ``maxInt64Factors``: digits an int64 holds with room for a factor.
_MAX_INT64_FACTORS: Final = 18
_PARTS: Final = re.compile(r"\+?0*([0-9]*)(?:\.([0-9]*))?(.*)")


def check_quantity(value: int | str) -> str:
    """A quantity as the string the builders render (``1`` -> ``"1"``); refuses what the CRD
    refuses: a negative or over-int64 integer, a string outside :data:`QUANTITY_PATTERN` or
    longer than :data:`QUANTITY_MAX_LENGTH`. Raises ``ValueError``."""
    if isinstance(value, int):
        if not 0 <= value <= QUANTITY_INT_MAX:
            raise ValueError(f"quantity {value} out of range 0..{QUANTITY_INT_MAX}")
        return str(value)
    if len(value) > QUANTITY_MAX_LENGTH:
        raise ValueError(f"quantity {value[:20]!r}... longer than {QUANTITY_MAX_LENGTH} characters")
    if not _QUANTITY_RE.fullmatch(value):
        raise ValueError(
            f"quantity {value!r} is not a non-negative Kubernetes quantity (100m, 64Mi, 1, 1e3)"
        )
    return value


def quantity_value(quantity: int | str) -> Fraction:
    """The value the API server gives ``quantity`` (refused as by :func:`check_quantity`),
    exactly as apimachinery's ``ParseQuantity`` computes it: exact when it takes its int64
    fast path (a decimal with at most 18 digits and no finer than nano: ``1e99`` stays
    ``1e99``), else the exact value rounded *up* to a multiple of 1n and capped at 2^63-1
    (``99999999999999999999`` is 2^63-1, ``1e-12`` is ``1n``). Raises ``ValueError``."""
    text = check_quantity(quantity)
    match = _PARTS.fullmatch(text)
    assert match is not None  # the pattern above is stricter
    num, denom, suffix = match.group(1) or "0", match.group(2) or "", match.group(3)
    if suffix in _SUFFIXES:
        base, exponent = _SUFFIXES[suffix]
    else:  # e3, E-2: a decimal exponent (apimachinery tries the SI suffixes first as well)
        base, exponent = 10, int(suffix[1:])
    exact = Fraction(int(num + denom), 10 ** len(denom)) * Fraction(base) ** exponent
    fast = (
        base == 10 and len(num) + len(denom) <= _MAX_INT64_FACTORS and exponent - len(denom) >= -9
    )
    if fast or exact == 0:
        return exact
    nanos = -((-exact * _NANO) // 1)  # rounded up (away from zero: never negative here)
    return min(Fraction(nanos, _NANO), Fraction(QUANTITY_INT_MAX))


def requests_over_limits(
    requests: Mapping[str, int | str] | None, limits: Mapping[str, int | str] | None
) -> list[str]:
    """The resources whose request is greater than their limit (what
    :data:`REQUESTS_WITHIN_LIMITS_RULE` refuses), sorted; ``[]`` when every request fits."""
    if not requests or not limits:
        return []
    return sorted(
        name
        for name, request in requests.items()
        if name in limits and quantity_value(request) > quantity_value(limits[name])
    )


def unknown_resources(
    requests: Mapping[str, object] | None, limits: Mapping[str, object] | None
) -> list[str]:
    """Names in ``requests`` or ``limits`` outside :data:`RESOURCE_NAMES` (what
    :data:`RESOURCE_NAMES_RULE` refuses), sorted, each once."""
    return sorted({*(requests or {}), *(limits or {})} - set(RESOURCE_NAMES))
