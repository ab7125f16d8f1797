"""Our worker for scenarios 1 and 2, stamped like every peer.

Run by the scenarios: ``python -m bench.our_worker --stamp-fd FD --handler noop|mail`` with the
worker's usual environment (``SENDGROUP_QUEUE``, ``REDIS_URL``, ``SMTP_*``, ``WORKER_*``).

It is ``sendgroup-worker work`` (same :class:`~sendgroup_worker.config.WorkerConfig` from the
environment, same :func:`~sendgroup_worker.worker.build_worker`, same run loop) with one change:
the ``sendgroups.SendMail`` handler is wrapped so that, after it ran, it writes one 8-byte stamp
(``time.time()``) to the inherited pipe ``--stamp-fd``, exactly as the peers' task bodies do
(``bench.peer_workers.job_body``). ``--handler noop`` replaces the send by the built-in
``sendgroups.Noop`` (no side effect, ``sends=False``, as in ``bench/worker_throughput.py``), so
the very same payloads serve both scenarios.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import struct
import sys
import time

from sendgroup_worker import handlers as h
from sendgroup_worker.config import WorkerConfig
from sendgroup_worker.worker import build_worker

STAMP = struct.Struct("d")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stamp-fd", type=int, required=True)
    ap.add_argument("--handler", choices=["noop", "mail"], default="noop")
    args = ap.parse_args()
    config = WorkerConfig.from_env()
    # each line with its time.time(), the stamps' clock (scenario 2's lane trace reads them)
    logging.basicConfig(
        level=config.log_level.upper(),
        stream=sys.stderr,
        format="%(created).6f %(levelname)s %(name)s: %(message)s",
    )
    fd = args.stamp_fd

    async def run() -> int:
        worker = build_worker(config)
        base = worker.registry.get(h.NOOP if args.handler == "noop" else h.SEND_MAIL)
        assert base is not None
        inner = base.run

        async def stamped(job: h.JobContext) -> h.HandlerResult:
            result = await inner(job)
            os.write(fd, STAMP.pack(time.time()))
            return result

        worker.registry.register(h.SEND_MAIL, stamped, sends=base.sends)
        return await worker.run()

    sys.exit(asyncio.run(run()))


if __name__ == "__main__":
    main()
