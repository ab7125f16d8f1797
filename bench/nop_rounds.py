"""Scenario 1's drain, our worker only, for before/after comparisons of the queue machinery:
one worker process (``WORKER_CONCURRENCY=4``, the scenario's settings: ``bench.scenarios.worker
.ours_env``) draining the scenario's no-op 1.5 KB jobs, measured as the scenario measures it
(``bench.drainbench.measure``: jobs/s from the first to the last stamp, worker CPU and Redis CPU
per job over the same window).

``python -m bench.nop_rounds [--rounds 3] [--jobs 15000] [--src DIR ...]`` under ``flock
/tmp/bench.lock``. Each ``--src`` is a source checkout (``contract``, ``worker_image``,
``operator`` on ``PYTHONPATH``; default: this one); with several, the rounds interleave them
(A, B, A, B, ...) on one redis-server, so machine load falls on each alike. ``--commandstats``
prints Redis' ``INFO commandstats`` (calls, usec_per_call) of each drain's scripts;
``--profile DIR`` records each drain's worker with py-spy (``--py-spy PATH``) into DIR.
Prints one line per drain, then per source the median and range of jobs/s and the medians of
worker CPU us/job and Redis CPU us/job.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from bench import drainbench as db
from bench.scenarios import worker as w
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]


def sources(root: Path) -> str:
    """``PYTHONPATH`` running the worker from checkout ``root`` (``.`` for ``bench``)."""
    return ":".join(str(root / d) for d in ("contract", "worker_image", "operator", "."))


def drain(
    setup: w.Setup, src: Path, jobs: int, cap: float, label: str, args: argparse.Namespace
) -> db.Drain:
    """One measured drain of ``jobs`` queued no-op jobs by one worker running ``src``'s code."""
    client = setup.server.client()
    try:
        client.flushall()
        w.enqueue("ours", setup, jobs)
        env = w.ours_env(setup.server.url, w.OURS_CONCURRENCY)
        env.update(PYTHONPATH=sources(src))
        log = setup.logs / f"ours-{label}.log"
        worker = db.StampedWorker(w.worker_argv("ours", setup, w.OURS_CONCURRENCY), env, log)
        spy = None
        if args.profile:
            out = args.profile / f"{label}.txt"
            spy = subprocess.Popen(
                [args.py_spy, "record", "--pid", str(worker.proc.pid), "--format", "raw",
                 "--rate", "500", "--output", str(out), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        if args.commandstats:
            client.config_resetstat()
        try:
            result = db.measure(worker, jobs, client, setup.server.port, timeout=120, cap=cap)
        finally:
            worker.stop()
            if spy is not None:
                spy.wait(30)
        if args.commandstats:
            stats = client.info("commandstats")
            for name, row in sorted(stats.items()):
                if row["calls"] >= 10:
                    print(f"    {name}: {row['calls']} calls, {row['usec_per_call']} us/call")
    finally:
        client.close()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=15_000)
    ap.add_argument("--cap", type=float, default=8.0)
    ap.add_argument("--src", type=Path, action="append")
    ap.add_argument("--logs", type=Path, default=Path("/tmp/nop-rounds-logs"))
    ap.add_argument("--commandstats", action="store_true")
    ap.add_argument("--profile", type=Path)
    ap.add_argument("--py-spy", default="py-spy")
    args = ap.parse_args()
    srcs: list[Path] = args.src or [ROOT]
    args.logs.mkdir(parents=True, exist_ok=True)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    server = RedisServer().start()
    got: dict[Path, list[db.Drain]] = {s: [] for s in srcs}
    try:
        setup = w.Setup(server, Path(sys.executable), args.logs)
        for rnd in range(args.rounds):
            for i, src in enumerate(srcs):
                d = drain(setup, src, args.jobs, args.cap, f"{i}-{rnd}", args)
                got[src].append(d)
                rcpu = (d.redis_cpu_per_1000 or 0) * 1000
                print(
                    f"round {rnd + 1} {src}: {d.rate:,.0f} jobs/s over {d.jobs} jobs, worker "
                    f"{d.cpu_per_1000 * 1000:.1f} CPU us/job, Redis {rcpu:.1f} "
                    f"CPU us/job, {d.trips_per_job or 0:.3f} trips/job, "
                    f"{d.commands_per_job or 0:.3f} commands/job",
                    flush=True,
                )
    finally:
        server.cleanup()
    print("\nmedian (min-max) over the rounds:")
    for src, drains in got.items():
        rates = [d.rate for d in drains]
        cpu = statistics.median(d.cpu_per_1000 for d in drains) * 1000
        rcpu = statistics.median(d.redis_cpu_per_1000 or 0 for d in drains) * 1000
        print(
            f"{src}: {statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) "
            f"jobs/s, worker {cpu:.1f} CPU us/job, Redis {rcpu:.1f} CPU us/job"
        )


if __name__ == "__main__":
    main()
