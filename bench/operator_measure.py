"""``python -m bench.operator_measure URL QUEUE INTERVAL [--at-rest]``: what still touches Redis
for a paused send group of ours (no worker processes): the operator's reaper passes, reduced to
their Redis side, through the operator's own :class:`~sendgroup_operator.observer.Observer`
(what ``reconcile.measure`` calls every pass).

* Default, a paused group that still holds jobs in Redis: ``plan.rests_paused`` is false while
  the queue is not empty, so its reaper passes every ``reaperInterval`` (INTERVAL,
  ``SENDGROUP_REAPER_INTERVAL``, default 10 s) and each takes a full measurement: one pipelined
  ``EVALSHA measure.lua`` round trip (the script loaded once on ``NOSCRIPT``).
* ``--at-rest``, the same group after ``reaper.dumpAfter`` (30 min by default) moved its jobs to
  the volume (the queue's keys empty): ``plan.rests_paused`` is true, the pass waits
  ``plan.idle_wait`` (INTERVAL: give ``SENDGROUP_IDLE_PASS_INTERVAL``, default 60 s) and the
  observer answers it from its last measurement without Redis; what touches Redis is the
  observer's idle watch of that Redis (here this one group): with client tracking (standalone
  and Sentinel Redis >= 6) one ``EXISTS`` and one ``PING`` every ``TRACKED_RECHECK`` (60 s),
  else one ``EXISTS`` over every idle group every ``POLL_INTERVAL`` (0.5 s).

Not modelled: the rest of a pass (planning, the Deployment read from the watch-fed index, the
two Kubernetes API lists of Jobs and pods a paused group with jobs makes per pass, a status
write when something changed) and the queue-claim recheck every ``CLAIM_RECHECK`` (300 s).

Prints ``READY`` after a first measurement (``--at-rest``: and the idle watch's first
check); on SIGTERM prints ``{"cpu": seconds, "measures": n, "round_trips": n}`` (its own CPU
time since READY from ``time.process_time``; the full measurements and the observer's round
trips since READY) and exits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time

from sendgroup_operator.observer import Observer
from sendgroup_operator.queueio import RedisQueues

KEY = "bench/paused-group"


async def run(url: str, queue: str, interval: float, at_rest: bool) -> None:
    queues = RedisQueues()
    observer = Observer(queues, wake=lambda key: None)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    first = await observer.measure(KEY, url, queue)
    if at_rest:
        if first.total:
            raise SystemExit(f"--at-rest: queue {queue!r} holds {first.total} jobs")
        observer.settle(KEY, True)
        # the window is the steady state: after the idle watch's first check (which, with
        # client tracking, opens its two connections: ~4 commands once, not per period)
        while observer.counts.idle_checks < 1:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    print("READY", flush=True)
    cpu0 = time.process_time()
    measured0, trips0 = observer.counts.measured, observer.counts.round_trips
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
        if stop.is_set():
            break
        await observer.measure(KEY, url, queue)
        if at_rest:
            observer.settle(KEY, True)
    out = {
        "cpu": time.process_time() - cpu0,
        "measures": observer.counts.measured - measured0,
        "round_trips": observer.counts.round_trips - trips0,
    }
    await observer.close()
    await queues.close()
    print(json.dumps(out), flush=True)


def main() -> None:
    at_rest = "--at-rest" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a != "--at-rest"]
    asyncio.run(run(args[0], args[1], float(args[2]), at_rest))


if __name__ == "__main__":
    main()
