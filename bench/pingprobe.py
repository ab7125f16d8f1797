"""``python -m bench.pingprobe PORT [INTERVAL]``: PING a local Redis every INTERVAL seconds
(default 0.005) until SIGTERM, then print ``{"worst": seconds, "pings": n}`` on one line.

Prints ``READY`` once connected. Runs as its own process so the benchmark's own work never
delays a probe and inflates the stall it reports (bench.harness.PingProbe starts it)."""

from __future__ import annotations

import json
import signal
import sys
import time

import redis


def main() -> None:
    port = int(sys.argv[1])
    interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.005
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)
    client.ping()
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    print("READY", flush=True)
    worst = 0.0
    pings = 0
    next_at = time.perf_counter()
    while not stop:
        t = time.perf_counter()
        client.ping()
        worst = max(worst, time.perf_counter() - t)
        pings += 1
        next_at += interval
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        else:
            next_at = time.perf_counter()
    print(json.dumps({"worst": worst, "pings": pings}), flush=True)


if __name__ == "__main__":
    main()
