"""Worker throughput benchmark (not a test): jobs/s of ONE worker process.

Run: ``.venv/bin/python -m bench.worker_throughput [--jobs N] [--concurrency 1,4,16]``

Measures, in one run on this machine:

* the raw Redis round-trip limit: sequential PINGs and sequential EVALSHA of a trivial script
  from one asyncio redis-py connection (what one job per round trip could reach at best);
* the raw SMTP limit: one reused aiosmtplib connection sending to the sink (MAIL/RCPT/DATA);
* ``sendgroup-worker work`` with the no-op handler (``sendgroups.Noop``): queue machinery only;
* ``sendgroup-worker work`` with the mail handler, sending to an aiosmtpd sink running in
  another process.

Every figure is printed with its ratio to the raw limits measured in the same run. Starts its
own redis-server and sink on free loopback ports and stops them at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiosmtplib
import redis
import redis.asyncio

from tests.support.redis_server import RedisServer
from tests.support.workers import WorkerProcess, mail_payload, sync_queue, wait_for, worker_env


async def redis_round_trips(url: str, seconds: float = 2.0) -> tuple[float, float]:
    """(PINGs/s, EVALSHA/s), sequential on one connection."""
    client = redis.asyncio.Redis.from_url(url)
    script = client.register_script("return 1")
    await script()
    rates = []
    for call in (client.ping, script):
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            await call()
            n += 1
        rates.append(n / (time.perf_counter() - start))
    await client.connection_pool.disconnect()
    return rates[0], rates[1]


async def smtp_raw(port: int, count: int = 2000) -> float:
    """Mails/s over one reused aiosmtplib connection to the sink."""
    client = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, local_hostname="bench")
    await client.connect()
    body = b"From: a@x.example\r\nTo: b@x.example\r\nSubject: s\r\n\r\nhello\r\n"
    start = time.perf_counter()
    for _ in range(count):
        await client.sendmail("a@x.example", ["b@x.example"], body)
    rate = count / (time.perf_counter() - start)
    await client.quit()
    return rate


def start_sink() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.smtp_sink"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"sink did not start: {line!r}")
    return proc, int(line.split()[1])


def run_worker(url: str, smtp_port: int, jobs: int, concurrency: int, handler: str) -> float:
    """Jobs/s for one worker process draining ``jobs`` jobs (timed from the first delivery
    counter change to the last, so process start-up is not counted)."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    q = sync_queue(url, queue, retry_after=90)
    client = redis.Redis.from_url(url)
    env = worker_env(
        url,
        queue,
        smtp_port,
        WORKER_CONCURRENCY=concurrency,
        WORKER_TIMEOUT=30,
        WORKER_RETRY_AFTER=90,
        LOG_LEVEL="WARNING",
    )
    if handler == "noop":
        payloads = [mail_payload(f"n{i}@x.example", job="sendgroups.Noop") for i in range(jobs)]
    else:
        payloads = [mail_payload(f"m{i}@x.example") for i in range(jobs)]
    q.push_many(payloads)
    w = WorkerProcess(env, "bench")
    stats_key = q.keys.stats
    try:
        wait_for(lambda: int(client.hget(stats_key, "delivered") or 0) > 0, 30, "first job")
        start, first = time.perf_counter(), int(client.hget(stats_key, "delivered") or 0)
        wait_for(lambda: int(client.hget(stats_key, "delivered") or 0) >= jobs, 300, "drain")
        elapsed = time.perf_counter() - start
    finally:
        w.signal(signal.SIGTERM)
        w.wait(30)
        w.stop()
        os.unlink(w.log_path)
    client.delete(*q.keys.all_keys)
    return (jobs - first) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--concurrency", default="1,4,16")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]

    server = RedisServer().start()
    sink, sink_port = start_sink()
    try:
        ping, evalsha = asyncio.run(redis_round_trips(server.url))
        smtp = asyncio.run(smtp_raw(sink_port))
        print(f"machine: {os.cpu_count()} CPUs, {server.binary} ({sys.version.split()[0]})")
        print(f"raw Redis, 1 connection, sequential: PING {ping:8.0f}/s  EVALSHA {evalsha:8.0f}/s")
        print(f"raw SMTP, 1 reused aiosmtplib connection to the sink: {smtp:8.0f} mails/s")
        print()
        print(f"{'handler':<8} {'concurrency':>11} {'jobs/s':>9} {'/EVALSHA':>9} {'/SMTP':>7}")
        results = {}
        for handler in ("noop", "smtp"):
            for c in levels:
                jobs = args.jobs if handler == "noop" else max(2000, args.jobs // 4)
                rate = run_worker(server.url, sink_port, jobs, c, handler)
                results[f"{handler}/{c}"] = rate
                print(f"{handler:<8} {c:>11} {rate:9.0f} {rate / evalsha:9.2f} {rate / smtp:7.2f}")
        print(json.dumps({"ping": ping, "evalsha": evalsha, "smtp_raw": smtp, **results}))
    finally:
        sink.send_signal(signal.SIGINT)
        sink.wait(10)
        server.cleanup()


if __name__ == "__main__":
    main()
