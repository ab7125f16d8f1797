"""The peer side of scenarios 1 and 2: enqueue with each library's own API, or run one worker
process of it, in the interpreter that has the library (``.venv-bench``, or ``.venv-bench-arq``
for arq, whose redis-py pin conflicts with ours).

Run by ``bench/scenarios/worker.py`` and ``smtp.py``, never by hand::

    python -m bench.peer_workers enqueue PEER --url URL --jobs N --size BYTES
    python -m bench.peer_workers work PEER --url URL --stamp-fd FD [--concurrency C]
        [--smtp HOST:PORT] [--jobs N]

Every worker's task body is :func:`job_body`: optionally send the payload as a mail (the same
send code as the plain loops), then write one 8-byte stamp (``time.time()`` as a C double) to
the inherited pipe ``--stamp-fd``. The benchmark reads the stamps: first stamp = start of the
timed window, N-th stamp = end, each stamp's time = that job's pickup (for the idle latency).
No Redis traffic of our own inside the workers: the round trips counted are the library's.

Peers ("loop-*" send mails from memory, no queue, as the SMTP baselines):
``laravel-loop`` (a Python loop of Laravel 11's LuaScripts pop/migrate + ZREM per job, EVALSHA,
BLPOP on notify when empty: not Laravel), ``rq`` (SimpleWorker), ``arq``, ``saq``, ``dramatiq``
(RedisBroker, in-process Worker; ``dramatiq_queue_prefetch`` from the environment), ``celery``
(Redis broker, solo pool), ``loop-smtplib-new``, ``loop-smtplib-reused``,
``loop-aiosmtplib-reused``; ``dramatiq-gevent`` and ``celery-gevent`` are Dramatiq and Celery
on gevent (greenlets for threads, Celery's ``--pool=gevent``), run through
``bench.peer_gevent``, which monkey-patches the standard library before anything else.
Laravel's own worker (``php artisan queue:work``, bench/laravel/artisan) is run by the scenario
directly; here only its jobs are enqueued (``enqueue laravel``: Laravel's layout, as ours, the
job class ``Bench\\Stamp@fire``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import smtplib
import struct
import sys
import threading
import time
import uuid
from typing import Any

from sendgroup_contract import jobs

QUEUE = "bench"
#: the Laravel peer's no-op job (bench/laravel/Bench/Stamp.php), named as Laravel names a raw job
LARAVEL_JOB = "Bench\\Stamp@fire"
#: Celery's prefetch multiplier (its optimizing guide: "64, or 128" for many short tasks)
CELERY_PREFETCH = 128
#: the peers run on gevent (``bench.peer_gevent`` patches first): the library they use
GEVENT_PEERS = {"dramatiq-gevent": "dramatiq", "celery-gevent": "celery"}
STAMP = struct.Struct("d")

_stamp_fd = -1
_smtp: tuple[str, int] | None = None
_local = threading.local()


#: one padding line of the mail text: 71 characters and its line end (mail bodies keep lines
#: under RFC 5322's 78; one 1.2 KB line would send every builder down its quoted-printable path)
_LINE = "x" * 71 + "\n"


def payload(i: int, size: int, job: str = jobs.MAIL_JOB) -> str:
    """A Laravel-shaped mail job of ``size`` bytes (JSON, the text padded to reach it with
    72-character lines); ``job`` names the handler (Laravel's worker: :data:`LARAVEL_JOB`)."""
    job_id = str(uuid.UUID(int=i + 1))
    data = {
        "to": f"user{i}@bench.example",
        "from": "campaign@sender.example",
        "subject": f"Hello {i}",
        "text": "",
    }
    body = jobs.envelope(data, job=job, uuid=job_id, job_id=job_id.replace("-", ""))
    base = len(json.dumps(body, separators=(",", ":")))
    need = max(0, size - base)
    per_line = len(json.dumps(_LINE)) - 2  # the line as JSON text: "\n" is 2 bytes there
    body["data"]["text"] = _LINE * (need // per_line) + "x" * (need % per_line)
    return json.dumps(body, separators=(",", ":"))


def message(job: str) -> tuple[str, str, bytes]:
    """(sender, recipient, RFC 5322 bytes) of a job payload: the send code every SMTP peer and
    loop shares. Built by our worker's own builder (``sendgroup_worker.smtp.build_message``,
    the stdlib's compat32 API), so every sender of scenario 2 pays the same CPU per message:
    issue 19's audit found peers building with ``EmailMessage`` at 640-724 us a message
    against our 240-282 us, about the whole of the ours-vs-arq gap it had reported."""
    from sendgroup_worker.smtp import build_message

    body = json.loads(job)
    mail = build_message(body["data"], body["uuid"])
    return mail.sender, mail.recipients[0], mail.body


def stamp() -> None:
    """One 8-byte stamp to the benchmark (atomic: < PIPE_BUF)."""
    os.write(_stamp_fd, STAMP.pack(time.time()))


def send_sync(job: str, reuse: bool = True) -> None:
    """smtplib send; one reused connection per thread, or a new one per mail."""
    assert _smtp is not None
    sender, rcpt, raw = message(job)
    if not reuse:
        with smtplib.SMTP(_smtp[0], _smtp[1], local_hostname="bench") as client:
            client.sendmail(sender, [rcpt], raw)
        return
    client = getattr(_local, "smtp", None)
    if client is None:
        client = smtplib.SMTP(_smtp[0], _smtp[1], local_hostname="bench")
        _local.smtp = client
    client.sendmail(sender, [rcpt], raw)


_apool: asyncio.Queue[Any] | None = None


async def send_async(job: str) -> None:
    """aiosmtplib send over a pool of reused connections (one per concurrent task)."""
    import aiosmtplib

    global _apool
    assert _smtp is not None
    if _apool is None:
        _apool = asyncio.Queue()
    sender, rcpt, raw = message(job)
    try:
        client = _apool.get_nowait()
    except asyncio.QueueEmpty:
        client = aiosmtplib.SMTP(hostname=_smtp[0], port=_smtp[1], local_hostname="bench")
        await client.connect()
    try:
        await client.sendmail(sender, [rcpt], raw)
    except BaseException:
        client.close()
        raise
    _apool.put_nowait(client)


def job_body(job: str) -> None:
    """The sync peers' task: send (when --smtp) then stamp."""
    if _smtp is not None:
        send_sync(job)
    stamp()


async def ajob_body(job: str) -> None:
    """The async peers' task: send (when --smtp) then stamp."""
    if _smtp is not None:
        await send_async(job)
    stamp()


# --- task functions, importable by name for each library ------------------------------------
RQ_TASK = "bench.peer_workers.rq_task"


def rq_task(job: str) -> None:
    job_body(job)


async def arq_task(ctx: dict[str, Any], job: str) -> None:
    await ajob_body(job)


async def saq_task(ctx: dict[str, Any], *, job: str) -> None:
    await ajob_body(job)


_dramatiq_actor: Any = None
_celery_app: Any = None


def dramatiq_actor(url: str) -> Any:
    global _dramatiq_actor
    if _dramatiq_actor is None:
        import dramatiq
        from dramatiq.brokers.redis import RedisBroker

        broker = RedisBroker(url=url)
        dramatiq.set_broker(broker)

        @dramatiq.actor(queue_name=QUEUE, max_retries=0)
        def noop(job: str) -> None:
            job_body(job)

        _dramatiq_actor = noop
    return _dramatiq_actor


def celery_app(url: str) -> Any:
    global _celery_app
    if _celery_app is None:
        from celery import Celery

        app = Celery("bench", broker=url)
        app.conf.update(
            task_ignore_result=True,
            worker_prefetch_multiplier=CELERY_PREFETCH,
            task_default_queue=QUEUE,
            broker_connection_retry_on_startup=True,
            worker_hijack_root_logger=False,
        )

        @app.task(name="bench.noop")
        def noop(job: str) -> None:
            job_body(job)

        _celery_app = app
    return _celery_app


# --- enqueue ----------------------------------------------------------------------------------
#: peers whose jobs are pushed in Laravel's layout (RPUSH queues:<q> + RPUSH queues:<q>:notify)
LARAVEL_LAYOUT = ("ours", "laravel", "laravel-loop")


class Enqueuer:
    """Pushes jobs with the peer's own API: :meth:`many` (batched where the API allows) and
    :meth:`one`."""

    def __init__(self, peer: str, url: str) -> None:
        peer = GEVENT_PEERS.get(peer, peer)  # the same queue and payloads as without gevent
        self.peer = peer
        self.url = url
        self.loop = asyncio.new_event_loop()
        self.handle: Any = None
        if peer in LARAVEL_LAYOUT:
            import redis

            self.handle = redis.Redis.from_url(url)
        elif peer == "rq":
            import redis
            from rq import Queue

            self.handle = Queue(QUEUE, connection=redis.Redis.from_url(url))
        elif peer == "arq":
            from arq import create_pool
            from arq.connections import RedisSettings

            self.handle = self.loop.run_until_complete(create_pool(RedisSettings.from_dsn(url)))
        elif peer == "saq":
            from saq import Queue as SaqQueue

            self.handle = SaqQueue.from_url(url, name=QUEUE)
            self.loop.run_until_complete(self.handle.connect())
        elif peer == "dramatiq":
            self.handle = dramatiq_actor(url)
        elif peer == "celery":
            self.handle = celery_app(url)
        else:
            raise SystemExit(f"unknown peer {peer}")

    def many(self, items: list[str]) -> None:
        peer, h = self.peer, self.handle
        if peer in LARAVEL_LAYOUT:
            # Laravel's RedisQueue::pushRaw (RPUSH ready + RPUSH notify), batched
            for start in range(0, len(items), 1000):
                chunk = items[start : start + 1000]
                pipe = h.pipeline(transaction=False)
                pipe.rpush(f"queues:{QUEUE}", *chunk)
                pipe.rpush(f"queues:{QUEUE}:notify", *([1] * len(chunk)))
                pipe.execute()
        elif peer == "rq":
            from rq import Queue

            for start in range(0, len(items), 500):
                h.enqueue_many(
                    [
                        Queue.prepare_data(RQ_TASK, args=(j,), result_ttl=0)
                        for j in items[start : start + 500]
                    ]
                )
        elif peer in ("arq", "saq"):

            async def go() -> None:
                for start in range(0, len(items), 200):
                    await asyncio.gather(*(self._aone(j) for j in items[start : start + 200]))

            self.loop.run_until_complete(go())
        elif peer == "celery":
            with h.producer_or_acquire() as producer:
                for j in items:
                    h.send_task("bench.noop", args=(j,), producer=producer)
        else:
            for j in items:
                self.one(j)

    async def _aone(self, job: str) -> None:
        if self.peer == "arq":
            await self.handle.enqueue_job("arq_task", job)
        else:
            await self.handle.enqueue("saq_task", job=job)

    def one(self, job: str) -> None:
        peer, h = self.peer, self.handle
        if peer in LARAVEL_LAYOUT:
            pipe = h.pipeline(transaction=False)
            pipe.rpush(f"queues:{QUEUE}", job)
            pipe.rpush(f"queues:{QUEUE}:notify", 1)
            pipe.execute()
        elif peer == "rq":
            h.enqueue(RQ_TASK, job, result_ttl=0)
        elif peer in ("arq", "saq"):
            self.loop.run_until_complete(self._aone(job))
        elif peer == "dramatiq":
            h.send(job)
        elif peer == "celery":
            h.send_task("bench.noop", args=(job,))


def job_name(peer: str) -> str:
    """The handler the payloads name for ``peer``'s worker."""
    return LARAVEL_JOB if peer == "laravel" else jobs.MAIL_JOB


def enqueue(peer: str, url: str, count: int, size: int) -> None:
    """Push ``count`` payloads of ``size`` bytes, then exit."""
    Enqueuer(peer, url).many([payload(i, size, job_name(peer)) for i in range(count)])


def push_on_request(peer: str, url: str, size: int) -> None:
    """For the idle pickup latency: on each stdin line push one job and print the
    ``time.time()`` taken just before the push call; exit at EOF."""
    enq = Enqueuer(peer, url)
    job = payload(0, size, job_name(peer))
    for _ in sys.stdin:
        started = time.time()
        enq.one(job)
        print(repr(started), flush=True)


# --- work ---------------------------------------------------------------------------------------
def work_laravel(url: str, block_for: int) -> None:
    """Laravel 11's worker loop per job: migrate delayed, migrate reserved, pop (LuaScripts.php,
    by EVALSHA), run, ZREM from reserved (RedisJob::delete); BLPOP on notify when empty."""
    import redis

    from bench.queue_throughput import LARAVEL_MIGRATE, LARAVEL_POP

    client = redis.Redis.from_url(url)
    migrate = client.register_script(LARAVEL_MIGRATE)
    pop = client.register_script(LARAVEL_POP)
    ready, delayed = f"queues:{QUEUE}", f"queues:{QUEUE}:delayed"
    reserved, notify = f"queues:{QUEUE}:reserved", f"queues:{QUEUE}:notify"
    while True:
        now = int(time.time())
        migrate(keys=[delayed, ready, notify], args=[now, 100])
        migrate(keys=[reserved, ready, notify], args=[now, 100])
        job, res = pop(keys=[ready, reserved, notify], args=[now + 90])
        if job is None:
            client.blpop([notify], timeout=block_for)
            continue
        job_body(job.decode())
        client.zrem(reserved, res)


def work_loop(peer: str, jobs: int, size: int) -> None:
    """The plain SMTP loops: ``jobs`` mails from memory, no queue."""
    items = [payload(i, size) for i in range(jobs)]
    if peer == "loop-aiosmtplib-reused":

        async def go() -> None:
            for j in items:
                await ajob_body(j)

        asyncio.run(go())
        return
    reuse = peer == "loop-smtplib-reused"
    for j in items:
        send_sync(j, reuse=reuse)
        stamp()


def check_gevent(peer: str) -> None:
    """For a gevent peer: SystemExit unless the process was monkey-patched (socket, ssl,
    threading, select), then one line on stderr (the worker's log) saying it was."""
    from gevent import monkey

    missing = [
        m for m in ("socket", "ssl", "threading", "select") if not monkey.is_module_patched(m)
    ]
    if missing:
        raise SystemExit(f"{peer}: run through bench.peer_gevent (not patched: {missing})")
    print(f"{peer}: gevent monkey-patched socket, ssl, threading, select", file=sys.stderr)


def work(peer: str, url: str, concurrency: int, jobs: int, size: int) -> None:
    logging.basicConfig(level=logging.WARNING)
    pool = "solo"
    if peer in GEVENT_PEERS:
        check_gevent(peer)
        peer, pool = GEVENT_PEERS[peer], "gevent"
    if peer.startswith("loop-"):
        work_loop(peer, jobs, size)
    elif peer == "laravel-loop":
        work_laravel(url, block_for=5)
    elif peer == "rq":
        import redis
        from rq import Queue, SimpleWorker

        conn = redis.Redis.from_url(url)
        worker = SimpleWorker([Queue(QUEUE, connection=conn)], connection=conn)
        worker.work(burst=False, logging_level="WARNING", with_scheduler=False)
    elif peer == "arq":
        from arq.connections import RedisSettings
        from arq.worker import Worker as ArqWorker

        async def go() -> None:
            w = ArqWorker(
                functions=[arq_task],  # type: ignore[list-item]
                redis_settings=RedisSettings.from_dsn(url),
                max_jobs=concurrency,
                keep_result=0,
                handle_signals=False,
                poll_delay=0.05,
            )
            await w.main()

        asyncio.run(go())
    elif peer == "saq":
        from saq import Queue as SaqQueue
        from saq import Worker as SaqWorker

        async def go() -> None:
            q = SaqQueue.from_url(url, name=QUEUE)
            w = SaqWorker(q, functions=[saq_task], concurrency=concurrency)
            await w.start()

        asyncio.run(go())
    elif peer == "dramatiq":
        from dramatiq import Worker as DWorker

        actor = dramatiq_actor(url)
        w = DWorker(actor.broker, worker_threads=concurrency)
        w.start()
        threading.Event().wait()
    elif peer == "celery":
        app = celery_app(url)
        app.worker_main(
            argv=[
                "worker",
                f"--pool={pool}",
                f"--concurrency={concurrency if pool == 'gevent' else 1}",
                f"--prefetch-multiplier={CELERY_PREFETCH}",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
                "--loglevel=WARNING",
                f"--queues={QUEUE}",
            ]
        )
    else:
        raise SystemExit(f"unknown peer {peer}")


def main() -> None:
    global _stamp_fd, _smtp
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["enqueue", "push", "work"])
    ap.add_argument("peer")
    ap.add_argument("--url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--size", type=int, default=1536)
    ap.add_argument("--stamp-fd", type=int, default=-1)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--smtp", default="", help="HOST:PORT: send each job as a mail there")
    args = ap.parse_args()
    _stamp_fd = args.stamp_fd
    if args.smtp:
        host, port = args.smtp.rsplit(":", 1)
        _smtp = (host, int(port))
    if args.mode == "enqueue":
        enqueue(args.peer, args.url, args.jobs, args.size)
    elif args.mode == "push":
        push_on_request(args.peer, args.url, args.size)
    else:
        work(args.peer, args.url, args.concurrency, args.jobs, args.size)
    sys.exit(0)


if __name__ == "__main__":
    # run inside the importable module, so the libraries' workers (which import task functions
    # by name) see the same globals (stamp fd, SMTP target)
    from bench.peer_workers import main as _main

    _main()
