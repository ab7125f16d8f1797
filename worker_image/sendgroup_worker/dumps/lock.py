"""A per-queue lock for dump, restore and purge: ``SET key token NX PX ttl``, renewed by a
background thread while the command works, released by compare-and-delete.

The pattern is the single-instance lock of the Redis documentation (``SET`` page, "Patterns"):
a random owner token, an expiry so a killed holder cannot block the queue forever, and scripts
that renew or delete the key only while it still holds our token. Correctness of dump and
restore does not depend on the lock alone (staging and per-chunk restore progress are
idempotent); the lock keeps two operators' Jobs from interleaving and gives a clear message.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from types import TracebackType
from typing import Final

from sendgroup_worker.dumps.redisconn import Client, script
from sendgroup_worker.queue.keys import QueueKeys

_RENEW: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class LockHeld(Exception):
    """Another dump/restore/purge holds the queue's lock; the message names key and holder."""


class LockLost(Exception):
    """Our lock expired or was taken over while we worked; the command must stop."""


class QueueLock:
    """The lock of one queue (key :attr:`QueueKeys.lock`), as a context manager.

    ``command`` names the holder in the token (``dump@host/pid/random``); ``ttl`` is the expiry
    in seconds, renewed every ``ttl / 3`` seconds by a daemon thread; ``wait`` is how long
    :meth:`acquire` polls for a held lock before raising :class:`LockHeld`.
    """

    def __init__(
        self, client: Client, keys: QueueKeys, command: str, ttl: float = 30.0, wait: float = 0.0
    ) -> None:
        if ttl <= 0:
            raise ValueError("lock ttl must be > 0 seconds")
        self.client = client
        self.key = keys.lock
        self.queue = keys.queue
        self.ttl_ms = max(1, int(ttl * 1000))
        self.wait = wait
        host = socket.gethostname()[:63]
        self.token = f"{command}@{host}/{os.getpid()}/{uuid.uuid4().hex[:12]}"
        self._renew = script(client, _RENEW)
        self._release = script(client, _RELEASE)
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`LockHeld` (after polling up to ``wait`` seconds)."""
        deadline = time.monotonic() + self.wait
        while True:
            if self.client.set(self.key, self.token, nx=True, px=self.ttl_ms):
                break
            if time.monotonic() >= deadline:
                holder = self.client.get(self.key)
                pttl = self.client.pttl(self.key)
                who = holder.decode(errors="replace") if isinstance(holder, bytes) else holder
                expires = f"expires in {pttl / 1000:.1f}s" if pttl and pttl > 0 else "expiring"
                raise LockHeld(
                    f"queue {self.queue!r} is locked by {who} (lock key {self.key}, {expires}); "
                    "another dump, restore or purge of this queue is running"
                )
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())) or 0.01)
        self._thread = threading.Thread(target=self._renew_loop, name="queue-lock", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        interval = self.ttl_ms / 3000
        last_ok = time.monotonic()
        while not self._stop.wait(interval):
            try:
                if int(self._renew(keys=[self.key], args=[self.token, self.ttl_ms])) == 1:
                    last_ok = time.monotonic()
                    continue
                self._lost.set()
                return
            except Exception:  # transient Redis error: keep trying until the lock has expired
                if time.monotonic() - last_ok > self.ttl_ms / 1000:
                    self._lost.set()
                    return

    def ensure(self) -> None:
        """Raise :class:`LockLost` if the renewal thread saw the lock expire or change hands.

        Called before every destructive step."""
        if self._lost.is_set():
            raise LockLost(
                f"lost the lock {self.key} of queue {self.queue!r} (expired or taken over); "
                "stopped before the next change; run the command again"
            )

    def release(self) -> None:
        """Stop renewing and delete the key if it still holds our token."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        with contextlib.suppress(Exception):  # else the key expires by itself
            self._release(keys=[self.key], args=[self.token])

    def __enter__(self) -> QueueLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
