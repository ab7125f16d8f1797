"""Lines for the terminal from fixtures, past pytest's output capturing."""

from __future__ import annotations

import pytest


def report_line(config: pytest.Config, line: str) -> None:
    """Write ``line`` (after a newline) to the terminal, past output capturing (start-up time,
    memory, measurements). Does nothing when the terminal reporter or capture manager is
    absent (e.g. ``-p no:terminal``)."""
    capture = config.pluginmanager.get_plugin("capturemanager")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if capture is None or reporter is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"\n{line}")
