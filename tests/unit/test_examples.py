"""examples/*.yaml are valid SendGroups for the models (the cluster tier applies them to the
API server too)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sendgroup_operator import models

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("sendgroup-*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_parses(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert (doc["apiVersion"], doc["kind"]) == (models.API_VERSION, models.KIND)
    spec = models.SendGroupSpec.model_validate(doc["spec"])
    assert spec.worker.timeout < spec.worker.retry_after


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 2
