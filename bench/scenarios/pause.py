"""Scenario 4: what a paused group of 100,000 jobs costs while it stays paused.

* **Ours**: a paused SendGroup has no worker processes (its Deployment is scaled to 0); the only
  thing still touching its Redis is the operator's reaper measuring the queue every
  ``reaper_interval`` seconds (``sendgroup_operator.settings.Settings``, default 10 s) with the
  operator's own ``RedisQueues.measure`` (``bench.operator_measure``, a real process).
* **Classic**: one shared Laravel queue; a job middleware checks a "paused" flag and calls
  ``$job->release(60)``; N ``queue:work`` processes keep reserving the group's jobs, seeing the
  flag and releasing them (``bench.classic_pause_worker``: Laravel 11's loop and Lua scripts,
  sent with EVAL as phpredis does, ``--sleep=3``). Measured twice: *just paused* (all jobs
  ready: the workers cycle through them as fast as they can) and *steady* (the jobs already
  released and spread over the 60 s delay, as after the first minute).

Over each window: CPU seconds per second of the processes involved and of redis-server
(psutil for the workers; ``time.process_time`` inside the operator-measure process; INFO cpu
for redis-server), Redis commands per second (INFO ``total_commands_processed``, commands inside Lua
scripts included, the benchmark's own INFO calls excluded), client round trips per second
(top-level EVAL/GET/EXEC calls from INFO commandstats) and releases per second.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import redis

from bench.dump_restore import payload
from bench.harness import (
    child_env,
    cpu_seconds,
    redis_counters,
    redis_cpu_seconds,
    stop_process,
)
from bench.report import Context, Plot, Result, Scenario, Table
from sendgroup_operator.settings import Settings
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.dumps import push
from tests.support.redis_server import RedisServer

QUEUE = "paused-group"
FLAG = "laravel_cache:sendgroup:paused-group:paused"
RELEASE_DELAY = 60
WORKERS = 4
#: Top-level commands = client round trips in both loops (EXEC closes one MULTI/EXEC pipeline).
ROUND_TRIP_COMMANDS = ("eval", "evalsha", "get", "exec")


def _start(args: list[str], log: Any) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        stop_process(proc)
        raise RuntimeError(f"{args[0]} did not start (see {log.name})")
    return proc


def _window(c: redis.Redis[bytes], pids: list[int], seconds: float) -> dict[str, float]:
    """Deltas over ``seconds`` of CPU (processes, redis-server), commands and round trips."""
    cpu0, rcpu0 = cpu_seconds(pids), redis_cpu_seconds(c)
    tot0, calls0 = redis_counters(c)
    t0 = time.monotonic()
    time.sleep(seconds)
    cpu1, rcpu1 = cpu_seconds(pids), redis_cpu_seconds(c)
    tot1, calls1 = redis_counters(c)
    dt = time.monotonic() - t0

    def delta(name: str) -> int:
        return calls1.get(name, 0) - calls0.get(name, 0)

    commands = tot1 - tot0 - delta("info")
    return {
        "seconds": dt,
        "process_cpu_per_s": (cpu1 - cpu0) / dt,
        "redis_cpu_per_s": (rcpu1 - rcpu0) / dt,
        "commands_per_s": commands / dt,
        "round_trips_per_s": sum(delta(n) for n in ROUND_TRIP_COMMANDS) / dt,
        "releases_per_s": delta("zrem") / dt,
    }


def _fill_ready(c: redis.Redis[bytes], keys: QueueKeys, jobs: int) -> None:
    for start in range(0, jobs, 10_000):
        push(c, keys, [payload(i) for i in range(start, min(jobs, start + 10_000))])


def _spread_delayed(c: redis.Redis[bytes], keys: QueueKeys, jobs: int) -> None:
    """Steady state of the release loop: every job released once, due times spread evenly over
    the next RELEASE_DELAY seconds (ready, notify and reserved empty)."""
    c.delete(keys.ready, keys.notify, keys.reserved, keys.delayed)
    now = time.time()
    for start in range(0, jobs, 10_000):
        c.zadd(
            keys.delayed,
            {
                payload(i): now + RELEASE_DELAY * i / jobs
                for i in range(start, min(jobs, start + 10_000))
            },
        )


def run(ctx: Context) -> Result:
    jobs = 10_000 if ctx.quick else 100_000
    window = 10.0 if ctx.quick else 30.0
    burst_window = 5.0 if ctx.quick else 10.0
    interval = Settings().reaper_interval
    keys = QueueKeys(QUEUE)
    res: dict[str, dict[str, float]] = {}
    log = ctx.work_dir.joinpath("pause.log").open("w")
    with RedisServer() as server:
        c = server.client()
        ctx.log(f"filling {jobs:,} x 1.5 KB jobs")
        _fill_ready(c, keys, jobs)

        ctx.log("redis-server alone (no client), baseline")
        res["idle"] = _window(c, [], min(window, 10.0))

        # Whole reaper periods (the window opens right after a measurement): 3 (1 if quick).
        ours_window = (1 if ctx.quick else 3) * interval + 0.5
        ctx.log(f"ours: operator measure every {interval:g} s, {ours_window:g} s window")
        meas = _start(["bench.operator_measure", server.url, QUEUE, str(interval)], log)
        try:
            res["ours"] = _window(c, [], ours_window)
        finally:
            meas.terminate()
            out, _ = meas.communicate(timeout=30)
        own = json.loads(out.strip().splitlines()[-1])
        res["ours"]["process_cpu_per_s"] = own["cpu"] / res["ours"]["seconds"]
        res["ours"]["measures"] = own["measures"]
        assert c.llen(keys.ready) == jobs

        c.set(FLAG, "1")
        for phase, seconds in (("just_paused", burst_window), ("steady", window)):
            if phase == "steady":
                _spread_delayed(c, keys, jobs)
            ctx.log(f"classic {phase}: {WORKERS} release-loop workers, {seconds:g} s window")
            workers = [
                _start(
                    [
                        "bench.classic_pause_worker",
                        server.url,
                        QUEUE,
                        FLAG,
                        str(RELEASE_DELAY),
                    ],
                    log,
                )
                for _ in range(WORKERS)
            ]
            try:
                res[f"classic_{phase}"] = _window(c, [w.pid for w in workers], seconds)
            finally:
                for w in workers:
                    stop_process(w)
            total = c.llen(keys.ready) + c.zcard(keys.delayed) + c.zcard(keys.reserved)
            assert total == jobs, f"classic {phase}: {total} jobs left of {jobs}"
    log.close()

    labels = {
        "idle": "redis-server alone (reference)",
        "ours": f"ours: 0 workers + operator measure every {interval:g} s",
        "classic_just_paused": f"classic, just paused: {WORKERS} workers release-looping",
        "classic_steady": f"classic, steady: {WORKERS} workers, release({RELEASE_DELAY})",
    }
    rows: list[list[Any]] = []
    for key, label in labels.items():
        r = res[key]
        rows.append(
            [
                label,
                round(r["process_cpu_per_s"] * 1000, 2),
                round(r["redis_cpu_per_s"] * 1000, 2),
                round((r["process_cpu_per_s"] + r["redis_cpu_per_s"]) * 1000, 2),
                round(r["commands_per_s"], 2),
                round(r["round_trips_per_s"], 2),
                round(r["releases_per_s"], 1),
            ]
        )
    ours, steady, burst = res["ours"], res["classic_steady"], res["classic_just_paused"]
    idle_redis = res["idle"]["redis_cpu_per_s"]

    def extra_cpu(r: dict[str, float]) -> float:
        return r["process_cpu_per_s"] + max(0.0, r["redis_cpu_per_s"] - idle_redis)

    per_day_ours = ours["commands_per_s"] * 86_400
    findings = [
        f"A paused group of ours costs {extra_cpu(ours) * 1000:.2f} ms CPU per second above an "
        f"idle redis-server and {ours['commands_per_s']:.2f} Redis commands/s "
        f"({ours['round_trips_per_s']:.2f} round trips/s): the operator's one MULTI/EXEC "
        f"measurement every {interval:g} s ({per_day_ours:,.0f} commands a day); with no worker "
        "processes nothing else runs, whatever the queue's size.",
        f"The classic release loop costs {extra_cpu(steady):.3f} CPU s/s and "
        f"{steady['commands_per_s']:,.0f} commands/s in steady state "
        f"({steady['releases_per_s']:,.0f} releases/s for {jobs:,} jobs released for "
        f"{RELEASE_DELAY} s: the rate is jobs / delay until the workers saturate), and "
        f"{extra_cpu(burst):.3f} CPU s/s, {burst['commands_per_s']:,.0f} commands/s right after "
        f"the pause ({burst['releases_per_s']:,.0f} releases/s, the {WORKERS} workers "
        "looping back to back): that CPU and those worker slots are taken from the groups "
        "that are not paused, and grow with every paused job; a longer release delay lowers "
        "it but delays the resume by as much. In Laravel each release also counts as an "
        "attempt, so paused jobs fail after `tries` releases unless the job sets "
        "`$tries = 0` or `retryUntil`.",
    ]
    if ours["commands_per_s"] > 0:
        findings.append(
            f"Ratio, steady state: {steady['commands_per_s'] / ours['commands_per_s']:,.0f}x the "
            "Redis commands of ours per paused group."
        )
    table = Table(
        title=f"Pause cost: one paused group of {jobs:,} jobs (1.5 KB), {window:g} s windows",
        columns=[
            "setup",
            "process CPU ms/s",
            "redis-server CPU ms/s",
            "total CPU ms/s",
            "Redis commands/s",
            "round trips/s",
            "releases/s",
        ],
        rows=rows,
        note=(
            "CPU: user+system milliseconds per wall second (1000 = one core busy; psutil for the "
            "workers, process_time in the measuring process, INFO cpu for redis-server). "
            "Commands include those run inside Lua scripts (INFO total_commands_processed, the "
            f"benchmark's INFO calls excluded). Classic: {WORKERS} processes of Laravel 11's "
            "worker loop (EVAL migrate x2, EVAL pop, GET restart flag, GET paused flag, "
            "EVAL release), --sleep=3. "
            f"Window of 'just paused': {burst_window:g} s."
        ),
    )
    plot = Plot(
        filename="pause_commands.png",
        title=f"Redis commands/s spent on one paused group of {jobs:,} jobs",
        ylabel="Redis commands/s (log)",
        bars={
            "ours (operator measure)": max(ours["commands_per_s"], 1e-3),
            "classic steady": steady["commands_per_s"],
            "classic just paused": burst["commands_per_s"],
        },
        log_y=True,
    )
    return Result(
        tables=[table],
        plots=[plot],
        findings=findings,
        raw={
            "jobs": jobs,
            "windowSeconds": window,
            "reaperIntervalSeconds": interval,
            "releaseDelaySeconds": RELEASE_DELAY,
            "workers": WORKERS,
            "windows": res,
        },
    )


SCENARIO = Scenario(key="pause", number=4, title="Pause cost of a paused group", run=run)
