"""Scenario 3: an urgent group arriving behind a big one.

A big group of 200,000 mails is being sent; 20 s later an urgent group of 3,000 is created
(``--quick``: 20,000 and 300, 6 s later). (Until 2026-12-04 the urgent group came 60 s later; our
workers now send ~3,300 mails/s with 2 processes on this machine, so the big group was drained
before the urgent one arrived. A round where less than a third of the big group is left when
the urgent group is created is named in the findings as not measuring isolation.)
Every job sends a real mail to the same SMTP sink (Postfix's ``smtp-sink`` when installed, else
the project's aiosmtpd sink) through one local redis-server; every side has 4 worker processes in
all. The sides:

* **ours** (per-group queues): each group has its own queue and its own worker processes, as the
  operator gives each SendGroup a Deployment: 2 ``sendgroup-worker work`` processes (4 sends in
  flight each) on the big group from the start, 2 on the urgent group started when it is created
  (their start-up is inside the measured time);
* **priority** (strict priority queue, the audit's peer): Laravel's own worker,
  ``php artisan queue:work redis --queue=urgent,default`` (Debian's Laravel 8.83, the example
  app ``examples/laravel-app`` run by ``bench/laravel/artisan``), 4 processes from the start. On
  every loop the worker pops ``urgent`` first and ``default`` only when ``urgent`` is empty
  (Illuminate\\Queue\\Worker::getNextJob), as Laravel's documentation describes ("Queues >
  Running the queue worker > Queue priorities"). The jobs are the example app's queued Mailable
  (``Mail::to($to)->queue(new OrderShipped($to))``, payloads made by Laravel's own producer,
  ``bench/laravel/Bench/MailPayloads.php``) on ``default`` (big) and ``urgent``; each is a real
  mail sent by Laravel's mailer (SwiftMailer) to the same sink. Settings: the redis connection's
  ``block_for`` null (Laravel's default and the example app's: with ``block_for`` set, each pop
  of the empty ``urgent`` queue would wait that long on its notify list before ``default`` is
  tried, RedisQueue::retrieveNextJob), ``--sleep=3 --tries=3`` (the documentation's Supervisor
  example), ``--quiet`` (no log line per job, as ours logs warnings only), the example app's
  SendGroup pause listener left out (a plain Laravel app has none). Laravel sends one mail at a
  time per process over a new SMTP connection each (Mailer::forceReconnection in 8.x);
* **priority, tuned**: the same with every setting scenario 2 found to speed Laravel's sending
  (its strongest Laravel row): the smtp mailer's ``stream`` option (a key of Laravel's mail
  config, passed to SwiftMailer's setStreamOptions) set to PHP's socket context option
  ``tcp_nodelay`` (SwiftMailer writes the end of DATA, ``\\r\\n.\\r\\n``, as its own small
  segment, which Nagle's algorithm holds until the sink's delayed ACK: ~40 ms per mail on Linux,
  seen with strace); SwiftMailer's pipelining off once the app booted (``BENCH_SWIFT_PIPELINING=0``
  in ``bench/laravel/artisan``: with it on, most mails stalled ~47 ms even with tcp_nodelay,
  scenario 2); and PHP's opcode cache for the CLI (``-d opcache.enable_cli=1``: the compiled
  Blade view is included again at every render). This is the strongest Laravel peer we could
  set up, so that the comparison is about the queue layout, not those stalls;
* **shared** (the classic setup): one FIFO queue for every group, our worker, 4 processes from the
  start; the urgent jobs are pushed behind the big backlog.

Rounds are interleaved (each round runs every side once, the order rotated by one each round;
``--quick``: 2 rounds, full: 3). Measured per side and round: seconds from the urgent group's
creation (just before its push) until its first, median and last mail was sent; the big group's
mails/s in the last 20 s (at most half the delay) before that moment and from it until the urgent
group's last mail; worker CPU (every worker process and its children, psutil) and redis-server
CPU (INFO) per mail over the side's whole run. Sent times: ours from the workers' idempotency
markers (``queues:<q>:sent``, score = sent time, written by the script that acknowledges the
mail); Laravel's from a JobProcessed listener (fired once the job ran and was deleted, the
counterpart of our acknowledgement) appending an 8-byte time per job to a file (one write(2),
no Redis command; ``bench/laravel/artisan``).

Environment overrides (for a shorter run, stated in the report): ``BENCH_ISOLATION_BIG``,
``BENCH_ISOLATION_URGENT``, ``BENCH_ISOLATION_DELAY`` (seconds), ``BENCH_ISOLATION_ROUNDS``.
"""

from __future__ import annotations

import bisect
import json
import os
import statistics
import struct
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench.drainbench import tree_cpu
from bench.harness import WORKER_BIN, SmtpSink, stop_process, worker_env
from bench.report import Context, Plot, Result, Scenario, Table
from bench.scenarios.worker import (
    LARAVEL_ARTISAN,
    Setup,
    laravel_env,
    laravel_mail_payloads,
    push_payload_file,
)
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.dumps import push
from tests.support.php import php_bin
from tests.support.redis_server import RedisServer
from tests.support.workers import mail_payload

TOTAL_WORKERS = 4
CONCURRENCY = 4
SIDES = ("ours", "priority", "priority-tuned", "shared")
LABELS = {
    "ours": "ours: per-group queues (2 + 2 processes)",
    "priority": "Laravel queue:work --queue=urgent,default (4 processes)",
    "priority-tuned": (
        "Laravel queue:work --queue=urgent,default, tuned: tcp_nodelay, SwiftMailer pipelining "
        "off, opcache.enable_cli=1 (4 processes)"
    ),
    "shared": f"shared FIFO queue, our worker ({TOTAL_WORKERS} processes)",
}
#: Laravel's queue names for the priority peer: --queue=urgent,default
LARAVEL_URGENT, LARAVEL_BIG = "urgent", "default"
LARAVEL_ARGV = [
    "queue:work",
    "redis",
    f"--queue={LARAVEL_URGENT},{LARAVEL_BIG}",
    "--sleep=3",
    "--tries=3",
    "--quiet",
]
LARAVEL_SOURCE = (
    "https://laravel.com/docs/8.x/queues#queue-priorities (a worker given --queue=high,low "
    "takes low only when high is empty); --sleep=3 --tries=3 from "
    "https://laravel.com/docs/8.x/queues#supervisor-configuration; block_for null: Laravel's "
    "default config/queue.php and the example app's (https://laravel.com/docs/8.x/queues#blocking "
    "describes block_for for one queue; with two, each pop of the empty urgent queue would "
    "block); tcp_nodelay: the smtp mailer's `stream` key (Illuminate\\Mail\\MailManager::"
    "createSmtpTransport -> SwiftMailer setStreamOptions) with PHP's socket context option "
    "tcp_nodelay (https://www.php.net/manual/en/context.socket.php); pipelining off: "
    "setPipelining(false) on the default mailer's SwiftMailer transport once the app booted "
    "(BENCH_SWIFT_PIPELINING=0 in bench/laravel/artisan; Laravel has no setting for it); "
    "opcache.enable_cli=1: https://www.php.net/manual/en/opcache.configuration.php (Debian's "
    "php.ini leaves it off); the tuned side's three settings are scenario 2's strongest "
    "Laravel row"
)


def _payloads(domain: str, n: int) -> tuple[list[str], list[bytes]]:
    ids = [str(uuid.uuid4()) for _ in range(n)]
    return ids, [
        mail_payload(f"user{i}@{domain}", uuid=u, subject=f"{domain} {i}")
        for i, u in enumerate(ids)
    ]


def _push(c: redis.Redis[bytes], queue: str, items: list[bytes]) -> None:
    keys = QueueKeys(queue)
    for start in range(0, len(items), 5_000):
        push(c, keys, items[start : start + 5_000])


def _stamps(path: Path) -> list[float]:
    """The 8-byte times Laravel's workers appended to ``path`` (a partial last one dropped)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    n = len(data) // 8
    return list(struct.unpack(f"={n}d", data[: n * 8]))


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a live process, its reaped children and its live descendants
    (:func:`bench.drainbench.tree_cpu`); 0 once the process is gone."""
    import psutil

    try:
        return tree_cpu(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return 0.0


def _redis_cpu(c: redis.Redis[bytes]) -> float:
    info = c.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def laravel_payloads(ctx: Context, setup: Setup, big: int, urgent: int) -> dict[str, Path]:
    """Files of Laravel payload lines (one per job) for the big and the urgent group, made once
    per run by Laravel's own producer (bench:mail-payloads) and pushed in every round."""
    groups = ((LARAVEL_BIG, "big.example", big), (LARAVEL_URGENT, "urgent.example", urgent))
    return {
        queue: laravel_mail_payloads(
            setup, queue, n, domain, ctx.work_dir / f"laravel-{queue}.jsonl"
        )
        for queue, domain, n in groups
    }


def _side(
    ctx: Context,
    server: RedisServer,
    sink: SmtpSink,
    side: str,
    sizes: tuple[int, int, float, float],
    round_no: int,
    laravel_files: dict[str, Path],
) -> dict[str, Any]:
    """One run of ``side``. Returns the urgent mails' offsets from the urgent group's creation
    (s, sorted), the big group's rates and the CPU per mail."""
    big, urgent, delay, deadline = sizes
    c = server.client()
    c.flushdb()
    laravel = side.startswith("priority")
    tuned = side == "priority-tuned"
    if side == "ours":
        big_q, urgent_q = "group-big", "group-urgent"
    elif side == "shared":
        big_q = urgent_q = "mail"
    else:
        big_q, urgent_q = LARAVEL_BIG, LARAVEL_URGENT
    urgent_ids: list[str] = []
    urgent_items: list[bytes] = []
    if laravel:
        push_payload_file(c, big_q, laravel_files[LARAVEL_BIG])
    else:
        _, big_items = _payloads("big.example", big)
        urgent_ids, urgent_items = _payloads("urgent.example", urgent)
        _push(c, big_q, big_items)
        del big_items
    first = TOTAL_WORKERS // 2 if side == "ours" else TOTAL_WORKERS
    workers: list[subprocess.Popen[bytes]] = []
    log = (ctx.work_dir / f"isolation-{side}-{round_no}.log").open("wb")
    sent_dir = ctx.work_dir / f"sent-{side}-{round_no}"
    sent_dir.mkdir()
    setup = Setup(server, ctx.peers_python, ctx.work_dir)

    def spawn(queue: str, n: int) -> None:
        if laravel:
            env = {**os.environ, **laravel_env(setup)}
            for k in [k for k in env if k.startswith(("MAIL_", "REDIS_URL"))]:
                del env[k]
            env.update(
                BENCH_BLOCK_FOR="null",
                BENCH_PLAIN_LARAVEL="1",
                BENCH_SENT_DIR=str(sent_dir),
                BENCH_MAIL_TCP_NODELAY="1" if tuned else "0",
                BENCH_SWIFT_PIPELINING="0" if tuned else "1",
                MAIL_MAILER="smtp",
                MAIL_HOST="127.0.0.1",
                MAIL_PORT=str(sink.port),
            )
            ini = ["-d", "opcache.enable_cli=1"] if tuned else []
            argv = [php_bin(), *ini, str(LARAVEL_ARTISAN), *LARAVEL_ARGV]
        else:
            env = worker_env(server.url, queue, sink.port, concurrency=CONCURRENCY)
            argv = [str(WORKER_BIN), "work"]
        for _ in range(n):
            workers.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))

    seen: list[float] = []
    pending = list(urgent_ids)

    def urgent_done() -> list[float]:
        """The urgent mails' sent times so far (ours: only the ids not seen yet are asked)."""
        nonlocal pending
        if laravel:
            return _stamps(sent_dir / f"sent-{LARAVEL_URGENT}.bin")
        key = QueueKeys(urgent_q).sent
        still: list[str] = []
        for start in range(0, len(pending), 5_000):
            chunk = pending[start : start + 5_000]
            for job_id, score in zip(chunk, c.zmscore(key, chunk), strict=True):
                if score is None:
                    still.append(job_id)
                else:
                    seen.append(score)
        pending = still
        return list(seen)

    result: dict[str, Any] = {"side": side, "round": round_no}
    cpu = 0.0
    try:
        redis_cpu_start = _redis_cpu(c)
        started = time.time()
        spawn(big_q, first)
        ctx.log(f"round {round_no} {side}: {big:,} big-group jobs, {first} processes")
        time.sleep(max(0.0, started + delay - time.time()))
        created = time.time()
        load_at_creation = round(os.getloadavg()[0], 2)
        if laravel:
            push_payload_file(c, urgent_q, laravel_files[LARAVEL_URGENT])
        else:
            _push(c, urgent_q, urgent_items)
        if side == "ours":
            spawn(urgent_q, TOTAL_WORKERS - first)
        done: list[float] = []
        give_up = created + deadline
        while time.time() < give_up:
            done = urgent_done()
            if len(done) >= urgent:
                break
            if any(w.poll() is not None for w in workers):
                raise RuntimeError(f"a worker exited early; see {log.name}")
            time.sleep(0.25)
        finished = time.time()
        cpu = sum(_tree_cpu(w.pid) for w in workers)
        redis_cpu = _redis_cpu(c) - redis_cpu_start
        done = sorted(urgent_done())
        # the big group's sent times, as a count over [a, b]
        if laravel:
            big_times = sorted(_stamps(sent_dir / f"sent-{LARAVEL_BIG}.bin"))

            def big_count(a: float, b: float) -> int:
                return bisect.bisect_right(big_times, b) - bisect.bisect_left(big_times, a)
        else:
            sent_key = QueueKeys(big_q).sent

            def big_count(a: float, b: float) -> int:
                n = int(c.zcount(sent_key, a, b))
                if side == "shared":  # the same sent set holds the urgent mails
                    n -= bisect.bisect_right(done, b) - bisect.bisect_left(done, a)
                return n

        complete = len(done) >= urgent
        end = done[-1] if complete else finished
        window = min(delay / 2, 20.0)
        big_before = big_count(0, created)
        big_total = big_count(0, finished)
        mails = big_total + len(done)
        result.update(
            workers_big=first,
            offsets=[round(t - created, 4) for t in done],
            complete=complete,
            seconds_observed=round(finished - created, 3),
            load_average_1m_at_creation=load_at_creation,
            big_sent_before_urgent=big_before,
            big_backlog_at_creation=big - big_before,
            big_rate_before=big_count(created - window, created) / window,
            big_rate_during=big_count(created, end) / max(1e-9, end - created),
            big_sent_during=big_count(created, end),
            mails_total=mails,
            worker_cpu_ms_per_mail=1000 * cpu / max(1, mails),
            redis_cpu_ms_per_mail=1000 * redis_cpu / max(1, mails),
            mails_per_s=mails / max(1e-9, finished - started),
        )
        ctx.log(
            f"round {round_no} {side}: urgent {len(done):,}/{urgent:,} done, last "
            f"{result['offsets'][-1] if done else float('nan'):.2f} s after creation; big group "
            f"{result['big_rate_before']:,.0f} mails/s before, "
            f"{result['big_rate_during']:,.0f} during"
        )
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            stop_process(w)
        log.close()
    return result


def _curve(offsets: list[float]) -> list[tuple[float, float]]:
    """(seconds, jobs done) points, about 40, starting at (0, 0) and flat until the first."""
    points = [(0.0, 0.0)]
    if offsets:
        points.append((round(offsets[0], 3), 0.0))
    step = max(1, len(offsets) // 40)
    for i in range(0, len(offsets), step):
        points.append((round(offsets[i], 3), float(i + 1)))
    if offsets:
        points.append((round(offsets[-1], 3), float(len(offsets))))
    return points


def _mr(values: list[float], digits: int = 2) -> str:
    """``median (min-max)`` of ``values``."""
    if not values:
        return "-"
    med = statistics.median(values)
    fmt: Callable[[float], str] = (
        (lambda v: f"{v:,.0f}") if digits == 0 else (lambda v: f"{v:.{digits}f}")
    )
    if len(values) == 1:
        return fmt(med)
    return f"{fmt(med)} ({fmt(min(values))}-{fmt(max(values))})"


def _sizes(quick: bool) -> tuple[int, int, float, int]:
    big, urgent, delay, rounds = (20_000, 300, 6.0, 2) if quick else (200_000, 3_000, 20.0, 3)
    big = int(os.environ.get("BENCH_ISOLATION_BIG", big))
    urgent = int(os.environ.get("BENCH_ISOLATION_URGENT", urgent))
    delay = float(os.environ.get("BENCH_ISOLATION_DELAY", delay))
    rounds = int(os.environ.get("BENCH_ISOLATION_ROUNDS", rounds))
    return big, urgent, delay, rounds


def run(ctx: Context) -> Result:
    big, urgent, delay, rounds = _sizes(ctx.quick)
    deadline = 240.0 if ctx.quick else 420.0
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
    with RedisServer() as server, SmtpSink(ctx.work_dir) as sink:
        ctx.log(f"SMTP sink: {sink.kind} on port {sink.port}")
        t0 = time.monotonic()
        files = laravel_payloads(ctx, Setup(server, ctx.peers_python, ctx.work_dir), big, urgent)
        ctx.log(f"Laravel payloads made in {time.monotonic() - t0:.1f} s")
        for r in range(rounds):
            order = SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]
            for side in order:
                runs[side].append(
                    _side(ctx, server, sink, side, (big, urgent, delay, deadline), r + 1, files)
                )
        sink_kind = sink.kind
    with files[LARAVEL_BIG].open("rb") as f:
        payload_bytes = {
            "ours": len(_payloads("big.example", 1)[1][0]),
            "laravel": len(f.readline().rstrip(b"\n")),
        }

    def offs(side: str, q: float) -> list[float]:
        """The q-quantile urgent offset of each round of ``side`` that got that far."""
        out = []
        for s in runs[side]:
            o = s["offsets"]
            k = int(q * (urgent - 1))
            if k < len(o):
                out.append(o[k])
        return out

    def lasts(side: str) -> list[float]:
        return [s["offsets"][-1] for s in runs[side] if s["complete"]]

    def field(side: str, key: str) -> list[float]:
        return [float(s[key]) for s in runs[side]]

    rows: list[list[Any]] = []
    for side in SIDES:
        incomplete = [s for s in runs[side] if not s["complete"]]
        last = _mr(lasts(side))
        if incomplete:
            last += f"; {len(incomplete)} round(s) not done after {deadline:.0f} s"
        rows.append(
            [
                LABELS[side],
                _mr(offs(side, 0.0)),
                _mr(offs(side, 0.5)),
                last,
                _mr(field(side, "big_backlog_at_creation"), 0),
                _mr(field(side, "big_rate_before"), 0),
                _mr(field(side, "big_rate_during"), 0),
                _mr(field(side, "worker_cpu_ms_per_mail")),
                _mr(field(side, "redis_cpu_ms_per_mail"), 3),
            ]
        )
    table = Table(
        title=(
            f"Isolation: urgent group of {urgent:,} created {delay:g} s after a group of "
            f"{big:,}; seconds from its creation, {rounds} interleaved rounds, median (range)"
        ),
        columns=[
            "side",
            "first urgent mail s",
            "median urgent mail s",
            "last urgent mail s",
            "big-group backlog at creation",
            "big group mails/s before",
            "big group mails/s until the urgent group is done",
            "worker CPU ms/mail",
            "Redis CPU ms/mail",
        ],
        rows=rows,
        note=(
            f"Every job a real mail to {sink_kind} on loopback; {TOTAL_WORKERS} worker "
            f"processes on every side. Ours: sendgroup-worker work, concurrency {CONCURRENCY} "
            "(4 sends in flight per process), the urgent group's 2 processes started at its "
            "creation (included; in a cluster add the pod start, scenario 7). Laravel: "
            f"php artisan {' '.join(LARAVEL_ARGV)} (Laravel 8.83, PHP "
            f"{_php_version()}), one mail per process at a time on a new SMTP connection each; "
            f"settings and sources: {LARAVEL_SOURCE}. Payload bytes per job: ours "
            f"{payload_bytes['ours']:,}, Laravel {payload_bytes['laravel']:,} (a serialized "
            "Mailable). 'Before': the big group's rate in the "
            f"{min(delay / 2, 20.0):g} s before the urgent group's creation; 'until done': from "
            "its creation to its last mail. CPU per mail: all the side's mails over its whole "
            "run (worker start-up included)."
        ),
    )
    per_round = Table(
        title="Isolation, every round (in the order run)",
        columns=[
            "round",
            "side",
            "first s",
            "median s",
            "last s",
            "backlog at creation",
            "big mails/s before",
            "big mails/s until done",
            "worker CPU ms/mail",
            "load 1m at creation",
        ],
        rows=[
            [
                s["round"],
                side,
                s["offsets"][0] if s["offsets"] else None,
                s["offsets"][len(s["offsets"]) // 2] if s["complete"] else None,
                s["offsets"][-1] if s["complete"] else f"> {s['seconds_observed']:.0f}",
                s["big_backlog_at_creation"],
                round(s["big_rate_before"]),
                round(s["big_rate_during"]),
                round(s["worker_cpu_ms_per_mail"], 2),
                s["load_average_1m_at_creation"],
            ]
            for r in range(rounds)
            for side in SIDES
            for s in runs[side]
            if s["round"] == r + 1
        ],
    )

    def median_run(side: str) -> dict[str, Any]:
        """The round whose last urgent mail is the median (an unfinished round ranks last)."""
        ranked = sorted(
            runs[side], key=lambda s: s["offsets"][-1] if s["complete"] else float("inf")
        )
        return ranked[len(ranked) // 2]

    plot = Plot(
        filename="isolation_urgent.png",
        title=f"Urgent group ({urgent:,} mails) completed after its creation (median round)",
        ylabel="urgent mails sent",
        xlabel="seconds since the urgent group was created",
        kind="line",
        series={LABELS[side]: _curve(median_run(side)["offsets"]) for side in SIDES},
    )
    findings = _findings(runs, urgent, rounds, big)
    rounds_file = ctx.artifact("isolation-rounds.json")
    rounds_file.write_text(json.dumps(runs, indent=1) + "\n")
    raw = {
        "bigJobs": big,
        "urgentJobs": urgent,
        "urgentDelaySeconds": delay,
        "rounds": rounds,
        "smtpSink": sink_kind,
        "laravelCommand": ["php", "artisan", *LARAVEL_ARGV],
        "payloadBytes": payload_bytes,
        "runs": {
            side: [{k: v for k, v in s.items() if k != "offsets"} for s in runs[side]]
            for side in SIDES
        },
        "urgentOffsetsFile": rounds_file.name,
    }
    return Result(tables=[table, per_round], plots=[plot], findings=findings, raw=raw)


def _php_version() -> str:
    try:
        out = subprocess.run(
            [php_bin(), "-r", "echo PHP_VERSION;"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError, AssertionError):
        return "?"
    return out.strip()


def _paired(
    runs: dict[str, list[dict[str, Any]]],
    num: str,
    den: str,
    key: Callable[[dict[str, Any]], float],
) -> list[float]:
    """Per round, key(num's run) / key(den's run), for rounds where both are complete."""
    out = []
    for a in runs[num]:
        for b in runs[den]:
            if a["round"] == b["round"] and a["complete"] and b["complete"]:
                out.append(key(a) / max(1e-9, key(b)))
    return out


def _findings(
    runs: dict[str, list[dict[str, Any]]], urgent: int, rounds: int, big: int
) -> list[str]:
    def last(s: dict[str, Any]) -> float:
        return float(s["offsets"][-1])

    def first(s: dict[str, Any]) -> float:
        return float(s["offsets"][0])

    def med(side: str, key: str) -> float:
        return statistics.median(float(s[key]) for s in runs[side])

    def med_last(side: str) -> float | None:
        vals = [last(s) for s in runs[side] if s["complete"]]
        return statistics.median(vals) if vals else None

    out: list[str] = []
    for side in SIDES:
        thin = [s["round"] for s in runs[side] if s.get("big_backlog_at_creation", big) < big / 3]
        if thin:
            out.append(
                f"NOT A MEASURE OF ISOLATION for {LABELS[side]} in round(s) "
                f"{', '.join(map(str, thin))}: less than a third of the big group "
                f"({big:,}) was left when the urgent group was created; raise "
                "BENCH_ISOLATION_BIG or lower BENCH_ISOLATION_DELAY."
            )
    ours = med_last("ours")
    for peer in ("priority-tuned", "priority"):
        theirs = med_last(peer)
        ratio = _paired(runs, peer, "ours", last)
        if ours is None or theirs is None or not ratio:
            out.append(f"{LABELS[peer]}: the urgent group did not finish in some rounds.")
            continue
        r = statistics.median(ratio)
        verdict = (
            f"**we win** on time-to-urgent: ours finishes {r:.2f}x ({min(ratio):.2f}-"
            f"{max(ratio):.2f}) sooner"
            if r > 1.05
            else (
                f"**we lose** on time-to-urgent: it finishes {1 / r:.2f}x ({1 / max(ratio):.2f}-"
                f"{1 / min(ratio):.2f}) sooner than ours"
                if r < 0.95
                else f"level on time-to-urgent ({r:.2f}x, {min(ratio):.2f}-{max(ratio):.2f})"
            )
        )
        rate_u = urgent / max(1e-9, theirs - statistics.median(first(s) for s in runs[peer]))
        out.append(
            f"{LABELS[peer]}: the urgent group's last mail {theirs:.2f} s after its creation "
            f"vs ours {ours:.2f} s (medians of {rounds} rounds): {verdict}. Its first urgent "
            f"mail comes after {statistics.median(first(s) for s in runs[peer]):.3f} s (ours "
            f"{statistics.median(first(s) for s in runs['ours']):.2f} s: ours starts the "
            "group's processes then); after that its time is the urgent group's size over "
            f"Laravel's sending rate with all {TOTAL_WORKERS} processes on it (~{rate_u:,.0f} "
            "mails/s here). Meanwhile it sends "
            f"{med(peer, 'big_rate_during'):,.0f} big-group mails/s (before: "
            f"{med(peer, 'big_rate_before'):,.0f}): a strict priority queue starves the lower "
            "queue while the upper one has work."
        )
    spread = [last(s) - first(s) for s in runs["shared"] if s["complete"]]
    if spread and ours is not None:
        sp = statistics.median(spread)
        out.append(
            "Not measured as a side, derived from the shared side: our worker with all "
            f"{TOTAL_WORKERS} processes on the urgent group sent its {urgent:,} mails in "
            f"{sp:.2f} s ({min(spread):.2f}-{max(spread):.2f}: first to last urgent mail on the "
            "shared queue, where every process works on it). A strict priority queue with our "
            "worker's sending (the audit's peer, not built: the worker reads one queue) would "
            "finish in about that time plus one job's latency, "
            f"{'before' if sp < ours else 'after'} ours ({ours:.2f} s): what decides "
            "scenario 3 against Laravel's own priority worker is the sending rate per "
            "process, not the queue layout."
        )
    sh = med_last("shared")
    if sh is not None and ours is not None:
        ratio = _paired(runs, "shared", "ours", last)
        out.append(
            f"Shared FIFO queue (our worker, {TOTAL_WORKERS} processes): the urgent group's last "
            f"mail after {sh:.1f} s vs ours {ours:.2f} s ({statistics.median(ratio):.1f}x, "
            f"{min(ratio):.1f}-{max(ratio):.1f}): it waits behind the "
            f"{med('shared', 'big_backlog_at_creation'):,.0f} big-group jobs queued ahead of it "
            "(FIFO); that wait grows with every big group in front of it."
        )
    out.append(
        "The big group while the urgent one runs (median mails/s before -> until the urgent "
        "group is done): "
        + "; ".join(
            f"{side} {med(side, 'big_rate_before'):,.0f} -> {med(side, 'big_rate_during'):,.0f}"
            for side in SIDES
        )
        + ". Ours keeps the big group's own 2 processes sending while the urgent group's 2 "
        "share the machine's cores; the priority worker stops the big group until the urgent "
        "queue is empty; the shared queue reaches the urgent jobs only after the backlog."
    )
    out.append(
        "Trade-off: the priority peer needs the urgency known in advance (a queue name chosen "
        "in the producer's code and listed in every worker's --queue, in order: a code change "
        "and a restart of every worker per new level), and it only orders two classes: two "
        "urgent groups share one queue FIFO, and a big 'urgent' group starves everything below "
        "it. Ours is per group and created at run time (a SendGroup, its own queue and workers), "
        "isolated both ways, at the cost of starting the group's processes when it arrives (the "
        "first-mail gap above) and of the big group keeping only its own processes."
    )
    return out


SCENARIO = Scenario(
    key="isolation",
    number=3,
    title="Isolation: an urgent group behind a big one",
    run=run,
)
