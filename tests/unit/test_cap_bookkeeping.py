"""The global cap's book-keeping across passes (reconcile.Runtime.allowed): a group never gets
more than the cap minus what the others hold, and shares converge as groups shrink."""

from __future__ import annotations

from sendgroup_operator.reconcile import Runtime
from sendgroup_operator.settings import Settings


def _runtime(cap: int | None) -> Runtime:
    return Runtime(settings=Settings(max_total_workers=cap), kube=None)  # type: ignore[arg-type]


def test_passes_never_grant_past_the_cap_and_converge() -> None:
    rt = _runtime(20)
    names = [f"ns/g{i}" for i in range(10)]
    for _round in range(3):
        for key in names:
            rt.granted[key] = rt.allowed(key, 5)  # what the pass then sets as replicas
            assert sum(rt.granted.values()) <= 20
    assert all(v == 2 for v in rt.granted.values())


def test_no_cap_grants_the_request() -> None:
    rt = _runtime(None)
    assert rt.allowed("ns/a", 7) == 7


def test_forgetting_a_group_frees_its_share() -> None:
    rt = _runtime(4)
    rt.granted["ns/a"] = rt.allowed("ns/a", 4)
    assert rt.allowed("ns/b", 4) == 0  # a still holds all 4 until its next pass
    rt.forget("ns/a")
    assert rt.allowed("ns/b", 4) == 4


class _Shard:
    def __init__(self, members: int) -> None:
        self.members = members

    def part(self, total: int) -> int:
        return total // self.members


def test_a_sharded_replica_shares_its_part_of_the_cap() -> None:
    rt = _runtime(20)
    rt.shard = _Shard(2)  # type: ignore[assignment]
    names = [f"ns/g{i}" for i in range(5)]
    for _round in range(3):
        for key in names:
            rt.granted[key] = rt.allowed(key, 5)
    assert sum(rt.granted.values()) == 10  # half the cap: the other replica has the rest
    rt.shard = _Shard(1)  # the other replica left: the whole cap, shares recomputed
    for _round in range(3):
        for key in names:
            rt.granted[key] = rt.allowed(key, 5)
    assert sum(rt.granted.values()) == 20
