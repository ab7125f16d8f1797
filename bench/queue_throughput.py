"""Queue drain throughput: one Python process, no-op handler.

Run: ``.venv/bin/python bench/queue_throughput.py [--jobs 5000] [--repeat 9]``

Measured in the same run, against one fresh ``redis-server`` on loopback (started here unless
``--redis-url`` is given):

* ``ping``        redis-py PING loop: the round-trip limit of one Python connection;
* ``redis-benchmark``  ``redis-benchmark -t ping_inline -c 1 -P 1`` (C client, if installed);
* ``laravel-4rt`` Laravel's loop per job: migrate delayed, migrate reserved, pop, ZREM
  (``RedisQueue::pop`` + ``RedisJob::delete``), with scripts equivalent to LuaScripts.php sent
  by EVALSHA;
* ``laravel-4rt-eval``  the same loop sending the script text with EVAL every time, as Laravel
  and phpredis really do;
* ``fused-1``     ``Queue.reserve(count=1, ack=[previous])``: one round trip per job;
* ``fused-10``    ``Queue.reserve(count=10, ack=previous ten)``: one round trip per 10 jobs;
* ``async-fused-1`` / ``async-fused-10``: the same through ``AsyncQueue`` (redis.asyncio),
  as the worker drains (trips/job is not counted for these: shown as -).

Every round runs each variant once, back to back; prints jobs/s (median over rounds) and the
median of per-round ratios against the Laravel loop and PING (pairing cancels load drift on a
shared machine).
Benchmarks are not tests: nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sendgroup_contract import jobs
from sendgroup_worker.queue import Ack, AsyncQueue, Queue, QueueKeys
from tests.support.redis_server import RedisServer

# Equivalent of Laravel 11's LuaScripts::migrateExpiredJobs() (bench peer only).
LARAVEL_MIGRATE = """
local val = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1], 'limit', 0, ARGV[2])
if(next(val) ~= nil) then
    redis.call('zremrangebyrank', KEYS[1], 0, #val - 1)
    for i = 1, #val, 100 do
        redis.call('rpush', KEYS[2], unpack(val, i, math.min(i+99, #val)))
        for j = i, math.min(i+99, #val) do
            redis.call('rpush', KEYS[3], 1)
        end
    end
end
return val
"""

# Equivalent of Laravel 11's LuaScripts::pop() (bench peer only).
LARAVEL_POP = """
local job = redis.call('lpop', KEYS[1])
local reserved = false
if(job ~= false) then
    reserved = cjson.decode(job)
    reserved['attempts'] = reserved['attempts'] + 1
    reserved = cjson.encode(reserved)
    redis.call('zadd', KEYS[2], ARGV[1], reserved)
    redis.call('lpop', KEYS[3])
end
return {job, reserved}
"""


def payloads(n: int) -> list[bytes]:
    """``n`` Laravel-shaped mail payloads (~450 bytes each)."""
    out = []
    for i in range(n):
        data = {
            "to": f"user{i}@example.test",
            "from": "news@example.test",
            "subject": "Hello",
            "template": "welcome",
            "vars": {"name": f"User {i}"},
        }
        body = jobs.envelope(data, pushed_at=time.time())
        out.append(json.dumps(body, separators=(",", ":")).encode())
    return out


class CountingConnection(redis.Connection):
    """A redis-py connection that counts the requests it sends (round trips, unpipelined)."""

    sent = 0

    def send_packed_command(self, command: object, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)  # type: ignore[arg-type]


def fill(q: Queue, items: list[bytes]) -> None:
    q.redis.flushdb()
    q.push_many(items)


def drain_laravel(client: redis.Redis, keys: QueueKeys, retry_after: int) -> int:
    migrate = client.register_script(LARAVEL_MIGRATE)
    pop = client.register_script(LARAVEL_POP)
    n = 0
    while True:
        now = int(time.time())
        migrate(keys=[keys.delayed, keys.ready, keys.notify], args=[now, 100])
        migrate(keys=[keys.reserved, keys.ready, keys.notify], args=[now, 100])
        job, reserved = pop(keys=[keys.ready, keys.reserved, keys.notify], args=[now + retry_after])
        if job is None:
            return n
        n += 1  # the no-op handler
        client.zrem(keys.reserved, reserved)


def drain_laravel_eval(client: redis.Redis, keys: QueueKeys, retry_after: int) -> int:
    """:func:`drain_laravel` sending the script text with EVAL each time, as Laravel does."""
    n = 0
    k3 = 3
    while True:
        now = int(time.time())
        client.eval(LARAVEL_MIGRATE, k3, keys.delayed, keys.ready, keys.notify, now, 100)
        client.eval(LARAVEL_MIGRATE, k3, keys.reserved, keys.ready, keys.notify, now, 100)
        job, reserved = client.eval(
            LARAVEL_POP, k3, keys.ready, keys.reserved, keys.notify, now + retry_after
        )
        if job is None:
            return n
        n += 1
        client.zrem(keys.reserved, reserved)


def drain_fused(q: Queue, count: int) -> int:
    n = 0
    acks: list[Ack] = []
    while True:
        jobs = q.reserve(count=count, ack=acks)
        if not jobs:
            if acks:
                q.reserve(count=0, ack=acks)
            return n
        n += len(jobs)  # the no-op handler
        acks = [Ack.of(j) for j in jobs]


def drain_fused_async(url: str, keys: QueueKeys, count: int) -> int:
    """:func:`drain_fused` through :class:`AsyncQueue` (what the worker uses)."""

    async def run() -> int:
        client = redis.asyncio.Redis.from_url(url)
        aq = AsyncQueue(client, keys, retry_after=90)
        n = 0
        acks: list[Ack] = []
        try:
            while True:
                jobs = await aq.reserve(count=count, ack=acks)
                if not jobs:
                    if acks:
                        await aq.reserve(count=0, ack=acks)
                    return n
                n += len(jobs)
                acks = [Ack.of(j) for j in jobs]
        finally:
            await client.aclose()

    return asyncio.run(run())


def ping_rate(client: redis.Redis, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        client.ping()
    return n / (time.perf_counter() - started)


def redis_benchmark_rate(port: int, n: int) -> float | None:
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return None
    out = subprocess.run(
        [binary, "-h", "127.0.0.1", "-p", str(port), "-t", "ping_inline", "-c", "1", "-P", "1",
         "-n", str(n), "-q"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    m = re.search(r"([0-9.]+) requests per second", out.stdout.replace("\r", "\n"))
    return float(m.group(1)) if m else None


@dataclass
class Run:
    """One drain: jobs/s, round trips per job, CPU microseconds per job (this Python process
    and the redis-server process). CPU per job hardly depends on other load on the machine,
    unlike jobs/s."""

    rate: float
    trips: float
    client_us: float
    server_us: float


def server_cpu(client: redis.Redis) -> float:
    """redis-server's CPU seconds so far (user + system)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def timed(
    client: redis.Redis, setup: Callable[[], None], body: Callable[[], int], expected: int
) -> Run:
    """Measure ``body`` (which drains ``expected`` jobs) after ``setup``."""
    setup()
    cpu0, srv0 = time.process_time(), server_cpu(client)
    sent = CountingConnection.sent
    started = time.perf_counter()
    done = body()
    elapsed = time.perf_counter() - started
    trips = (CountingConnection.sent - sent) / max(done, 1)
    cpu1, srv1 = time.process_time(), server_cpu(client)
    if done != expected:
        raise RuntimeError(f"drained {done} jobs, expected {expected}")
    return Run(
        rate=done / elapsed,
        trips=trips,
        client_us=(cpu1 - cpu0) / done * 1e6,
        server_us=(srv1 - srv0) / done * 1e6,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--jobs", type=int, default=5_000, help="jobs per drain run")
    ap.add_argument("--repeat", type=int, default=9, help="rounds (every variant once per round)")
    ap.add_argument("--redis-url", default=None, help="use this Redis (it is FLUSHDB'd!)")
    args = ap.parse_args()

    server = None
    if args.redis_url is None:
        server = RedisServer().start()
        url = server.url
    else:
        url = args.redis_url
    try:
        pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection)
        client = redis.Redis(connection_pool=pool)
        keys = QueueKeys("bench")
        q = Queue(client, keys, retry_after=90)
        items = payloads(args.jobs)
        names = ["ping", "laravel-4rt", "laravel-4rt-eval", "fused-1", "fused-10"]
        names += ["async-fused-1", "async-fused-10"]
        results: dict[str, list[float]] = {n: [] for n in names}
        trips: dict[str, float] = {"ping": 1.0}
        drains: dict[str, Callable[[], int]] = {
            "laravel-4rt": lambda: drain_laravel(client, keys, 90),
            "laravel-4rt-eval": lambda: drain_laravel_eval(client, keys, 90),
            "fused-1": lambda: drain_fused(q, 1),
            "fused-10": lambda: drain_fused(q, 10),
            "async-fused-1": lambda: drain_fused_async(url, keys, 1),
            "async-fused-10": lambda: drain_fused_async(url, keys, 10),
        }
        cpu: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
        for _ in range(args.repeat):
            results["ping"].append(ping_rate(client, args.jobs))
            for name, drain in drains.items():
                run = timed(client, lambda: fill(q, items), drain, args.jobs)
                results[name].append(run.rate)
                trips[name] = run.trips
                cpu[name].append((run.client_us, run.server_us))
        port = server.port if server else client.connection_pool.connection_kwargs.get("port")
        rb = redis_benchmark_rate(int(port or 6379), args.jobs * 2)
        med = {k: statistics.median(v) for k, v in results.items()}

        def paired(k: str, base: str) -> float:
            """Median over rounds of k/base measured back to back (cancels load drift)."""
            return statistics.median(a / b for a, b in zip(results[k], results[base], strict=True))

        info = client.info("server")
        print(
            f"redis {info['redis_version']}, {args.jobs} jobs per run, {args.repeat} rounds; "
            "ratios are medians of per-round ratios"
        )
        print(
            f"{'variant':<18}{'per second':>12}{'vs laravel':>12}{'vs ping':>10}{'trips/job':>11}"
            f"{'cpu us/job':>16}  range over rounds"
        )
        for k, v in med.items():
            unit = "round trips" if k == "ping" else "jobs"
            per_job = f"{trips[k]:.2f}" if trips[k] else "-"
            lo, hi = min(results[k]), max(results[k])
            if cpu[k]:
                c_us = statistics.median(c for c, _ in cpu[k])
                s_us = statistics.median(sv for _, sv in cpu[k])
                cpu_text = f"{c_us:.0f} + {s_us:.0f}"
            else:
                cpu_text = "-"
            print(
                f"{k:<18}{v:>12,.0f}{paired(k, 'laravel-4rt'):>11.2f}x{paired(k, 'ping'):>9.2f}x"
                f"{per_job:>11}{cpu_text:>16}  {lo:,.0f}..{hi:,.0f} {unit}/s"
            )
        print("cpu us/job = this Python process + redis-server, CPU microseconds per job")
        if rb is not None:
            print(f"{'redis-benchmark':<18}{rb:>12,.0f}{'':>12}{rb / med['ping']:>9.2f}x"
                  "  (PING_INLINE round trips, C client, 1 connection)")  # fmt: skip
    finally:
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
