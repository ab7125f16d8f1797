"""Resource quantities as the API server reads them, and requests within limits (issue 16,
item 2): ``spec.worker.resources`` with requests.cpu 2 and limits.cpu 1 passed the CRD and the
model, then the API server refused the Deployment and the group was stuck. The model and the
CRD's CEL rule now refuse it; the values below are what apimachinery's ``ParseQuantity`` gives
(the agreement with the real API server is tests/cluster/test_spec_grammar_agreement.py)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pydantic
import pytest

from sendgroup_operator import crdgen, models, quantities

Q = quantities.quantity_value
MAX = Fraction(2**63 - 1)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("1500m", Fraction(3, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("+2", Fraction(2)),
        ("007", Fraction(7)),
        ("64Mi", Fraction(64 * 2**20)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1k", Fraction(1000)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1E", Fraction(10**18)),
        ("1e-3", Fraction(1, 1000)),
        ("250u", Fraction(1, 4000)),
        ("3n", Fraction(3, 10**9)),
        # finer than nano: rounded up to 1n (ParseQuantity's slow path)
        ("0.1n", Fraction(1, 10**9)),
        ("1e-12", Fraction(1, 10**9)),
        ("0.0000000011", Fraction(2, 10**9)),
        ("0.0000000000", Fraction(0)),
        # 18 digits or fewer at nano or coarser: the int64 fast path, exact and not capped
        ("1e99", Fraction(10**99)),
        ("10E", Fraction(10**19)),
        ("999999999999999999", Fraction(10**18 - 1)),
        # more digits, or a binary suffix past int64: the slow path caps at 2^63-1
        ("9999999999999999999", MAX),
        ("99999999999999999999", MAX),
        ("8Ei", MAX),
        ("16Ei", MAX),
        ("7Ei", Fraction(7 * 2**60)),
    ],
)
def test_quantity_values_as_parse_quantity_reads_them(text: str, value: Fraction) -> None:
    assert Q(text) == value


@pytest.mark.parametrize("text", ["-1", "1e", "e3", "1KiB", "1e100", "1 ", "", "0x1"])
def test_malformed_quantities_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Q(text)


def _resources(requests: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    resources = {"requests": requests, "limits": limits}
    return {"campaign": "c", "host": "gmail.com", "worker": {"resources": resources}}


@pytest.mark.parametrize(
    ("requests", "limits", "refused"),
    [
        ({"cpu": 2}, {"cpu": 1}, ["cpu"]),
        ({"cpu": "2"}, {"cpu": "1500m"}, ["cpu"]),
        ({"cpu": "1500m"}, {"cpu": 2}, []),
        ({"cpu": "1"}, {"cpu": "1000m"}, []),  # equal is fine
        ({"memory": "1Gi"}, {"memory": "1G"}, ["memory"]),  # 1073741824 > 10^9
        ({"memory": "1G"}, {"memory": "1Gi"}, []),
        ({"memory": "2Gi", "cpu": "3"}, {"memory": "1Gi", "cpu": "2"}, ["cpu", "memory"]),
        ({"cpu": "2"}, {"memory": "1Gi"}, []),  # no limit of that resource
        ({"memory": "1e99"}, {"memory": "99999999999999999999"}, ["memory"]),  # 1e99 not capped
        ({"cpu": "99999999999999999999"}, {"cpu": "9999999999999999999"}, []),  # both capped
        ({"cpu": "0.2n"}, {"cpu": "0.1n"}, []),  # both rounded up to 1n
        ({"cpu": "2n"}, {"cpu": "0.1n"}, ["cpu"]),
    ],
)
def test_requests_over_limits(
    requests: dict[str, Any], limits: dict[str, Any], refused: list[str]
) -> None:
    as_text = {k: str(v) for k, v in requests.items()}
    assert quantities.requests_over_limits(as_text, {k: str(v) for k, v in limits.items()}) == (
        refused
    )
    spec = _resources(requests, limits)
    if refused:
        with pytest.raises(pydantic.ValidationError, match="at most the limit") as exc:
            models.SendGroupSpec.model_validate(spec)
        assert f"requests.{refused[0]} " in str(exc.value)
    else:
        models.SendGroupSpec.model_validate(spec)


def test_jobs_resources_and_the_operator_setting_are_checked_too() -> None:
    bad = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    with pytest.raises(pydantic.ValidationError, match=r"requests\.cpu 2 > limits\.cpu 1"):
        models.SendGroupSpec.model_validate(
            {"campaign": "c", "host": "gmail.com", "jobs": {"resources": bad}}
        )
    with pytest.raises(pydantic.ValidationError, match="at most the limit"):
        models.ResourceRequirements.model_validate(bad)  # the jobResources setting's model


def test_the_crd_carries_the_rule_on_every_resources_block() -> None:
    """Generated from the model: the worker's and the Jobs' resources both carry the rule."""
    spec = crdgen.spec_schema()["properties"]
    for block in (spec["worker"], spec["jobs"]):
        rules = block["properties"]["resources"]["x-kubernetes-validations"]
        assert [(r["rule"], r["message"]) for r in rules] == [
            (quantities.RESOURCE_NAMES_RULE, quantities.RESOURCE_NAMES_MESSAGE),
            (quantities.REQUESTS_WITHIN_LIMITS_RULE, quantities.REQUESTS_WITHIN_LIMITS_MESSAGE),
        ]


@pytest.mark.parametrize(
    "resources",
    [
        {"requests": {"gpu": "1"}},  # "must be a standard resource for containers"
        {"requests": {"example.com/foo": "1"}, "limits": {"example.com/foo": "1"}},
        {"limits": {"hugepages-2Mi": "4Mi", "memory": "1Gi"}},
        {"requests": {"CPU": "1"}},
        {"limits": {"": "1"}},
    ],
)
def test_only_cpu_memory_and_ephemeral_storage_are_named(resources: dict[str, Any]) -> None:
    """Each of these passed the CRD and the model, then the API server refused the Deployment
    (a non-standard name; an extended resource or huge pages: integer, request == limit, a limit
    required)."""
    spec = {"campaign": "c", "host": "gmail.com", "worker": {"resources": resources}}
    with pytest.raises(pydantic.ValidationError, match="name only cpu, memory and ephemeral"):
        models.SendGroupSpec.model_validate(spec)
    ok = {"requests": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"}}
    models.SendGroupSpec.model_validate({**spec, "worker": {"resources": ok}})
