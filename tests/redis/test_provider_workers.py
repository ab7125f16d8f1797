"""Pacing per provider with real worker processes (``sendgroup-worker work``), a real Redis and
a real SMTP server: two campaigns, three groups, three workers each, all resolved to one
provider. What a user checks at the receiving side: recipients per second arriving at the
provider, in total and per group, and how fast a pushback rule changes that."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess, mail_payload, sync_queue, wait_for, worker_env

pytestmark = pytest.mark.redis

PROVIDER_ID = "csp/bigmail"


def _provider_env(group: str, **fields: Any) -> str:
    return json.dumps({"id": PROVIDER_ID, "group": group, **fields})


def _start_group(
    started: list[WorkerProcess],
    redis_url: str,
    smtp_port: int,
    group: str,
    n: int,
    provider: str,
    **env: Any,
) -> list[WorkerProcess]:
    procs = []
    for i in range(n):
        extra = {"SENDGROUP_PROVIDER": provider, "WORKER_CONCURRENCY": "2", **env}
        w = WorkerProcess(
            worker_env(redis_url, f"mail-{group}", smtp_port, **extra), name=f"{group}-{i}"
        )
        started.append(w)
        procs.append(w)
    return procs


def _fill(redis_url: str, group: str, count: int, start: int = 0) -> None:
    sync_queue(redis_url, f"mail-{group}").push_many(
        mail_payload(f"u{i}@{group}.example") for i in range(start, start + count)
    )


def _arrivals(sink: SmtpSink, start: float, end: float, domain: str = "") -> int:
    with sink.lock:
        log = list(sink.rcpt_log)
    return sum(1 for t, rcpt in log if start <= t < end and rcpt.endswith(domain))


def test_three_groups_of_two_campaigns_share_the_budget_within_5_percent(
    redis_url: str, smtp_sink: SmtpSink, workers: list[WorkerProcess]
) -> None:
    """Provider 1200/min (20/s). Groups a and b (campaign spring) and c (campaign news), three
    workers each, every group unlimited on its own. c starts late and a stops halfway:
    recipients arriving at the provider stay at 20/s +- 5 % over 20 s; every sending group
    gets mail through."""
    budget = {"perMinute": 1200}
    for g in ("spring-a", "spring-b"):
        _fill(redis_url, g, 600)
    _start_group(workers, redis_url, smtp_sink.port, "spring-a", 3, _provider_env("ns/a", **budget))
    _start_group(workers, redis_url, smtp_sink.port, "spring-b", 3, _provider_env("ns/b", **budget))
    # c's workers idle on an empty queue (process start-up time is not what is measured)
    late = _start_group(
        workers, redis_url, smtp_sink.port, "news-c", 3, _provider_env("ns/c", **budget)
    )
    wait_for(lambda: _arrivals(smtp_sink, 0, time.time() + 1) > 0, 30, "the first mail")
    t0 = time.time() + 2.0  # past the initial burst
    time.sleep(4.0)
    _fill(redis_url, "news-c", 600)  # group c starts: work arrives
    time.sleep(7.0)
    for w in workers[:3]:  # group a pauses: its workers stop
        w.stop()
    wait_for(lambda: time.time() >= t0 + 20.0, 30, "the end of the 20 s window")
    total = _arrivals(smtp_sink, t0, t0 + 20.0)
    per_group = {
        g: _arrivals(smtp_sink, t0, t0 + 20.0, f"@{g}.example")
        for g in ("spring-a", "spring-b", "news-c")
    }
    print(f"provider budget 20/s over 20 s: {total} recipients, per group {per_group}")
    # GCRA bounds a 20 s window of permits to 400 + burst (20); arrivals at the sink also move
    # by the jitter between a permit and its RCPT (here: +4, 0.2 s at 20/s). A quiet machine
    # gives 400-401; stop 26's CI, loaded, gave 422 (senders stalled before the window, then
    # spent their burst in it). A budget not applied gives far more (each group is unlimited).
    assert 380 <= total <= 400 + 20 + 4, (total, per_group)
    assert all(n > 20 for n in per_group.values()), per_group
    assert all(w.proc.poll() is None for w in late)


def test_a_rule_fired_by_one_group_slows_every_group_within_a_second_and_expires(
    redis_url: str, smtp_sink: SmtpSink, workers: list[WorkerProcess]
) -> None:
    """Provider 1200/min, rule ``unusual-rate`` (code 421 and an RE2 pattern, immediate,
    ScaleRate 25 % for 4 s, then back by 100 % a step). Group a hits one recipient the
    provider defers with "421 4.7.28 ... unusual rate"; from 1 s after that reply, both groups
    together get 5/s, and 20/s again once the rule expired."""
    rule = {
        "name": "unusual-rate",
        "codes": [421],
        "pattern": "(?i)unusual rate",
        "count": 1,
        "action": "scale",
        "value": 25,
        "duration": 4.0,
        "step_percent": 100,
        "every": 1.0,
    }
    budget = {"perMinute": 1200, "rules": [rule]}
    _fill(redis_url, "a", 120)
    sync_queue(redis_url, "mail-a").push(mail_payload("trigger@a.example", maxTries=1))
    _fill(redis_url, "a", 400, start=120)  # the trigger comes ~6 s after the flow started
    _fill(redis_url, "b", 500)
    smtp_sink.script("trigger@a.example", "421 4.7.28 Our system has detected an unusual rate")
    _start_group(workers, redis_url, smtp_sink.port, "a", 2, _provider_env("ns/a", **budget))
    _start_group(workers, redis_url, smtp_sink.port, "b", 2, _provider_env("ns/b", **budget))
    wait_for(lambda: any(r == "trigger@a.example" for _, r in smtp_sink.rcpt_log), 30, "the 421")
    fired_at = next(t for t, r in smtp_sink.rcpt_log if r == "trigger@a.example")
    before = _arrivals(smtp_sink, fired_at - 3.0, fired_at) / 3.0
    wait_for(lambda: time.time() >= fired_at + 9.0, 20, "the rule's end and recovery")
    during = _arrivals(smtp_sink, fired_at + 1.0, fired_at + 4.0) / 3.0
    during_b = _arrivals(smtp_sink, fired_at + 1.0, fired_at + 4.0, "@b.example") / 3.0
    after = _arrivals(smtp_sink, fired_at + 6.0, fired_at + 9.0) / 3.0
    log = "".join(w.log() for w in workers[:2])
    print(
        f"recipients/s before {before:.1f}, during {during:.1f} (b {during_b:.1f}), "
        f"after {after:.1f}"
    )
    assert 18 <= before <= 22, before
    assert 4.0 <= during <= 6.0, during  # 25 % of 20/s, for every group
    assert during_b > 0.5  # b slowed but still sending
    assert 18 <= after <= 22, after
    assert "pushback rule unusual-rate fired" in log


def test_the_budget_holds_across_a_redis_restart(
    smtp_sink: SmtpSink, workers: list[WorkerProcess]
) -> None:
    """Provider 1200/min (burst 20) on a Redis with an append-only file, restarted while two
    groups send: the workers ride out the outage, and no 5 s window after it carries more than
    the budget plus one burst (the GCRA state came back with the data)."""
    from tests.support.redis_server import RedisServer

    with RedisServer({"appendonly": "yes", "appendfsync": "always"}) as server:
        budget = {"perMinute": 1200}
        _fill(server.url, "a", 600)
        _fill(server.url, "b", 600)
        _start_group(workers, server.url, smtp_sink.port, "a", 2, _provider_env("ns/a", **budget))
        _start_group(workers, server.url, smtp_sink.port, "b", 2, _provider_env("ns/b", **budget))
        wait_for(lambda: _arrivals(smtp_sink, 0, time.time() + 1) > 60, 30, "mail flowing")
        server.restart()
        back = time.time()
        wait_for(lambda: time.time() > back + 12, 20, "12 s after the restart")
        windows = [_arrivals(smtp_sink, back + s, back + s + 5) for s in range(0, 8)]
        print(f"recipients per 5 s window after the restart: {windows}")
        assert max(windows) <= 100 + 20 + 2, windows  # 5 s at 20/s + one burst
        assert _arrivals(smtp_sink, back + 7, back + 12) >= 90  # flowing at the budget again


def test_a_high_group_that_arrives_gets_its_share_within_a_second(
    redis_url: str, smtp_sink: SmtpSink, workers: list[WorkerProcess]
) -> None:
    """Provider 1200/min shared by two normal groups (600 each). A high-priority group with its
    own rate 600/min arrives; the operator's pass writes the new shares (the pure function and
    the Redis adapter the operator uses, called here at the moment the group's first mail
    arrives). From 1 s later the high group gets 10/s and the two normal groups 10/s together,
    each within what GCRA allows a window (rate x window + burst) and 10 % below."""
    import asyncio

    import redis.asyncio

    from sendgroup_operator import provider_io, provider_plan
    from sendgroup_operator.models import Priority

    def write(demands: list[provider_plan.GroupDemand]) -> None:
        async def main() -> None:
            client: redis.asyncio.Redis[bytes] = redis.asyncio.Redis.from_url(redis_url)
            allocation = provider_plan.shares(1200, demands)
            await provider_io.write_shares(client, redis_url, PROVIDER_ID, allocation)
            await client.connection_pool.disconnect()

        asyncio.run(main())

    budget = {"perMinute": 1200}
    for g in ("n1", "n2", "h"):
        _fill(redis_url, g, 500)
    normal = [provider_plan.GroupDemand("ns/n1"), provider_plan.GroupDemand("ns/n2")]
    write(normal)
    _start_group(workers, redis_url, smtp_sink.port, "n1", 2, _provider_env("ns/n1", **budget))
    _start_group(workers, redis_url, smtp_sink.port, "n2", 2, _provider_env("ns/n2", **budget))
    wait_for(lambda: _arrivals(smtp_sink, 0, time.time() + 1) > 40, 30, "normal groups sending")
    _start_group(
        workers,
        redis_url,
        smtp_sink.port,
        "h",
        2,
        _provider_env("ns/h", **budget),
        RATE_PER_MINUTE="600",
    )
    wait_for(lambda: _arrivals(smtp_sink, 0, time.time() + 1, "@h.example") > 0, 30, "h arrives")
    write([*normal, provider_plan.GroupDemand("ns/h", Priority.HIGH, limit=600)])
    t_h = time.time()
    window = 8.0  # seconds, from 1 s after the write
    wait_for(lambda: time.time() > t_h + 1.0 + window, 15, f"{window} s of the new shares")
    high = _arrivals(smtp_sink, t_h + 1.0, t_h + 1.0 + window, "@h.example")
    rest = _arrivals(smtp_sink, t_h + 1.0, t_h + 1.0 + window, "@n1.example") + _arrivals(
        smtp_sink, t_h + 1.0, t_h + 1.0 + window, "@n2.example"
    )
    print(
        f"{window} s from 1 s after the high group's share was written: high {high}, normal {rest}"
    )
    # GCRA bounds any window of W seconds to rate x W + burst (burst = ceil(perMinute / 60)
    # unless set): the high group 10/s, burst 10; the normal groups 5/s each, burst 5 each. A
    # lane held back before the window (the provider level full) spends its burst inside it:
    # stop 25's CI saw 56 in a 5 s window (50 + 6), inside the bound. Below: 10 % for a 2-core
    # runner's stalls, and for the normal groups also the high group's burst, which comes out
    # of the same provider budget (seen: high 84-85, normal 75-76 in 8 s). A share not applied
    # gives the high group ~2/3 of this and the normal groups ~4/3 (the three would split the
    # provider's 20/s).
    expected = 10 * window
    assert 0.9 * expected <= high <= expected + 10, high
    assert 0.9 * expected - 10 <= rest <= expected + 5 + 5, rest


def test_an_idle_worker_keeps_no_demand_alive_and_a_job_brings_its_share_back(
    redis_url: str, smtp_sink: SmtpSink, workers: list[WorkerProcess]
) -> None:
    """Review finding: a worker asks for a permit before it looks for a job, so its idle lanes,
    polling every ``block_for``, told the operator the group had work for ever and an emptied
    group never freed its provider share. Now only a permit request with a sign of work (the
    lane sent a mail, or a job woke it) is recorded in the provider's ``demand`` hash. With a
    share of 0 and no sign of work a lane waits for work, not for a permit; a job then makes
    it ask (recorded), and the share the operator writes next lets the mail go."""
    import redis as sync_redis

    from sendgroup_worker.provider import ProviderKeys

    keys = ProviderKeys(PROVIDER_ID)
    r = sync_redis.Redis.from_url(redis_url)

    def demand_age() -> float | None:
        value = r.hget(keys.demand, "ns/idle")
        if value is None:
            return None
        sec, usec = r.time()
        return (sec * 1000 + usec // 1000 - int(value)) / 1000

    def delivered(domain: str) -> int:
        return _arrivals(smtp_sink, 0, time.time() + 1, domain)

    provider = _provider_env("ns/idle", perMinute=600)
    (worker,) = _start_group(
        workers, redis_url, smtp_sink.port, "idle", 1, provider, WORKER_BLOCK_FOR="1"
    )
    # its lanes ask for permits and find nothing, once a block_for (1 s)
    wait_for(lambda: "worker started" in worker.log(), 30, "the worker started")
    time.sleep(6)  # six block_for timeouts of idle polling
    # review finding: a starting lane's first request counted as demand (it had not looked
    # yet), so every rollout of an idle group took a share for 30 s
    assert demand_age() is None, f"a starting or idle lane was recorded as demand: {demand_age()}"
    assert delivered("@idle.example") == 0

    # the operator saw no work and wrote the group a share of 0
    r.hset(keys.shares, mapping={"ns/idle": "0", "ns/other": "600"})
    time.sleep(2)
    assert demand_age() is None, "a lane polled for a permit with no work"
    _fill(redis_url, "idle", 1)
    pushed = time.time()
    wait_for(
        lambda: (a := demand_age()) is not None and a < time.time() - pushed + 0.5,
        10,
        "the job's permit request recorded (share 0: refused)",
    )
    time.sleep(1.5)
    assert delivered("@idle.example") == 0, "sent with a share of 0"
    r.hset(keys.shares, "ns/idle", "600")  # the operator's next pass
    wait_for(lambda: delivered("@idle.example") == 1, 10, "the mail after the share came back")


def test_multi_recipient_mails_of_two_groups_stay_within_the_provider_budget(
    redis_url: str, smtp_sink: SmtpSink, workers: list[WorkerProcess]
) -> None:
    """Provider 1200/min (20/s), burst 20 (the default, ``ceil(perMinute / 60)``). Groups a
    and b, one worker of 4 lanes each, mails of 10 recipients, a relay 0.4 s slow to answer
    DATA: each mail is in flight while the other lanes (of both groups) ask for permits, so
    they must already see its 9 extra recipients (charged right after the reserve, before the
    send). Recipients at the relay (RCPT), counted from the first: GCRA lets at most
    burst + rate x window through any window (ITU-T I.371), 40 in the first second and 120
    in the first 5 s; + one mail (10) for the other process' permit granted between a permit
    and its mail's charge (two round trips). With the extra recipients charged on the lane's
    next permit call instead (after the send), every lane's mail in flight is uncounted: 80
    at the start (8 lanes x 10, the burst allows 8 permits) and ~70 over the budget later."""
    budget = {"perMinute": 1200}
    for g in ("a", "b"):
        mails = [[f"r{j}-{i}@{g}.example" for i in range(10)] for j in range(20)]
        for rcpt in (r for to in mails for r in to):
            smtp_sink.script(rcpt, data_delay=0.4)
        sync_queue(redis_url, f"mail-{g}").push_many(mail_payload(to) for to in mails)
        _start_group(
            workers,
            redis_url,
            smtp_sink.port,
            g,
            1,
            _provider_env(f"ns/{g}", **budget),
            WORKER_CONCURRENCY="4",
        )
    wait_for(lambda: _arrivals(smtp_sink, 0, time.time() + 1) > 0, 30, "the first mail")
    with smtp_sink.lock:
        t0 = min(t for t, _ in smtp_sink.rcpt_log)
    wait_for(lambda: time.time() >= t0 + 5.2, 30, "5 s of sending")
    first_second = _arrivals(smtp_sink, t0, t0 + 1.0)
    five_seconds = _arrivals(smtp_sink, t0, t0 + 5.0)
    with smtp_sink.lock:
        starts = [t for t, _ in smtp_sink.rcpt_log if t < t0 + 4.0]
    busiest = max(_arrivals(smtp_sink, t, t + 1.0) for t in starts)  # any 1 s window
    per_group = {g: _arrivals(smtp_sink, t0, t0 + 5.0, f"@{g}.example") for g in ("a", "b")}
    print(
        f"provider 20/s burst 20: {first_second} recipients in the first second, busiest "
        f"second {busiest}, {five_seconds} in 5 s, per group {per_group}"
    )
    assert first_second <= 20 + 20 + 10, (first_second, busiest, five_seconds)
    assert busiest <= 20 + 20 + 10, (first_second, busiest, five_seconds)
    assert five_seconds <= 20 + 100 + 10, (first_second, five_seconds)
    assert five_seconds >= 80, five_seconds  # the budget is used, not starved
    assert all(n >= 10 for n in per_group.values()), per_group
