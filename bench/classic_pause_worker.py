"""``python -m bench.classic_pause_worker URL QUEUE FLAG_KEY RELEASE_DELAY``: the classic way to
pause one group on a shared Laravel queue, as a faithful loop over the same Redis layout.

What ``php artisan queue:work redis`` does per loop with a job middleware that checks a "paused"
flag and calls ``$job->release($delay)`` (Laravel 11, ``Illuminate/Queue/Worker.php``,
``RedisQueue.php``, ``LuaScripts.php``; ``block_for`` unset, ``--sleep=3``):

1. ``Worker::daemon`` -> ``stopIfNecessary`` -> ``queueShouldRestart``: GET
   ``illuminate:queue:restart`` from the cache (a Redis cache store);
2. ``RedisQueue::pop``: EVAL migrateExpiredJobs(delayed -> ready), EVAL
   migrateExpiredJobs(reserved -> ready) (``migrationBatchSize`` -1 = all due), EVAL pop;
3. no job: sleep 3 s (``--sleep``) and loop;
4. the middleware: GET the group's paused flag (``Cache::get``); set -> ``$job->release($delay)``
   = EVAL release (ZREM reserved, ZADD delayed at now + delay).

Scripts are sent as text with EVAL each time, as phpredis does. Prints ``READY`` once connected;
stops on SIGTERM. Released jobs keep their incremented ``attempts`` (so in Laravel a paused job
also burns its tries unless ``$tries = 0`` or ``retryUntil`` is set).
"""

from __future__ import annotations

import signal
import sys
import time

import redis

from bench.queue_throughput import LARAVEL_MIGRATE, LARAVEL_POP
from sendgroup_worker.queue.keys import QueueKeys

# Laravel 11's LuaScripts::migrateExpiredJobs() and ::pop(), as the throughput bench has them.
MIGRATE, POP = LARAVEL_MIGRATE, LARAVEL_POP

# LuaScripts::release() (Laravel 11).
RELEASE = """
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('zadd', KEYS[1], ARGV[2], ARGV[1])
return true
"""

RESTART_KEY = "laravel_cache:illuminate:queue:restart"
RETRY_AFTER = 90
SLEEP = 3.0


def main() -> None:
    url, queue, flag_key, delay = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    keys = QueueKeys(queue)
    client = redis.Redis.from_url(url)
    client.ping()
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    print("READY", flush=True)
    while not stop:
        client.get(RESTART_KEY)
        now = int(time.time())
        client.eval(MIGRATE, 3, keys.delayed, keys.ready, keys.notify, now, -1)
        client.eval(MIGRATE, 3, keys.reserved, keys.ready, keys.notify, now, -1)
        job, reserved = client.eval(
            POP, 3, keys.ready, keys.reserved, keys.notify, now + RETRY_AFTER
        )
        if job is None:
            deadline = time.monotonic() + SLEEP
            while not stop and time.monotonic() < deadline:
                time.sleep(0.1)
            continue
        if client.get(flag_key) is not None:
            client.eval(RELEASE, 2, keys.delayed, keys.reserved, reserved, now + delay)
        else:  # not paused: the job would run here; the benchmark never gets here
            client.zrem(keys.reserved, reserved)


if __name__ == "__main__":
    main()
