"""Scenario 2: one process sending every job as a real mail to Postfix's ``smtp-sink``.

Ours (concurrency 1, 4, 16 and the default, ``auto``; its SMTP pool reuses one connection per lane
and pipelines, RFC 2920, when the relay offers PIPELINING as smtp-sink does; concurrency 4 once
more with ``SMTP_PIPELINING=off``, to show what pipelining alone is worth) beside plain loops with
no queue (smtplib with a new connection per mail, smtplib reusing one connection, aiosmtplib
reusing one connection) and every peer of scenario 1 that can send (arq, SAQ, Dramatiq, Celery),
each twice: at its scenario 1 settings and at the setting its own documentation gives for
network-bound work (:data:`IO_ROWS`: Dramatiq and Celery on gevent, arq and SAQ with more jobs
at a time; where the documentation names no number, the best of a sweep on the +1 ms link),
running the loops' send code (smtplib per thread, or per greenlet under gevent, for sync peers;
a pool of aiosmtplib connections for async ones). The findings compare our default with each
peer's best row per link. Every sender builds its messages
with the same function, our worker's (``bench.peer_workers.message``), except Laravel's.

Laravel's own worker (``php artisan queue:work``, Debian's Laravel 8.83 and SwiftMailer 6.3,
the example app ``examples/laravel-app`` run by ``bench/laravel/artisan`` as a plain Laravel
app) drains queued Mailables (the example app's ``OrderShipped``, payloads made by Laravel's own
producer, ``Mail::to($to)->queue(...)``), each a real mail built by Laravel's Mailable and
SwiftMailer and sent by SwiftMailer to the same sink; one job at a time per process, as Laravel
runs. Four ways: as shipped; with the smtp mailer's ``stream`` option set to PHP's socket
option ``tcp_nodelay`` (scenario 3 found SwiftMailer's end of DATA held ~40 ms by Nagle's
algorithm without it); also with SwiftMailer's pipelining off (with it, most mails still
stalled ~47 ms on loopback); and also with PHP's CLI opcode cache on (the strongest Laravel we
could set up). It writes its stamp after each processed job (JobProcessed, once the job ran
and was deleted). What building one message costs Laravel (Mailable + SwiftMailer,
``bench:mail-build``) and our builder is measured after the rounds, without queue or network.

First on loopback, then across a network-namespace link with about 1 ms of added round-trip
time (``bench.smtplink`` says how it was added and the RTT measured). Rounds interleaved
(every sender once per link, then the next round), in an order that changes each round
(:func:`round_order`: forward, then reversed, each rotated by the round's number), so no sender
always runs right after the same one; the table gives the median and the range over the
rounds, and the ratios are taken within each round, then their median and range.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from bench import drainbench as db
from bench import smtplink
from bench.report import Context, Plot, Result, Scenario, Table
from bench.scenarios import worker as w
from sendgroup_worker.lanes import START_LANES
from tests.support.php import php_bin
from tests.support.redis_server import RedisServer

#: scenario 1's peers that can send mail in ``bench.peer_workers`` (RQ left out: an order of
#: magnitude slower than the others in every scenario 1 run)
PEERS = ["arq", "saq", "dramatiq", "celery"]


class IoRow(NamedTuple):
    """A peer's row at the setting for network-bound work: its key, the worker
    (``bench.peer_workers``' peer name), label, concurrency, SMTP connection, extra
    environment, the setting in words and where it comes from."""

    key: str
    worker: str
    label: str
    concurrency: int
    conn: str
    extra: dict[str, str]
    setting: str
    source: str


#: the delay relay's limit that rules out the documentation's 1,000 green threads on the link
RELAY_LIMIT = (
    "N greenlets open N SMTP connections, and the delay relay (bench/delay_relay.py, "
    "select(): file descriptors below 1,024, two per relayed connection) failed at 1,024 in a "
    "sweep, so the sweep stopped at 250"
)
#: a sweep on the +1 ms link (2026-12-04 14:00 UTC, 2 rounds of 1,000 mails, median mails/s)
SWEEP = "sweep on the +1 ms link, 1,000 mails, 2 rounds, median mails/s"
#: each peer's row at the setting its documentation gives for network-bound (I/O) work
IO_ROWS: dict[str, IoRow] = {
    "arq": IoRow(
        "arq-io",
        "arq",
        "arq, I/O setting",
        250,
        "reused (aiosmtplib pool)",
        {},
        "max_jobs=250, poll_delay=0.05 s, keep_result=0",
        "arq's Worker docstring (https://github.com/python-arq/arq/blob/main/arq/worker.py): "
        "'max_jobs: maximum number of jobs to run at a time' (default 10); no value is advised "
        f"for I/O-bound jobs: 250, the best of a {SWEEP}: max_jobs 10 / 100 / 250: 546 / 828 / "
        "860",
    ),
    "saq": IoRow(
        "saq-io",
        "saq",
        "SAQ, I/O setting",
        250,
        "reused (aiosmtplib pool)",
        {},
        "concurrency=250",
        "SAQ's Worker docstring (https://github.com/tobymao/saq/blob/master/saq/worker.py): "
        "'concurrency: number of jobs to process concurrently' (default 10); its documentation "
        "advises no value (https://github.com/tobymao/saq/blob/master/docs/worker.md: 'TODO: "
        "Discuss running workers'; its own benchmark, benchmarks/simple.py, runs the sleep job "
        f"at concurrency=10): 250, the best of a {SWEEP}: 10 / 50 / 250: 537 / 679 / 762",
    ),
    "dramatiq": IoRow(
        "dramatiq-gevent",
        "dramatiq-gevent",
        "Dramatiq (Redis), gevent, I/O setting",
        64,
        "reused (smtplib per greenlet)",
        {"dramatiq_queue_prefetch": "1000"},
        "gevent: the standard library monkey-patched before anything else, as Dramatiq's "
        "dramatiq-gevent command does (bench/peer_gevent.py), worker_threads=64 (greenlets), "
        "dramatiq_queue_prefetch=1000 as in scenario 1",
        "Dramatiq's command-line help (dramatiq --help, "
        "https://github.com/Bogdanp/dramatiq/blob/master/dramatiq/cli.py): 'Run dramatiq with "
        "gevent.  Make sure you `pip install gevent` first. $ dramatiq-gevent --processes 1 "
        "--threads 1024 some_module'; the dramatiq[gevent] extra; "
        f"{RELAY_LIMIT}: greenlets 16 / 64 / 250: 1,665 / 1,806 / 1,585 (threads without "
        "gevent 8 / 32 / 128: 947 / 1,102 / 1,151)",
    ),
    "celery": IoRow(
        "celery-gevent",
        "celery-gevent",
        "Celery (Redis), gevent pool, I/O setting",
        16,
        "reused (smtplib per greenlet)",
        {},
        "--pool=gevent --concurrency=16 (the standard library monkey-patched first, as "
        "celery worker -P gevent does: bench/peer_gevent.py), worker_prefetch_multiplier=128, "
        "no heartbeat/mingle/gossip",
        "https://docs.celeryq.dev/en/stable/userguide/concurrency/gevent.html ('You can enable "
        "the gevent pool by using the celery worker -P gevent or celery worker --pool=gevent "
        "worker option. $ celery -A proj worker -P gevent -c 1000'; 'gevent is inspired by "
        "eventlet but features a more consistent API, simpler implementation and better "
        "performance') and https://docs.celeryq.dev/en/stable/userguide/concurrency/"
        "eventlet.html ('With Eventlet you can efficiently spawn hundreds, or thousands of "
        f"green threads'); {RELAY_LIMIT}: -c 16 / 64 / 250: 409 / 363 / 391 (flat: the worker "
        "spends 2-3 CPU ms per mail)",
    ),
}

#: Laravel's worker: the command after ``php bench/laravel/artisan`` (one process, one job at a
#: time); the redis connection's block_for is 5 s (``bench.scenarios.worker.laravel_env``)
LARAVEL_ARGV = [
    "queue:work",
    "redis",
    f"--queue={w.db_queue()}",
    "--sleep=3",
    "--tries=3",
    "--quiet",
]
#: each setting of the Laravel peer and where it comes from
LARAVEL_SETTINGS = (
    "php artisan " + " ".join(LARAVEL_ARGV) + ": --sleep=3 --tries=3 as in "
    "https://laravel.com/docs/8.x/queues#supervisor-configuration (--sleep only applies when no "
    "job is waiting; --max-time=3600 of that example is left out: it ends a worker after an "
    "hour, never within a drain); --quiet: no output line per job (ours logs warnings only); "
    "redis connection block_for=5 ('block_for' => 5, "
    "https://laravel.com/docs/8.x/queues#blocking); one job at a time per process: Laravel "
    "scales with more processes (numprocs=8 in the Supervisor example), not per process; a "
    "plain Laravel app (the example app's SendGroup pause listener left out, "
    "BENCH_PLAIN_LARAVEL=1); the smtp mailer as the example app sets it (MAIL_HOST/MAIL_PORT, "
    "timeout 30); 'tcp_nodelay' rows: its `stream` key (Illuminate\\Mail\\MailManager::"
    "createSmtpTransport passes it to SwiftMailer's setStreamOptions; not in Laravel's "
    "documentation) set to ['socket' => ['tcp_nodelay' => true]], PHP's socket context option "
    "(https://www.php.net/manual/en/context.socket.php). Laravel 8's Mailer stops the transport "
    "after every mail (Mailer::sendSwiftMessage -> forceReconnection): a new SMTP connection per "
    "mail, with no setting to keep it; SwiftMailer pipelines MAIL/RCPT/DATA when the server "
    "offers PIPELINING (auto-detected, EsmtpTransport), each command in its own write; "
    "'pipelining off' rows: setPipelining(false) on the default mailer's SwiftMailer transport "
    "once the app booted (BENCH_SWIFT_PIPELINING=0 in bench/laravel/artisan; what an app's "
    "service provider could do, Laravel has no setting for it): with pipelining on, most mails "
    "stalled ~47 ms on loopback even with tcp_nodelay, off they did not (a probe before this "
    "run: 29-34 vs 287 mails/s); 'opcache.enable_cli=1' row: PHP's opcode cache for the CLI "
    "(https://www.php.net/manual/en/opcache.configuration.php; Debian's php.ini leaves it off, "
    "Laravel's documentation does not mention it): the compiled Blade view is included again "
    "at every render and compiled anew without it. The last row is the strongest Laravel we "
    "could set up"
)
LARAVEL_CONN = "new per mail (Laravel 8), SwiftMailer pipelined"
#: a Laravel row's extra-environment key that runs PHP with ``-d opcache.enable_cli=1``
OPCACHE = "BENCH_PHP_OPCACHE_CLI"

#: (key, worker, label, concurrency, SMTP connection, extra environment) of every sender row
Row = tuple[str, str, str, int, str, dict[str, str]]


def shown_concurrency(conc: int, extra: dict[str, str]) -> str:
    """A row's concurrency as the report shows it: its WORKER_CONCURRENCY (``auto``) when its
    environment sets one, else the number given."""
    return extra.get("WORKER_CONCURRENCY", str(conc))


def senders() -> list[Row]:
    """The rows of the table, in the order they run in each round."""
    labels = {k: label for k, label, _ in w.PEERS}
    rows: list[Row] = [
        ("loop-smtplib-new", "loop-smtplib-new", "smtplib loop", 1, "new per mail", {}),
        ("loop-smtplib-reused", "loop-smtplib-reused", "smtplib loop", 1, "reused", {}),
        ("loop-aiosmtplib-reused", "loop-aiosmtplib-reused", "aiosmtplib loop", 1, "reused", {}),
        ("ours-1", "ours", "sendgroup-worker", 1, "reused (pool), pipelined", {}),
        ("ours-4", "ours", "sendgroup-worker", 4, "reused (pool), pipelined", {}),
        (
            "ours-4-nopipe",
            "ours",
            "sendgroup-worker, SMTP_PIPELINING=off",
            4,
            "reused (pool)",
            {"SMTP_PIPELINING": "off"},
        ),
        ("ours-16", "ours", "sendgroup-worker", 16, "reused (pool), pipelined", {}),
        # the default: WORKER_CONCURRENCY=auto starts at START_LANES (16) and tunes on
        # measured throughput (the environment overrides the 4 given here)
        (
            "ours-auto",
            "ours",
            "sendgroup-worker (default)",
            4,
            "reused (pool), pipelined",
            # INFO (the worker's default level; WARNING elsewhere): its lane changes for the trace
            {"WORKER_CONCURRENCY": "auto", "LOG_LEVEL": "INFO"},
        ),
    ]
    for peer in PEERS:
        sync = peer in ("rq", "dramatiq", "celery")
        conn = "reused (smtplib per thread)" if sync else "reused (aiosmtplib pool)"
        label = f"{labels[peer]}, scenario 1 setting"
        rows.append((peer, peer, label, w.PEER_CONCURRENCY.get(peer, 1), conn, {}))
        io = IO_ROWS[peer]
        rows.append((io.key, io.worker, io.label, io.concurrency, io.conn, io.extra))
    rows.append(
        (
            "laravel",
            "laravel",
            "Laravel queue:work (PHP), as shipped",
            1,
            LARAVEL_CONN,
            {"BENCH_MAIL_TCP_NODELAY": "0"},
        )
    )
    rows.append(
        (
            "laravel-nodelay",
            "laravel",
            "Laravel queue:work (PHP), tcp_nodelay",
            1,
            LARAVEL_CONN,
            {"BENCH_MAIL_TCP_NODELAY": "1"},
        )
    )
    rows.append(
        (
            "laravel-nopipe",
            "laravel",
            "Laravel queue:work (PHP), tcp_nodelay, SwiftMailer pipelining off",
            1,
            "new per mail (Laravel 8)",
            {"BENCH_MAIL_TCP_NODELAY": "1", "BENCH_SWIFT_PIPELINING": "0"},
        )
    )
    rows.append(
        (
            "laravel-best",
            "laravel",
            "Laravel queue:work (PHP), tcp_nodelay, SwiftMailer pipelining off, "
            "opcache.enable_cli=1",
            1,
            "new per mail (Laravel 8)",
            {"BENCH_MAIL_TCP_NODELAY": "1", "BENCH_SWIFT_PIPELINING": "0", OPCACHE: "1"},
        )
    )
    return rows


def run_loop(
    kind: str, setup: w.Setup, mails: int, target: tuple[str, int], cap: float
) -> db.Drain:
    """One plain send loop process (no queue): ``mails`` mails to ``target``."""
    argv = [str(setup.peers_python), "-m", "bench.peer_workers", "work", kind, "--jobs", str(mails)]
    argv += ["--smtp", f"{target[0]}:{target[1]}", "--size", str(w.PAYLOAD_BYTES)]
    worker = db.StampedWorker(argv, {}, setup.logs / f"{kind}.log")
    try:
        return db.measure(worker, mails, None, 0, timeout=60, cap=cap)
    finally:
        worker.stop()


def run_laravel(
    setup: w.Setup,
    mails: int,
    target: tuple[str, int],
    cap: float,
    payloads: Path,
    extra: dict[str, str],
) -> db.Drain:
    """Flush, push the first ``mails`` of Laravel's payload lines, start one ``queue:work``
    sending to ``target`` (a stamp per processed job), time the drain, stop it."""
    client = setup.server.client()
    try:
        client.flushall()
        w.push_payload_file(client, w.db_queue(), payloads, limit=mails)
        env = {
            **w.laravel_env(setup),
            "BENCH_STAMP_PROCESSED": "1",
            "MAIL_MAILER": "smtp",
            "MAIL_HOST": target[0],
            "MAIL_PORT": str(target[1]),
            **extra,
        }
        suffix = "-nodelay" if extra.get("BENCH_MAIL_TCP_NODELAY") == "1" else ""
        suffix += "-nopipe" if extra.get("BENCH_SWIFT_PIPELINING") == "0" else ""
        ini = ["-d", "opcache.enable_cli=1"] if extra.get(OPCACHE) == "1" else []
        suffix += "-opcache" if ini else ""
        argv = [php_bin(), *ini, str(w.LARAVEL_ARTISAN), *LARAVEL_ARGV]
        worker = db.StampedWorker(argv, env, setup.logs / f"laravel-smtp{suffix}.log")
        try:
            return db.measure(worker, mails, client, setup.server.port, timeout=60, cap=cap)
        finally:
            worker.stop()
    finally:
        client.close()


def laravel_build_cost(setup: w.Setup, messages: int, opcache: bool) -> dict[str, float]:
    """CPU and wall microseconds per message and the message's bytes of Laravel building the
    example Mailable (Mailable + SwiftMailer, no queue, no network: bench:mail-build), PHP's
    CLI opcode cache on or off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAIL_", "REDIS_URL"))}
    env.update(w.laravel_env(setup))
    ini = ["-d", f"opcache.enable_cli={int(opcache)}"]
    out = subprocess.run(
        [php_bin(), *ini, str(w.LARAVEL_ARTISAN), "bench:mail-build", str(messages)],
        env=env, check=True, timeout=300, capture_output=True, text=True,
    ).stdout  # fmt: skip
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def our_build_cost(messages: int) -> dict[str, float]:
    """The same for our builder (``sendgroup_worker.smtp.build_message``, what every other
    sender runs) on this scenario's job payloads (parsed beforehand: the builder alone), in this
    process; 200 messages first, not timed."""
    from bench.peer_workers import payload
    from sendgroup_worker.smtp import build_message

    bodies = [json.loads(payload(i, w.PAYLOAD_BYTES)) for i in range(messages + 200)]
    size = 0
    for body in bodies[:200]:
        size = len(build_message(body["data"], body["uuid"]).body)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for body in bodies[200:]:
        size = len(build_message(body["data"], body["uuid"]).body)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {
        "messages": messages,
        "cpu_us_per_message": cpu / messages * 1e6,
        "wall_us_per_message": wall / messages * 1e6,
        "message_bytes": size,
    }


#: (row key, link) -> the drain of each round (None: that round failed)
Measured = dict[tuple[str, str], list[db.Drain | None]]


def rates(measured: Measured, key: str, link: str) -> list[float]:
    """The mails/s of every round that ran."""
    return [d.rate for d in measured.get((key, link), []) if d is not None]


def median_rate(measured: Measured, key: str, link: str) -> float | None:
    """The median mails/s over the rounds, None when no round ran."""
    values = rates(measured, key, link)
    return statistics.median(values) if values else None


def default_row(measured: Measured, link: str) -> str:
    """The row of our default, ``ours-auto``; ``ours-4`` in a run without it (reports from
    before auto became the default)."""
    return "ours-auto" if median_rate(measured, "ours-auto", link) else "ours-4"


def ratios(measured: Measured, a: str, b: str, link: str) -> list[float]:
    """``a``'s mails/s over ``b``'s, per round where both ran."""
    pairs = zip(measured.get((a, link), []), measured.get((b, link), []), strict=False)
    return [x.rate / y.rate for x, y in pairs if x is not None and y is not None and y.rate > 0]


def cpu_ms(measured: Measured, key: str, link: str) -> float | None:
    """Median CPU milliseconds per mail of the sending process over the rounds."""
    values = [d.cpu_per_1000 for d in measured.get((key, link), []) if d is not None]
    return statistics.median(values) if values else None


def round_order(rows: Sequence[Row], rnd: int) -> list[Row]:
    """The senders of round ``rnd`` (0-based): ``rows`` rotated by ``rnd``, reversed in odd
    rounds. A rotation alone keeps every sender behind the same neighbour (the full run of
    2026-12-04 23:09 ran one fixed order, our default always right after fixed 16 lanes, and
    measured it at 0.77x of them on the link where a probe of the two alone found them level:
    bench/results/2026-12-05-loglevel-probe/note.md); reversing every other round puts each
    sender after a different one."""
    k = rnd % len(rows) if rows else 0
    turned = list(rows[k:]) + list(rows[:k])
    return turned[::-1] if rnd % 2 else turned


def run(ctx: Context) -> Result:
    mails = {"loopback": 200 if ctx.quick else 2_000, "+1 ms link": 100 if ctx.quick else 1_000}
    cap = 5.0 if ctx.quick else 10.0
    rounds = 2 if ctx.quick else 3
    logs = ctx.work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rows_spec = senders()
    server = RedisServer().start()
    targets = smtplink.start(log=ctx.log)
    links = {"loopback": targets.loopback, "+1 ms link": targets.delayed}
    measured: Measured = {(row[0], link): [] for row in rows_spec for link in links}
    errors: list[str] = []
    build: dict[str, dict[str, float]] = {}
    traces: dict[str, list[tuple[db.Drain, list[LaneChange]]]] = {link: [] for link in links}
    try:
        setup = w.Setup(server, ctx.peers_python, logs)
        laravel_payloads: Path | None = None
        laravel_error = ""
        try:
            laravel_payloads = w.laravel_mail_payloads(
                setup, w.db_queue(), max(mails.values()), "bench.example",
                ctx.work_dir / "laravel-bench.jsonl",
            )  # fmt: skip
        except Exception as exc:  # the Laravel rows fail, the others still run
            laravel_error = f"Laravel payloads: {type(exc).__name__}: {exc}"[:400]
            ctx.log(f"FAILED {laravel_error}")
        ctx.log(
            "SMTP NOOP RTT: "
            + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in targets.rtt.items())
            + f"; latency: {targets.how}"
        )
        for rnd in range(rounds):
            for link, target in links.items():
                n = mails[link]
                for key, worker, label, conc, _, extra in round_order(rows_spec, rnd):
                    d: db.Drain | None = None
                    smtp = f"{target[0]}:{target[1]}"
                    log = w.peer_log(setup, worker, conc, smtp, extra) if key == TRACED else None
                    offset = log.stat().st_size if log is not None and log.exists() else 0
                    try:
                        if worker.startswith("loop-"):
                            d = run_loop(worker, setup, n, target, cap)
                        elif worker == "laravel":
                            if laravel_payloads is None:
                                raise RuntimeError(laravel_error)
                            d = run_laravel(setup, n, target, cap, laravel_payloads, extra)
                        else:
                            d = w.run_peer(
                                worker,
                                setup,
                                n,
                                0,
                                cap=cap,
                                concurrency=conc,
                                smtp=smtp,
                                smtp_host=target[0],
                                smtp_port=target[1],
                                extra_env=extra,
                            )
                    except Exception as exc:
                        errors.append(
                            f"{label} c={shown_concurrency(conc, extra)} on {link}, "
                            f"round {rnd + 1}: "
                            f"{type(exc).__name__}: {exc}"[:400]
                        )
                        ctx.log(f"FAILED {errors[-1]}")
                    measured[(key, link)].append(d)
                    if log is not None and d is not None:
                        with log.open("rb") as f:
                            f.seek(offset)
                            text = f.read().decode(errors="replace")
                        traces[link].append((d, lane_changes(text, d.first)))
                    if d is not None:
                        ctx.log(
                            f"round {rnd + 1}, {link}: {label} "
                            f"c={shown_concurrency(conc, extra)}: {d.rate:,.0f} mails/s, "
                            f"{d.cpu_per_1000:.2f} CPU ms/mail"
                        )
        relay_cpu = targets.relay_cpu()
        messages = 300 if ctx.quick else 2_000
        build["ours"] = our_build_cost(messages)
        if laravel_payloads is not None:
            try:
                build["laravel"] = laravel_build_cost(setup, messages, opcache=False)
                build["laravel-opcache"] = laravel_build_cost(setup, messages, opcache=True)
            except Exception as exc:
                errors.append(f"Laravel build cost: {type(exc).__name__}: {exc}"[:400])
        ctx.log(f"build cost per message: {build}")
    finally:
        smtplink.stop(targets)
        server.cleanup()
    rows: list[list[object]] = []
    for key, _, label, conc, conn, extra in rows_spec:
        row: list[object] = [label, conn, shown_concurrency(conc, extra)]
        for link in links:
            values = rates(measured, key, link)
            row += [w.spread(values) if values else None, cpu_ms(measured, key, link)]
        rows.append(row)
    rtt_text = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in targets.rtt.items())
    if relay_cpu is not None:
        rtt_text += f"; the relay process used {relay_cpu:.1f} CPU s in all"
    table = Table(
        title="One process sending each job as a mail to Postfix's smtp-sink",
        columns=[
            "sender",
            "SMTP connection",
            "concurrency",
            "loopback mails/s, median (range)",
            "loopback CPU ms / mail",
            "+1 ms link mails/s, median (range)",
            "+1 ms link CPU ms / mail",
        ],
        rows=rows,  # type: ignore[arg-type]
        note=(
            f"{rounds} interleaved rounds, the senders' order changing each round (rotated by "
            "the round's number, reversed in every other round); "
            f"{mails['loopback']:,} mails on loopback, {mails['+1 ms link']:,} across the link "
            f"(a sender still busy {cap:g} s after its first mail is timed over the mails sent "
            "by then); mails/s between the first and the last mail; CPU = the sending process "
            "and its children (psutil), median over the rounds. Every sender builds its "
            "messages with our worker's builder (sendgroup_worker.smtp.build_message), "
            "except Laravel, which builds its own with its Mailable and SwiftMailer (see the "
            "table below). Loops "
            "send from memory (no queue); the worker rows drain the same "
            f"{w.PAYLOAD_BYTES}-byte jobs from a local Redis. Each peer runs twice: at its "
            "scenario 1 setting (scenario 1's table gives each and its source) and at the "
            "setting for network-bound work its documentation gives ('I/O setting' rows; "
            "where it names no number, the best median of a sweep on the +1 ms link before "
            f"this run): {io_settings_text()}. Laravel: the example "
            "app's queued Mailable (OrderShipped), payloads made by Laravel's producer and "
            "pushed as its push script does, stamped after each processed job; settings and "
            f"sources: {LARAVEL_SETTINGS}. Link: a veth pair "
            f"into a network namespace made by the benchmark, sink inside it; latency: "
            f"{targets.how}. Measured SMTP NOOP round trip (median): {rtt_text}."
        ),
    )
    build_table = Table(
        title="Building one message, no queue and no network (CPU per message, this machine)",
        columns=["builder", "messages", "CPU us / message", "wall us / message", "bytes"],
        rows=[
            [
                label,
                b["messages"],
                b["cpu_us_per_message"],
                b["wall_us_per_message"],
                b["message_bytes"],
            ]
            for key, label in (
                ("ours", "ours (sendgroup_worker.smtp.build_message; every sender but Laravel)"),
                (
                    "laravel",
                    "Laravel: Mailable::send through the array transport + "
                    "Swift_Message::toString (OrderShipped, its Blade view)",
                ),
                ("laravel-opcache", "the same, opcache.enable_cli=1"),
            )
            if (b := build.get(key))
        ],
        note=(
            "Ours: build_message on this scenario's parsed job payloads (a 1.2 KB text body), in "
            "the benchmark's process. Laravel: bench:mail-build (bench/laravel/Bench/"
            "MailBuild.php): the path of a queued Mailable's job after unserializing it "
            "(Mailable::send: build(), the Blade view, Illuminate\\Mail\\Message over a "
            "Swift_Message) into Laravel's array transport, then the bytes as the SMTP transport "
            "streams them (toString); the example app's message is smaller (an HTML line). "
            "Both: 200 messages first, not timed; process CPU (user + system)."
        ),
    )
    findings = findings_for(measured, list(links), targets.rtt)
    findings += laravel_findings(measured, list(links), targets.rtt, build)
    findings += trace_findings(traces)
    findings += errors
    plot = Plot(
        filename="smtp-throughput.png",
        title="Mails/s, one process (median of the rounds)",
        ylabel="mails/s",
        kind="bar",
        bars={
            f"{label} c={conc} {link}": rate
            for link in links
            for key, _, label, conc, _, _ in rows_spec
            if (rate := median_rate(measured, key, link)) is not None
        },
        log_y=True,
    )
    raw = {
        "io_settings": {p: {"setting": r.setting, "source": r.source} for p, r in IO_ROWS.items()},
        "rtt_ms": {k: v * 1e3 for k, v in targets.rtt.items()},
        "latency_how": targets.how,
        "relay_cpu_s": relay_cpu,
        "rounds": rounds,
        "order": [[row[0] for row in round_order(rows_spec, r)] for r in range(rounds)],
        "laravel_settings": LARAVEL_SETTINGS,
        "lane_trace": {
            link: [
                {"rate": d.rate, "seconds": d.seconds, "changes": [c._asdict() for c in changes]}
                for d, changes in drains
            ]
            for link, drains in traces.items()
        },
        "build_cost": build,
        "rates": {f"{k}/{link}": rates(measured, k, link) for (k, link) in measured},
        "cpu_ms_per_mail": {
            f"{k}/{link}": [d.cpu_per_1000 if d else None for d in ds]
            for (k, link), ds in measured.items()
        },
    }
    tables = [table, build_table, trace_table(traces)]
    return Result(tables=tables, plots=[plot], findings=findings, raw=raw)


#: the row whose lane changes the report traces (our default)
TRACED = "ours-auto"
#: the worker's INFO line for a lane change (bench/our_worker.py puts time.time() first)
LANE_LINE = re.compile(r"^(\d+\.\d+) INFO \S+: lanes (\d+) -> (\d+): (.*)$", re.MULTILINE)


class LaneChange(NamedTuple):
    """One lane change the worker logged: seconds after the drain's first mail (negative:
    before it), lanes before and after, the controller's reason."""

    at: float
    before: int
    after: int
    reason: str


def lane_changes(log_text: str, first: float | None) -> list[LaneChange]:
    """The lane changes in one drain's part of our worker's log, times relative to ``first``
    (the drain's first stamp, time.time())."""
    base = first or 0.0
    return [
        LaneChange(float(t) - base, int(a), int(b), why)
        for t, a, b, why in LANE_LINE.findall(log_text)
    ]


def trace_table(traces: dict[str, list[tuple[db.Drain, list[LaneChange]]]]) -> Table:
    """One row per drain of our default: its rate, length and lane changes with their times."""
    rows: list[list[object]] = []
    for link, drains in traces.items():
        for rnd, (d, changes) in enumerate(drains, 1):
            steps = "; ".join(f"{c.at:.2f} s: {c.before} -> {c.after}" for c in changes)
            last = changes[-1].after if changes else START_LANES
            rows.append(
                [link, rnd, d.rate, d.seconds, last, steps or f"none ({last} lanes throughout)"]
            )
    return Table(
        title="Our default (WORKER_CONCURRENCY=auto): its lane count during each drain",
        columns=["link", "round", "mails/s", "drain s", "lanes at the end", "lane changes"],
        rows=rows,  # type: ignore[arg-type]
        note=(
            "The lane changes the worker logged at INFO ('lanes N -> M: reason', "
            "sendgroup_worker.worker), each at its time.time() minus the drain's first mail's "
            "stamp (s after the first mail; negative: before it); the drain lasts from the first "
            f"to the last mail. auto starts at {START_LANES} lanes. The controller's reasons are "
            "in results.json (lane_trace)."
        ),
    )


def trace_findings(traces: dict[str, list[tuple[db.Drain, list[LaneChange]]]]) -> list[str]:
    """Per link: the lanes auto ended at and when its last climb came, against the drain's
    length."""
    out: list[str] = []
    for link, drains in traces.items():
        if not drains:
            continue
        ends = [changes[-1].after if changes else START_LANES for _, changes in drains]
        climbs = [
            max((c.at for c in changes if c.after > c.before), default=None)
            for _, changes in drains
        ]
        out.append(
            f"{link}: our default (auto) starts at {START_LANES} lanes; over the {len(drains)} "
            f"drains it ended at {', '.join(str(e) for e in ends)} lanes, its last climb "
            + ", ".join("none" if c is None else f"{c:.2f} s" for c in climbs)
            + " after the first mail, in drains of "
            + ", ".join(f"{d.seconds:.2f} s" for d, _ in drains)
            + " (lane trace table)."
        )
    return out


def io_settings_text() -> str:
    """Every I/O-setting row's label, setting and source, for the table's note."""
    return "; ".join(f"{r.label}: {r.setting} (source: {r.source})" for r in IO_ROWS.values())


def best_rows(measured: Measured, link: str) -> dict[str, str]:
    """Each peer's fastest row on ``link`` by median mails/s (its scenario 1 row or its I/O
    row; a report without I/O rows: the scenario 1 row), peers with no round left out."""
    out: dict[str, str] = {}
    for peer in PEERS:
        keys = [k for k in (peer, IO_ROWS[peer].key) if median_rate(measured, k, link)]
        if keys:
            out[peer] = max(keys, key=lambda k: median_rate(measured, k, link) or 0.0)
    return out


def row_text(key: str) -> str:
    """A row as the findings name it: its label and concurrency (``Dramatiq (Redis), gevent,
    I/O setting, c=64``)."""
    for k, _, label, conc, _, extra in senders():
        if k == key:
            return f"{label}, c={shown_concurrency(conc, extra)}"
    return key


def findings_for(measured: Measured, links: list[str], rtt: dict[str, float]) -> list[str]:
    """Connection reuse, concurrency, pipelining and the peer comparison, from the rounds."""
    out: list[str] = []
    for link in links:

        def rate(key: str, link: str = link) -> float | None:
            return median_rate(measured, key, link)

        def ratio_text(a: str, b: str, link: str = link) -> str:
            values = ratios(measured, a, b, link)
            if not values:
                return "- (no round with both)"
            return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"

        new, reused = rate("loop-smtplib-new"), rate("loop-smtplib-reused")
        if new and reused:
            out.append(
                f"{link}: reusing the SMTP connection is "
                f"{ratio_text('loop-smtplib-reused', 'loop-smtplib-new')} a new one."
            )
        o1, o4, o16 = rate("ours-1"), rate("ours-4"), rate("ours-16")
        if o1 and o4 and o16:
            out.append(
                f"{link}: our concurrency 4 is {ratio_text('ours-4', 'ours-1')} concurrency 1, "
                f"16 is {ratio_text('ours-16', 'ours-1')}."
            )
        if o4 and rate("ours-4-nopipe"):
            out.append(
                f"{link}: PIPELINING (RFC 2920) at concurrency 4 is "
                f"{ratio_text('ours-4', 'ours-4-nopipe')} the same worker with "
                "SMTP_PIPELINING=off."
            )
        # each peer's best row here (scenario 1 or I/O setting), by median mails/s
        ran = {row: r for row in best_rows(measured, link).values() if (r := rate(row))}
        # the default is WORKER_CONCURRENCY=auto; a report without its row compares c=4
        dflt = default_row(measured, link)
        dname = "our default (auto)" if dflt == "ours-auto" else "our c=4"
        od = rate(dflt)
        if od and ran:
            best = max(ran, key=lambda row: ran[row])
            cd, cb = cpu_ms(measured, dflt, link), cpu_ms(measured, best, link)
            cpu = f"; CPU per mail: ours {cd:.2f}, its {cb:.2f} ms" if cd and cb else ""
            goal = f"the issue-19 goal is >= {2 if link != 'loopback' else 1.5}x"
            if ran[best] > od:
                out.append(
                    f"{link}: we lose to the best peer row, {row_text(best)}: it sends "
                    f"{ratio_text(best, dflt)} {dname}{cpu} ({goal}); our fixed 4 lanes are "
                    f"{ratio_text('ours-4', best)} it, 16 lanes {ratio_text('ours-16', best)}."
                )
            else:
                out.append(
                    f"{link}: {dname} is {ratio_text(dflt, best)} the best peer row, "
                    f"{row_text(best)}{cpu}; {goal}. Fixed 4 lanes: "
                    f"{ratio_text('ours-4', best)}, 16 lanes: {ratio_text('ours-16', best)}."
                )
            out.append(
                f"{link}: {dname} against each peer's best row here (median mails/s over the "
                "rounds decides which): "
                + "; ".join(
                    f"{row_text(row)} ({ran[row]:,.0f} mails/s): {ratio_text(dflt, row)}"
                    for row in ran
                )
                + "."
            )
        if rate("ours-auto") and o4 and o16:
            out.append(
                f"{link}: auto is {ratio_text('ours-auto', 'ours-4')} fixed 4 lanes and "
                f"{ratio_text('ours-auto', 'ours-16')} fixed 16 (it starts at {START_LANES} and "
                "tunes on measured throughput during the drain)."
            )
        link_rtt = rtt.get("netns link + delay") if link != "loopback" else None
        if link_rtt and o1:
            out.append(
                f"{link}: a reused connection without PIPELINING waits for 4 SMTP replies per "
                f"mail (MAIL, RCPT, DATA, end of data; RFC 5321), {4 * link_rtt * 1e3:.1f} ms at "
                f"the measured RTT, at most {1 / (4 * link_rtt):,.0f} mails/s per lane; with "
                f"PIPELINING 2 waits, at most {1 / (2 * link_rtt):,.0f}. Our concurrency 1 got "
                f"{o1:,.0f}. On this 2-core machine the lanes share the CPU with the relay, the "
                "sink and Redis."
            )
        aio = rate("loop-aiosmtplib-reused")
        if aio and o1:
            out.append(
                f"{link}: our worker at concurrency 1 sends "
                f"{ratio_text('ours-1', 'loop-aiosmtplib-reused')} the mails/s of a bare reused "
                "aiosmtplib loop, while also draining the queue (2 Redis round trips per mail: "
                "reserve with the previous ack and its outcome entry; the exactly-once fence "
                "with the suppression check)."
            )
    return out


#: the Laravel rows, strongest first, as the findings name them
LARAVEL_ROWS = (
    ("laravel-best", "with tcp_nodelay, SwiftMailer pipelining off and opcache.enable_cli=1"),
    ("laravel-nopipe", "with tcp_nodelay and SwiftMailer pipelining off"),
    ("laravel-nodelay", "with tcp_nodelay"),
    ("laravel", "as shipped"),
)


def laravel_findings(
    measured: Measured,
    links: list[str],
    rtt: dict[str, float],
    build: dict[str, dict[str, float]],
) -> list[str]:
    """Laravel's worker per process against ours (c=1 and the default, auto; c=4 in a report
    without the auto row), by round; the processes and CPU it would need for our default's rate;
    its builder's share of its CPU."""
    out: list[str] = []
    for link in links:
        dflt = default_row(measured, link)
        dname = "auto" if dflt == "ours-auto" else "c=4"
        o1, o4 = median_rate(measured, "ours-1", link), median_rate(measured, dflt, link)
        c4 = cpu_ms(measured, dflt, link)
        for key, what in LARAVEL_ROWS:
            lr, lc = median_rate(measured, key, link), cpu_ms(measured, key, link)
            if not lr or not lc or not o1 or not o4 or not c4:
                continue
            by_round = {
                c: ratios(measured, ours, key, link) for c, ours in (("1", "ours-1"), (dname, dflt))
            }
            verdict = []
            for c, values in by_round.items():
                med, lo, hi = statistics.median(values), min(values), max(values)
                word = "we win" if lo > 1 else "we lose" if hi < 1 else "level"
                shown = c if c == "auto" else f"c={c}"
                verdict.append(f"our {shown} sends {med:.2f}x ({lo:.2f}-{hi:.2f}) it, {word}")
            need = math.ceil(o4 / lr)
            out.append(
                f"{link}: Laravel queue:work {what} sends {lr:,.0f} mails/s per process (one "
                f"mail at a time) at {lc:.2f} CPU ms per mail; per process "
                + "; ".join(verdict)
                + f". Our default's {o4:,.0f} mails/s would take {need} Laravel process(es) and "
                f"{o4 * lc / 1000:.2f} CPU cores of PHP (ours: one process, "
                f"{o4 * c4 / 1000:.2f} cores at {c4:.2f} ms per mail)."
            )
        link_rtt = rtt.get("netns link + delay") if link != "loopback" else None
        piped, unpiped = (
            median_rate(measured, k, link) for k in ("laravel-nodelay", "laravel-best")
        )
        if link_rtt and piped and unpiped:
            out.append(
                f"{link}: Laravel opens a new SMTP connection per mail and then waits for 4 "
                "replies after the greeting with SwiftMailer's pipelining (EHLO, MAIL/RCPT/DATA "
                "together, end of data, QUIT), 6 without (MAIL, RCPT and DATA each): "
                f"{4 * link_rtt * 1e3:.1f} / {6 * link_rtt * 1e3:.1f} ms at the measured RTT, "
                f"at most {1 / (4 * link_rtt):,.0f} / {1 / (6 * link_rtt):,.0f} mails/s per "
                f"process; it got {piped:,.0f} (tcp_nodelay) / {unpiped:,.0f} (strongest). The "
                "delay relay does not delay TCP's handshake (the relay's kernel answers it): on "
                "a real link each new connection costs one more round trip, which favours "
                "Laravel here."
            )
    ours = build.get("ours")
    if ours and (php := build.get("laravel")):
        text = (
            "Laravel builds its messages with its own builder (Mailable + SwiftMailer), every "
            "other sender with ours: building one costs Laravel "
            f"{php['cpu_us_per_message']:,.0f} us of CPU ({php['message_bytes']:,.0f}-byte "
            f"message) and ours {ours['cpu_us_per_message']:,.0f} us "
            f"({ours['message_bytes']:,.0f} bytes)"
        )
        lc = cpu_ms(measured, "laravel-nopipe", "loopback")
        if lc:
            text += (
                f"; that is {php['cpu_us_per_message'] / (lc * 1000):.0%} of Laravel's "
                f"{lc:.2f} CPU ms per mail on loopback (tcp_nodelay, pipelining off, no opcode "
                "cache), the rest is its queue, framework and SMTP client"
            )
        if (opc := build.get("laravel-opcache")) and (
            lo := cpu_ms(measured, "laravel-best", "loopback")
        ):
            text += (
                f"; with opcache.enable_cli=1 {opc['cpu_us_per_message']:,.0f} us, "
                f"{opc['cpu_us_per_message'] / (lo * 1000):.0%} of the strongest row's {lo:.2f} "
                "ms"
            )
        out.append(text + ".")
    return out


SCENARIO = Scenario(
    key="smtp",
    number=2,
    title="Worker throughput with SMTP (Postfix smtp-sink), loopback and +1 ms link",
    run=run,
)
