"""sharding.py (issue 15): rendezvous assignment and the membership safety rules."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sendgroup_operator import sharding
from sendgroup_operator.sharding import LeaseRecord, Membership

UIDS = [str(uuid.UUID(int=i * 7919 + 12345)) for i in range(10_000)]
names = st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=12)


def test_owner_is_stable_and_known_value() -> None:
    # blake2b, not hash(): the same answer in every process (a regression here reshuffles
    # every group of every installation at upgrade)
    assert sharding.owner("uid-1", ["a", "b", "c"]) == sharding.owner("uid-1", ["c", "a", "b"])
    assert sharding.weight("a", "uid-1") == sharding.weight("a", "uid-1")
    assert sharding.owner("x", []) is None


@settings(max_examples=50, deadline=None)
@given(members=st.sets(names, min_size=1, max_size=6), joiner=names)
def test_a_joining_member_takes_only_groups_it_now_owns(members: set[str], joiner: str) -> None:
    uids = UIDS[:500]
    before = {u: sharding.owner(u, members) for u in uids}
    after = {u: sharding.owner(u, members | {joiner}) for u in uids}
    for u in uids:
        assert after[u] in (before[u], joiner)


@settings(max_examples=50, deadline=None)
@given(members=st.sets(names, min_size=2, max_size=6), data=st.data())
def test_a_leaving_member_gives_up_only_its_own(members: set[str], data: st.DataObject) -> None:
    leaver = data.draw(st.sampled_from(sorted(members)))
    uids = UIDS[:500]
    for u in uids:
        before = sharding.owner(u, members)
        after = sharding.owner(u, members - {leaver})
        if before != leaver:
            assert after == before
        else:
            assert after != leaver


def test_balance_of_10000_groups_over_3_members() -> None:
    counts = Counter(sharding.owner(u, ["sgo-0", "sgo-1", "sgo-2"]) for u in UIDS)
    assert set(counts) == {"sgo-0", "sgo-1", "sgo-2"}
    # expected 3,333 each; binomial sd ~47: 5 % is more than 6 sd
    for n in counts.values():
        assert abs(n - 10_000 / 3) < 0.05 * 10_000 / 3, counts


L = 15.0


def rec(holder: str, rv: str) -> LeaseRecord:
    return LeaseRecord(holder=holder, renew_time=f"t{rv}", resource_version=rv)


def joined(identity: str, others: dict[str, str], at: float = 0.0) -> Membership:
    """A member that joined at ``at`` and has waited out rule (b) (polled every L/3)."""
    m = Membership(identity, lease_duration=L)
    t = at
    n = 0
    while t <= at + L + 0.1:
        n += 1
        m.polled(
            t, t, t, [rec(identity, f"{n}"), *(rec(h, f"{rv}{n}") for h, rv in others.items())]
        )
        t += L / 3
    return m


def test_rule_b_a_new_member_waits_one_lease_duration() -> None:
    m = Membership("a", lease_duration=L)
    m.polled(100.0, 100.2, 100.2, [rec("a", "1")])
    assert m.fenced(100.2)
    assert m.fenced(100.2 + L - 0.01)
    m.polled(100.2 + L - 5, 100.2 + L - 5, 100.2 + L - 5, [rec("a", "2")])
    assert not m.fenced(100.2 + L)
    assert m.may_act("any-uid", 100.2 + L)  # the only member owns everything


def test_rule_a_a_replica_that_cannot_poll_fences_itself() -> None:
    m = joined("a", {})
    last = m.last_poll
    assert last is not None
    margin = m.margin
    assert margin is not None
    assert not m.fenced(last + L - margin - 0.01)
    assert m.fenced(last + L - margin)  # before anybody may drop it (rule c: L)


def test_rule_c_a_member_is_dropped_after_its_lease_is_unchanged_for_l() -> None:
    m = joined("a", {"b": "x"})
    now = m.last_poll or 0.0
    assert m.members(now) == ("a", "b")
    # b stops renewing: the same record, polled again and again
    t = now
    frozen = rec("b", "frozen")
    m.polled(t, t, t, [rec("a", "100"), frozen])
    seen_b = t
    while t < seen_b + L:
        assert "b" in m.members(t)
        t += L / 3
        m.polled(t, t, t, [rec("a", f"{t}"), frozen])
    assert m.members(t) == ("a",)


def test_rule_c_the_dead_member_stopped_before_it_is_dropped() -> None:
    """b's last poll started before a saw b's Lease change: b fences itself at least the
    margin before a drops it (a keeps polling every L/3 and sees b's record unchanged)."""
    b = joined("b", {"a": "y"})
    b_last = b.last_poll
    assert b_last is not None
    a = Membership("a", lease_duration=L)
    t = b_last + 0.5
    n = 0
    a_drops = None
    while a_drops is None:
        n += 1
        a.polled(t, t, t, [rec("a", str(n)), rec("b", "last")])  # b's last write, again and again
        if "b" not in a.members(t):
            a_drops = t
        t += 0.01 if n > 1 else L / 3  # first poll, then one every 10 ms: the earliest drop
    b_stops = next(t / 100 for t in range(int(b_last * 100), 100_000) if b.fenced(t / 100))
    assert b.margin is not None
    assert a_drops - b_stops >= b.margin


def test_rule_c_the_clock_alone_drops_nobody() -> None:
    """A replica that cannot poll keeps the members it last saw: it fences itself (rule a)
    instead of taking a peer's groups on its own clock."""
    m = joined("a", {"b": "x"})
    last = m.last_poll or 0.0
    assert m.members(last + 100 * L) == ("a", "b")
    uid = next(u for u in UIDS if sharding.owner(u, ["a", "b"]) == "b")
    assert not any(m.may_act(uid, last + k) for k in range(0, int(100 * L)))


def test_rule_d_a_deleted_lease_moves_its_groups_at_the_next_poll() -> None:
    m = joined("a", {"b": "x"})
    t = (m.last_poll or 0.0) + 1
    uid = next(u for u in UIDS if sharding.owner(u, ["a", "b"]) == "b")
    assert not m.may_act(uid, t)
    m.polled(t, t, t, [rec("a", "z")])  # b deleted its Lease
    assert m.may_act(uid, t)


def test_two_replicas_never_both_act_while_one_joins() -> None:
    """Simulated time: a alone, b joins at t=40; at every instant at most one of them may act
    on each group, and after the join both act on some groups."""
    a = Membership("a", lease_duration=L)
    b = Membership("b", lease_duration=L)
    uids = UIDS[:200]
    rv = 0
    leases = {"a": "0"}
    t = 0.0
    step = 0.25
    both_acted = False
    while t < 120:
        tick = round(t / step)
        if tick % round(5 / step) == 0:  # a polls every 5 s
            rv += 1
            leases["a"] = str(rv)
            a.polled(t, t, t, [rec(h, v) for h, v in leases.items()])
        if t >= 40 and tick % round(5 / step) == 2:  # b from t=40, at another phase
            rv += 1
            leases["b"] = str(rv)
            b.polled(t, t, t, [rec(h, v) for h, v in leases.items()])
        for u in uids:
            assert not (a.may_act(u, t) and b.may_act(u, t)), (u, t)
        if any(b.may_act(u, t) for u in uids) and any(a.may_act(u, t) for u in uids):
            both_acted = True
        t += step
    assert both_acted


def test_margin_must_be_below_the_lease_duration() -> None:
    with pytest.raises(ValueError):
        Membership("a", lease_duration=10, margin=10)


def test_view_counts_owned_groups() -> None:
    m = joined("a", {"b": "x"})
    now = m.last_poll or 0.0
    view = m.view(now)
    uids = UIDS[:1000]
    mine = view.owned(uids)
    assert 400 < mine < 600
    assert view.members == ("a", "b")
    assert m.view(now) == view


def test_next_change_is_the_earliest_time_rule() -> None:
    m = Membership("a", lease_duration=L)
    assert m.next_change(0.0) is None
    m.polled(10.0, 10.5, 10.5, [rec("a", "1"), rec("b", "1")])
    # the fence closes at 10 + L - M; the join wait ends at 10.5 + L; members change only at
    # polls, so no member expiry is a moment of its own
    assert m.margin is not None
    assert m.next_change(11.0) == 10.0 + L - m.margin
    assert m.next_change(10.0 + L - m.margin) == 10.5 + L
    assert m.next_change(10.5 + L) is None


def test_a_long_dead_member_is_stale_but_never_ourselves() -> None:
    m = Membership("a", lease_duration=L)
    m.polled(0.0, 0.0, 0.0, [rec("a", "1"), rec("b", "1")])
    m.polled(10 * L - 0.1, 10 * L - 0.1, 10 * L - 0.1, [rec("a", "2"), rec("b", "1")])
    assert m.stale(10 * L - 0.1) == ()
    assert m.stale(100 * L) == ()  # judged by listings, not by the clock
    m.polled(10 * L, 10 * L, 10 * L, [rec("a", "3"), rec("b", "1")])
    assert m.stale(10 * L) == ("b",)  # our own record is not judged (we renew it)


@settings(max_examples=100, deadline=None)
@given(total=st.integers(0, 1000), members=st.sets(names, min_size=1, max_size=7))
def test_the_parts_of_a_budget_add_up_to_it(total: int, members: set[str]) -> None:
    parts = [sharding.part(total, sorted(members), m) for m in members]
    assert sum(parts) == total and max(parts) - min(parts) <= 1
    assert sharding.part(total, sorted(members), "not-a-member") == total


@settings(max_examples=40, deadline=None)
@given(
    phases=st.lists(st.floats(0, 4.9), min_size=3, max_size=3),
    joins=st.lists(st.floats(0, 60), min_size=3, max_size=3),
    cuts=st.lists(st.one_of(st.none(), st.floats(10, 90)), min_size=3, max_size=3),
)
def test_never_two_at_once_with_joins_and_partitions(
    phases: list[float], joins: list[float], cuts: list[float | None]
) -> None:
    """Three replicas joining at random times, polling every L/3 at random phases; some are
    cut off from the API server at a random time (they stop renewing and listing but keep
    running: the worst case, a partition). At no instant may two of them act on one group,
    and a replica that is never cut off ends up acting on something."""
    period = L / 3
    uids = UIDS[:30]
    names_ = ["a", "b", "c"]
    views = {n: Membership(n, lease_duration=L) for n in names_}
    leases: dict[str, str] = {}
    rv = 0
    step = 0.25
    next_poll = {n: joins[i] + phases[i] for i, n in enumerate(names_)}
    acted: set[str] = set()
    t = 0.0
    while t < 120:
        for i, n in enumerate(names_):
            cut = cuts[i]
            if t >= next_poll[n] and (cut is None or t < cut):
                rv += 1
                leases[n] = str(rv)
                views[n].polled(t, t, t, [rec(h, v) for h, v in leases.items()])
                next_poll[n] += period
        for u in uids:
            actors = [n for n in names_ if views[n].may_act(u, t)]
            assert len(actors) <= 1, (u, t, actors)
            acted.update(actors)
        t += step
    for i, n in enumerate(names_):
        if cuts[i] is None:
            assert n in acted


def _simulate(
    joins: list[float],
    phases: list[float],
    cuts: list[float | None],
    latencies: list[list[float]],
    until: float = 120.0,
    step: float = 0.05,
) -> set[str]:
    """Replicas ``a``, ``b``, ``c`` polling every L/3 from ``joins[i] + phases[i]``: each poll
    renews at once, then its listing takes the next of ``latencies[i]`` (in turn) seconds
    and reads the Leases at its answer (the worst case: it sees every renewal made
    meanwhile); a replica cut off at ``cuts[i]`` stops polling and never gets the listing
    in flight, but keeps running. At no instant may two replicas act on one group. Returns
    the replicas that acted."""
    period = L / 3
    names_ = ["a", "b", "c"]
    views = {n: Membership(n, lease_duration=L) for n in names_}
    leases: dict[str, str] = {}
    rv = 0
    next_poll = {n: joins[i] + phases[i] for i, n in enumerate(names_)}
    in_flight: dict[str, tuple[float, float]] = {}  # replica -> its poll's start, latency
    polls = dict.fromkeys(names_, 0)
    acted: set[str] = set()
    t = 0.0
    while t < until:
        for i, n in enumerate(names_):
            cut = cuts[i]
            if cut is not None and t >= cut:
                in_flight.pop(n, None)
                continue
            poll = in_flight.get(n)
            if poll is not None and t >= poll[0] + poll[1]:
                del in_flight[n]
                views[n].polled(poll[0], poll[0], t, [rec(h, v) for h, v in leases.items()])
            if n not in in_flight and t >= next_poll[n]:
                rv += 1
                leases[n] = str(rv)
                latency = latencies[i][polls[n] % len(latencies[i])]
                polls[n] += 1
                in_flight[n] = (t, latency)
                next_poll[n] = t + max(period, latency)
        for u in UIDS[:30]:
            actors = [n for n in names_ if views[n].may_act(u, t)]
            assert len(actors) <= 1, (u, round(t, 2), actors)
            acted.update(actors)
        t += step
    return acted


def test_rule_c_a_slow_listing_does_not_drop_a_member_that_renewed_while_it_ran() -> None:
    """a's sixth listing (sent at 25.05) takes 10.95 s (the fence allows up to L - M = 12) and
    reads b's renewal of 35.5; b is cut off right after, so it acts until 35.5 + 12. a must not
    drop b before then: dating b's change at a's renewal (25.05), before the listing, dropped
    b at a's next poll (41.0) and both acted on b's groups until 47.5 (a fresh reader's case,
    2026-12-05)."""
    acted = _simulate(
        joins=[0.0, 0.0, 200.0],  # c never joins
        phases=[0.05, 0.5, 0.0],
        cuts=[None, 36.0, None],
        latencies=[[0.0] * 5 + [10.95], [0.0], [0.0]],
        until=90.0,
    )
    assert "a" in acted and "b" in acted


@settings(max_examples=40, deadline=None)
@given(
    phases=st.lists(st.floats(0, 4.9), min_size=3, max_size=3),
    joins=st.lists(st.floats(0, 40), min_size=3, max_size=3),
    cuts=st.lists(st.one_of(st.none(), st.floats(10, 80)), min_size=3, max_size=3),
    latencies=st.lists(
        st.lists(st.floats(0, L - 0.2 * L + 0.5), min_size=1, max_size=4),
        min_size=3,
        max_size=3,
    ),
)
def test_never_two_at_once_with_slow_listings(
    phases: list[float],
    joins: list[float],
    cuts: list[float | None],
    latencies: list[list[float]],
) -> None:
    """The partition property with listings as slow as a poll may be and still count (up to
    ``L - M`` plus the last request's minimum timeout): never two replicas on one group."""
    _simulate(joins, phases, cuts, latencies, until=100.0, step=0.1)
