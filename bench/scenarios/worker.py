"""Scenario 1: worker throughput of one process on no-op 1.5 KB jobs, ours beside the peers.

Every worker (ours; Laravel's own ``php artisan queue:work``; a Python loop of Laravel's queue
scripts; RQ, arq, SAQ, Dramatiq, Celery) drains the same number of jobs from the same local
redis-server (FLUSHALL between workers, jobs pushed with the library's own API before the worker
starts; not timed), one process each, each configured as its own documentation recommends for
throughput (:data:`SOURCES`: the setting and where it is written), and measured from the
outside the same way (``bench.drainbench``): jobs/s between its first and last job (process
start-up excluded for every worker), the process tree's CPU per job (user + system, children
included), Redis CPU, commands and request segments (round trips) per job.

The workers run in interleaved rounds, the order rotated by one each round (A, B, ..., ours;
B, ..., ours, A; ...): load from other work on the machine falls on every worker alike, and no
worker always runs first after the set-up or right after the same neighbour; the table gives
the median and the range over the rounds. The idle pickup latency of single jobs pushed to an
idle worker is taken once per worker, after the rounds.

Measured ceilings in the same run (:func:`ceilings`), instead of a computed "physical limit":
Redis popping the same payloads with pipelined LPOPs (the most any Redis list worker could take
out of this Redis), Redis's CPU per job of our reserve script at batch sizes 1 and 10 (Redis is
single-threaded: 1 / that is the most one Redis gives that script), and each worker's jobs per
worker-CPU-second (the most one busy core gives that worker).
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench import drainbench as db
from bench.report import Context, Plot, Result, Scenario, Table
from sendgroup_worker.queue import Ack, Queue, QueueKeys
from tests.support.dumps import push
from tests.support.php import LARAVEL_AUTOLOAD, php_bin
from tests.support.redis_server import RedisServer
from tests.support.workers import worker_env

PAYLOAD_BYTES = 1536

#: (key, label, settings stated in the note); "ours16" is ours with WORKER_CONCURRENCY=16
PEERS: list[tuple[str, str, str]] = [
    (
        "ours",
        "sendgroup-worker",
        "WORKER_CONCURRENCY=4 (fixed; the default, auto, starts at 16 and is measured in "
        "scenario 2), WORKER_BLOCK_FOR=5 s",
    ),
    ("ours16", "sendgroup-worker c=16", "WORKER_CONCURRENCY=16"),
    (
        "laravel",
        "Laravel queue:work (PHP)",
        "php artisan queue:work redis --queue=bench --quiet --tries=1 (defaults: --sleep=3, "
        "--timeout=60, --memory=128), redis connection block_for=5, cache store redis (the "
        "example app's: queue:restart signal), raw job class Bench\\Stamp@fire; a plain Laravel "
        "app: the example app's SendGroup pause listener (one EXISTS per loop) left out",
    ),
    (
        "laravel-loop",
        "Python loop of Laravel's queue scripts",
        "not Laravel: Laravel 11's migrate/pop scripts + ZREM per job from redis-py (EVALSHA), "
        "BLPOP notify 5 s",
    ),
    ("rq", "RQ SimpleWorker", "SimpleWorker (no fork per job), result_ttl=0"),
    ("arq", "arq", "max_jobs=100, poll_delay=0.05 s (default 0.5 s), keep_result=0"),
    ("saq", "SAQ", "concurrency=10 (default)"),
    ("dramatiq", "Dramatiq (Redis)", "worker_threads=8 (default), dramatiq_queue_prefetch=1000"),
    (
        "celery",
        "Celery (Redis)",
        "pool solo, worker_prefetch_multiplier=128, no heartbeat/mingle/gossip",
    ),
]
#: where each peer's throughput setting comes from (what its own documentation says)
SOURCES: dict[str, str] = {
    "ours": "bench default = the operator's default",
    "laravel": "https://laravel.com/docs/8.x/queues#blocking (block_for 5 is the documented "
    "example; no per-process throughput setting is documented: scale is more processes, "
    "https://laravel.com/docs/8.x/queues#supervisor-configuration); --quiet so that neither "
    "side writes a log line per job",
    "laravel-loop": "kept only as the 4-round-trip reference of bench/queue_throughput.py",
    "rq": "https://github.com/rq/rq/blob/master/docs/benchmark.md ('Notes on Performance': "
    "SimpleWorker for jobs of single-digit milliseconds, ~6x the forking Worker)",
    "arq": "arq's Worker docstring names poll_delay ('duration between polling the queue') and "
    "max_jobs with no advised value; poll_delay 0.05 s measured 3x the default 0.5 s here",
    "saq": "no throughput setting documented; default concurrency",
    "dramatiq": "https://dramatiq.io/reference.html (environment variables: "
    "dramatiq_queue_prefetch, the number of messages to prefetch per worker; the changelog "
    "added it for the prefetch performance issue #183); default 0 = 2 x worker_threads, with "
    "which the Redis consumer sleeps with backoff between fetches; no value is advised: 1000, "
    "as the issue-19 audit ran it (1.9-2.4x the default there)",
    "celery": "https://docs.celeryq.dev/en/stable/userguide/optimizing.html#prefetch-limits "
    "('lots of short tasks, and throughput/round trip latency is important to you: this number "
    "should be large ... 64, or 128'); solo pool: no pool hand-off in one process",
}
PEER_CONCURRENCY = {"arq": 100, "saq": 10, "dramatiq": 8, "ours16": 16}
PEER_ENV = {"dramatiq": {"dramatiq_queue_prefetch": "1000"}}
OURS_CONCURRENCY = 4
#: the Laravel peer's job class (bench/laravel/Bench/Stamp.php), as Laravel names a raw job
LARAVEL_ARTISAN = db.ROOT / "bench" / "laravel" / "artisan"

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
    if peer == "laravel":
        if smtp:
            raise RuntimeError("the Laravel peer has no SMTP variant in this benchmark")
        check_laravel()
        return [php_bin(), str(LARAVEL_ARTISAN), "queue:work", "redis", f"--queue={db_queue()}",
                "--quiet", "--tries=1"]  # fmt: skip
    py = db.python_for(peer, setup.peers_python)
    # gevent peers (dramatiq-gevent, celery-gevent): an entry that monkey-patches first
    module = "bench.peer_gevent" if peer.endswith("-gevent") else "bench.peer_workers"
    argv = [str(py), "-m", module, "work", peer, "--url", setup.server.url]
    argv += ["--concurrency", str(concurrency)]
    if smtp:
        argv += ["--smtp", smtp]
    return argv


def db_queue() -> str:
    """The queue every worker drains (bench.peer_workers.QUEUE, without importing it here:
    that module's imports belong to the peers' interpreters)."""
    return "bench"


def laravel_env(setup: Setup) -> dict[str, str]:
    """Laravel's worker environment: this Redis, no key prefix (the same keys as ours), its
    storage (compiled config, logs) under the run's log directory, and a plain Laravel app:
    the example app's SendGroup pause listener (one EXISTS per worker loop, for SendGroup
    queues only) left out (``BENCH_PLAIN_LARAVEL=1``, ``bench/laravel/artisan``)."""
    storage = setup.logs / "laravel-storage"
    for sub in ("framework/views", "framework/cache", "logs", "cache"):
        (storage / sub).mkdir(parents=True, exist_ok=True)
    return {
        "REDIS_HOST": "127.0.0.1",
        "REDIS_PORT": str(setup.server.port),
        "REDIS_PREFIX": "",
        "LARAVEL_STORAGE_PATH": str(storage),
        "APP_SERVICES_CACHE": str(storage / "cache/services.php"),
        "APP_PACKAGES_CACHE": str(storage / "cache/packages.php"),
        "BENCH_BLOCK_FOR": "5",
        "BENCH_PLAIN_LARAVEL": "1",
    }


def check_laravel() -> None:
    """RuntimeError naming the Debian packages when Laravel is not installed."""
    if not LARAVEL_AUTOLOAD.is_file():
        raise RuntimeError(
            f"{LARAVEL_AUTOLOAD} missing: run hack/bootstrap (apt-get install "
            "php-laravel-framework php-swiftmailer php-redis php-cli)"
        )


def laravel_mail_payloads(setup: Setup, queue: str, count: int, domain: str, path: Path) -> Path:
    """Write ``count`` payload lines of the example app's queued Mailable (``OrderShipped`` to
    ``user<i>@<domain>`` on ``queue``) to ``path``, made by Laravel's own producer
    (``bench:mail-payloads``, bench/laravel/Bench/MailPayloads.php); returns ``path``."""
    check_laravel()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAIL_", "REDIS_URL"))}
    env.update(laravel_env(setup))
    subprocess.run(
        [php_bin(), str(LARAVEL_ARTISAN), "bench:mail-payloads", queue, str(count), domain,
         str(path)],
        env=env, check=True, timeout=900,
    )  # fmt: skip
    return path


def push_payload_file(client: object, queue: str, path: Path, limit: int | None = None) -> int:
    """Push the payload lines of ``path`` (the first ``limit``, or all) to ``queue`` as Laravel's
    push script does (RPUSH queue + RPUSH notify, 5,000 per call); returns how many."""
    keys = QueueKeys(queue)
    batch: list[bytes] = []
    pushed = 0
    with path.open("rb") as f:
        for line in f:
            if limit is not None and pushed + len(batch) >= limit:
                break
            batch.append(line.rstrip(b"\n"))
            if len(batch) == 5_000:
                push(client, keys, batch)
                pushed += len(batch)
                batch = []
    if batch:
        push(client, keys, batch)
        pushed += len(batch)
    return pushed


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


def pusher_python(peer: str, setup: Setup) -> Path:
    """The interpreter that enqueues for ``peer`` (ours and Laravel: Laravel's layout, RPUSH +
    notify, from the project's interpreter)."""
    if peer in ("ours", "laravel"):
        return db.ours_python()
    return db.python_for(peer, setup.peers_python)


def enqueue(peer: str, setup: Setup, jobs: int) -> None:
    """Push ``jobs`` payloads with ``peer``'s API (ours and Laravel: Laravel's layout, RPUSH +
    notify, as Laravel's push script does)."""
    subprocess.run(
        [str(pusher_python(peer, setup)), "-m", "bench.peer_workers", "enqueue", peer, "--url",
         setup.server.url, "--jobs", str(jobs), "--size", str(PAYLOAD_BYTES)],
        cwd=db.ROOT, env={**os.environ, "PYTHONPATH": str(db.ROOT)}, check=True, timeout=600,
    )  # fmt: skip


def peer_log(
    setup: Setup, peer: str, concurrency: int, smtp: str, extra_env: dict[str, str] | None
) -> Path:
    """The log file of :func:`run_peer`'s worker (``ours16`` is ``ours``); appended to by every
    drain with the same arguments."""
    peer = "ours" if peer == "ours16" else peer
    suffix = "-smtp" if smtp else ""
    suffix += "".join(f"-{k}={v}" for k, v in sorted((extra_env or {}).items()))
    return setup.logs / f"{peer}-{concurrency}{suffix}.log"


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
    drain: bool = True,
    extra_env: dict[str, str] | None = None,
) -> db.Drain:
    """Flush, enqueue ``jobs``, start ``peer``'s worker, time the drain (at most ``cap``
    seconds), stop it; then (``samples`` > 0) flush, start a fresh worker, wait for one warm-up
    job and take the idle pickup latency. ``drain=False``: the latency only. ``extra_env``:
    variables set on top of the worker's environment (e.g. ``SMTP_PIPELINING=off``)."""
    client = setup.server.client()
    if concurrency is None:
        concurrency = OURS_CONCURRENCY if peer == "ours" else PEER_CONCURRENCY.get(peer, 1)
    if peer == "ours16":
        peer = "ours"
    if peer == "ours":
        env = ours_env(setup.server.url, concurrency, smtp_host, smtp_port)
    elif peer == "laravel":
        env = laravel_env(setup)
    else:
        env = dict(PEER_ENV.get(peer, {}))
    env.update(extra_env or {})
    log = peer_log(setup, peer, concurrency, smtp, extra_env)
    argv = worker_argv(peer, setup, concurrency, smtp)
    result = db.Drain(0, 0.0, 0.0, None, None)
    try:
        if drain:
            client.flushall()
            enqueue(peer, setup, jobs)
            worker = db.StampedWorker(argv, env, log)
            try:
                result = db.measure(worker, jobs, client, setup.server.port, timeout=120, cap=cap)
            finally:
                worker.stop()
        if samples:
            client.flushall()
            pusher = [str(pusher_python(peer, setup)), "-m", "bench.peer_workers", "push", peer]
            pusher += ["--url", setup.server.url, "--size", str(PAYLOAD_BYTES)]
            worker = db.StampedWorker(argv, env, log)
            try:
                result.latencies_ms = db.idle_latency(worker, pusher, samples, timeout=30)
            finally:
                worker.stop()
    finally:
        client.close()
    return result


@dataclass
class Ceilings:
    """What :func:`ceilings` measured."""

    lpop_rate: float  # jobs/s, pipelined LPOP of the payloads, raw socket
    reserve_redis_us: dict[int, float]  # batch size -> Redis CPU us per job of our reserve
    reserve_rate: dict[int, float]  # batch size -> jobs/s of a synchronous reserve loop
    rtt_us: float


def ceilings(server: RedisServer, jobs: int, rtt: float) -> Ceilings:
    """Measured ceilings on this Redis: (1) pipelined LPOP of ``jobs`` payloads, 100 per write,
    from a raw socket; (2) our reserve script (``Queue.reserve(count=n, ack=previous)``, the
    worker's one round trip per reservation) at n = 1 and 10 from one synchronous redis-py loop:
    Redis's CPU per job and the loop's jobs/s."""
    from bench.peer_workers import payload

    client = server.client()
    items = [payload(i, PAYLOAD_BYTES).encode() for i in range(jobs)]
    key = f"queues:{db_queue()}"
    try:
        client.flushall()
        for i in range(0, jobs, 1000):
            client.rpush(key, *items[i : i + 1000])
        depth = 100
        request = f"LPOP {key}\r\n".encode() * depth
        # the reply bytes of each pipeline of ``depth`` LPOPs: "$<len>\r\n<payload>\r\n" each
        sizes = [len(f"${len(j)}\r\n") + len(j) + 2 for j in items]
        batches = jobs // depth
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            started = time.perf_counter()
            for i in range(batches):
                s.sendall(request)
                need = sum(sizes[i * depth : (i + 1) * depth])
                while need > 0:
                    chunk = s.recv(min(need, 1 << 20))
                    if not chunk:
                        raise RuntimeError("redis closed the connection")
                    need -= len(chunk)
            lpop = batches * depth / (time.perf_counter() - started)
        if client.llen(key) != jobs - batches * depth:
            raise RuntimeError("pipelined LPOP: the list did not shrink by the jobs popped")
        redis_us: dict[int, float] = {}
        rates: dict[int, float] = {}
        for batch in (1, 10):
            client.flushall()
            q = Queue(client, QueueKeys(db_queue()), retry_after=90)
            q.push_many(items)
            cpu0 = redis_cpu(client)
            started = time.perf_counter()
            done = 0
            acks: list[Ack] = []
            while True:
                taken = q.reserve(count=batch, ack=acks)
                if not taken:
                    break
                done += len(taken)
                acks = [Ack.of(j) for j in taken]
            rates[batch] = done / (time.perf_counter() - started)
            redis_us[batch] = (redis_cpu(client) - cpu0) / max(done, 1) * 1e6
        return Ceilings(lpop, redis_us, rates, rtt * 1e6)
    finally:
        client.close()


def redis_cpu(client: object) -> float:
    info = client.info("cpu")  # type: ignore[attr-defined]
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


@dataclass
class Rounds:
    """One worker's drains over the rounds, plus its idle pickup latencies."""

    drains: list[db.Drain]
    latencies_ms: list[float]

    def med(self, attr: str) -> float | None:
        vals = [v for v in (getattr(d, attr) for d in self.drains) if v is not None]
        return statistics.median(vals) if vals else None

    @property
    def rates(self) -> list[float]:
        return [d.rate for d in self.drains]

    @property
    def per_cpu(self) -> list[float]:
        return [1000 / d.cpu_per_1000 for d in self.drains if d.cpu_per_1000 > 0]

    def as_drain(self) -> db.Drain:
        """The medians as one Drain (what :func:`findings_for` and scenario 2 read)."""
        rate = statistics.median(self.rates)
        jobs = max(d.jobs for d in self.drains)
        return db.Drain(
            jobs=jobs,
            seconds=(jobs - 1) / rate,
            cpu_per_1000=self.med("cpu_per_1000") or 0.0,
            commands_per_job=self.med("commands_per_job"),
            trips_per_job=self.med("trips_per_job"),
            redis_cpu_per_1000=self.med("redis_cpu_per_1000"),
            latencies_ms=self.latencies_ms,
        )


def spread(values: list[float], digits: int = 0) -> str:
    """``median (min-max)`` of ``values``."""
    if not values:
        return "-"
    m = statistics.median(values)
    return f"{m:,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def run(ctx: Context) -> Result:
    global LAST_BEST
    jobs = 2_000 if ctx.quick else 15_000
    rounds = 2 if ctx.quick else 3
    samples = 10 if ctx.quick else 30
    cap = 5.0 if ctx.quick else 8.0
    logs = ctx.work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    load_before = load_after()
    server = RedisServer().start()
    order = [k for k, _, _ in PEERS if k != "ours"] + ["ours"]
    results: dict[str, Rounds] = {k: Rounds([], []) for k in order}
    errors: dict[str, str] = {}
    loads: list[list[str]] = []
    orders: list[list[str]] = []
    try:
        setup = Setup(server, ctx.peers_python, logs)
        rtt = db.ping_rtt(server.port)
        ctx.log(f"raw PING round trip {rtt * 1e6:.0f} us; {jobs} jobs per worker, {rounds} rounds")
        for r in range(rounds):
            loads.append(load_after())
            turn = order[r % len(order) :] + order[: r % len(order)]
            orders.append(turn)
            for key in turn:
                if key in errors:
                    continue
                try:
                    d = run_peer(key, setup, jobs, 0, cap=cap)
                except Exception as exc:  # a peer that fails is reported, the others still run
                    errors[key] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    ctx.log(f"{key}: FAILED {errors[key]}")
                    continue
                results[key].drains.append(d)
                ctx.log(
                    f"round {r + 1} {key}: {d.rate:,.0f} jobs/s, "
                    f"{1000 / d.cpu_per_1000 if d.cpu_per_1000 else 0:,.0f} jobs/CPU s, "
                    f"{d.trips_per_job or 0:.2f} trips/job"
                )
        loads.append(load_after())
        for key in order:
            if key in errors or not samples:
                continue
            try:
                lat = run_peer(key, setup, jobs, samples, drain=False).latencies_ms
                results[key].latencies_ms = lat
            except Exception as exc:
                ctx.log(f"{key}: idle latency FAILED {type(exc).__name__}: {exc}")
        ceil = ceilings(server, jobs, rtt)
        ctx.log(
            f"ceilings: pipelined LPOP {ceil.lpop_rate:,.0f}/s; reserve Redis CPU "
            f"{ceil.reserve_redis_us[1]:.1f} / {ceil.reserve_redis_us[10]:.1f} us/job (batch 1/10)"
        )
    finally:
        server.cleanup()
    ran = {k: v for k, v in results.items() if v.drains}
    drains = {k: v.as_drain() for k, v in ran.items()}
    ours = ran.get("ours")
    labels = {k: label for k, label, _ in PEERS}
    rows: list[list[object]] = []
    pairs: dict[str, list[float]] = {}
    for key, label, _ in PEERS:
        res = ran.get(key)
        if res is None:
            rows.append([label, "FAILED: " + errors.get(key, "?")] + [None] * 9)
            continue
        d = drains[key]
        paired = (
            [p.rate / o.rate for p, o in zip(res.drains, ours.drains, strict=False)]
            if ours and key != "ours"
            else []
        )
        if paired:
            pairs[key] = paired
        rows.append(
            [
                label,
                min(x.jobs for x in res.drains),
                spread(res.rates),
                spread(paired, 2) if paired else None,
                spread(res.per_cpu),
                d.cpu_per_1000 * 1000,
                d.redis_cpu_per_1000 * 1000 if d.redis_cpu_per_1000 is not None else None,
                d.trips_per_job,
                d.commands_per_job,
                d.latency(0.5),
                d.latency(0.99),
            ]
        )
    rows.append(["ceiling: Redis pops the same payloads, pipelined LPOP (100 per write)", None,
                 f"{ceil.lpop_rate:,.0f}", None, None, None, None, 0.01, 1.0, None,
                 None])  # fmt: skip
    for batch in (1, 10):
        rows.append(
            [f"ceiling: 1 / Redis CPU of our reserve script, {batch} job(s) per call", None,
             f"{1e6 / ceil.reserve_redis_us[batch]:,.0f}", None, None, None,
             ceil.reserve_redis_us[batch], None, None, None, None]
        )  # fmt: skip
        rows.append(
            [f"one synchronous redis-py loop of that script, {batch} job(s) per call", None,
             f"{ceil.reserve_rate[batch]:,.0f}", None, None, None, None, 1 / batch, None, None,
             None]
        )  # fmt: skip
    settings = "; ".join(f"{label}: {s}" for _, label, s in PEERS)
    table = Table(
        title=(
            f"One worker process draining {jobs:,} no-op {PAYLOAD_BYTES}-byte jobs, {rounds} "
            "interleaved rounds: median (min-max)"
        ),
        columns=[
            "worker",
            "jobs timed (least)",
            "jobs/s",
            "vs ours (same round)",
            "jobs / worker CPU s",
            "worker CPU us / job",
            "Redis CPU us / job",
            "round trips / job",
            "commands / job",
            "idle pickup p50 ms",
            "idle pickup p99 ms",
        ],
        rows=rows,  # type: ignore[arg-type]
        note=(
            "Every worker timed the same way: jobs/s between its first and its last job (process "
            "start-up and enqueueing not timed, for every worker alike; a worker still busy "
            f"{cap:g} s after its first job is timed over the jobs done by then: 'jobs timed'); "
            "worker CPU = user+system of the worker process and all its children (psutil), "
            "read when the benchmark saw the first job's stamp and again when it saw the last "
            "one, divided by the jobs stamped between those two reads (Redis CPU, commands and "
            "round trips likewise); jobs / worker CPU s = the rate one busy core "
            "would give the worker, the figure least disturbed by other load; Redis CPU = "
            "redis-server (INFO cpu); round trips = request segments Redis received (ss "
            "data_segs_in; a pipeline or MULTI batch is one); commands = INFO "
            "total_commands_processed (includes the commands inside Lua scripts); idle pickup "
            f"= {samples} single jobs pushed with the peer's API to the idle worker, once per "
            "worker after the rounds. 'vs ours' = the worker's jobs/s over ours in the same "
            "round. The order within a round rotates by one each round: "
            + " | ".join(", ".join(labels.get(k, k) for k in turn) for turn in orders)
            + ". Ceilings: measured on the same Redis after the rounds. Settings: "
            + settings
            + ". Sources: "
            + "; ".join(f"{labels.get(k, k)}: {v}" for k, v in SOURCES.items())
            + ". arq runs in its own venv (.venv-bench-arq: it pins redis-py < 6)."
        ),
    )
    load = (
        f" (load average before {' '.join(load_before)}; at each round "
        + ", ".join("/".join(x) for x in loads)
        + ")"
    )
    findings = findings_for(drains, rtt, load, ceil, pairs)
    peers_only = {
        k: v for k, v in drains.items() if k not in ("ours", "ours16", "laravel", "laravel-loop")
    }
    if peers_only:  # scenario 2 reuses the fastest peer that has an SMTP variant
        LAST_BEST = max(peers_only, key=lambda k: peers_only[k].rate)
    if errors:
        findings += [f"{k} failed: {v}" for k, v in errors.items()]
    plot = Plot(
        filename="worker-throughput.png",
        title=f"No-op jobs/s, one process ({jobs:,} jobs, median of {rounds} rounds)",
        ylabel="jobs/s",
        bars={labels[k]: d.rate for k, d in drains.items()},
    )
    raw = {
        "rtt_us": rtt * 1e6,
        "jobs": jobs,
        "rounds": rounds,
        "order": orders,
        "load_before": load_before,
        "load_at_rounds": loads,
        "settings": {k: s for k, _, s in PEERS},
        "sources": SOURCES,
        "env": PEER_ENV,
        "ceilings": {
            "lpop_pipelined_per_s": ceil.lpop_rate,
            "reserve_redis_cpu_us_per_job": ceil.reserve_redis_us,
            "reserve_sync_loop_per_s": ceil.reserve_rate,
        },
        "drains": {
            k: [
                {
                    "jobs": d.jobs,
                    "rate": d.rate,
                    "cpu_per_1000": d.cpu_per_1000,
                    "redis_cpu_per_1000": d.redis_cpu_per_1000,
                    "trips_per_job": d.trips_per_job,
                    "commands_per_job": d.commands_per_job,
                }
                for d in v.drains
            ]
            for k, v in ran.items()
        },
        "latencies_ms": {k: v.latencies_ms for k, v in ran.items()},
        "errors": errors,
        "best_peer": LAST_BEST,
    }
    return Result(tables=[table], plots=[plot], findings=findings, raw=raw)


def findings_for(
    drains: dict[str, db.Drain],
    rtt: float,
    load: str = "",
    ceil: Ceilings | None = None,
    paired: dict[str, list[float]] | None = None,
) -> list[str]:
    """Where we win or lose, from the measured figures (medians over the rounds: rate, round
    trips, CPU per job), the rate ratios paired by round (``paired``: peer / ours per round;
    without it the ratio of the medians) and the measured ceilings. A ratio whose range over the
    rounds includes 1 is called level."""
    ours = drains.get("ours")
    if ours is None:
        return ["our worker failed: no comparison"]
    out: list[str] = []
    our_redis = ours.redis_cpu_per_1000 or 0.0
    for key, label, _ in PEERS[2:]:
        d = drains.get(key)
        if d is None:
            continue
        rounds = (paired or {}).get(key) or [d.rate / ours.rate]
        ratio = statistics.median(rounds)
        lo, hi = min(rounds), max(rounds)
        span = f", {lo:.2f}-{hi:.2f} over the rounds" if len(rounds) > 1 else ""
        peer_redis = d.redis_cpu_per_1000 or 0.0
        why = (
            f"{d.trips_per_job:.2f} vs our {ours.trips_per_job:.2f} round trips/job, "
            f"worker CPU {d.cpu_per_1000 * 1000:.0f} vs our {ours.cpu_per_1000 * 1000:.0f} us/job, "
            f"Redis CPU {peer_redis * 1000:.0f} vs our {our_redis * 1000:.0f} us/job"
        )
        if lo <= 1 <= hi or 0.95 <= ratio <= 1.05:
            out.append(f"{label} is level with us ({ratio:.2f}x our rate{span}): {why}.")
        elif ratio > 1:
            out.append(f"{label} is {ratio:.2f}x our rate{span}: {why}.")
        else:
            out.append(f"We are {1 / ratio:.2f}x {label} ({ratio:.2f}x our rate{span}): {why}.")
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
    lat = {k: v for k, v in ((k, d.latency(0.5)) for k, d in drains.items()) if v is not None}
    if "ours" in lat:
        faster = [k for k, v in lat.items() if v < lat["ours"] * 0.9]
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
    our_cpu_rate = 1000 / ours.cpu_per_1000 if ours.cpu_per_1000 > 0 else float("nan")
    text = (
        f"Where our time goes: {ours.cpu_per_1000 * 1000:.0f} us of worker CPU per job (one busy "
        f"core: {our_cpu_rate:,.0f} jobs/s), {our_redis * 1000:.0f} us of Redis CPU, "
        f"{ours.trips_per_job or 0:.2f} round trips of {rtt * 1e6:.0f} us (raw PING); we ran at "
        f"{ours.rate:,.0f} jobs/s = {ours.rate / our_cpu_rate:.0%} of our own CPU ceiling"
    )
    if ceil is not None:
        redis_1 = 1e6 / ceil.reserve_redis_us[1]
        redis_10 = 1e6 / ceil.reserve_redis_us[10]
        text += (
            f". Ceilings measured on the same Redis: it pops the same payloads at "
            f"{ceil.lpop_rate:,.0f}/s pipelined; its CPU runs our reserve script at "
            f"{redis_1:,.0f} jobs/s (1 per call) or {redis_10:,.0f} jobs/s (10 per call; our "
            "worker reserves WORKER_RESERVE_BATCH jobs per call, 32 by default). The lowest "
            "ceiling is "
            + (
                "our worker's own CPU: a larger reserve batch would not lift it, cheaper "
                "per-job work in the worker would"
                if our_cpu_rate < redis_10
                else "Redis's CPU running the reserve script even at 10 jobs per call: the "
                "script's per-job work (decode, reservation member, acks) is what to cut"
            )
            + f"; the rest of the measured time ({1 - ours.rate / our_cpu_rate:.0%}) the worker "
            "was not running: waiting for Redis's replies and for a CPU on this shared machine"
        )
    out.append(text + f"{load}.")
    return out


SCENARIO = Scenario(
    key="worker",
    number=1,
    title="Worker throughput, one process, no-op 1.5 KB jobs (vs Laravel queue:work, RQ, arq, "
    "SAQ, Dramatiq, Celery)",
    run=run,
)
