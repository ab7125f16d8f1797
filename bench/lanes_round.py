"""Scenario 2's drains, our worker only: ``WORKER_CONCURRENCY=auto`` (the default since issue
19) beside fixed 4, 8, 16 and 32 lanes, on loopback and on the +1 ms link (``bench.smtplink``),
with the scenario's settings (``bench.scenarios.worker.ours_env``, its payloads, its
``measure``: mails/s from the first to the last stamp, CPU ms per mail of the worker process).

``python -m bench.lanes_round [--rounds 3] [--mails-link 1000] [--mails-loopback 2000]
[--lanes auto,4,8,16,32] [--links loopback,link] [--base DIR [--base-lanes auto]]``, as root
(the link is a network namespace), under ``flock /tmp/bench.lock``. The worker runs this
checkout's code (``PYTHONPATH`` to its source folders), not an installed copy; ``--base DIR``
adds a row ``base-<lanes>`` per value of ``--base-lanes`` (default ``auto``): that setting
with the code of another checkout (e.g. ``git archive main | tar -x -C DIR``), in the same
rounds, each right before the same setting of this checkout, so a change (to the controller,
or to the CPU per mail) is compared under the same load. Prints one line per drain (with the
lane changes an auto worker logged) and the medians, each row's rounds in brackets.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

from bench import drainbench as db
from bench import smtplink
from bench.scenarios import worker as w
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]
LANES = "auto,4,8,16,32"
#: the rows that run ``--base``'s code are named this prefix and their lanes
BASE = "base-"
LINKS = ("loopback", "link")


def sources(root: Path) -> str:
    """``PYTHONPATH`` for a worker running the code of the checkout at ``root``."""
    return ":".join(str(root / d) for d in ("contract", "worker_image", "operator", "."))


def drain(
    setup: w.Setup,
    lanes: str,
    mails: int,
    target: tuple[str, int],
    code: Path = ROOT,
    log_level: str = "INFO",
) -> tuple[db.Drain, str]:
    """One measured drain of ``mails`` mails by one worker with ``WORKER_CONCURRENCY=lanes``
    running the code of the checkout at ``code``, logging at ``log_level`` (INFO: its lane
    changes are logged); the drain and the worker's lane changes."""
    client = setup.server.client()
    try:
        client.flushall()
        w.enqueue("ours", setup, mails)
        env = w.ours_env(setup.server.url, 4, target[0], target[1])
        env.update(WORKER_CONCURRENCY=lanes, LOG_LEVEL=log_level, PYTHONPATH=sources(code))
        tag = lanes if code == ROOT else f"{lanes}-{code.name}"
        tag += "" if log_level == "INFO" else f"-{log_level}"
        log = setup.logs / f"ours-{tag}-{target[1]}.log"
        worker = db.StampedWorker(w.worker_argv("ours", setup, 4, "smtp"), env, log)
        try:
            result = db.measure(worker, mails, client, setup.server.port, timeout=120, cap=10.0)
        finally:
            worker.stop()
    finally:
        client.close()
    changes = re.findall(r"lanes (\d+ -> \d+)", log.read_text(errors="replace"))
    return result, ", ".join(changes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mails-link", type=int, default=1000)
    ap.add_argument("--mails-loopback", type=int, default=2000)
    ap.add_argument("--logs", type=Path, default=Path("/tmp/lanes-round-logs"))
    ap.add_argument("--lanes", default=LANES, help="WORKER_CONCURRENCY values, comma-separated")
    ap.add_argument("--links", default=",".join(LINKS), help="loopback, link or both")
    ap.add_argument("--base", type=Path, help=f"a checkout whose code runs as rows {BASE}*")
    ap.add_argument("--base-lanes", default="auto", help="the --base rows' WORKER_CONCURRENCY")
    args = ap.parse_args()
    rows: list[tuple[str, Path]] = []
    base_lanes = [v.strip() for v in args.base_lanes.split(",") if v.strip()]
    for value in (v.strip() for v in args.lanes.split(",") if v.strip()):
        if args.base is not None and value in base_lanes:
            rows.append((value, args.base.resolve()))
        rows.append((value, ROOT))
    links_wanted = {v.strip() for v in args.links.split(",")}
    args.logs.mkdir(parents=True, exist_ok=True)
    server = RedisServer().start()
    targets = smtplink.start(log=print)
    got: dict[tuple[str, str], list[db.Drain]] = {}
    try:
        print("SMTP NOOP RTT:", {k: f"{v * 1e3:.3f} ms" for k, v in targets.rtt.items()})
        print("latency:", targets.how)
        setup = w.Setup(server, Path(sys.executable), args.logs)
        links = {
            name: got_link
            for name, key, got_link in (
                ("loopback", "loopback", (targets.loopback, args.mails_loopback)),
                ("+1 ms link", "link", (targets.delayed, args.mails_link)),
            )
            if key in links_wanted
        }
        for rnd in range(args.rounds):
            for link, (target, mails) in links.items():
                for lanes, code in rows:
                    d, changes = drain(setup, lanes, mails, target, code)
                    row = lanes if code == ROOT else BASE + lanes
                    got.setdefault((link, row), []).append(d)
                    print(
                        f"round {rnd + 1}, {link}, WORKER_CONCURRENCY={row}: "
                        f"{d.rate:,.0f} mails/s, {d.cpu_per_1000:.3f} CPU ms/mail"
                        + (f"; lanes {changes}" if changes else ""),
                        flush=True,
                    )
    finally:
        smtplink.stop(targets)
        server.cleanup()
    print("\nmedians over the rounds:")
    for (link, lanes), drains in got.items():
        rate = statistics.median(d.rate for d in drains)
        cpu = statistics.median(d.cpu_per_1000 for d in drains)
        spread = ", ".join(f"{d.rate:,.0f}" for d in drains)
        print(f"{link:11} {lanes:>9}: {rate:7,.0f} mails/s ({spread}), {cpu:.3f} CPU ms/mail")


if __name__ == "__main__":
    main()
