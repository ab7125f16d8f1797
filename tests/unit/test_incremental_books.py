"""Issue 15: the per-pass books over all groups are kept incrementally. Property: after any
sequence of passes and deletions, the cached cap allocation and the phase tally equal what a
full recomputation over every group gives (the behaviour before the change)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import kubernetes.client as k8s
from hypothesis import given, settings
from hypothesis import strategies as st

from sendgroup_operator import fairshare, metrics, models, reconcile
from sendgroup_operator.kube import Kube
from sendgroup_operator.settings import Settings

KEYS = [f"mail/g{i}" for i in range(6)]
PHASES = [p for p in models.Phase]

# a step: (group, workers wanted, phase) for a pass, or (group, None, None) for a deletion
steps = st.lists(
    st.tuples(
        st.sampled_from(KEYS),
        st.one_of(st.none(), st.integers(0, 7)),
        st.sampled_from(PHASES),
    ),
    max_size=60,
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(steps=steps, cap=st.one_of(st.none(), st.integers(0, 20)))
def test_cap_allocation_cached_equals_full_recomputation(
    steps: list[tuple[str, int | None, models.Phase]], cap: int | None
) -> None:
    rt = reconcile.Runtime(
        settings=Settings(max_total_workers=cap), kube=Kube(k8s.ApiClient(k8s.Configuration()))
    )
    for key, want, _ in steps:
        if want is None:
            rt.forget(key)
            continue
        got = rt.allowed(key, want)
        # what allowed() computed before the cache: allocate over every demand, every pass
        share = fairshare.allocate(rt.demands, cap)[key]
        if cap is not None:
            others = sum(v for k, v in rt.granted.items() if k != key)
            share = max(0, min(share, cap - others))
        assert got == share
        rt.granted[key] = got
        rt.set_demand(key, max(0, want - 1))  # the pass's own demand write afterwards


@settings(max_examples=300, derandomize=True, deadline=None)
@given(steps=steps)
def test_phase_tally_equals_a_full_count(steps: list[tuple[str, int | None, models.Phase]]) -> None:
    table = metrics.GroupTable()
    spec = models.SendGroupSpec.model_validate({"campaign": "c", "host": "gmail.com"})
    now = datetime.now(UTC)
    for key, want, phase in steps:
        if want is None:
            table.forget(key)
        else:
            table.update(key, models.SendGroupStatus(phase=phase), spec, now)
        full = Counter(table.phases.values())
        assert {p: n for p, n in table.tally.items() if n} == dict(full)
    table.export(now, 60.0)
    for phase in PHASES:
        expected = sum(1 for p in table.phases.values() if p == phase.value)
        assert metrics.GROUPS.labels(phase.value)._value.get() == expected


# a step: (group, starving or not, or None for a deletion, seconds since the start)
starve_steps = st.lists(
    st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.booleans()), st.integers(0, 200)),
    max_size=60,
)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(steps=starve_steps, grace=st.sampled_from([0.0, 0.5, 30.0, 60.0, 120.0]))
def test_orphan_count_equals_a_full_count(
    steps: list[tuple[str, bool | None, int]], grace: float
) -> None:
    """``sendgroup_orphans{kind="group_without_workers"}`` from the sorted starts equals the
    count over every starved group (what export computed before, one by one)."""
    table = metrics.GroupTable()
    spec = models.SendGroupSpec.model_validate({"campaign": "c", "host": "gmail.com"})
    start = datetime(2026, 12, 3, tzinfo=UTC)
    for key, starving, at in steps:
        now = start + timedelta(seconds=at)
        if starving is None:
            table.forget(key)
        else:
            status = models.SendGroupStatus.model_validate(
                {"queue": {"total": 1 if starving else 0}, "workers": {"allowed": 1, "ready": 0}}
            )
            table.update(key, status, spec, now)
        for probe in (now, now + timedelta(seconds=grace), now + timedelta(seconds=500)):
            table.export(probe, grace)
            full = sum(
                1
                for since in table.starved_since.values()
                if (probe - since).total_seconds() >= grace
            )
            gauge = metrics.ORPHANS.labels("group_without_workers")._value.get()
            assert gauge == full
            assert len(table._starts) == len(table.starved_since)
