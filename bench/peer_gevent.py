"""The entry of the peers' gevent workers (``dramatiq-gevent``, ``celery-gevent``): patch the
standard library with gevent's monkey first, as Dramatiq's own ``dramatiq-gevent`` command
does (``monkey.patch_all()``, then ``dramatiq.cli.main``) and as ``celery worker -P gevent``
does (``celery.__main__`` -> ``maybe_patch_concurrency`` -> ``gevent.monkey.patch_all()``),
then run :mod:`bench.peer_workers` as usual. After the patch, ``smtplib``'s sockets and the
libraries' threads are cooperative: every task body (``bench.peer_workers.job_body``, smtplib
per thread, now per greenlet) yields while it waits for the SMTP server.

Run by the scenarios (``bench.scenarios.worker.worker_argv``), never by hand::

    python -m bench.peer_gevent work dramatiq-gevent --url URL --stamp-fd FD --concurrency C
"""

from gevent import monkey

monkey.patch_all()

from bench.peer_workers import main  # noqa: E402  (the patch must come before any import)

if __name__ == "__main__":
    main()
