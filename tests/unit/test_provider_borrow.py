"""Work-conserving shares (review finding): a ``high`` group without its own rate that only
trickles took the whole provider budget and every ``normal`` group sent nothing. A group is now
capped at what it can use (``provider_plan.usable``: its measured send rate with headroom, or
its backlog, at least a floor); what it does not take goes to the next groups."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sendgroup_operator import models, provider_handlers, provider_plan
from sendgroup_operator.models import Priority
from sendgroup_operator.provider_plan import GroupDemand, SendSample, shares

H, N = Priority.HIGH, Priority.NORMAL


def test_a_trickling_high_group_without_own_rate_leaves_the_rest_to_normal_groups() -> None:
    # one mail every 5 s (12/min), its ready queue empty; two normal groups with backlogs
    groups = [
        GroupDemand("mail/reset", H, backlog=0, used=12.0),
        GroupDemand("mail/a", backlog=500, used=0.0),
        GroupDemand("mail/b", backlog=500, used=0.0),
    ]
    got = shares(1200, groups)
    # the high group: max(floor 5 % x 1200 / 3 = 20, 1.5 x 12 = 18, 0) = 20/min
    assert got == pytest.approx({"mail/reset": 20.0, "mail/a": 590.0, "mail/b": 590.0})


def test_a_backlogged_high_group_still_takes_all_it_can() -> None:
    normal = GroupDemand("mail/news", backlog=5000, used=600.0)
    # a backlog of 1,000 jobs could use 12,000/min: the whole budget, the normal group waits
    assert shares(1200, [GroupDemand("mail/urgent", H, backlog=1000, used=12.0), normal]) == {
        "mail/urgent": 1200.0,
        "mail/news": 0.0,
    }
    # its ready queue empty but sending at its whole share: 1.5 x 1200 keeps it all
    assert shares(1200, [GroupDemand("mail/urgent", H, backlog=0, used=1200.0), normal]) == {
        "mail/urgent": 1200.0,
        "mail/news": 0.0,
    }
    # sending 400/min with an empty ready queue: 600 of it (headroom 1.5), the rest to normal
    assert shares(1200, [GroupDemand("mail/urgent", H, backlog=0, used=400.0), normal]) == {
        "mail/urgent": pytest.approx(600.0),
        "mail/news": pytest.approx(600.0),
    }


def test_a_high_group_with_its_own_rate_that_arrives_with_work_gets_that_rate() -> None:
    normal = [GroupDemand("ns/n1", backlog=500), GroupDemand("ns/n2", backlog=500)]
    high = GroupDemand("ns/h", H, limit=600, backlog=500)
    assert shares(1200, [*normal, high]) == {"ns/n1": 300.0, "ns/n2": 300.0, "ns/h": 600.0}


def test_what_every_capped_group_leaves_goes_back_to_them_high_first() -> None:
    """Every sending group capped: the rest goes back to them up to their own limits, high
    first, so the shares still sum to min(perMinute, sum of the limits)."""
    groups = [
        GroupDemand("h", H, backlog=0, used=10.0),
        GroupDemand("n", limit=100, backlog=0, used=10.0),
    ]
    got = shares(1200, groups)
    # round one: h max(30, 15) = 30, n max(30, 15) = 30; the rest (1140) to h (high first)
    assert got == pytest.approx({"h": 1170.0, "n": 30.0})
    limited = [GroupDemand("h", H, limit=200, backlog=0), GroupDemand("n", limit=100, backlog=0)]
    assert shares(1200, limited) == pytest.approx({"h": 200.0, "n": 100.0})


def test_a_group_whose_use_is_not_known_is_not_capped() -> None:
    """No measurement (backlog None): the priority share as before."""
    assert shares(1200, [GroupDemand("h", H), GroupDemand("n", backlog=10)]) == {
        "h": 1200.0,
        "n": 0.0,
    }


def test_the_send_rate_comes_from_two_measurements_of_the_status() -> None:
    def status(at: str, delivered: int, failed: int = 0, ready: int = 0) -> dict[str, Any]:
        return {
            "phase": "Running",
            "queue": {"total": ready, "ready": ready, "reserved": 0, "measuredAt": at},
            "progress": {"delivered": delivered, "failed": failed},
        }

    first = provider_plan.send_sample(status("2026-12-01T12:00:00Z", 100))
    assert first == SendSample(1796126400.0, 100)
    kept = provider_plan.next_samples(None, first)
    assert provider_plan.send_rate(kept) is None  # one measurement: not known
    # one second later (two passes close together): no rate yet
    kept = provider_plan.next_samples(kept, SendSample(first.at + 1, 100))
    assert provider_plan.send_rate(kept) is None
    kept = provider_plan.next_samples(
        kept, provider_plan.send_sample(status("2026-12-01T12:00:10Z", 101, 1))
    )
    assert provider_plan.send_rate(kept) == pytest.approx(60 * 2 / 9)
    # the counters went back (a flushed Redis): no rate
    assert provider_plan.send_rate((SendSample(0, 10), SendSample(10, 5))) is None
    # review finding: writes 1.5 s apart at a steady 600/min gave no rate at all, and one
    # 3 s gap then fast writes pinned the earlier sample (a lifetime average)
    kept = None
    for i in range(20):
        kept = provider_plan.next_samples(kept, SendSample(1.5 * i, 15 * i))
    assert provider_plan.send_rate(kept) == pytest.approx(600.0)
    kept = provider_plan.next_samples(None, SendSample(0, 0))
    kept = provider_plan.next_samples(kept, SendSample(3, 0))  # idle for the first 3 s
    for i in range(1, 11):
        kept = provider_plan.next_samples(kept, SendSample(3 + 1.5 * i, 15 * i))
    assert provider_plan.send_rate(kept) == pytest.approx(600.0)
    # an older measurement (a stale index entry) changes nothing
    assert provider_plan.next_samples(kept, SendSample(1, 0)) == kept
    assert provider_plan.send_sample({"queue": {"total": 0}}) is None

    # through the operator's pass: a high group trickling, a normal group with a backlog
    provider_handlers._samples.clear()
    high = models.SendGroupSpec.model_validate(
        {"campaign": "c", "host": "gmail.com", "priority": "high"}
    )
    normal = high.model_copy(update={"priority": Priority.NORMAL})
    now = 1_800_000_000.0

    def demands(at: str, delivered: int) -> list[GroupDemand]:
        return [
            provider_handlers._demand(
                high,
                status(at, delivered),
                "mail/high",
                now - 3,
                now,
                provider_handlers._send_rate("mail/high", status(at, delivered)),
            ),
            provider_handlers._demand(normal, status(at, 0, ready=900), "mail/news", None, now),
        ]

    first_pass = demands("2026-12-01T12:00:00Z", 100)
    assert first_pass[0].backlog == 0 and first_pass[0].used is None
    # not measured yet: the floor (5 % of 1200 / 2 = 30/min), the rest to the normal group
    assert shares(1200, first_pass) == pytest.approx({"mail/high": 30.0, "mail/news": 1170.0})
    later = demands("2026-12-01T12:01:00Z", 112)  # 12 mails in 60 s
    assert later[0].used == pytest.approx(12.0)
    assert shares(1200, later) == pytest.approx({"mail/high": 30.0, "mail/news": 1170.0})
    provider_handlers._samples.clear()


def group_demands(
    keys: st.SearchStrategy[str], max_weight: int, max_size: int
) -> st.SearchStrategy[list[GroupDemand]]:
    """Lists of groups with unique ``keys``: any priority, weight 1..``max_weight``, a limit or
    none, sending or not, a measured backlog and use or none."""
    return st.lists(
        st.builds(
            GroupDemand,
            key=keys,
            priority=st.sampled_from([H, N]),
            weight=st.integers(1, max_weight),
            limit=st.one_of(st.none(), st.floats(min_value=0, max_value=5000)),
            sending=st.booleans(),
            backlog=st.one_of(st.none(), st.integers(0, 2000)),
            used=st.one_of(st.none(), st.floats(min_value=0, max_value=5000)),
        ),
        max_size=max_size,
        unique_by=lambda g: g.key,
    )


groups_st = group_demands(st.text("abcdefgh", min_size=1, max_size=4), 5, 8)


def check_budget_given_out(
    per_minute: float, groups: list[GroupDemand], got: dict[str, float]
) -> list[GroupDemand]:
    """What every split must hold: a share per group; the budget all given out up to what the
    sending groups' own limits allow; none negative, none above its limit, 0 when not
    sending. Returns the sending groups."""
    assert set(got) == {g.key for g in groups}
    sending = [g for g in groups if g.sending]
    limit_sum = sum(g.limit if g.limit is not None else float("inf") for g in sending)
    assert sum(got[g.key] for g in sending) == pytest.approx(min(per_minute, limit_sum), abs=1e-6)
    for g in groups:
        assert got[g.key] >= -1e-9
        if not g.sending:
            assert got[g.key] == 0
        if g.limit is not None:
            assert got[g.key] <= g.limit + 1e-6
    return sending


@settings(max_examples=400, deadline=None)
@given(per_minute=st.floats(min_value=0, max_value=20000), groups=groups_st)
def test_shares_invariants(per_minute: float, groups: list[GroupDemand]) -> None:
    got = shares(per_minute, groups)
    sending = check_budget_given_out(per_minute, groups, got)
    # high first, up to what it can use: a high group gets at least min(usable, the share
    # it had when nobody's use was known)
    blind = shares(
        per_minute, [GroupDemand(g.key, g.priority, g.weight, g.limit, g.sending) for g in groups]
    )
    floor = provider_plan.FLOOR_FRACTION * per_minute / max(1, len(sending))
    for g in sending:
        if g.priority == H:
            cap = provider_plan.usable(g, floor)
            want = blind[g.key] if cap is None else min(cap, blind[g.key])
            assert got[g.key] >= want - 1e-6
