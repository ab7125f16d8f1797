"""shardmember.py (issue 15) over a fake Lease API: the poll's calls (one renewal, one list),
join and takeover of our own Lease, a conflict, a failing API server (fencing), the change
event the waiting daemons use, the clean leave, and the orphan count of a sharded replica."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

import pytest

from sendgroup_operator import reconcile, sharding, shardmember
from sendgroup_operator.kube import KubeError
from sendgroup_operator.settings import Settings

LOG = logging.getLogger("test")
F = TypeVar("F", bound=Callable[..., Coroutine[Any, Any, None]])


def sync(fn: F) -> Callable[..., None]:
    """Run the async test in its own event loop (the unit tier has no asyncio plugin)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return run


class FakeLeases:
    """The Lease calls of ``Kube`` over a dict, with a resourceVersion per write."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.rv = 0
        self.calls: list[str] = []
        self.down = False
        #: the timeout of every call (None: none given)
        self.timeouts: list[float | None] = []
        #: the next patch is applied, then answered with a timeout (outcome unknown)
        self.lose_answer = False

    def _check(self, call: str, timeout: float | None = None) -> None:
        self.calls.append(call)
        self.timeouts.append(timeout)
        if self.down:
            raise KubeError(0, "HTTP 0: connection refused")

    def _stored(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[body["metadata"]["name"]] = body
        return body

    async def list_leases(
        self, namespace: str, selector: str, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        self._check("list", timeout)
        wanted = dict(part.split("=") for part in selector.split(","))
        return [
            lease
            for lease in self.leases.values()
            if wanted.items() <= lease["metadata"]["labels"].items()
        ]

    async def create_lease(
        self, body: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        self._check("create", timeout)
        if body["metadata"]["name"] in self.leases:
            raise KubeError(409, "HTTP 409: exists")
        return self._stored(body)

    async def patch_lease(
        self, namespace: str, name: str, patch: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any] | None:
        self._check("patch", timeout)
        lease = self.leases.get(name)
        if lease is None:
            return None
        rv = patch.get("metadata", {}).get("resourceVersion")
        if rv is not None and rv != lease["metadata"]["resourceVersion"]:
            raise KubeError(409, "HTTP 409: conflict")
        lease["spec"].update(patch["spec"])
        stored = self._stored(lease)
        if self.lose_answer:
            self.lose_answer = False
            raise KubeError(0, "HTTP 0: ReadTimeoutError: read timed out")
        return stored

    async def delete_lease(self, namespace: str, name: str, timeout: float | None = None) -> None:
        self._check("delete", timeout)
        self.leases.pop(name, None)


def shard(fake: FakeLeases, member: str, duration: float = 3.0) -> shardmember.Shard:
    settings = Settings(namespace="ops", shard_set="sgo", shard_lease_duration=duration)
    return shardmember.Shard(fake, settings, member=member)  # type: ignore[arg-type]


def test_lease_names_are_dns_names() -> None:
    assert shardmember.lease_name("sgo", "Pod_A") == "sgo-pod-a"
    long = shardmember.lease_name("x" * 40, "y" * 40)
    assert len(long) <= 63 and long != shardmember.lease_name("x" * 40, "y" * 39 + "z")


@sync
async def test_a_poll_is_one_renewal_and_one_list() -> None:
    fake = FakeLeases()
    a = shard(fake, "a")
    await a.poll(LOG)
    assert fake.calls == ["create", "list"]
    lease = fake.leases["sgo-a"]
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["metadata"]["labels"] == {
        "app.kubernetes.io/name": "sendgroup-operator",
        "app.kubernetes.io/component": "shard-member",
        "sendgroups.io/shard-set": "sgo",
    }
    fake.calls.clear()
    await a.poll(LOG)
    assert fake.calls == ["patch", "list"]  # conditional on the resourceVersion we wrote
    assert a.membership.members(a.membership.last_poll or 0) == ("a",)


@sync
async def test_a_restarted_replica_takes_its_own_lease_back() -> None:
    fake = FakeLeases()
    await shard(fake, "a").poll(LOG)
    again = shard(fake, "a")
    await again.poll(LOG)  # create answers 409: patched instead
    assert fake.calls[-3:] == ["create", "patch", "list"]
    assert again.membership.joined_at is not None


@sync
async def test_a_conflict_on_our_lease_is_logged_and_we_join_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeLeases()
    a = shard(fake, "a")
    await a.poll(LOG)
    await a.poll(LOG)
    joined = a.membership.joined_at
    fake.leases["sgo-a"]["metadata"]["resourceVersion"] = "999"  # another writer
    with caplog.at_level(logging.ERROR):
        await asyncio.sleep(0.01)
        await a.poll(LOG)
    assert "another replica running with identity a" in caplog.text
    assert a.membership.joined_at is not None and a.membership.joined_at != joined


@sync
async def test_a_failing_api_server_fences_the_replica_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeLeases()
    a = shard(fake, "a", duration=3.0)
    a.membership.lease_duration = 0.3  # a short lease to wait out here
    a.membership.margin = 0.06
    await a.poll(LOG)
    await asyncio.sleep(0.31)
    await a.poll(LOG)
    assert a.may_act("uid-1")
    fake.down = True
    with caplog.at_level(logging.WARNING):
        await a.poll(LOG)
        await a.poll(LOG)
    assert caplog.text.count("cannot renew Lease") == 1
    await asyncio.sleep(0.3)
    assert not a.may_act("uid-1")


@sync
async def test_the_change_event_fires_when_the_assignment_changes() -> None:
    fake = FakeLeases()
    a = shard(fake, "a", duration=3.0)
    a.duration = 0.3  # the poll period is duration / 3
    a.membership.lease_duration = 0.3
    a.membership.margin = 0.06
    event = a.changed()
    polling = asyncio.create_task(a.run(LOG))
    try:
        await asyncio.wait_for(event.wait(), 1.0)  # the first view (joining)
        assert not a.may_act("uid-1")
        # the join wait ends by time alone (publish() scheduled itself for that moment)
        event = a.changed()
        await asyncio.wait_for(event.wait(), 1.0)
        assert a.may_act("uid-1") and a.changed() is not event
        b = shard(fake, "b")
        await b.poll(LOG)
        event = a.changed()
        await asyncio.wait_for(event.wait(), 1.0)  # a's next poll sees b: groups move
        uids = [f"uid-{i}" for i in range(50)]
        moved = [u for u in uids if sharding.owner(u, ["a", "b"]) == "b"]
        assert moved and not any(a.may_act(u) for u in moved)
    finally:
        polling.cancel()


@sync
async def test_a_clean_leave_waits_for_passes_then_deletes_the_lease() -> None:
    fake = FakeLeases()
    a = shard(fake, "a")
    await a.poll(LOG)
    a.busy = 1

    async def finish() -> None:
        await asyncio.sleep(0.2)
        assert "sgo-a" in fake.leases  # not deleted while a pass runs
        a.busy = 0

    await asyncio.gather(a.leave(LOG, wait=5), finish())
    assert "sgo-a" not in fake.leases
    assert not a.may_act("uid-1")


@sync
async def test_a_leave_with_a_pass_still_running_keeps_the_lease() -> None:
    """A pass that outlasts the wait may still act: the Lease stays, so the others take the
    groups only once it expired (as after a crash), not at once."""
    fake = FakeLeases()
    a = shard(fake, "a")
    await a.poll(LOG)
    a.busy = 1
    await a.leave(LOG, wait=0.3)
    assert "sgo-a" in fake.leases
    assert not a.may_act("uid-1")


class FakeDeployments:
    def __init__(self, groups: list[str]) -> None:
        self.groups = groups

    async def list_deployments(
        self, namespace: str | None, selector: str
    ) -> AsyncIterator[list[dict[str, Any]]]:
        yield [
            {"metadata": {"namespace": "ops", "labels": {"sendgroups.io/group": g}}}
            for g in self.groups
        ]


@sync
async def test_a_sharded_replica_does_not_count_the_others_groups_as_orphans() -> None:
    settings = Settings(namespace="ops", sharding=True)
    rt = reconcile.Runtime(settings=settings, kube=FakeDeployments(["mine", "theirs", "ghost"]))  # type: ignore[arg-type]
    rt.shard = shard(FakeLeases(), "a")
    rt.set_demand("ops/mine", 1)
    rt.shard.groups = {"ops/mine": "u1", "ops/theirs": "u2"}
    assert await reconcile.count_orphan_deployments(rt) == 1


@sync
async def test_a_long_dead_members_lease_is_deleted() -> None:
    fake = FakeLeases()
    await shard(fake, "b").poll(LOG)  # b writes once, then dies
    a = shard(fake, "a")
    await a.poll(LOG)
    a.membership.seen["b"].changed_at -= 10 * a.duration
    await a.poll(LOG)
    assert set(fake.leases) == {"sgo-a"}
    assert a.membership.members(a.membership.last_poll or 0) == ("a",)


@sync
async def test_every_lease_request_is_timed_out_within_the_fence() -> None:
    """A poll counts from its start (rule a): each of its requests gets what is left of the
    fence ``L - M`` as its timeout, so a poll never outlasts the moment it could unfence us."""
    fake = FakeLeases()
    a = shard(fake, "a", duration=15.0)
    assert a.budget == 15.0 - 0.2 * 15.0
    await a.poll(LOG)
    await a.poll(LOG)
    assert fake.calls == ["create", "list", "patch", "list"]
    assert all(t is not None and 0 < t <= a.budget for t in fake.timeouts), fake.timeouts
    assert fake.timeouts[1] <= fake.timeouts[0]  # the list gets what the renewal left


@sync
async def test_a_renewal_with_an_unknown_outcome_does_not_make_us_join_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A renewal applied by the API server but timed out on our side must not read as
    "someone else changed our Lease" at the next renewal (join again: act on nothing for L):
    the next renewal takes the Lease over (create 409, plain patch) instead."""
    fake = FakeLeases()
    a = shard(fake, "a")
    await a.poll(LOG)
    joined = a.membership.joined_at
    fake.lose_answer = True
    assert not await a.poll(LOG)
    fake.calls.clear()
    with caplog.at_level(logging.ERROR):
        assert await a.poll(LOG)
    assert fake.calls == ["create", "patch", "list"]
    assert "another replica running" not in caplog.text
    assert a.membership.joined_at == joined


@sync
async def test_a_failed_poll_is_tried_again_sooner() -> None:
    """After a failed poll the next one comes after 2 L / 15 (client-go's retry period), not
    L / 3: a poll that failed under load has the rest of the fence to succeed in."""
    for down, most, least in ((False, 3, 2), (True, 99, 5)):
        fake = FakeLeases()
        fake.down = down
        a = shard(fake, "a", duration=1.5)  # polls every 0.5 s; after a failure, 0.2 s
        task = asyncio.create_task(a.run(LOG))
        await asyncio.sleep(0.95)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        polls = fake.calls.count("list") if not down else len(fake.calls)
        assert least <= polls <= most, (down, fake.calls)
