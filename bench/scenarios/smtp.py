"""Scenario 2: one process sending every job as a real mail to Postfix's ``smtp-sink``.

Ours (concurrency 1, 4, 16; its SMTP pool reuses one connection per lane and pipelines, RFC
2920, when the relay offers PIPELINING as smtp-sink does; concurrency 4 once more with
``SMTP_PIPELINING=off``, to show what pipelining alone is worth) beside plain loops with no
queue (smtplib with a new connection per mail, smtplib reusing one connection, aiosmtplib
reusing one connection) and every peer of scenario 1 that can send (arq, SAQ, Dramatiq,
Celery), each at its scenario 1 settings, running the loops' send code (smtplib per thread for
sync peers, a pool of aiosmtplib connections for async ones). Every sender builds its messages
with the same function, our worker's (``bench.peer_workers.message``). First on loopback, then
across a network-namespace link with about 1 ms of added round-trip time (``bench.smtplink``
says how it was added and the RTT measured). Rounds interleaved (every sender once per link,
then the next round); the table gives the median and the range over the rounds, and the
ratios are taken within each round, then their median and range.
"""

from __future__ import annotations

import statistics

from bench import drainbench as db
from bench import smtplink
from bench.report import Context, Plot, Result, Scenario, Table
from bench.scenarios import worker as w
from tests.support.redis_server import RedisServer

#: scenario 1's peers that can send mail in ``bench.peer_workers`` (RQ left out: an order of
#: magnitude slower than the others in every scenario 1 run)
PEERS = ["arq", "saq", "dramatiq", "celery"]

#: (key, worker, label, concurrency, SMTP connection, extra environment) of every sender row
Row = tuple[str, str, str, int, str, dict[str, str]]


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
    ]
    for peer in PEERS:
        sync = peer in ("rq", "dramatiq", "celery")
        conn = "reused (smtplib per thread)" if sync else "reused (aiosmtplib pool)"
        rows.append((peer, peer, labels[peer], w.PEER_CONCURRENCY.get(peer, 1), conn, {}))
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


#: (row key, link) -> the drain of each round (None: that round failed)
Measured = dict[tuple[str, str], list[db.Drain | None]]


def rates(measured: Measured, key: str, link: str) -> list[float]:
    """The mails/s of every round that ran."""
    return [d.rate for d in measured.get((key, link), []) if d is not None]


def median_rate(measured: Measured, key: str, link: str) -> float | None:
    """The median mails/s over the rounds, None when no round ran."""
    values = rates(measured, key, link)
    return statistics.median(values) if values else None


def ratios(measured: Measured, a: str, b: str, link: str) -> list[float]:
    """``a``'s mails/s over ``b``'s, per round where both ran."""
    pairs = zip(measured.get((a, link), []), measured.get((b, link), []), strict=False)
    return [x.rate / y.rate for x, y in pairs if x is not None and y is not None and y.rate > 0]


def cpu_ms(measured: Measured, key: str, link: str) -> float | None:
    """Median CPU milliseconds per mail of the sending process over the rounds."""
    values = [d.cpu_per_1000 for d in measured.get((key, link), []) if d is not None]
    return statistics.median(values) if values else None


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
    try:
        setup = w.Setup(server, ctx.peers_python, logs)
        ctx.log(
            "SMTP NOOP RTT: "
            + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in targets.rtt.items())
            + f"; latency: {targets.how}"
        )
        for rnd in range(rounds):
            for link, target in links.items():
                n = mails[link]
                for key, worker, label, conc, _, extra in rows_spec:
                    d: db.Drain | None = None
                    try:
                        if worker.startswith("loop-"):
                            d = run_loop(worker, setup, n, target, cap)
                        else:
                            d = w.run_peer(
                                worker,
                                setup,
                                n,
                                0,
                                cap=cap,
                                concurrency=conc,
                                smtp=f"{target[0]}:{target[1]}",
                                smtp_host=target[0],
                                smtp_port=target[1],
                                extra_env=extra,
                            )
                    except Exception as exc:
                        errors.append(
                            f"{label} c={conc} on {link}, round {rnd + 1}: "
                            f"{type(exc).__name__}: {exc}"[:400]
                        )
                        ctx.log(f"FAILED {errors[-1]}")
                    measured[(key, link)].append(d)
                    if d is not None:
                        ctx.log(
                            f"round {rnd + 1}, {link}: {label} c={conc}: {d.rate:,.0f} mails/s, "
                            f"{d.cpu_per_1000:.2f} CPU ms/mail"
                        )
        relay_cpu = targets.relay_cpu()
    finally:
        smtplink.stop(targets)
        server.cleanup()
    rows: list[list[object]] = []
    for key, _, label, conc, conn, _ in rows_spec:
        row: list[object] = [label, conn, conc]
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
            f"{rounds} interleaved rounds; "
            f"{mails['loopback']:,} mails on loopback, {mails['+1 ms link']:,} across the link "
            f"(a sender still busy {cap:g} s after its first mail is timed over the mails sent "
            "by then); mails/s between the first and the last mail; CPU = the sending process "
            "and its children (psutil), median over the rounds. Every sender builds its "
            "messages with our worker's builder (sendgroup_worker.smtp.build_message). Loops "
            "send from memory (no queue); the worker rows drain the same "
            f"{w.PAYLOAD_BYTES}-byte jobs from a local Redis. Peers run at their scenario 1 "
            "settings (scenario 1's table gives each and its source). Link: a veth pair "
            f"into a network namespace made by the benchmark, sink inside it; latency: "
            f"{targets.how}. Measured SMTP NOOP round trip (median): {rtt_text}."
        ),
    )
    findings = findings_for(measured, list(links), targets.rtt)
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
        "rtt_ms": {k: v * 1e3 for k, v in targets.rtt.items()},
        "latency_how": targets.how,
        "relay_cpu_s": relay_cpu,
        "rounds": rounds,
        "rates": {f"{k}/{link}": rates(measured, k, link) for (k, link) in measured},
        "cpu_ms_per_mail": {
            f"{k}/{link}": [d.cpu_per_1000 if d else None for d in ds]
            for (k, link), ds in measured.items()
        },
    }
    return Result(tables=[table], plots=[plot], findings=findings, raw=raw)


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
        ran = {p: r for p in PEERS if (r := rate(p))}
        if o4 and ran:
            best = max(ran, key=lambda p: ran[p])
            c4, cb = cpu_ms(measured, "ours-4", link), cpu_ms(measured, best, link)
            cpu = f"; CPU per mail {c4:.2f} vs {cb:.2f} ms" if c4 and cb else ""
            if ran[best] > o4:
                out.append(
                    f"{link}: we lose to the best peer, {best}: it sends "
                    f"{ratio_text(best, 'ours-4')} our default (c=4){cpu}; our concurrency 16 "
                    f"is {ratio_text('ours-16', best)} it."
                )
            else:
                out.append(
                    f"{link}: our default (c=4) is {ratio_text('ours-4', best)} the best peer, "
                    f"{best} (c={w.PEER_CONCURRENCY.get(best, 1)}){cpu}; the issue-19 goal is "
                    f">= {2 if link != 'loopback' else 1.5}x."
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


SCENARIO = Scenario(
    key="smtp",
    number=2,
    title="Worker throughput with SMTP (Postfix smtp-sink), loopback and +1 ms link",
    run=run,
)
