"""Scenario 4: what a paused group of 100,000 jobs costs while it stays paused.

Sides, all on one redis-server holding the same 100,000 x 1.5 KB jobs in Laravel's layout:

* **Ours**: a paused SendGroup has no worker processes (its Deployment is scaled to 0); what
  still touches its Redis is the operator's reaper pass. While the paused queue holds jobs,
  ``plan.rests_paused`` is false (it needs an empty queue), so the pass runs every
  ``reaperInterval`` (``Settings.reaper_interval``, default 10 s) and takes one full
  measurement through the operator's own ``Observer`` (a pipelined ``EVALSHA measure.lua``):
  ``bench.operator_measure``, a real process.
* **Ours, after dumpAfter**: the same group once ``reaper.dumpAfter`` (default 30 min) moved the
  jobs to the volume: its queue is empty, ``plan.rests_paused`` is true, the pass waits the idle
  interval (``plan.idle_wait``: ``SENDGROUP_IDLE_PASS_INTERVAL``, 60 s) and is answered from the
  observer's last measurement; Redis sees the observer's idle check, one ``EXISTS`` per 0.5 s
  per Redis, shared by every idle group of that Redis (here this group alone: the worst case).
  ``bench.operator_measure --at-rest`` on an empty queue.
* **Laravel queue:pause**: Laravel's own pause (``php artisan queue:pause redis:paused-group``,
  Laravel 12.40+, laravel/framework#57800) on the real Laravel 8.83 worker of Debian
  (``bench/laravel/artisan``: the example app, phpredis, the example app's default cache store
  ``redis``). Laravel 8 has no such command, so ``bench/laravel/Bench/
  QueuePauseServiceProvider.php`` backports it: the command stores ``true`` under the cache key
  ``illuminate:queue:paused:redis:paused-group`` as Laravel 12's ``QueueManager::pause`` does,
  and a listener of Laravel 8's ``Looping`` event reads that key through the same cache store
  each iteration (Laravel 12's ``Worker::queuePaused`` -> ``QueueManager::isPaused``); when it
  is set, Laravel 8's ``daemonShouldRun`` is false and the worker sleeps ``--sleep`` (default
  3 s) and reads the restart signal, as Laravel 12's worker does after skipping the paused
  queue. Per iteration and worker: 2 cache GETs, then 3 s asleep. ``WORKERS`` ``queue:work
  redis --queue=paused-group`` processes (defaults otherwise).
* **Classic release loop**: one shared Laravel queue; a job middleware checks a "paused" flag
  and calls ``$job->release(60)``; ``WORKERS`` processes keep reserving the group's jobs and
  releasing them (``bench.classic_pause_worker``: a Python loop of Laravel 11's scripts, not
  PHP). Measured *just paused* (every job ready: the workers cycle as fast as they can) and
  *steady* (the jobs already released, their due times spread over the 60 s delay).

``ROUNDS`` interleaved rounds (the queue filled anew and redis-server left to settle 20 s
before each; each side once per round, the first three sides in a rotated
order; the classic phases last, since they move the jobs); the table gives the median and the
range over the rounds. Over each window, for every side on the same basis: on-CPU seconds per
second of its processes and of redis-server (``/proc/PID/task/*/schedstat``, nanoseconds;
redis-server's CPU above the same round's idle window is what a side adds), Redis commands per
second (INFO ``total_commands_processed``, commands run inside Lua scripts included, the
benchmark's own INFO calls excluded), round trips per second (INFO ``total_reads_processed``:
read events, a pipeline sent at once counts once; the benchmark's INFO calls excluded).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil
import redis

from bench.dump_restore import payload
from bench.harness import child_env, redis_pid, stop_process
from bench.report import Context, Plot, Result, Scenario, Table
from bench.scenarios.worker import LARAVEL_ARTISAN, Setup, laravel_env
from sendgroup_operator import reconcile
from sendgroup_operator.queueio import RedisQueues
from sendgroup_operator.settings import Settings
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.dumps import push
from tests.support.php import php_bin
from tests.support.redis_server import RedisServer

QUEUE = "paused-group"
#: the same group after dumpAfter: its jobs on the volume, its Redis keys empty
RESTED_QUEUE = "paused-group-dumped"
FLAG = "laravel_cache:sendgroup:paused-group:paused"
RELEASE_DELAY = 60
WORKERS = 4
ROUNDS = 3
#: queue:work's default --sleep (Laravel 8 and 11)
LARAVEL_SLEEP = 3.0
#: Laravel 12.40+'s pause key in the example app's cache store (prefix "laravel_cache:")
PAUSE_KEY = f"laravel_cache:illuminate:queue:paused:redis:{QUEUE}"
#: the operator's CPU at rest and its pass rate in the 3,000-group scale run (cited, not
#: measured here): an estimate of one reaper pass's CPU beyond the Redis measurement
SCALE_OPERATOR_CPU = 0.293
SCALE_PASSES_PER_S = 128.0
SCALE_SOURCE = "bench/results/scale-3000-20261203T0455Z.md, bench/README.md"
SIDES = ("idle", "ours", "ours_rest", "laravel_pause", "classic_just_paused", "classic_steady")
LABELS = {
    "idle": "redis-server alone (reference)",
    "ours": "ours: 0 workers, operator pass every reaperInterval",
    "ours_rest": "ours after dumpAfter: 0 workers, queue on the volume",
    "laravel_pause": f"Laravel queue:pause: {WORKERS} queue:work, --sleep=3",
    "classic_just_paused": f"classic, just paused: {WORKERS} workers release-looping",
    "classic_steady": f"classic, steady: {WORKERS} workers, release({RELEASE_DELAY})",
}
PROCESSES = {"idle": 0, "ours": 0, "ours_rest": 0, "laravel_pause": WORKERS}
PROCESSES |= {"classic_just_paused": WORKERS, "classic_steady": WORKERS}


def oncpu_seconds(pids: Iterable[int]) -> float:
    """On-CPU seconds (user + system, every thread) of ``pids`` from the scheduler's own
    nanosecond count (``/proc/PID/task/*/schedstat``); processes that are gone count 0."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tasks:
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue
    return total / 1e9


def _snapshot(c: redis.Redis[bytes], pids: list[int], rpid: int) -> dict[str, Any]:
    stats = c.info("stats")
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in c.info("commandstats").items()}
    return {
        "t": time.monotonic(),
        "cpu": oncpu_seconds(pids),
        "rcpu": oncpu_seconds([rpid]),
        "commands": int(stats["total_commands_processed"]),
        "reads": int(stats["total_reads_processed"]),
        "calls": calls,
    }


def _window(c: redis.Redis[bytes], pids: list[int], rpid: int, seconds: float) -> dict[str, float]:
    """Deltas over ``seconds`` of on-CPU time (``pids``, redis-server), commands, round trips."""
    s0 = _snapshot(c, pids, rpid)
    time.sleep(seconds)
    s1 = _snapshot(c, pids, rpid)
    dt = s1["t"] - s0["t"]

    def delta(name: str) -> int:
        return int(s1["calls"].get(name, 0) - s0["calls"].get(name, 0))

    own = delta("info")  # the benchmark's own INFO calls: one command and one read each
    return {
        "seconds": dt,
        "process_cpu_per_s": (s1["cpu"] - s0["cpu"]) / dt,
        "redis_cpu_per_s": (s1["rcpu"] - s0["rcpu"]) / dt,
        "commands_per_s": (s1["commands"] - s0["commands"] - own) / dt,
        "round_trips_per_s": (s1["reads"] - s0["reads"] - own) / dt,
        "gets_per_s": delta("get") / dt,
        "releases_per_s": delta("zrem") / dt,
    }


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


def _fill_ready(c: redis.Redis[bytes], keys: QueueKeys, jobs: int) -> None:
    c.delete(keys.ready, keys.notify, keys.reserved, keys.delayed)
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


def _claim_commands(c: redis.Redis[bytes], url: str) -> int:
    """Redis commands of one queue-claim recheck (every ``reconcile.CLAIM_RECHECK`` s)."""
    marks: list[int] = []

    async def claim() -> None:
        queues = RedisQueues()
        try:
            await queues.client(url)  # the connect probe is not part of a recheck
            marks.append(int(c.info("stats")["total_commands_processed"]))
            await queues.claim(url, QUEUE, "bench/paused-group/uid")
            marks.append(int(c.info("stats")["total_commands_processed"]))
        finally:
            await queues.close()

    asyncio.run(claim())
    return marks[1] - marks[0] - 1  # less the INFO that took the first mark


class _Ours:
    """One operator-measure process over one window."""

    def __init__(self, url: str, queue: str, interval: float, log: Any, at_rest: bool) -> None:
        args = ["bench.operator_measure", url, queue, f"{interval:g}"]
        self.proc = _start([*args, "--at-rest"] if at_rest else args, log)

    def finish(self, r: dict[str, float]) -> None:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=30)
        own = json.loads(out.strip().splitlines()[-1])
        r["own_cpu_per_s"] = own["cpu"] / r["seconds"]
        r["measures"] = own["measures"]
        r["observer_round_trips"] = own["round_trips"]


def _artisan(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [php_bin(), str(LARAVEL_ARTISAN), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"artisan {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc.stdout.strip()


def _laravel_round(
    c: redis.Redis[bytes],
    env: dict[str, str],
    rpid: int,
    window: float,
    log: Any,
    jobs: int,
    keys: QueueKeys,
) -> dict[str, float]:
    """``queue:pause`` (Laravel's cache), WORKERS ``queue:work`` processes, one window taken
    from the middle of a sleep (so it holds exactly window / 3 s iterations per worker), then
    check nothing moved, stop them and ``queue:resume``."""
    said = _artisan(env, "queue:pause", f"redis:{QUEUE}")
    if c.get(PAUSE_KEY) is None:
        raise RuntimeError(f"queue:pause said {said!r} but {PAUSE_KEY} is not set")
    gets0 = int(c.info("commandstats").get("cmdstat_get", {}).get("calls", 0))
    argv = [php_bin(), str(LARAVEL_ARTISAN), "queue:work", "redis", f"--queue={QUEUE}"]
    workers = [
        subprocess.Popen(argv, env=env, stdout=log, stderr=log, cwd=LARAVEL_ARTISAN.parents[2])
        for _ in range(WORKERS)
    ]
    try:
        # each worker: GET restart signal at start, GET pause key at its first iteration
        deadline = time.monotonic() + 60
        while True:
            gets = int(c.info("commandstats").get("cmdstat_get", {}).get("calls", 0))
            if gets - gets0 >= 2 * WORKERS:
                break
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError("queue:work did not start its loop (see pause.log)")
            time.sleep(0.05)
        time.sleep(LARAVEL_SLEEP / 3)
        r = _window(c, [w.pid for w in workers], rpid, window)
        if any(w.poll() is not None for w in workers):
            raise RuntimeError("a queue:work process exited during the window (see pause.log)")
        r["rss_mb"] = sum(psutil.Process(w.pid).memory_info().rss for w in workers) / 2**20
    finally:
        for w in workers:
            stop_process(w)
    left = c.llen(keys.ready)
    if left != jobs or c.zcard(keys.reserved) or c.zcard(keys.delayed):
        raise RuntimeError(f"Laravel queue:pause: {left} of {jobs} jobs left ready: it popped")
    _artisan(env, "queue:resume", f"redis:{QUEUE}")
    return r


def _stats(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def _fmt(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    med, lo, hi = (v * scale for v in _stats(values))
    if digits == 0:
        return f"{med:,.0f} ({lo:,.0f}-{hi:,.0f})"
    return f"{med:,.{digits}f} ({lo:,.{digits}f}-{hi:,.{digits}f})"


def run(ctx: Context) -> Result:
    jobs = 10_000 if ctx.quick else 100_000
    settings = Settings()
    interval = settings.reaper_interval
    # plan.idle_wait of a resting group (no ttlSecondsAfterFinished)
    rest_interval = min(
        max(settings.idle_pass_interval, settings.reaper_interval), settings.liveness_stall / 2
    )
    periods = 1 if ctx.quick else 3
    ours_window = periods * interval + 0.5  # whole reaper periods (opens after a measurement)
    laravel_window = (4 if ctx.quick else 10) * LARAVEL_SLEEP  # whole --sleep periods
    idle_window = 5.0 if ctx.quick else 10.0
    burst_window = 5.0 if ctx.quick else 10.0
    steady_window = 10.0 if ctx.quick else 30.0
    settle = 5.0 if ctx.quick else 20.0
    keys = QueueKeys(QUEUE)
    rounds: list[dict[str, dict[str, float]]] = []
    log = ctx.work_dir.joinpath("pause.log").open("w")
    with RedisServer() as server:
        c = server.client()
        rpid = redis_pid(c)
        setup = Setup(server=server, peers_python=ctx.peers_python, logs=ctx.work_dir)
        lenv = {**child_env(), **laravel_env(setup), "BENCH_QUEUE_PAUSE": "1"}
        claim_commands = _claim_commands(c, server.url)
        for n in range(ROUNDS):
            res: dict[str, dict[str, float]] = {}
            ctx.log(f"round {n + 1}/{ROUNDS}: filling {jobs:,} x 1.5 KB jobs")
            _fill_ready(c, keys, jobs)
            c.delete(FLAG, PAUSE_KEY)
            # let redis-server settle: right after the fill its CPU was 5 ms/s against ~2 later
            # (probably jemalloc's background purge of the previous round's freed pages)
            time.sleep(settle)
            res["idle"] = _window(c, [], rpid, idle_window)
            order = ["ours", "ours_rest", "laravel_pause"]
            order = order[n % 3 :] + order[: n % 3]
            for side in order:
                if side == "laravel_pause":
                    ctx.log(f"Laravel queue:pause, {WORKERS} workers, {laravel_window:g} s")
                    res[side] = _laravel_round(c, lenv, rpid, laravel_window, log, jobs, keys)
                    continue
                at_rest = side == "ours_rest"
                queue, every = (RESTED_QUEUE, rest_interval) if at_rest else (QUEUE, interval)
                ctx.log(f"{side}: operator pass every {every:g} s, {ours_window:g} s window")
                ours = _Ours(server.url, queue, every, log, at_rest)
                try:
                    res[side] = _window(c, [ours.proc.pid], rpid, ours_window)
                finally:
                    ours.finish(res.get(side, {"seconds": ours_window}))
                assert c.llen(keys.ready) == jobs
            c.set(FLAG, "1")
            for phase, seconds in (("just_paused", burst_window), ("steady", steady_window)):
                if phase == "steady":
                    _spread_delayed(c, keys, jobs)
                ctx.log(f"classic {phase}: {WORKERS} release-loop workers, {seconds:g} s")
                argv = ["bench.classic_pause_worker", server.url, QUEUE, FLAG, str(RELEASE_DELAY)]
                workers = [_start(argv, log) for _ in range(WORKERS)]
                try:
                    res[f"classic_{phase}"] = _window(c, [w.pid for w in workers], rpid, seconds)
                finally:
                    for w in workers:
                        stop_process(w)
                total = c.llen(keys.ready) + c.zcard(keys.delayed) + c.zcard(keys.reserved)
                assert total == jobs, f"classic {phase}: {total} jobs left of {jobs}"
            for r in res.values():
                r["extra_cpu_per_s"] = r["process_cpu_per_s"] + max(
                    0.0, r["redis_cpu_per_s"] - res["idle"]["redis_cpu_per_s"]
                )
            rounds.append(res)
    log.close()
    return _result(rounds, jobs, interval, rest_interval, claim_commands, laravel_window)


def _result(
    rounds: list[dict[str, dict[str, float]]],
    jobs: int,
    interval: float,
    rest_interval: float,
    claim_commands: int,
    laravel_window: float,
) -> Result:
    def col(side: str, metric: str) -> list[float]:
        return [r[side][metric] for r in rounds]

    def ratio(a: str, b: str, metric: str) -> list[float]:
        return [r[a][metric] / r[b][metric] for r in rounds if r[b][metric] > 0]

    rows: list[list[Any]] = []
    for side in SIDES:
        rows.append(
            [
                LABELS[side],
                PROCESSES[side],
                _fmt(col(side, "process_cpu_per_s"), 1000, 3),
                _fmt(col(side, "redis_cpu_per_s"), 1000, 2),
                "-" if side == "idle" else _fmt(col(side, "extra_cpu_per_s"), 1000, 3),
                _fmt(col(side, "commands_per_s"), digits=0 if side.startswith("classic") else 2),
                _fmt(col(side, "round_trips_per_s"), digits=0 if side.startswith("classic") else 2),
                _fmt(col(side, "releases_per_s"), digits=0),
            ]
        )
    med = {s: {m: statistics.median(col(s, m)) for m in rounds[0][s]} for s in SIDES}
    ours, rest, lara = med["ours"], med["ours_rest"], med["laravel_pause"]
    steady, burst = med["classic_steady"], med["classic_just_paused"]
    iters = lara["gets_per_s"] / 2 / WORKERS * LARAVEL_SLEEP
    max_workers = int(ours["commands_per_s"] * LARAVEL_SLEEP / 2)  # 2 GETs per 3 s each
    findings: list[str] = []

    def versus(metric: str, what: str) -> str:
        m, lo, hi = _stats(ratio("laravel_pause", "ours", metric))
        return f"{what} {m:.2f}x ({lo:.2f}-{hi:.2f})"

    findings.append(
        f"Laravel's own pause ({WORKERS} `queue:work` processes kept on the paused queue, "
        f"--sleep=3) against ours while the queue holds its {jobs:,} jobs, median over "
        f"{len(rounds)} rounds: {lara['commands_per_s']:.2f} vs {ours['commands_per_s']:.2f} "
        f"Redis commands/s, {lara['round_trips_per_s']:.2f} vs {ours['round_trips_per_s']:.2f} "
        f"round trips/s, {lara['extra_cpu_per_s'] * 1000:.3f} vs "
        f"{ours['extra_cpu_per_s'] * 1000:.3f} ms of CPU per second (processes + redis-server "
        "above idle). Per round, Laravel / ours: "
        + "; ".join(
            [
                versus("commands_per_s", "commands"),
                versus("round_trips_per_s", "round trips"),
                versus("extra_cpu_per_s", "CPU"),
            ]
        )
        + " (Laravel's figure over ours in the same round; above 1: Laravel spends more). "
        "Both are tiny next to anything that runs: the difference that matters is "
        f"{WORKERS} resident PHP workers ({lara.get('rss_mb', 0):.0f} MB RSS together) and "
        "their worker slots held by a paused queue, against none."
    )
    findings.append(
        f"Where the commands go: each Laravel worker makes 2 cache GETs per iteration (the "
        f"pause key, then the restart signal after its 3 s sleep; {iters:.1f} iterations per "
        f"worker per {LARAVEL_SLEEP:g} s measured), so {WORKERS} workers send "
        f"{2 * WORKERS / LARAVEL_SLEEP:.2f} single-command round trips per second whatever the "
        "queue holds. Ours sends one EVALSHA of measure.lua per reaper pass (every "
        f"{interval:g} s): one round trip that runs ~{ours['commands_per_s'] * interval:.0f} "
        "commands inside the script, so per command Redis counts, one paused queue of ours "
        f"costs {ours['commands_per_s']:.2f}/s: a Laravel deployment with at most "
        f"{max_workers} worker(s) on the paused queue sends fewer Redis commands than ours "
        f"(one worker: {2 / LARAVEL_SLEEP:.2f}/s), though always more round trips "
        f"({2 / LARAVEL_SLEEP:.2f}/s against {1 / interval:.2f}/s)."
    )
    findings.append(
        f"Ours after `reaper.dumpAfter` (30 min by default; the jobs moved to the volume, the "
        f"queue empty in Redis): the pass waits the idle interval ({rest_interval:g} s) and "
        "is answered without Redis; what Redis sees is the operator's idle watch, per Redis "
        "and shared by every idle group of that Redis: with client tracking (the default on "
        "standalone and Sentinel Redis >= 6) one EXISTS and one PING every 60 s, Redis naming "
        "a changed key on its own; polled (Redis Cluster, or where tracking is refused) one "
        "EXISTS every 0.5 s (a window shorter than 60 s may hold no safety check: over a "
        "minute, tracked, 2 commands and 2 round trips, 0.033/s). With this group "
        f"alone on its Redis (the worst case): {rest['commands_per_s']:.2f} commands/s and "
        f"{rest['round_trips_per_s']:.2f} round trips/s, "
        f"{rest['extra_cpu_per_s'] * 1000:.3f} ms CPU/s: "
        + ("more" if rest["commands_per_s"] > ours["commands_per_s"] else "fewer")
        + f" commands than while it held its jobs ({ours['commands_per_s']:.2f}/s), "
        + (
            "more than Laravel's 4 workers"
            if rest["commands_per_s"] > lara["commands_per_s"]
            else "fewer than Laravel's 4 workers"
        )
        + f" ({lara['commands_per_s']:.2f}/s); and "
        + (
            "more CPU than Laravel's 4 workers"
            if rest["extra_cpu_per_s"] > lara["extra_cpu_per_s"]
            else "less CPU than Laravel's 4 workers"
        )
        + f" ({lara['extra_cpu_per_s'] * 1000:.3f} ms/s"
        + (
            ": the operator's idle watch costs more than 4 PHP workers asleep 3 s at a time)."
            if rest["extra_cpu_per_s"] > lara["extra_cpu_per_s"]
            else ")."
        )
        + " Both the EXISTS and the "
        "poll's CPU are per Redis, not per group: shared by 100 idle groups they are "
        f"{rest['commands_per_s'] / 100:.3f} commands/s and "
        f"{rest['extra_cpu_per_s'] * 1000 / 100:.4f} ms CPU/s each. And the jobs' memory "
        "leaves Redis (scenario 5); a Laravel queue:pause keeps them there."
    )
    findings.append(
        f"The classic release loop costs {steady['extra_cpu_per_s']:.3f} CPU s/s and "
        f"{steady['commands_per_s']:,.0f} commands/s in steady state "
        f"({steady['releases_per_s']:,.0f} releases/s for {jobs:,} jobs released for "
        f"{RELEASE_DELAY} s), and {burst['extra_cpu_per_s']:.3f} CPU s/s, "
        f"{burst['commands_per_s']:,.0f} commands/s right after the pause (the {WORKERS} "
        "workers looping back to back); each release also counts as an attempt in Laravel. "
        "It is what a Laravel user without queue:pause (before Laravel 12.40) would write; "
        "Laravel 12.40's queue:pause replaces it."
    )
    pass_cpu = SCALE_OPERATOR_CPU / SCALE_PASSES_PER_S  # CPU seconds per pass, estimated
    with_pass = ours["extra_cpu_per_s"] + pass_cpu / interval
    findings.append(
        "Not in the figures of ours: the rest of each reaper pass (planning; a paused group "
        "still holding jobs lists its Jobs and pods, 2 Kubernetes API requests per pass, to "
        "know when a dump falls due). Estimated from the 3,000-group scale run "
        f"({SCALE_OPERATOR_CPU:.1%} of a core over ~{SCALE_PASSES_PER_S:g} passes/s at rest, "
        f"{SCALE_SOURCE}): ~{pass_cpu * 1000:.1f} ms of operator CPU per pass, "
        f"{pass_cpu / interval * 1000:.2f} ms/s for a pass every {interval:g} s; with it, ours "
        f"would be ~{with_pass * 1000:.3f} ms/s against Laravel's "
        f"{lara['extra_cpu_per_s'] * 1000:.3f} ("
        + ("ours then above Laravel" if with_pass > lara["extra_cpu_per_s"] else "still below")
        + "). The queue-claim recheck, "
        f"{claim_commands} Redis commands every {reconcile.CLAIM_RECHECK:g} s "
        f"({claim_commands / reconcile.CLAIM_RECHECK:.3f}/s), is not in the windows either."
    )
    table = Table(
        title=(
            f"Pause cost: one paused group of {jobs:,} jobs (1.5 KB), median (range) over "
            f"{len(rounds)} interleaved rounds"
        ),
        columns=[
            "setup",
            "worker processes",
            "process CPU ms/s",
            "redis-server CPU ms/s",
            "added CPU ms/s",
            "Redis commands/s",
            "round trips/s",
            "releases/s",
        ],
        rows=rows,
        note=(
            "CPU: on-CPU milliseconds per wall second from /proc/PID/task/*/schedstat (1000 = "
            "one core busy) of the side's processes and of redis-server; 'added' = the "
            "processes + redis-server above the same round's idle window. Commands include "
            "those run inside Lua scripts (INFO total_commands_processed); round trips are "
            "INFO total_reads_processed; the benchmark's own INFO calls excluded from both. "
            f"Windows: ours {rounds[0]['ours']['seconds']:.1f} s (whole reaper periods), "
            f"Laravel {laravel_window:g} s (whole --sleep periods, opened mid-sleep), "
            f"classic {rounds[0]['classic_just_paused']['seconds']:.0f} s just paused / "
            f"{rounds[0]['classic_steady']['seconds']:.0f} s steady. "
            "Laravel: Debian's Laravel 8.83 (PHP 8.2, phpredis), `php artisan queue:work redis "
            f"--queue={QUEUE}` (defaults: --sleep=3, block_for 5 as in scenario 1), cache "
            "store redis (the example app's default), Laravel 12.40's queue:pause backported "
            "(bench/laravel/Bench/QueuePauseServiceProvider.php). Classic: a Python loop of "
            "Laravel 11's worker scripts (EVAL migrate x2, EVAL pop, GET restart, GET flag, "
            "EVAL release), --sleep=3."
        ),
    )
    plot = Plot(
        filename="pause_commands.png",
        title=f"Redis commands/s spent on one paused group of {jobs:,} jobs (median)",
        ylabel="Redis commands/s (log)",
        bars={
            "ours": max(ours["commands_per_s"], 1e-3),
            "ours after dumpAfter": max(rest["commands_per_s"], 1e-3),
            "Laravel queue:pause": max(lara["commands_per_s"], 1e-3),
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
            "rounds": rounds,
            "reaperIntervalSeconds": interval,
            "restIntervalSeconds": rest_interval,
            "laravelSleepSeconds": LARAVEL_SLEEP,
            "laravelWindowSeconds": laravel_window,
            "releaseDelaySeconds": RELEASE_DELAY,
            "workers": WORKERS,
            "claimCommands": claim_commands,
            "claimRecheckSeconds": reconcile.CLAIM_RECHECK,
            "ratiosLaravelOverOurs": {
                m: ratio("laravel_pause", "ours", m)
                for m in ("commands_per_s", "round_trips_per_s", "extra_cpu_per_s")
            },
        },
    )


SCENARIO = Scenario(key="pause", number=4, title="Pause cost of a paused group", run=run)
