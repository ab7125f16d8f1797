"""hack/test's two lanes draw listen ports from disjoint residues (tests/support/ports.py), so
two pytest processes at once never hand out the same port."""

from __future__ import annotations

import pytest

from tests.support import ports


@pytest.mark.parametrize("k", [0, 1])
def test_a_lane_hands_out_only_its_residue(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    monkeypatch.setenv("SENDGROUP_TEST_PORT_LANE", f"{k}/2")
    monkeypatch.setattr(ports, "_handed", set())
    got = [ports.free_port() for _ in range(40)] + [ports.free_port(gap=10000) for _ in range(5)]
    assert {p % 2 for p in got} == {k}
    assert all(ports.LOWEST <= p < ports.ephemeral_low() for p in got)
    assert len(set(got)) == len(got)


@pytest.mark.parametrize("value", ["", "x", "2/2", "-1/2", "1/0"])
def test_a_malformed_lane_means_no_lanes(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SENDGROUP_TEST_PORT_LANE", value)
    assert ports.lane() == (0, 1)
