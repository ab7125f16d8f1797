"""Scenario 5: what paused groups cost in Redis memory, and what moving them out costs.

1. Bytes per queued job: one group's queue filled the way Laravel pushes (payload on the ready
   list + one ``1`` token on the notify list) vs a raw Redis list of the same payloads (RPUSH
   only), from ``INFO memory`` ``used_memory`` deltas and ``MEMORY USAGE key SAMPLES 0``; and
   the time Redis spends in one ``LRANGE`` of 1,000 and of 5,000 of these jobs (what the chunk
   size of a chunked copy costs in stall).
2. Five paused groups of 100,000 jobs of 1.5 KB (random base64 bodies: no free ride from
   compression) on one redis-server, moved out of Redis and back by each method in turn, in
   interleaved rounds (the order rotates every round): ``used_memory`` after moving out, the
   time to move out and back, the CPU of the process doing it, and the worst PING round trip
   seen by a probe sending one every 5 ms (``bench.pingprobe``, its own process), for:

   * ours: ``sendgroup-worker dump`` then ``restore`` per group (real processes, as the
     operator's dump/restore Jobs run them), one group after the other;
   * a chunked copy, what a careful user would write (``bench/chunked_copy.py chunked-out`` /
     ``chunked-in``, one process per group): ``LRANGE`` 1,000 items, append to a file,
     ``fdatasync``, ``LTRIM`` (ready and notify in one MULTI), ZRANGE/ZREMRANGEBYRANK for the
     sorted sets; back with ``RPUSH`` of 1,000 items + their notify tokens per MULTI;
   * Redis' own ``DUMP`` of each group's keys (each written to a file and fsynced) +
     ``UNLINK``, then ``RESTORE`` (``bench/chunked_copy.py dump-out`` / ``dump-in``, one
     process per group);
   * ``BGSAVE`` of the same data (fork + RDB write; the data stays in Redis, and getting one
     group back from an RDB means loading the whole file into a restarted Redis).

Time basis, the same for every process-based method: wall clock from the spawn of each group's
process to its exit (interpreter start, imports and connection included), summed over the
groups; each process's own figure (timed inside it from after the connection, start excluded)
is reported beside it. BGSAVE is one call: from BGSAVE until INFO says the save is done.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench.dump_restore import bgsave_seconds, payload
from bench.harness import (
    ROOT,
    SLOWLOG_CONFIG,
    WORKER_BIN,
    PingProbe,
    child_env,
    redis_busy_seconds,
    redis_cpu_seconds,
    slowest_command,
    used_memory,
)
from bench.report import Cell, Context, Plot, Result, Scenario, Table
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.dumps import push
from tests.support.redis_server import RedisServer

GROUPS = 5
PAYLOAD = 1500
MB = 1_000_000
#: Records per chunk of the chunked copy (see :func:`run`'s LRANGE measurement and the report).
CHUNK = 1000
PEER_SCRIPT = ROOT / "bench" / "chunked_copy.py"
#: Method keys in the order of the first round, and their labels.
METHODS = {
    "ours": "ours: sendgroup-worker dump / restore",
    "chunked": f"chunked copy: LRANGE+fdatasync+LTRIM / RPUSH, {CHUNK:,} per chunk",
    "dump": "Redis DUMP + fsync + UNLINK / RESTORE",
    "bgsave": "BGSAVE (data stays in Redis)",
}
SHORT = {"chunked": "chunked copy", "dump": "DUMP/RESTORE"}
#: Sample positions of each ready list checked after every move back (order and content).
SAMPLES = 16


def _payloads(group: int, jobs: int) -> list[bytes]:
    return [payload(group * 10_000_000 + i, PAYLOAD) for i in range(jobs)]


def _fill(c: redis.Redis[bytes], keys: QueueKeys, items: list[bytes]) -> None:
    for start in range(0, len(items), 10_000):
        push(c, keys, items[start : start + 10_000])


def _memory_usage(c: redis.Redis[bytes], key: str) -> int:
    return int(c.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0") or 0)


def _settle(c: redis.Redis[bytes]) -> int:
    """``used_memory`` once lazy freeing (if any) is done."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and int(c.info("memory").get("lazyfree_pending_objects", 0)):
        time.sleep(0.05)
    return used_memory(c)[0]


def _cmd(slowest: tuple[float, str]) -> str:
    """``12.3 (DUMP)`` from :func:`slowest_command`'s answer; ``<1`` when nothing took 1 ms."""
    seconds, name = slowest
    return f"{seconds * 1000:.1f} ({name})" if name else "<1"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _process(cmd: list[str], env: dict[str, str]) -> tuple[dict[str, Any], float, float]:
    """Run one mover process: (its JSON line, wall seconds from spawn to exit, its CPU s)."""
    cpu = _children_cpu()
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    cpu = _children_cpu() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out, wall, cpu


def _phase(
    c: redis.Redis[bytes], port: int, work: Callable[[], tuple[float, float, float | None, int]]
) -> dict[str, Any]:
    """Run ``work`` (-> wall s, own s, process CPU s, bytes) under the PING probe and collect
    what Redis saw: the longest command, seconds busy in commands, its CPU seconds."""
    slowest_command(c)
    busy = redis_busy_seconds(c)
    rcpu = redis_cpu_seconds(c)
    with PingProbe(port) as probe:
        wall, own, cpu, nbytes = work()
    slow = slowest_command(c)
    return {
        "wall_s": wall,
        "own_s": own,
        "cpu_s": cpu,
        "bytes": nbytes,
        "worst_ping_s": probe.worst,
        "pings": probe.pings,
        "slowest_s": slow[0],
        "slowest_cmd": slow[1],
        "redis_busy_s": redis_busy_seconds(c) - busy,
        "redis_cpu_s": redis_cpu_seconds(c) - rcpu,
    }


def _movers(
    queues: list[QueueKeys], url: str, dumps: Path, peer_dir: Path
) -> dict[str, tuple[Callable[[QueueKeys], list[str]], Callable[[QueueKeys], list[str]]]]:
    """method -> (command moving one group out, command moving it back)."""

    def ours(verb: str) -> Callable[[QueueKeys], list[str]]:
        return lambda k: [str(WORKER_BIN), verb, "-q", k.queue, "--dumps-dir", str(dumps)]

    def peer(mode: str) -> Callable[[QueueKeys], list[str]]:
        def cmd(k: QueueKeys) -> list[str]:
            return [
                sys.executable,
                str(PEER_SCRIPT),
                mode,
                "--url",
                url,
                "--file",
                str(peer_dir / f"{k.queue}.{mode.split('-')[0]}"),
                "--chunk",
                str(CHUNK),
                "--ready",
                k.ready,
                "--notify",
                k.notify,
                "--delayed",
                k.delayed,
                "--reserved",
                k.reserved,
            ]

        return cmd

    return {
        "ours": (ours("dump"), ours("restore")),
        "chunked": (peer("chunked-out"), peer("chunked-in")),
        "dump": (peer("dump-out"), peer("dump-in")),
    }


def _sample(c: redis.Redis[bytes], queues: list[QueueKeys], jobs: int) -> list[list[bytes]]:
    """Items at :data:`SAMPLES` spread positions of every ready list (first and last included)."""
    at = sorted({round(i * (jobs - 1) / (SAMPLES - 1)) for i in range(SAMPLES)})
    out = []
    for k in queues:
        pipe = c.pipeline(transaction=False)
        for i in at:
            pipe.lindex(k.ready, i)
        out.append(pipe.execute())
    return out


def _lrange_usec(c: redis.Redis[bytes], key: str, n: int, calls: int = 20) -> float:
    """Mean microseconds Redis spends in one ``LRANGE key 0 n-1`` (INFO commandstats)."""
    c.config_resetstat()
    for _ in range(calls):
        c.lrange(key, 0, n - 1)
    stat = c.info("commandstats")["cmdstat_lrange"]
    return float(stat["usec"]) / int(stat["calls"])


def spread(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    """``median (min-max)`` of ``values`` times ``scale``."""
    vals = [v * scale for v in values]
    if not vals:
        return "-"
    m = statistics.median(vals)
    if len(vals) == 1:
        return f"{m:,.{digits}f}"
    return f"{m:,.{digits}f} ({min(vals):,.{digits}f}-{max(vals):,.{digits}f})"


def run(ctx: Context) -> Result:
    jobs = 5_000 if ctx.quick else 100_000
    rounds = 3 if ctx.quick else 5
    queues = [QueueKeys(f"paused-{g}") for g in range(GROUPS)]
    dumps = ctx.work_dir / "dumps"
    peer_dir = ctx.work_dir / "peer"
    peer_dir.mkdir()
    raw: dict[str, Any] = {
        "jobsPerGroup": jobs,
        "groups": GROUPS,
        "payloadBytes": PAYLOAD,
        "rounds": rounds,
        "chunk": CHUNK,
        "timeBasis": "wall clock from each group's process spawn to its exit, summed; "
        "BGSAVE from the call until done",
    }
    with RedisServer({"dir": str(ctx.work_dir), **SLOWLOG_CONFIG}) as server:
        c = server.client()
        # --- 1. bytes per job; what one LRANGE costs ------------------------------------
        ctx.log(f"bytes per job: {jobs:,} jobs, our layout vs a raw list")
        items = _payloads(0, jobs)
        m0 = _settle(c)
        _fill(c, queues[0], items)
        m1 = _settle(c)
        ours_usage = _memory_usage(c, queues[0].ready) + _memory_usage(c, queues[0].notify)
        for start in range(0, jobs, 10_000):
            c.rpush("raw-list", *items[start : start + 10_000])
        m2 = _settle(c)
        raw_usage = _memory_usage(c, "raw-list")
        lrange_us = {n: _lrange_usec(c, "raw-list", n) for n in (1000, 5000)}
        c.delete("raw-list")
        del items
        per_job = {
            "ours_used_memory": (m1 - m0) / jobs,
            "ours_memory_usage": ours_usage / jobs,
            "ours_notify_memory_usage": _memory_usage(c, queues[0].notify) / jobs,
            "raw_used_memory": (m2 - m1) / jobs,
            "raw_memory_usage": raw_usage / jobs,
        }
        raw["bytesPerJob"] = per_job
        raw["lrangeUsec"] = lrange_us

        # --- 2. five paused groups, moved out and back by each method, rounds ----------------
        ctx.log(f"filling {GROUPS - 1} more groups of {jobs:,} jobs")
        for keys in queues[1:]:
            _fill(c, keys, _payloads(int(keys.queue.rsplit("-", 1)[1]), jobs))
        empty = m0
        before = _settle(c)
        before_rss = used_memory(c)[1]
        expected = _sample(c, queues, jobs)
        movers = _movers(queues, server.url, dumps, peer_dir)
        env = child_env(REDIS_URL=server.url)
        order = list(METHODS)
        per_round: dict[str, list[dict[str, Any]]] = {m: [] for m in METHODS}

        def processes(make: Callable[[QueueKeys], list[str]]) -> Callable[[], Any]:
            def work() -> tuple[float, float, float, int]:
                wall = own = cpu = 0.0
                nbytes = 0
                for keys in queues:
                    out, w, u = _process(make(keys), env)
                    wall += w
                    own += float(out["seconds"])
                    cpu += u
                    nbytes += int(out.get("bytes", 0))
                return wall, own, cpu, nbytes

            return work

        def bgsave() -> tuple[float, float, None, int]:
            seconds, size = bgsave_seconds(c)
            return seconds, seconds, None, size

        for r in range(rounds):
            rotated = order[r % len(order) :] + order[: r % len(order)]
            for method in rotated:
                ctx.log(f"round {r + 1}/{rounds}: {method}")
                start = _settle(c)
                rec: dict[str, Any] = {"round": r + 1, "before": start}
                if method == "bgsave":
                    rec["out"] = _phase(c, server.port, bgsave)
                    rec["fork_s"] = int(c.info("stats")["latest_fork_usec"]) / 1e6
                    rec["after"] = _settle(c)
                    rec["after_rss"] = used_memory(c)[1]
                else:
                    out_cmd, back_cmd = movers[method]
                    rec["out"] = _phase(c, server.port, processes(out_cmd))
                    rec["after"] = _settle(c)
                    rec["after_rss"] = used_memory(c)[1]
                    left = sum(c.llen(k.ready) + c.llen(k.notify) for k in queues)
                    assert left == 0, f"{method}: {left} ready items/tokens still in Redis"
                    rec["back"] = _phase(c, server.port, processes(back_cmd))
                    counts = [(c.llen(k.ready), c.llen(k.notify)) for k in queues]
                    assert counts == [(jobs, jobs)] * GROUPS, f"{method} restored {counts}"
                    assert _sample(c, queues, jobs) == expected, f"{method}: order/content differ"
                    rec["restored"] = _settle(c)
                per_round[method].append(rec)
        raw["perRound"] = per_round
        raw["memory"] = {"empty": empty, "before": before, "beforeRss": before_rss}
    return _report(jobs, rounds, per_job, lrange_us, empty, before, before_rss, per_round, raw)


def _report(
    jobs: int,
    rounds: int,
    per_job: dict[str, float],
    lrange_us: dict[int, float],
    empty: int,
    before: int,
    before_rss: int,
    per_round: dict[str, list[dict[str, Any]]],
    raw: dict[str, Any],
) -> Result:
    t1 = Table(
        title=f"Redis bytes per queued job ({jobs:,} jobs of {PAYLOAD:,} bytes)",
        columns=["layout", "used_memory delta / job", "MEMORY USAGE / job", "overhead / job"],
        rows=[
            [
                "ours (Laravel layout: ready list + notify token)",
                round(per_job["ours_used_memory"], 1),
                round(per_job["ours_memory_usage"], 1),
                round(per_job["ours_used_memory"] - PAYLOAD, 1),
            ],
            [
                "raw Redis list (RPUSH payload only)",
                round(per_job["raw_used_memory"], 1),
                round(per_job["raw_memory_usage"], 1),
                round(per_job["raw_used_memory"] - PAYLOAD, 1),
            ],
        ],
        note="Overhead = used_memory delta per job minus the payload's 1,500 bytes. "
        f"The notify list alone: {per_job['ours_notify_memory_usage']:.1f} bytes/job "
        f"(MEMORY USAGE). One LRANGE of 1,000 of these jobs keeps Redis busy "
        f"{lrange_us[1000]:,.0f} us, of 5,000 {lrange_us[5000]:,.0f} us (INFO commandstats, "
        "mean of 20 calls).",
    )

    def col(method: str, phase: str, field: str) -> list[float]:
        return [float(r[phase][field]) for r in per_round[method] if r.get(phase)]

    def mem(method: str) -> list[float]:
        return [float(r["after"]) for r in per_round[method]]

    def rows(phase: str) -> list[list[Cell]]:
        out: list[list[Cell]] = []
        for method, label in METHODS.items():
            if not per_round[method] or not per_round[method][0].get(phase):
                continue
            longest = [r[phase]["slowest_s"] for r in per_round[method]]
            names = sorted({r[phase]["slowest_cmd"] for r in per_round[method]} - {""})
            cpu = col(method, phase, "cpu_s") if method != "bgsave" else []
            out.append(
                [
                    label,
                    spread(col(method, phase, "wall_s")),
                    spread(col(method, phase, "own_s")) if method != "bgsave" else None,
                    spread(cpu) if cpu else None,
                    spread(col(method, phase, "redis_busy_s")),
                    spread(col(method, phase, "worst_ping_s"), 1000, 1),
                    spread(longest, 1000, 1) + (f" ({', '.join(names)})" if names else ""),
                    spread(col(method, phase, "bytes"), 1 / MB, 1),
                    spread(mem(method), 1 / MB, 1) if phase == "out" else None,
                ]
            )
        return out

    columns = [
        "method",
        "wall s, process start included",
        "own s, start excluded",
        "process CPU s",
        "Redis busy s",
        "worst PING ms",
        "longest command in Redis ms (0: none over 1 ms)",
        "MB written / read",
        "used_memory after MB",
    ]
    fork = [r["fork_s"] for r in per_round["bgsave"]]
    basis = (
        f"{rounds} interleaved rounds (the method order rotates each round), median (min-max). "
        f"Every figure is a total over the {GROUPS} groups, one process per group, one after the "
        "other. Wall: from each process's spawn to its exit (interpreter start, imports and "
        "connection included), the same basis for every process-based method; 'own' is the "
        "process's own timer, from after its connection to its end. BGSAVE: from the call until "
        "INFO reports the save done"
        + (f" (fork {spread(fork, 1000, 1)} ms)" if fork else "")
        + ". Process CPU: user+system of the mover process (getrusage of the reaped child). "
        "Redis busy: seconds spent executing the phase's commands (INFO commandstats usec). "
        "PING probe: one every 5 ms from its own process; its worst round trip also holds the "
        "probe's own scheduling delay on a loaded machine; the longest command (SLOWLOG, "
        "commands over 1 ms) is the stall inside Redis."
    )
    t2 = Table(
        title=f"Moving {GROUPS} paused groups x {jobs:,} jobs out of Redis",
        columns=columns,
        rows=rows("out"),
        note=(
            f"used_memory before: {before / MB:,.1f} MB; of the empty server: {empty / MB:,.1f} "
            f"MB; RSS before {before_rss / MB:,.1f} MB (jemalloc keeps freed pages until reused). "
            + basis
        ),
    )
    t3 = Table(
        title=f"Moving them back ({GROUPS} x {jobs:,} jobs)",
        columns=columns[:-1],
        rows=[row[:-1] for row in rows("back")],
        note="Same basis as above. Moving back from a BGSAVE means restarting Redis and loading "
        "the whole RDB (every group), so it has no per-group row. After every move back the "
        f"benchmark checks each group's ready and notify lengths and {SAMPLES} items at spread "
        "positions (order and content).",
    )

    def ratios(peer: str, phase: str, field: str = "wall_s") -> list[float]:
        return [
            o[phase][field] / p[phase][field]
            for o, p in zip(per_round["ours"], per_round[peer], strict=True)
            if p[phase][field] > 0
        ]

    ratio_rows: list[list[Cell]] = []
    for peer in ("chunked", "dump"):
        for phase, word in (("out", "out"), ("back", "back")):
            ratio_rows.append(
                [
                    f"ours / {SHORT[peer]}, move {word}",
                    spread(ratios(peer, phase)),
                    spread(ratios(peer, phase, "own_s")),
                    spread(ratios(peer, phase, "cpu_s")),
                ]
            )
    ratio_rows.append(
        [
            "ours / BGSAVE, move out (BGSAVE frees nothing)",
            spread(ratios("bgsave", "out")),
            None,
            None,
        ]
    )
    t4 = Table(
        title="Time ratios, ours over the peer in the same round (above 1: ours is slower)",
        columns=["pair", "wall (start included)", "own (start excluded)", "process CPU"],
        rows=ratio_rows,
        note="Median (min-max) of the per-round ratios.",
    )

    def med(method: str, phase: str, field: str) -> float:
        return statistics.median(col(method, phase, field))

    plot = Plot(
        filename="memory_stall.png",
        title=f"Worst Redis stall (5 ms PING probe), {GROUPS} groups x {jobs:,} jobs, median",
        ylabel="worst PING round trip, ms (log)",
        bars={
            "ours dump": med("ours", "out", "worst_ping_s") * 1000,
            "ours restore": med("ours", "back", "worst_ping_s") * 1000,
            "chunked out": med("chunked", "out", "worst_ping_s") * 1000,
            "chunked back": med("chunked", "back", "worst_ping_s") * 1000,
            "DUMP+UNLINK": med("dump", "out", "worst_ping_s") * 1000,
            "RESTORE": med("dump", "back", "worst_ping_s") * 1000,
            "BGSAVE": med("bgsave", "out", "worst_ping_s") * 1000,
        },
        log_y=True,
    )
    findings = _findings(jobs, per_job, before, per_round, med, ratios, mem)
    findings.append(EXTRAS)
    return Result(tables=[t1, SETTINGS, t2, t3, t4], plots=[plot], findings=findings, raw=raw)


#: How every mover is set up, and where the setting comes from.
SETTINGS = Table(
    title="Peers and their settings",
    columns=["method", "setting", "source / why"],
    rows=[
        [
            "ours",
            "sendgroup-worker dump / restore, defaults: 1,000 jobs per chunk (4 MiB cap), "
            "fdatasync every 64 MiB + fsync before rename, UNLINK of the staged keys; restore "
            "pipelines 8 merge scripts per round trip",
            "worker_image/sendgroup_worker/dumps/dump.py, restore.py (as the operator's Jobs run "
            "them)",
        ],
        [
            "chunked copy",
            f"{CHUNK:,} items per LRANGE / LTRIM (and per ZRANGE / ZREMRANGEBYRANK), "
            "fdatasync of the file before every trim, directory fsync at the end; back: one "
            f"MULTI of RPUSH {CHUNK:,} items + RPUSH {CHUNK:,} notify tokens per round trip, "
            "file deleted at the end",
            "LRANGE is O(S+N) (redis.io/docs/latest/commands/lrange); Redis' latency guide "
            "(redis.io/docs/latest/operate/oss_and_stack/management/optimization/latency, 'Latency "
            "generated by slow commands') says to avoid O(N) commands on big values, so a careful "
            "user bounds N by the stall it causes: the note of the first table gives what one "
            "LRANGE of 1,000 and of 5,000 of these jobs costs inside Redis, against a 5 ms probe "
            "(and clients with timeouts of a few ms). 1,000 is also ours, so the stalls "
            "compare chunk for chunk. Synced before each trim so nothing leaves Redis before "
            "it is on disk, the guarantee ours gives",
        ],
        [
            "DUMP / RESTORE",
            "DUMP of each key (ready, notify; delayed/reserved when present), file written and "
            "fsynced, directory fsynced, then one UNLINK; back: RESTORE key 0 payload",
            "UNLINK instead of DEL: Redis' knowledge base, 'How do I troubleshoot latency issues "
            "and sporadic failures using DEL?' (redis.io/kb/doc/16mfqr9c6n) and the UNLINK "
            "command page (memory reclaimed in another thread). The 2026-11-30 run used DEL and "
            "no fsync",
        ],
        [
            "BGSAVE",
            "BGSAVE with the server's defaults (rdbcompression yes, rdbchecksum yes)",
            "redis.conf defaults of Debian's redis-server 7.0",
        ],
    ],
)

#: What ours does that the peers do not (read from worker_image/sendgroup_worker/dumps/).
EXTRAS = (
    "What the time buys (read from worker_image/sendgroup_worker/dumps/; not measured here): "
    "ours takes a per-queue lock, moves the live keys aside atomically (one RENAME script, so "
    "jobs pushed during the dump land in fresh keys, neither lost nor dumped twice; delayed, "
    "reserved and failed jobs with their records go too), writes a segment with a CRC-32 per "
    "chunk, a SHA-256 of the file and an optional HMAC signature, checks the counts written "
    "against Redis, and deletes nothing before the file is fsynced and renamed into place; a "
    "crash at any point is resumed by the next dump or undone by the next restore. The restore "
    "verifies every segment in full before merging any (a damaged file changes nothing), merges "
    "each chunk in one script that also records its progress (a crash never applies a chunk "
    "twice: exactly once), never overwrites (ZADD NX / HSETNX), and ends with one notify token "
    "per ready job. The chunked copy has none of this: a crash between its fdatasync and its "
    "LTRIM leaves a chunk both on disk and in Redis (duplicated on restore), a crash during "
    "the restore duplicates the chunks already pushed when re-run, a truncated or altered file "
    "is noticed only when parsing fails part-way (after earlier chunks are back), it chases "
    "the tail of a list that producers keep filling, and failed jobs are not handled. DUMP/RESTORE "
    "carries a CRC-64 and refuses a payload from a newer RDB version, and blocks Redis for the "
    "whole key both ways."
)


def _findings(
    jobs: int,
    per_job: dict[str, float],
    before: int,
    per_round: dict[str, list[dict[str, Any]]],
    med: Callable[[str, str, str], float],
    ratios: Callable[..., list[float]],
    mem: Callable[[str], list[float]],
) -> list[str]:
    overhead = per_job["ours_used_memory"] - per_job["raw_used_memory"]
    out = [
        f"Our layout holds a 1.5 KB job in {per_job['ours_memory_usage']:,.0f} bytes of Redis "
        f"memory vs {per_job['raw_memory_usage']:,.0f} in a raw list (MEMORY USAGE; the "
        f"difference is the notify token Laravel's layout keeps per ready job, "
        f"{per_job['ours_notify_memory_usage']:.1f} bytes/job). used_memory deltas say "
        f"{per_job['ours_used_memory']:,.0f} vs {per_job['raw_used_memory']:,.0f} "
        f"({overhead:+.1f} bytes/job, which also holds allocator and buffer noise).",
    ]
    freed = {m: before - statistics.median(mem(m)) for m in ("ours", "chunked", "dump")}
    out.append(
        "Memory freed by moving out (median): "
        + ", ".join(f"{m} {v / MB:,.1f} MB" for m, v in freed.items())
        + f" of {before / MB:,.1f} MB; BGSAVE frees nothing."
    )
    for phase, word in (("out", "out"), ("back", "back")):
        o = med("ours", phase, "wall_s")
        for peer, name in (("chunked", "the chunked copy"), ("dump", "DUMP/RESTORE")):
            p = med(peer, phase, "wall_s")
            rr = ratios(peer, phase)
            verdict = "we lose" if min(rr) > 1 else ("we win" if max(rr) < 1 else "level")
            out.append(
                f"Moving {word}, ours vs {name}: {o:.2f} s vs {p:.2f} s wall, process start "
                f"included on both sides (ratio {spread(rr)}: {verdict}); own time "
                f"{med('ours', phase, 'own_s'):.2f} vs {med(peer, phase, 'own_s'):.2f} s; "
                f"process CPU {med('ours', phase, 'cpu_s'):.2f} vs {med(peer, phase, 'cpu_s'):.2f}"
                f" s; worst PING {med('ours', phase, 'worst_ping_s') * 1000:.1f} vs "
                f"{med(peer, phase, 'worst_ping_s') * 1000:.1f} ms; longest command in Redis "
                f"{med('ours', phase, 'slowest_s') * 1000:.1f} vs "
                f"{med(peer, phase, 'slowest_s') * 1000:.1f} ms."
            )
    start = [
        (r["out"]["wall_s"] - r["out"]["own_s"]) / GROUPS for r in per_round["ours"] if r.get("out")
    ]
    peer_start = [
        (r["out"]["wall_s"] - r["out"]["own_s"]) / GROUPS
        for r in per_round["chunked"]
        if r.get("out")
    ]
    out.append(
        f"Process start (wall minus own time, per process, moving out): ours "
        f"{statistics.median(start):.2f} s (sendgroup-worker's imports), the peer script "
        f"{statistics.median(peer_start):.2f} s (Python + redis-py)."
    )
    out.append(
        f"BGSAVE: {med('bgsave', 'out', 'wall_s'):.2f} s, worst PING "
        f"{med('bgsave', 'out', 'worst_ping_s') * 1000:.1f} ms, but it frees nothing and one "
        "group cannot be brought back from it alone."
    )
    return out


SCENARIO = Scenario(key="memory", number=5, title="Paused memory and moving it out", run=run)
