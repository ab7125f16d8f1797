"""SMTP PIPELINING (RFC 2920) in the worker's send path: mails/s with and without it, same run.

``.venv/bin/python -m bench.pipelining [--mails 2000] [--rounds 3] [--concurrency 4]``
(root: it builds scenario 2's network-namespace link with ``bench.smtplink``; ~1 min)

The worker's own ``SmtpPool`` sends ``--mails`` one-recipient mails (1.1 KB, built by
``build_message``) over ``--concurrency`` lanes, each lane one reused connection, to Postfix's
``smtp-sink`` behind scenario 2's link (a delay relay or netem adding ~0.5 ms each way), and
on loopback for context. "plain" is the same pool with ``SmtpSettings(pipelining=False)``
(the worker's ``SMTP_PIPELINING=off``: the server, link and connections are identical and
only the client's behaviour differs): MAIL, RCPT, DATA and the message each wait for their reply
(4 round trips per mail); "pipelined" writes MAIL, RCPT and DATA as one group (2 round trips).
Rounds are interleaved (plain, pipelined, pipelined, plain, ...); mails/s is counted from the
first to the last send of a round, connections opened beforehand. Prints a table, the median
and range of each, their ratio, and the SMTP round trip (NOOP) measured on each target.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from bench import smtplink
from sendgroup_worker.smtp import (
    OutgoingMail,
    ReplyClass,
    SmtpPool,
    SmtpSettings,
    build_message,
)


def _mails(n: int) -> list[OutgoingMail]:
    text = "Hello,\n" + "x" * 70 + "\n" + "this is a benchmark mail\n" * 30
    return [
        build_message(
            {
                "to": f"user{i}@example.com",
                "from": "shop@example.net",
                "subject": "s",
                "text": text,
            },
            f"job-{i}",
        )
        for i in range(n)
    ]


async def _drain(
    target: tuple[str, int], plain: bool, mails: list[OutgoingMail], lanes: int
) -> float:
    """mails/s of ``mails`` over ``lanes`` concurrent senders sharing one pool of ``lanes``."""
    settings = SmtpSettings(
        host=target[0], port=target[1], timeout=30, helo_name="bench", pipelining=not plain
    )
    pool = SmtpPool(settings, lanes)
    try:
        warm = await asyncio.gather(*(pool.send(m) for m in mails[:lanes]))  # open the lanes
        assert all(r.reply_class is ReplyClass.OK for r in warm), warm
        queue = list(reversed(mails[lanes:]))
        failed: list[str] = []

        async def lane() -> None:
            while queue:
                result = await pool.send(queue.pop())
                if result.reply_class is not ReplyClass.OK:
                    failed.append(result.reply)

        start = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(lanes)))
        elapsed = time.perf_counter() - start
        if failed:
            raise RuntimeError(f"{len(failed)} sends failed, first: {failed[0]}")
        return (len(mails) - lanes) / elapsed
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mails", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    mails = _mails(args.mails)
    targets = smtplink.start(log=lambda m: print(m, file=sys.stderr))
    rates: dict[tuple[str, str], list[float]] = {}
    try:
        links = {"loopback": targets.loopback, "+1 ms link": targets.delayed}
        print(f"link: {targets.how or 'netem'}")
        print("SMTP round trip (NOOP, median): "
              + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in targets.rtt.items()))  # fmt: skip
        for rnd in range(args.rounds):
            order = ["plain", "pipelined"] if rnd % 2 == 0 else ["pipelined", "plain"]
            for link, target in links.items():
                for variant in order:
                    rate = asyncio.run(_drain(target, variant == "plain", mails, args.concurrency))
                    rates.setdefault((link, variant), []).append(rate)
                    print(f"round {rnd + 1}, {link}, {variant}: {rate:,.0f} mails/s", flush=True)
    finally:
        smtplink.stop(targets)
    print(f"\n{args.mails} mails, concurrency {args.concurrency}, {args.rounds} interleaved rounds")
    print(f"{'link':<12} {'plain mails/s':>24} {'pipelined mails/s':>24} {'ratio':>18}")
    for link in ("loopback", "+1 ms link"):
        plain, piped = rates[(link, "plain")], rates[(link, "pipelined")]
        ratios = [b / a for a, b in zip(plain, piped, strict=True)]
        print(
            f"{link:<12} {_fmt(plain):>24} {_fmt(piped):>24} "
            f"{statistics.median(ratios):>5.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        )


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


if __name__ == "__main__":
    main()
