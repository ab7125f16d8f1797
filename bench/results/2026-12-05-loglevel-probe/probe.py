"""Probe (2026-12-05): does ``LOG_LEVEL`` change our worker's mails/s in scenario 2's drains?

``PYTHONPATH=. .venv-bench/bin/python bench/results/2026-12-05-loglevel-probe/probe.py [ROUNDS]``
from the checkout, as root (the +1 ms link is a network namespace). Fixed 16 lanes and
``auto``, each at INFO and WARNING, interleaved; prints every drain, then per setting the
median mails/s, each round's rate and the median CPU ms per mail (see note.md).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from bench import drainbench as db
from bench import smtplink
from bench.lanes_round import drain
from bench.scenarios import worker as w
from tests.support.redis_server import RedisServer

SETTINGS = (("16", "WARNING"), ("16", "INFO"), ("auto", "WARNING"), ("auto", "INFO"))


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    logs = Path("/tmp/loglevel-probe")
    logs.mkdir(exist_ok=True)
    server = RedisServer().start()
    targets = smtplink.start(log=print)
    got: dict[tuple[str, str, str], list[db.Drain]] = {}
    try:
        setup = w.Setup(server, Path(sys.executable), logs)
        links = (("link", targets.delayed, 1000), ("loopback", targets.loopback, 2000))
        for rnd in range(rounds):
            for link, target, mails in links:
                for lanes, level in SETTINGS:
                    d, _ = drain(setup, lanes, mails, target, log_level=level)
                    got.setdefault((link, lanes, level), []).append(d)
                    print(
                        f"r{rnd + 1} {link} {lanes} {level}: {d.rate:,.0f} mails/s "
                        f"{d.cpu_per_1000:.3f} ms",
                        flush=True,
                    )
    finally:
        smtplink.stop(targets)
        server.cleanup()
    for key, drains in got.items():
        rate = statistics.median(d.rate for d in drains)
        cpu = statistics.median(d.cpu_per_1000 for d in drains)
        print(key, f"{rate:,.0f}", [f"{d.rate:,.0f}" for d in drains], f"{cpu:.3f}")


if __name__ == "__main__":
    main()
