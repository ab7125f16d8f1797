"""Pacing per provider against a real Redis: the permit script (provider GCRA + group share +
rules + expiring concurrency leases, one round trip) and the pushback script, driven through
the worker's own :class:`ProviderPacer` by several clients at once, as several worker processes
would."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis.asyncio
from redis.crc import key_slot

from sendgroup_worker.provider import (
    ProviderConfig,
    ProviderKeys,
    ProviderPacer,
    PushbackRuleConfig,
    reply_code,
)
from sendgroup_worker.ratelimit import RatePolicy

pytestmark = pytest.mark.redis

T = TypeVar("T")

UNLIMITED = RatePolicy(per_minute=None)


def _run(redis_url: str, body: Callable[[Callable[..., ProviderPacer]], Awaitable[T]]) -> T:
    """Run ``body(make)`` where ``make(config, policy=..., lease=...)`` builds a pacer on its own
    Redis connection (as a separate worker process would have); connections closed after."""

    async def main() -> T:
        clients: list[redis.asyncio.Redis[bytes]] = []

        def make(
            config: ProviderConfig, policy: RatePolicy = UNLIMITED, lease: float = 30.0
        ) -> ProviderPacer:
            client: redis.asyncio.Redis[bytes] = redis.asyncio.Redis.from_url(redis_url)
            clients.append(client)
            return ProviderPacer(client, config, policy, lease)

        try:
            return await body(make)
        finally:
            for c in clients:
                await c.connection_pool.disconnect()

    return asyncio.run(main())


def _provider(**fields: Any) -> ProviderConfig:
    base: dict[str, Any] = {"id": "csp/test", "group": "ns/a"}
    base.update(fields)
    return ProviderConfig.model_validate(base)


async def _drive(pacers: list[tuple[ProviderPacer, str]], seconds: float) -> list[list[float]]:
    """Each (pacer, lane) takes permits as fast as allowed for ``seconds``; returns the grant
    times (monotonic) per taker."""
    stop = asyncio.Event()
    out: list[list[float]] = [[] for _ in pacers]

    async def taker(i: int, pacer: ProviderPacer, lane: str) -> None:
        while not stop.is_set():
            if await pacer.take(lane, stop):
                out[i].append(time.monotonic())

    tasks = [asyncio.create_task(taker(i, p, lane)) for i, (p, lane) in enumerate(pacers)]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    return out


def _in_window(times: list[float], start: float, end: float) -> int:
    return sum(1 for t in times if start <= t < end)


def test_every_key_of_a_provider_is_in_one_cluster_slot() -> None:
    keys = ProviderKeys("sp/mail/google")
    names = [keys.tat, keys.leases, keys.rules, keys.shares, keys.fired]
    names += [keys.group("mail/spring-sale-gmail"), keys.matches("unusual-rate")]
    assert len({key_slot(k.encode()) for k in names}) == 1
    other = ProviderKeys("csp/yahoo")
    assert key_slot(other.tat.encode()) != key_slot(keys.tat.encode())


def test_the_provider_budget_holds_across_groups_and_clients(redis_url: str) -> None:
    """Three groups x two clients, each taking as fast as it may: together they get the
    provider's 600/min (10/s), within 5 % over 6 s after the initial burst (default burst,
    10), whatever their number."""

    async def body(make: Callable[..., ProviderPacer]) -> tuple[int, int, float]:
        pacers = [
            (make(_provider(perMinute=600, group=f"ns/g{g}")), f"w{g}{w}")
            for g in range(3)
            for w in range(2)
        ]
        start = time.monotonic()
        times = await _drive(pacers, 7.5)
        first = min(t[0] for t in times)
        burst = sum(_in_window(t, first, first + 0.05) for t in times)
        got = sum(_in_window(t, start + 1.5, start + 7.5) for t in times)
        return burst, got, min(len(t) for t in times)

    burst, got, least = _run(redis_url, body)
    assert 10 <= burst <= 11, burst  # the burst at once (+1 that became due meanwhile)
    assert 57 <= got <= 63, got  # 6 s at 10/s
    assert least >= 5  # nobody starved


def test_shares_split_the_budget_and_group_limits_apply_inside(redis_url: str) -> None:
    """Provider 1200/min; shares written by the operator: a 600, b 600; group b's own rate is
    120/min, so b sends at 120 (its own limit applies inside its share), a at 600 with its two
    clients together."""

    async def body(make: Callable[..., ProviderPacer]) -> tuple[int, int]:
        cfg_a = _provider(perMinute=1200, group="ns/a")
        cfg_b = _provider(perMinute=1200, group="ns/b")
        a1, a2 = make(cfg_a), make(cfg_a)
        await a1.redis.hset(a1.keys.shares, mapping={"ns/a": "600", "ns/b": "600"})
        b = make(cfg_b, RatePolicy(per_minute=120))
        start = time.monotonic()
        t = await _drive([(a1, "a1"), (a2, "a2"), (b, "b1"), (b, "b2")], 6.5)
        a_got = _in_window(t[0] + t[1], start + 1.5, start + 6.5)
        b_got = _in_window(t[2] + t[3], start + 1.5, start + 6.5)
        return a_got, b_got

    a_got, b_got = _run(redis_url, body)
    assert 48 <= a_got <= 52, a_got  # 5 s at 10/s
    assert 9 <= b_got <= 11, b_got  # 5 s at 2/s


def test_under_a_scale_rule_the_shares_apply_as_written_so_a_high_group_keeps_its_own(
    redis_url: str,
) -> None:
    """Provider 1200/min under ScaleRate(20%): 240/min in all. The operator splits those 240
    (high first: high 240, normal 0); the script applies the shares as written and scales only
    the provider level. Before, it scaled each share again (high at 48/min, 1/5 of its share:
    review finding "ScaleRate slows a high group as much as a normal one")."""

    async def body(make: Callable[..., ProviderPacer]) -> tuple[int, str, float | None]:
        high = make(_provider(perMinute=1200, group="ns/high"))
        normal = make(_provider(perMinute=1200, group="ns/normal"))
        sec, usec = await high.redis.time()
        now_ms = sec * 1000 + usec // 1000
        await high.redis.hset(
            high.keys.rules, "unusual-rate", f"scale|20|{now_ms}|{now_ms + 60000}|10|60000"
        )
        await high.redis.hset(high.keys.shares, mapping={"ns/high": "240", "ns/normal": "0"})
        refused = await normal.try_take("n1")
        start = time.monotonic()
        (t,) = await _drive([(high, "h1")], 5.5)
        return _in_window(t, start + 0.5, start + 5.5), refused.why, refused.per_minute

    got, why, per_minute = _run(redis_url, body)
    assert why == "share" and per_minute == 240.0
    assert 18 <= got <= 22, got  # 5 s at 4/s: the whole scaled rate (was ~4: 48/min)


def test_a_zero_share_waits_and_a_new_share_takes_effect_at_once(redis_url: str) -> None:
    async def body(make: Callable[..., ProviderPacer]) -> tuple[str, bool, float]:
        p = make(_provider(perMinute=600, group="ns/normal"))
        await p.redis.hset(p.keys.shares, mapping={"ns/high": "600", "ns/normal": "0"})
        refused = await p.try_take("l1")
        await p.redis.hset(p.keys.shares, "ns/normal", "300")
        t0 = time.monotonic()
        ok = await p.take("l1", asyncio.Event())
        return refused.why, ok, time.monotonic() - t0

    why, ok, took = _run(redis_url, body)
    assert why == "share" and ok and took < 0.2


def test_a_share_that_rises_rescales_the_wait_to_the_new_rate(redis_url: str) -> None:
    """Review finding: a group's TAT was counted at the rate in force when it was written, so
    a group that sent one mail at a share of 1/min (burst 1) and then got 600/min waited the
    old 60 s for its next permit (179 s and 46 s were seen after a scale rule ended). When the
    rate rises the backlog is now cut to what one grant at the new rate leaves (tolerance +
    interval), never below its cells at the new interval (a debt stays charged); when it
    falls, the past stays charged at the old rate."""

    async def body(make: Callable[..., ProviderPacer]) -> tuple[float, ...]:
        p = make(_provider(perMinute=6000, group="ns/g"))
        await p.redis.hset(p.keys.shares, "ns/g", "1")
        assert (await p.try_take("l1")).granted
        slow = await p.try_take("l1")  # at 1/min: the next cell in ~60 s
        await p.redis.hset(p.keys.shares, "ns/g", "600")
        fast = await p.try_take("l1")  # 600/min, burst 10: 0.9 s tolerance, 0.1 s a cell
        t0 = time.monotonic()
        assert await p.take("l1", asyncio.Event())
        took = time.monotonic() - t0
        # 60/min, burst 1: a debt of 30 recipients puts the group ~31 s ahead; at 600/min
        # those 31 cells are 3.1 s (cut to 1 s they would forgive the debt)
        await p.redis.hset(p.keys.shares, "ns/g", "60")
        await p.try_take("l1", debt=30)
        await p.redis.hset(p.keys.shares, "ns/g", "600")
        debt = await p.try_take("l1")
        # falling again, to 6/min: the ~3 s ahead are not re-charged at 10 s a cell
        await p.redis.hset(p.keys.shares, "ns/g", "6")
        fell = await p.try_take("l1")
        return slow.wait, fast.wait, took, debt.wait, fell.wait

    slow, fast, took, debt, fell = _run(redis_url, body)
    assert slow > 55.0, slow
    assert fast <= 0.15 and took < 0.3, (fast, took)
    assert 2.0 <= debt <= 3.2, debt
    assert 2.5 <= fell <= 3.3, fell


def test_concurrency_leases_expire_so_a_killed_worker_leaks_nothing(redis_url: str) -> None:
    """Concurrency 2: two lanes hold leases; a third is refused until a lease is released or,
    for a lane that vanished (its process killed: it never releases), until the lease expires
    (lease lifetime 1 s here: job timeout + margin in real workers)."""

    async def body(make: Callable[..., ProviderPacer]) -> list[Any]:
        cfg = _provider(concurrency=2)
        killed = make(cfg, lease=1.0)
        alive = make(cfg, lease=1.0)
        out: list[Any] = []
        out.append((await killed.try_take("k1")).granted)
        out.append((await alive.try_take("a1")).granted)
        third = await alive.try_take("a2")
        out.append((third.granted, third.why))
        out.append((await alive.try_take("a1")).granted)  # renewing its own lease is fine
        await alive.release("a1")
        out.append((await alive.try_take("a2")).granted)  # a released lease is free at once
        out.append((await alive.try_take("a3")).granted)  # k1 still holds one
        t0 = time.monotonic()
        await alive.take("a3", asyncio.Event())  # k1 never comes back: its lease expires
        out.append(round(time.monotonic() - t0, 1))
        members = await alive.redis.zrange(alive.keys.leases, 0, -1)
        out.append(sorted(m.decode() for m in members))
        return out

    out = _run(redis_url, body)
    assert out[:6] == [True, True, (False, "concurrency"), True, True, False]
    assert 0.5 <= out[6] <= 1.3, out  # k1's lease (1 s) ran out
    assert "k1" not in out[7] and "a3" in out[7]  # k1's lease is gone, a3 holds one


def test_recipients_not_jobs_are_counted(redis_url: str) -> None:
    """A mail to 5 recipients charges 4 more cells as debt on the lane's next permit: at
    60/min with burst 1, the next permit comes 5 s later, not 1 s."""

    async def body(make: Callable[..., ProviderPacer]) -> tuple[bool, bool, float]:
        p = make(_provider(perMinute=60, burst=1))
        first = await p.try_take("l1")
        nxt = await p.try_take("l1", debt=4)
        return first.granted, nxt.granted, nxt.wait

    first, nxt, wait = _run(redis_url, body)
    assert first and not nxt
    assert 4.8 <= wait <= 5.0, wait


def test_a_charge_counts_at_once_for_every_group_and_leaves_the_lease(redis_url: str) -> None:
    """A mail's 4 extra recipients charged right after its permit (``charge``, the script's
    ``peek`` mode): at 60/min, burst 1, another group's next permit comes 5 s later, not 1 s;
    the charge takes no permit and keeps the lane's lease (concurrency 1: the other group is
    refused for concurrency once the rate allows it)."""

    async def body(make: Callable[..., ProviderPacer]) -> tuple[bool, float, float, str, str]:
        config = _provider(perMinute=60, burst=1, concurrency=1)
        a = make(config)
        b = make(config.model_copy(update={"group": "ns/b"}))
        first = await a.try_take("a1")
        before = await b.try_take("b1")
        await a.charge("a1", 4)
        after = await b.try_take("b1")
        # let the rate allow a permit (5 cells = 5 s would be long): move the TAT to now
        await a.redis.delete(a.keys.tat)
        leased = await b.try_take("b1")
        return first.granted, before.wait, after.wait, after.why, leased.why

    granted, before, after, why, leased = _run(redis_url, body)
    assert granted
    assert 0.8 <= before <= 1.0, before
    assert 4.8 <= after <= 5.0, (after, why)
    assert why == "provider"
    assert leased == "concurrency"  # a1's lease held through the charge


def test_a_refund_gives_back_only_cells_nobody_took_a_permit_behind(redis_url: str) -> None:
    """``refund`` after a ``charge`` (recipients not sent to): exact when nothing was charged
    since (the provider's and the group's TAT move back by the cells: the next permit waits
    ~1 s for the mail's own cell, not 5 s), nothing once another lane took a permit behind the
    charged cells (moving the TAT back would stack the next permit on top of that one)."""

    async def body(make: Callable[..., ProviderPacer]) -> dict[str, Any]:
        policy = RatePolicy(per_minute=60, burst=1)  # the group's own rate: a group level
        a = make(_provider(perMinute=60, burst=1), policy)
        b = make(_provider(perMinute=60, burst=1, group="ns/b"))
        await a.try_take("a1")
        marks = await a.charge("a1", 4)
        exact = await a.refund(4, marks)
        after_refund = await b.try_take("b1")
        # again, with another group's permit behind the charge (burst 10: it is granted)
        await a.redis.delete(a.keys.tat, a.keys.group("ns/a"))
        wide = make(_provider(perMinute=60, burst=10), policy)
        other = make(_provider(perMinute=60, burst=10, group="ns/b"))
        await wide.try_take("a1")
        marks = await wide.charge("a1", 4)
        behind = await other.try_take("b1")
        tat = await wide.redis.get(wide.keys.tat)
        kept = await wide.refund(4, marks)
        return {
            "exact": exact,
            "after_refund": (after_refund.granted, after_refund.wait),
            "behind": behind.granted,
            "kept": kept,
            "tat_unchanged": tat == await wide.redis.get(wide.keys.tat),
        }

    out = _run(redis_url, body)
    assert out["exact"] == (True, True), out
    granted, wait = out["after_refund"]
    assert not granted and 0.8 <= wait <= 1.0, out  # the mail's own cell, not 5 s
    assert out["behind"], out
    # the provider's TAT had b1's permit behind the charge: kept; the group's (only a's) not
    assert out["kept"] == (False, True), out
    assert out["tat_unchanged"], out


def test_an_unused_permit_goes_back_only_where_nobody_took_one_behind_it(redis_url: str) -> None:
    """``give_back`` (the reserve found no job for the permit): the cell goes back when
    nothing was taken since, so another group's permit follows at once (burst 1); once another
    group's lane took a permit after it, in a slot whose time had come (the schedule had fallen
    behind now), the provider keeps the cell: moving the schedule back would let a third
    permit go in the same interval as that one."""

    async def body(make: Callable[..., ProviderPacer]) -> dict[str, Any]:
        a = make(_provider(perMinute=600, burst=1))  # one permit per 100 ms, one at once
        b = make(_provider(perMinute=600, burst=1, group="ns/b"))
        c = make(_provider(perMinute=600, burst=1, group="ns/c"))
        await a.try_take("a1")
        exact = await a.give_back("a1")
        right_after = await b.try_take("b1")
        await b.redis.delete(b.keys.tat)
        await a.try_take("a1")
        await asyncio.sleep(0.15)  # a's slot has passed: b's permit is placed at now
        behind = await b.try_take("b1")
        kept = await a.give_back("a1")
        third = await c.try_take("c1")
        return {
            "exact": exact,
            "right_after": right_after.granted,
            "behind": behind.granted,
            "kept": kept,
            "third": (third.granted, third.wait),
        }

    out = _run(redis_url, body)
    assert out["exact"] == (True, False), out  # no group rate here: only the provider level
    assert out["right_after"], out
    assert out["behind"], out
    assert out["kept"] == (False, False), out
    granted, wait = out["third"]
    assert not granted and 0.05 <= wait <= 0.1, out


def test_a_counted_rule_scales_every_group_then_recovers_additively(redis_url: str) -> None:
    """``count: 3`` matching replies within the window, from different groups' workers, fire
    ScaleRate(20%) for 1 s: every group's next permit sees the provider at 20 %; after the
    duration the rate climbs back by 40 % per 0.5 s step."""
    rule = PushbackRuleConfig(
        name="unusual-rate",
        codes=[421, 451],
        pattern="(?i)unusual rate",
        count=3,
        window=10.0,
        action="scale",
        value=20,
        duration=1.0,
        step_percent=40,
        every=0.5,
    )

    async def body(make: Callable[..., ProviderPacer]) -> list[Any]:
        a = make(_provider(perMinute=6000, group="ns/a", rules=[rule]))
        b = make(_provider(perMinute=6000, group="ns/b", rules=[rule]))
        out: list[Any] = []
        out.append(a.matching_rule("421 4.7.0 Unusual rate of mail"))
        out.append(a.matching_rule("421 4.7.0 try later"))  # code matches, text does not
        out.append(a.matching_rule("550 5.7.1 unusual rate"))  # text matches, code does not
        fired = [await a.record_reply("421 4.7.28 Unusual rate detected") for _ in range(2)]
        fired.append(await b.record_reply("451 4.7.28 unusual RATE from your IP"))
        out.append([f is not None for f in fired])
        t_fired = time.monotonic()
        out.append((await a.try_take("a1")).per_minute)
        out.append((await b.try_take("b1")).per_minute)
        rates = []
        while time.monotonic() - t_fired < 2.6:
            rates.append(
                (round(time.monotonic() - t_fired, 2), (await b.try_take("b1")).per_minute)
            )
            await asyncio.sleep(0.05)
        out.append(rates)
        fired_log = await a.redis.lrange(a.keys.fired, 0, -1)
        out.append(fired_log)
        return out

    out = _run(redis_url, body)
    assert out[0] is not None and out[0].name == "unusual-rate"
    assert out[1] is None and out[2] is None
    assert out[3] == [False, False, True]  # the third reply, from another group, fires it
    assert out[4] == out[5] == 1200.0  # 20 % for both groups at once
    rates: list[tuple[float, float]] = out[6]
    assert all(r == 1200.0 for t, r in rates if t < 0.95)
    assert all(r == 3600.0 for t, r in rates if 1.05 < t < 1.45)  # 20 % + 40 %
    assert all(r == 6000.0 for t, r in rates if t > 1.6)  # 20 + 40 + 40 >= 100 %: recovered
    assert len(out[7]) == 1 and out[7][0].startswith(b"unusual-rate|")
    assert b"421 4.7.28 Unusual rate detected" not in out[7][0]  # the firing reply is b's
    assert b"unusual RATE from your IP" in out[7][0]


def test_an_immediate_suspend_stops_every_group_and_ends_on_time(redis_url: str) -> None:
    rule = PushbackRuleConfig(name="blocked", codes=[421], count=1, action="suspend", duration=1.0)

    async def body(make: Callable[..., ProviderPacer]) -> tuple[str, float, str]:
        a = make(_provider(group="ns/a", rules=[rule]))
        b = make(_provider(group="ns/b", rules=[rule]))
        assert (await b.try_take("b1")).granted
        fired = await a.record_reply(
            "421 4.7.0 [TS01] Messages from 192.0.2.1 temporarily deferred"
        )
        assert fired is not None
        t0 = time.monotonic()
        refused = await b.try_take("b1")
        held = await b.redis.zcard(b.keys.leases)  # a suspended lane holds no lease
        await b.take("b1", asyncio.Event())
        leases = await b.redis.zrange(b.keys.leases, 0, -1)
        return refused.why, time.monotonic() - t0, f"{held} {b','.join(leases).decode()}"

    why, waited, leases = _run(redis_url, body)
    assert why == "suspended:blocked"
    assert 0.85 <= waited <= 1.3, waited
    assert leases == "0 b1"  # the suspension released b1's lease; the permit took it again


def test_reply_codes_are_read_from_the_reply() -> None:
    assert reply_code("421 4.7.0 later") == 421
    assert reply_code("  550-5.1.1 no") == 550
    assert reply_code("connection reset") is None


def test_the_operator_writes_shares_and_reads_the_rules_the_workers_fired(redis_url: str) -> None:
    """The operator side of the same keys: shares written atomically reach the permit script;
    a firing written by a worker is read back with the reply that fired it."""
    from sendgroup_operator import provider_io

    rule = PushbackRuleConfig(name="blocked", codes=[421], action="suspend", duration=60.0)

    async def body(make: Callable[..., ProviderPacer]) -> tuple[Any, ...]:
        p = make(_provider(perMinute=600, group="ns/normal", rules=[rule]))
        await provider_io.write_shares(
            p.redis, redis_url, "csp/test", {"ns/high": 600.0, "ns/normal": 0.0}
        )
        refused = await p.try_take("l1")
        await provider_io.write_shares(p.redis, redis_url, "csp/test", {"ns/normal": 600.0})
        granted = await p.try_take("l1")
        shares = await p.redis.hgetall(p.keys.shares)
        ttl = await p.redis.ttl(p.keys.shares)
        await p.record_reply("421 4.7.0 [TSS04] Messages temporarily deferred")
        state = await provider_io.read_state(p.redis, redis_url, "csp/test")
        return refused.why, granted.granted, shares, state, ttl

    why, granted, shares, state, ttl = _run(redis_url, body)
    assert (why, granted) == ("share", True)
    assert shares == {b"ns/normal": b"600.000"}  # replaced, not merged
    assert 0 < ttl <= provider_io.SHARES_TTL  # gone if no operator writes them again
    assert [(r.name, r.action) for r in state.rules] == [("blocked", "suspend")]
    assert 59 <= state.rules[0].until - state.now <= 60
    assert state.replies == {"blocked": "421 4.7.0 [TSS04] Messages temporarily deferred"}
    # both permit calls ("take", refused or granted) recorded that ns/normal asks to send
    assert set(state.demand) == {"ns/normal"}
    assert 0 <= state.now - state.demand["ns/normal"] <= 2, (state.now, state.demand)


def test_a_group_that_asks_for_permits_is_seen_to_have_work(redis_url: str) -> None:
    """Review finding: an emptied group kept its share until idleAfter (its phase stayed
    Running), so an empty high group held the whole budget. A "take" call records the group's
    request (the provider's demand hash); "peek", "give" and "release" do not; the operator
    counts a group with nothing queued as having work only while it asked recently."""
    from sendgroup_operator import provider_io, provider_plan

    async def body(make: Callable[..., ProviderPacer]) -> tuple[Any, Any, int]:
        asking = make(_provider(perMinute=600, group="ns/asking"))
        quiet = make(_provider(perMinute=600, group="ns/quiet"))
        await provider_io.write_shares(
            asking.redis, redis_url, "csp/test", {"ns/asking": 0.0, "ns/quiet": 600.0}
        )
        refused = await asking.try_take("a1")  # a zero share: refused, but it asked
        await quiet.release("q1")
        await quiet.give_back("q1")
        await quiet.try_take("q1", demand=False)  # an idle lane's poll: granted, not recorded
        state = await provider_io.read_state(asking.redis, redis_url, "csp/test")
        ttl = await asking.redis.pttl(asking.keys.demand)
        return refused.why, state, ttl

    why, state, ttl = _run(redis_url, body)
    assert why == "share"
    assert set(state.demand) == {"ns/asking"}, state.demand
    assert 86_000_000 <= ttl <= 86_400_000, ttl  # a day past its newest group
    assert state.shares_present
    assert provider_plan.has_work(0, state.demand.get("ns/asking"), state.now)
    assert not provider_plan.has_work(0, state.demand.get("ns/quiet"), state.now)
    later = state.now + provider_plan.DEMAND_WINDOW + 1
    assert not provider_plan.has_work(0, state.demand["ns/asking"], later)
    assert provider_plan.has_work(3, None, later)  # queued jobs are work without asking


def test_a_short_lease_does_not_cut_a_long_ones_life(redis_url: str) -> None:
    """Review finding: every permit set the whole leases key to expire at the caller's lease
    lifetime, so a group with a 1 s lease deleted, 2 s later, the lease of a group whose jobs
    may run 30 s: concurrency 2 then let a third transaction in."""

    async def body(make: Callable[..., ProviderPacer]) -> tuple[bool, bool, tuple[bool, str]]:
        cfg = _provider(concurrency=2)
        slow = make(cfg, lease=30.0)
        quick = make(_provider(concurrency=2, group="ns/b"), lease=1.0)
        first = (await slow.try_take("s1")).granted
        second = (await quick.try_take("q1")).granted
        await asyncio.sleep(2.5)  # past the quick lease's key expiry (1 s + 1 s)
        await quick.release("q1")
        third = await quick.try_take("q2")  # slow's lease still counts: one of two free
        fourth = await quick.try_take("q3")
        return first, second and third.granted, (fourth.granted, fourth.why)

    first, second, fourth = _run(redis_url, body)
    assert first and second
    assert fourth == (False, "concurrency")
