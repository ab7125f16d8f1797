"""``python -m bench.operator_measure URL QUEUE INTERVAL``: what still touches Redis for a paused
send group of ours (no worker processes): the operator's reaper measuring the queue every
INTERVAL seconds (``SENDGROUP_REAPER_INTERVAL``, default 10), with the operator's own
``RedisQueues.measure`` (one MULTI/EXEC round trip). Prints ``READY`` after the first
measurement, then one JSON line per measurement (``total`` jobs); stops on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys

from sendgroup_operator.queueio import RedisQueues


async def run(url: str, queue: str, interval: float) -> None:
    queues = RedisQueues()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    first = True
    while not stop.is_set():
        m = await queues.measure(url, queue)
        if first:
            print("READY", flush=True)
            first = False
        print(json.dumps({"total": m.total}), flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


def main() -> None:
    asyncio.run(run(sys.argv[1], sys.argv[2], float(sys.argv[3])))


if __name__ == "__main__":
    main()
