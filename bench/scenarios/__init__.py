"""The benchmark scenarios. Each module here exposes ``SCENARIO`` (a ``bench.report.Scenario``);
they are found by import, and run and reported in ``SCENARIO.number`` order."""

from __future__ import annotations

import importlib
import pkgutil

from bench.report import Scenario


def _discover() -> list[Scenario]:
    found: list[Scenario] = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        scenario = getattr(module, "SCENARIO", None)
        if isinstance(scenario, Scenario):
            found.append(scenario)
    return sorted(found, key=lambda s: s.number)


SCENARIOS: list[Scenario] = _discover()
