"""Scenario 1: worker throughput of one process on no-op 1.5 KB jobs, ours beside the peers.

Every worker (ours, a plain loop of Laravel's queue scripts, RQ, arq, SAQ, Dramatiq, Celery)
drains the same number of jobs from the same local redis-server (FLUSHALL between peers, jobs
pushed with the library's own API before the worker starts; not timed), one process each, and
is measured from the outside the same way (``bench.drainbench``): jobs/s between its first and
last job, the process's CPU per 1,000 jobs, Redis commands and request segments (round trips)
per job, then the idle pickup latency of single jobs pushed to the idle worker.

The physical limit row: the raw-socket PING round trip measured in the same run times our round
trips per job.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from bench import drainbench as db
from bench.report import Context, Plot, Result, Scenario, Table
from tests.support.redis_server import RedisServer
from tests.support.workers import worker_env

PAYLOAD_BYTES = 1536

#: (key, label, settings stated in the note); "ours16" is ours with WORKER_CONCURRENCY=16
PEERS: list[tuple[str, str, str]] = [
    ("ours", "sendgroup-worker", "WORKER_CONCURRENCY=4 (default), block_for 5 s"),
    ("ours16", "sendgroup-worker c=16", "WORKER_CONCURRENCY=16"),
    ("laravel", "Laravel scripts loop", "4 calls/job as RedisQueue (EVALSHA), BLPOP notify 5 s"),
    ("rq", "RQ SimpleWorker", "1 job at a time, result_ttl=0"),
    ("arq", "arq", "max_jobs=100, poll_delay=0.05 s (default 0.5 s: 3x slower), keep_result=0"),
    ("saq", "SAQ", "concurrency=10 (default)"),
    ("dramatiq", "Dramatiq (Redis)", "in-process Worker, worker_threads=8 (default)"),
    ("celery", "Celery (Redis)", "pool solo, prefetch multiplier 100, no heartbeat/mingle/gossip"),
]
PEER_CONCURRENCY = {"arq": 100, "saq": 10, "dramatiq": 8, "ours16": 16}
OURS_CONCURRENCY = 4

#: the fastest peer of the last run of this scenario in this process (scenario 2 reuses it)
LAST_BEST: str | None = None


@dataclass
class Setup:
    """Where the workers run: redis, interpreters, a log directory."""

    server: RedisServer
    peers_python: Path
    logs: Path


def load_after() -> list[str]:
    """The 1/5/15-minute load averages now (the machine's cores: os.cpu_count())."""
    return Path("/proc/loadavg").read_text().split()[:3]


def worker_argv(peer: str, setup: Setup, concurrency: int, smtp: str = "") -> list[str]:
    """The command of one worker process for ``peer`` (``--stamp-fd`` is added later)."""
    if peer == "ours":
        handler = "mail" if smtp else "noop"
        return [str(db.ours_python()), "-m", "bench.our_worker", "--handler", handler]
    py = db.python_for(peer, setup.peers_python)
    argv = [str(py), "-m", "bench.peer_workers", "work", peer, "--url", setup.server.url]
    argv += ["--concurrency", str(concurrency)]
    if smtp:
        argv += ["--smtp", smtp]
    return argv


def ours_env(
    url: str, concurrency: int, smtp_host: str = "127.0.0.1", smtp_port: int = 25
) -> dict[str, str]:
    """The worker's environment as the operator would set it, metrics off, quiet logs."""
    env = worker_env(
        url,
        "bench",
        smtp_port,
        SMTP_HOST=smtp_host,
        WORKER_CONCURRENCY=concurrency,
        WORKER_TIMEOUT=30,
        WORKER_RETRY_AFTER=90,
        WORKER_BLOCK_FOR=5,
        SMTP_TIMEOUT=10,
        LOG_LEVEL="WARNING",
    )
    return env


def enqueue(peer: str, setup: Setup, jobs: int) -> None:
    """Push ``jobs`` payloads with ``peer``'s API (ours: Laravel's layout, RPUSH + notify)."""
    py = db.ours_python() if peer == "ours" else db.python_for(peer, setup.peers_python)
    db.subprocess.run(
        [str(py), "-m", "bench.peer_workers", "enqueue", peer, "--url", setup.server.url,
         "--jobs", str(jobs), "--size", str(PAYLOAD_BYTES)],
        cwd=db.ROOT, env={**db.os.environ, "PYTHONPATH": str(db.ROOT)}, check=True, timeout=600,
    )  # fmt: skip


def run_peer(
    peer: str,
    setup: Setup,
    jobs: int,
    samples: int,
    *,
    cap: float | None = None,
    concurrency: int | None = None,
    smtp: str = "",
    smtp_host: str = "127.0.0.1",
    smtp_port: int = 25,
) -> db.Drain:
    """Flush, enqueue ``jobs``, start ``peer``'s worker, time the drain (at most ``cap``
    seconds), stop it; then (``samples`` > 0) flush, start a fresh worker, wait for one warm-up
    job and take the idle pickup latency."""
    client = setup.server.client()
    if concurrency is None:
        concurrency = OURS_CONCURRENCY if peer == "ours" else PEER_CONCURRENCY.get(peer, 1)
    if peer == "ours16":
        peer = "ours"
    env = ours_env(setup.server.url, concurrency, smtp_host, smtp_port) if peer == "ours" else {}
    log = setup.logs / f"{peer}-{concurrency}{'-smtp' if smtp else ''}.log"
    argv = worker_argv(peer, setup, concurrency, smtp)
    try:
        client.flushall()
        enqueue(peer, setup, jobs)
        worker = db.StampedWorker(argv, env, log)
        try:
            drain = db.measure(worker, jobs, client, setup.server.port, timeout=120, cap=cap)
        finally:
            worker.stop()
        if samples:
            client.flushall()
            py = db.ours_python() if peer == "ours" else db.python_for(peer, setup.peers_python)
            pusher = [str(py), "-m", "bench.peer_workers", "push", peer, "--url"]
            pusher += [setup.server.url, "--size", str(PAYLOAD_BYTES)]
            worker = db.StampedWorker(argv, env, log)
            try:
                drain.latencies_ms = db.idle_latency(worker, pusher, samples, timeout=30)
            finally:
                worker.stop()
    finally:
        client.close()
    return drain


def run(ctx: Context) -> Result:
    global LAST_BEST
    jobs = 2_000 if ctx.quick else 50_000
    samples = 20 if ctx.quick else 50
    cap = 10.0 if ctx.quick else 20.0
    logs = ctx.work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    load_before = load_after()
    server = RedisServer().start()
    try:
        setup = Setup(server, ctx.peers_python, logs)
        rtt = db.ping_rtt(server.port)
        ctx.log(f"raw PING round trip {rtt * 1e6:.0f} us; {jobs} jobs per peer")
        drains: dict[str, db.Drain] = {}
        errors: dict[str, str] = {}
        for key, label, _ in PEERS:
            try:
                d = run_peer(key, setup, jobs, samples, cap=cap)
            except Exception as exc:  # a peer that fails is reported, the others still run
                errors[key] = f"{type(exc).__name__}: {str(exc)[:300]}"
                ctx.log(f"{label}: FAILED {errors[key]}")
                continue
            drains[key] = d
            ctx.log(
                f"{label}: {d.rate:,.0f} jobs/s, {d.cpu_per_1000:.2f} CPU s/1000, "
                f"{d.trips_per_job:.2f} trips/job, p50 {d.latency(0.5):.1f} ms"
            )
        rtt_after = db.ping_rtt(server.port)
    finally:
        server.cleanup()
    rtt = statistics.mean([rtt, rtt_after])
    ours = drains.get("ours")
    rows: list[list[object]] = []
    for key, label, _ in PEERS:
        d = drains.get(key)
        if d is None:
            rows.append([label, "FAILED"] + [None] * 9)
            continue
        rows.append(
            [
                label,
                d.jobs,
                d.rate,
                d.rate / ours.rate if ours else None,
                1000 / d.cpu_per_1000 if d.cpu_per_1000 > 0 else None,
                d.cpu_per_1000,
                d.redis_cpu_per_1000,
                d.trips_per_job,
                d.commands_per_job,
                d.latency(0.5),
                d.latency(0.99),
            ]
        )
    if ours is not None and ours.trips_per_job:
        limit = 1 / (rtt * ours.trips_per_job)
        rows.append(
            [
                f"physical limit ({ours.trips_per_job:.2f} trips x {rtt * 1e6:.0f} us)",
                None,
                limit,
                limit / ours.rate,
                None,
                None,
                None,
                ours.trips_per_job,
                None,
                None,
                None,
            ]
        )
    settings = "; ".join(f"{label}: {s}" for _, label, s in PEERS)
    table = Table(
        title=f"One worker process draining {jobs:,} no-op {PAYLOAD_BYTES}-byte jobs",
        columns=[
            "worker",
            "jobs timed",
            "jobs/s",
            "vs ours",
            "jobs / worker CPU s",
            "worker CPU s / 1000 jobs",
            "Redis CPU s / 1000 jobs",
            "round trips / job",
            "commands / job",
            "idle pickup p50 ms",
            "idle pickup p99 ms",
        ],
        rows=rows,  # type: ignore[arg-type]
        note=(
            "jobs/s between the first and the last job (start-up and enqueueing not timed; "
            f"a worker still busy {cap:g} s after its first job is timed over the jobs done by "
            "then: 'jobs timed'); worker CPU = the worker process (user+system, psutil); "
            "Redis CPU = redis-server (INFO cpu); jobs / worker CPU s = the rate one busy core "
            "would give the worker, the figure least disturbed by other load on the machine; "
            "round trips = request segments Redis received (ss data_segs_in; a pipeline or "
            "MULTI batch is one); commands = INFO total_commands_processed (includes the "
            f"commands inside Lua scripts); idle pickup = {samples} single jobs pushed with the "
            "peer's API to the idle worker, time from just before the push call to the task "
            "body. Physical limit = raw-socket PING round trip measured in the same run x our "
            "round trips per job. Settings: " + settings + ". arq runs in its own venv "
            "(.venv-bench-arq: it pins redis-py < 6)."
        ),
    )
    load = f" (load average {' '.join(load_before)} before, {' '.join(load_after())} after)"
    findings = findings_for(drains, rtt, load)
    peers_only = {k: v for k, v in drains.items() if k not in ("ours", "ours16", "laravel")}
    if peers_only:
        LAST_BEST = max(peers_only, key=lambda k: peers_only[k].rate)
    if errors:
        findings += [f"{k} failed: {v}" for k, v in errors.items()]
    labels = {k: label for k, label, _ in PEERS}
    plot = Plot(
        filename="worker-throughput.png",
        title=f"No-op jobs/s, one process ({jobs:,} jobs)",
        ylabel="jobs/s",
        bars={labels[k]: d.rate for k, d in drains.items()},
    )
    raw = {
        "rtt_us": rtt * 1e6,
        "jobs": jobs,
        "drains": {
            k: {
                "rate": d.rate,
                "cpu_per_1000": d.cpu_per_1000,
                "redis_cpu_per_1000": d.redis_cpu_per_1000,
                "trips_per_job": d.trips_per_job,
                "commands_per_job": d.commands_per_job,
                "latencies_ms": d.latencies_ms,
            }
            for k, d in drains.items()
        },
        "errors": errors,
        "best_peer": LAST_BEST,
    }
    return Result(tables=[table], plots=[plot], findings=findings, raw=raw)


def findings_for(drains: dict[str, db.Drain], rtt: float, load: str = "") -> list[str]:
    """Where we win or lose, from the measured figures (rate, round trips, CPU per job)."""
    ours = drains.get("ours")
    if ours is None:
        return ["our worker failed: no comparison"]
    out: list[str] = []
    our_redis = ours.redis_cpu_per_1000 or 0.0
    for key, label, _ in PEERS[2:]:
        d = drains.get(key)
        if d is None:
            continue
        ratio = d.rate / ours.rate
        peer_redis = d.redis_cpu_per_1000 or 0.0
        why = (
            f"{d.trips_per_job:.2f} vs our {ours.trips_per_job:.2f} round trips/job, "
            f"worker CPU {d.cpu_per_1000 * 1000:.0f} vs our {ours.cpu_per_1000 * 1000:.0f} us/job, "
            f"Redis CPU {peer_redis * 1000:.0f} vs our {our_redis * 1000:.0f} us/job"
        )
        if ratio > 1.05:
            out.append(f"{label} is {ratio:.2f}x our rate: {why}.")
        elif ratio < 0.95:
            out.append(f"We are {1 / ratio:.2f}x {label}: {why}.")
        else:
            out.append(f"{label} is level with us ({ratio:.2f}x): {why}.")
        fixes = []
        ahead = []
        if d.cpu_per_1000 < ours.cpu_per_1000 * 0.95:
            ahead.append(
                f"worker CPU ({1000 / d.cpu_per_1000:,.0f} vs our "
                f"{1000 / ours.cpu_per_1000:,.0f} jobs per CPU second, the ceiling of one busy "
                "core)"
            )
            fixes.append(
                "less Python per job in the worker: redis-py packs ~22 arguments per reserve "
                "call (keys and constant settings could be bound once), per-job metric label "
                "look-ups, the asyncio timeout and lane hand-offs"
            )
        if peer_redis < our_redis * 0.95:
            ahead.append(
                f"Redis CPU ({peer_redis * 1000:.0f} vs our {our_redis * 1000:.0f} us/job)"
            )
            fixes.append(
                "a lighter reserve script: ours also writes the exactly-once marker (ZADD sent) "
                "and the stats hash per job, and checks delayed and reserved each call"
            )
        if fixes:
            fixes.append(
                "reserving several jobs per call (Queue.reserve(count=10), 'fused-10' in "
                "bench/queue_throughput.py) to spread the fixed per-call cost"
            )
            out.append(
                f"{label} is ahead of us on "
                + " and ".join(ahead)
                + ". What would close it: "
                + "; ".join(fixes)
                + "."
            )
    lat = {k: d.latency(0.5) for k, d in drains.items() if d.latencies_ms}
    if lat.get("ours") is not None:
        faster = [k for k, v in lat.items() if v is not None and v < lat["ours"] * 0.9]
        labels = {k: label for k, label, _ in PEERS}
        text = ", ".join(f"{labels[k]} {lat[k]:.1f} ms" for k in lat if k != "ours")
        out.append(
            f"Idle pickup p50: ours {lat['ours']:.1f} ms; {text}. Workers that poll (arq's "
            "poll_delay, Dramatiq's Redis consumer) sit at tens of ms; "
            + (
                "faster than ours: " + ", ".join(labels[k] for k in faster) + " (our wake-up "
                "path after BLPOP returns is not profiled yet; the ack and reserve are one "
                "round trip, so the gap is client-side)."
                if faster
                else "none of the blocking peers is faster than ours."
            )
        )
    if ours.trips_per_job:
        limit = 1 / (rtt * ours.trips_per_job)
        busy = (ours.cpu_per_1000 + our_redis) / 1000 + rtt * ours.trips_per_job
        out.append(
            f"We reach {ours.rate / limit:.0%} of the physical limit of our round trips "
            f"({limit:,.0f} jobs/s). Per job we spend {ours.cpu_per_1000 * 1000:.0f} us of worker "
            f"CPU, {our_redis * 1000:.0f} us of Redis CPU and {rtt * ours.trips_per_job * 1e6:.0f}"
            f" us on the wire: {1 / busy:,.0f} jobs/s if nothing overlapped and nothing else "
            f"ran; the rest of the measured time is waiting for a CPU{load}."
        )
    return out


SCENARIO = Scenario(
    key="worker",
    number=1,
    title="Worker throughput, one process, no-op 1.5 KB jobs (vs Laravel loop, RQ, arq, SAQ, "
    "Dramatiq, Celery)",
    run=run,
)
