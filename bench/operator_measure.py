"""``python -m bench.operator_measure URL QUEUE INTERVAL``: what still touches Redis for a paused
send group of ours (no worker processes): the operator's reaper measuring the queue every
INTERVAL seconds (``SENDGROUP_REAPER_INTERVAL``, default 10), with the operator's own
``RedisQueues.measure`` (one MULTI/EXEC round trip). Prints ``READY`` after a first
measurement; on SIGTERM prints ``{"cpu": seconds, "measures": n}`` (its own CPU time since
READY, from ``time.process_time``: finer than the 10 ms ticks psutil sees) and exits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time

from sendgroup_operator.queueio import RedisQueues


async def run(url: str, queue: str, interval: float) -> None:
    queues = RedisQueues()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await queues.measure(url, queue)
    print("READY", flush=True)
    cpu0 = time.process_time()
    measures = 0
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
        if stop.is_set():
            break
        await queues.measure(url, queue)
        measures += 1
    print(json.dumps({"cpu": time.process_time() - cpu0, "measures": measures}), flush=True)


def main() -> None:
    asyncio.run(run(sys.argv[1], sys.argv[2], float(sys.argv[3])))


if __name__ == "__main__":
    main()
