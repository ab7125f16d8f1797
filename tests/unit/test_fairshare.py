"""Water-filling of maxTotalWorkers across groups with work."""

from __future__ import annotations

import pytest

from sendgroup_operator.fairshare import allocate


def test_no_cap_or_under_cap_gives_requests() -> None:
    assert allocate({"a": 5, "b": 0}, None) == {"a": 5, "b": 0}
    assert allocate({"a": 5, "b": 3}, 20) == {"a": 5, "b": 3}


def test_ten_groups_of_five_under_cap_twenty() -> None:
    requests = {f"ns/g{i:02d}": 5 for i in range(10)}
    allowed = allocate(requests, 20)
    assert sum(allowed.values()) == 20
    assert all(v == 2 for v in allowed.values())


def test_small_requests_are_met_and_the_rest_split() -> None:
    allowed = allocate({"a": 1, "b": 10, "c": 10, "d": 0}, 11)
    assert allowed == {"a": 1, "b": 5, "c": 5, "d": 0}


def test_remainder_goes_in_key_order_and_sums_to_cap() -> None:
    allowed = allocate({"a": 10, "b": 10, "c": 10}, 10)
    assert sorted(allowed.values()) == [3, 3, 4] and allowed["a"] == 4
    assert sum(allowed.values()) == 10


def test_more_groups_than_cap_each_gets_at_most_one() -> None:
    allowed = allocate({f"g{i}": 3 for i in range(5)}, 3)
    assert sorted(allowed.values()) == [0, 0, 1, 1, 1]


def test_never_above_request_and_max_min_fair() -> None:
    requests = {"a": 2, "b": 7, "c": 4, "d": 9}
    allowed = allocate(requests, 15)
    assert sum(allowed.values()) == 15
    assert all(allowed[k] <= requests[k] for k in requests)
    assert allowed["a"] == 2 and allowed["c"] == 4
    assert abs(allowed["b"] - allowed["d"]) <= 1


def test_negative_request_rejected() -> None:
    with pytest.raises(ValueError):
        allocate({"a": -1}, 3)
