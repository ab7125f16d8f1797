"""The kopf handlers under sharding (issue 15): a non-owner's change handler does nothing, its
deletion handler never lets kopf finish (kopf would drop the finalizer), its reaper
parks the group until the assignment changes and runs a pass as soon as it owns the group."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from sendgroup_operator import handlers, reconcile
from sendgroup_operator.settings import Settings
from tests.unit import test_handover

BODY = {"metadata": {"namespace": "mail", "name": "g", "uid": "uid-g", "generation": 2}}


class FakeShard:
    """What the handlers ask of ``shardmember.Shard``; ownership set by the test."""

    def __init__(self, mine: bool) -> None:
        self.mine = mine
        self.identity = "me"
        self.duration = 0.3
        self.busy = 0
        self.groups: dict[str, str] = {}
        self._changed = asyncio.Event()

    def may_act(self, uid: str) -> bool:
        return self.mine

    def owner(self, uid: str) -> str | None:
        return "me" if self.mine else "other"

    def changed(self) -> asyncio.Event:
        return self._changed

    def take(self) -> None:
        """The assignment changes: we own the group now."""
        self.mine = True
        self._changed.set()
        self._changed = asyncio.Event()

    def count(self) -> None:
        pass


def memo_with(shard: FakeShard) -> SimpleNamespace:
    rt = reconcile.Runtime(settings=Settings(reaper_interval=30), kube=None)  # type: ignore[arg-type]
    rt.shard = shard  # type: ignore[assignment]
    return SimpleNamespace(runtime=rt)


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the reconcile pass: record each call, return no plan."""
    calls: list[str] = []

    async def fake(*args: Any, **kwargs: Any) -> None:
        calls.append("pass")

    monkeypatch.setattr(handlers, "_compute", fake)
    return calls


def test_a_non_owners_change_handler_does_nothing(passes: list[str]) -> None:
    patch = kopf.Patch()
    memo = memo_with(FakeShard(mine=False))
    asyncio.run(handlers.on_change(body=BODY, patch=patch, memo=memo, logger=None))
    assert passes == [] and not patch


def test_the_owners_change_handler_runs_the_pass(passes: list[str]) -> None:
    memo = memo_with(FakeShard(mine=True))
    asyncio.run(handlers.on_change(body=BODY, patch=kopf.Patch(), memo=memo, logger=None))
    assert passes == ["pass"] and memo.runtime.shard.busy == 0


def test_a_non_owners_deletion_handler_never_succeeds(passes: list[str]) -> None:
    memo = memo_with(FakeShard(mine=False))
    with pytest.raises(kopf.TemporaryError, match="deleted by its owner"):
        asyncio.run(handlers.on_delete(body=BODY, patch=kopf.Patch(), memo=memo, logger=None))
    assert passes == []


def test_a_deletion_handler_that_becomes_the_owner_runs_the_pass(passes: list[str]) -> None:
    shard = FakeShard(mine=False)
    memo = memo_with(shard)

    async def scenario() -> None:
        asyncio.get_running_loop().call_later(0.05, shard.take)
        await handlers.on_delete(body=BODY, patch=kopf.Patch(), memo=memo, logger=None)

    asyncio.run(scenario())  # the fake pass returns no plan: the handler returns
    assert passes == ["pass"]


def test_a_non_owners_reaper_waits_then_takes_over(passes: list[str]) -> None:
    shard = FakeShard(mine=False)
    memo = reaper_memo(shard)

    async def scenario(memo: SimpleNamespace) -> None:
        await see(memo, BODY)
        await asyncio.sleep(INITIAL + 0.1)
        assert passes == [] and shard.groups == {"mail/g": "uid-g"}  # waits, no pass
        memo.runtime.kick("mail/g", 0)  # a wake-up of a group it does not own: no pass
        await asyncio.sleep(0.05)
        assert passes == []
        shard.take()
        await asyncio.sleep(0.1)
        assert passes == ["pass"]  # the takeover: a full pass at once
        await see(memo, BODY, "DELETED")
        assert shard.groups == {}

    with_reaper(scenario, memo)


def test_an_owners_reaper_stops_acting_when_the_group_moves(passes: list[str]) -> None:
    shard = FakeShard(mine=True)
    memo = reaper_memo(shard)

    async def scenario(memo: SimpleNamespace) -> None:
        rt = memo.runtime
        await see(memo, BODY)
        await asyncio.sleep(INITIAL + 0.05)
        assert passes == ["pass"]
        rt.demands["mail/g"] = 3  # what the pass recorded: its share of the cap
        shard.mine = False  # another member owns it now
        shard._changed.set()
        shard._changed = asyncio.Event()
        await asyncio.sleep(0.1)
        assert "mail/g" not in rt.demands  # handed away: this replica's share released
        rt.kick("mail/g", 0)  # a wake-up (e.g. jobs arrived) runs no pass
        await asyncio.sleep(0.1)
        assert passes == ["pass"]
        assert shard.groups == {"mail/g": "uid-g"}  # still watched: it may come back

    with_reaper(scenario, memo)


def test_a_pass_in_flight_counts_as_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean stop (``Shard.leave``) waits for ``busy`` to reach 0 before it deletes the
    Lease: a reaper pass counts while it runs."""
    shard = FakeShard(mine=True)
    memo = reaper_memo(shard)
    seen: list[int] = []

    async def fake(*args: Any, **kwargs: Any) -> None:
        seen.append(shard.busy)

    monkeypatch.setattr(handlers, "_compute", fake)

    async def scenario(memo: SimpleNamespace) -> None:
        await see(memo, BODY)
        await asyncio.sleep(INITIAL + 0.05)

    with_reaper(scenario, memo)
    assert seen == [1] and shard.busy == 0


def reaper_memo(shard: FakeShard) -> SimpleNamespace:
    memo = test_handover._memo()
    memo.runtime.shard = shard
    return memo


see = test_handover.see
with_reaper = test_handover.with_reaper
INITIAL = test_handover.INITIAL
