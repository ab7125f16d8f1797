"""Shares between tenants (issue 14's review: a tenant setting ``priority: high`` and a large
``weight`` on all its groups took a shared ClusterSendProvider's whole budget from every other
namespace). ``spec.shareBy: Namespace`` (the default) splits the budget among namespaces first,
max-min fair, then inside each namespace by priority and weight; ``Group`` keeps one pool."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sendgroup_operator import provider_models, provider_plan
from sendgroup_operator.models import Priority
from sendgroup_operator.provider_models import ShareBy
from sendgroup_operator.provider_plan import GroupDemand, shares
from tests.unit.test_provider_borrow import check_budget_given_out, group_demands

H, N = Priority.HIGH, Priority.NORMAL


def hostile_and_victim() -> list[GroupDemand]:
    """team-a: ten high groups of weight 1000 with backlogs; team-b: one normal group."""
    team_a = [GroupDemand(f"team-a/g{i}", H, 1000, backlog=5000) for i in range(10)]
    return [*team_a, GroupDemand("team-b/news", N, 1, backlog=5000)]


def test_one_tenants_priority_and_weights_take_nothing_from_another_namespace() -> None:
    got = shares(1200, hostile_and_victim(), by_namespace=True)
    assert got["team-b/news"] == pytest.approx(600.0)
    assert sum(v for k, v in got.items() if k.startswith("team-a/")) == pytest.approx(600.0)
    # one pool (shareBy: Group): high first across namespaces, as before
    pooled = shares(1200, hostile_and_victim(), by_namespace=False)
    assert pooled["team-b/news"] == 0.0


def test_inside_a_namespace_high_still_comes_first() -> None:
    groups = [
        GroupDemand("shop/reset", H, backlog=5000),
        GroupDemand("shop/news", N, backlog=5000),
        GroupDemand("other/news", N, backlog=5000),
    ]
    got = shares(1200, groups, by_namespace=True)
    assert got == pytest.approx({"shop/reset": 600.0, "shop/news": 0.0, "other/news": 600.0})


def test_a_namespace_that_can_use_less_leaves_the_rest_to_the_others() -> None:
    # team-b trickles: one mail every 5 s, nothing ready; its floor is 5 % x 1200 / 3 = 20/min
    groups = [
        GroupDemand("team-a/x", N, backlog=5000),
        GroupDemand("team-a/y", N, backlog=5000),
        GroupDemand("team-b/z", H, backlog=0, used=12.0),
    ]
    got = shares(1200, groups, by_namespace=True)
    assert got == pytest.approx({"team-a/x": 590.0, "team-a/y": 590.0, "team-b/z": 20.0})


def test_every_namespace_capped_the_rest_goes_back_up_to_their_own_rates() -> None:
    groups = [
        GroupDemand("a/x", N, limit=100, backlog=0, used=6.0),
        GroupDemand("b/y", N, limit=None, backlog=0, used=6.0),
    ]
    got = shares(1200, groups, by_namespace=True)
    # a: capped at 100 (its own rate), b takes the rest: the budget is all given out
    assert got == pytest.approx({"a/x": 100.0, "b/y": 1100.0})


def test_a_cluster_provider_shares_by_namespace_unless_told_otherwise() -> None:
    body = {
        "apiVersion": provider_models.API_VERSION,
        "kind": provider_models.CLUSTER_KIND,
        "metadata": {"name": "google"},
        "spec": {"rate": {"perMinute": 1200}},
    }
    assert provider_models.parse_provider(body).spec.share_by is ShareBy.NAMESPACE
    body["spec"]["shareBy"] = "Group"
    assert provider_models.parse_provider(body).spec.share_by is ShareBy.GROUP


groups_st = group_demands(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.text("wxyz", min_size=1, max_size=3)).map(
        "/".join
    ),
    1000,
    9,
)


@settings(max_examples=400, deadline=None)
@given(per_minute=st.floats(min_value=0, max_value=20000), groups=groups_st)
def test_namespace_shares_invariants(per_minute: float, groups: list[GroupDemand]) -> None:
    """Whatever the priorities and weights: the budget is all given out up to the groups' own
    rates, no group above its own rate, and every namespace with work gets at least
    ``min(what its groups can use, budget / namespaces with work)``."""
    got = shares(per_minute, groups, by_namespace=True)
    sending = check_budget_given_out(per_minute, groups, got)
    namespaces = {provider_plan.namespace_of(g.key) for g in sending}
    floor = provider_plan.FLOOR_FRACTION * per_minute / max(1, len(sending))
    for ns in namespaces:
        members = [g for g in sending if provider_plan.namespace_of(g.key) == ns]
        caps = []
        for g in members:
            use = provider_plan.usable(g, floor)
            caps.append(g.limit if use is None else use if g.limit is None else min(use, g.limit))
        can_use = float("inf") if any(c is None for c in caps) else sum(c or 0.0 for c in caps)
        fair = min(can_use, per_minute / len(namespaces))
        assert sum(got[g.key] for g in members) >= fair - 1e-6, ns
