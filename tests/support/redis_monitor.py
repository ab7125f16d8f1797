"""Redis ``MONITOR`` as a test's witness: every command the server runs that contains a given
text (e.g. a provider's hash tag), with the server's timestamp (seconds since the epoch)."""

from __future__ import annotations

import threading

import redis


class Monitor:
    """Records every command that contains ``tag``, read by a thread from ``MONITOR`` on its
    own connection to ``url``. :meth:`close` ends it."""

    def __init__(self, url: str, tag: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.tag = tag
        self.seen: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(5), "MONITOR did not start"

    def _run(self) -> None:
        with self.client.monitor() as m:
            self._ready.set()
            while not self._stop.is_set():
                try:
                    cmd = m.next_command()
                except (redis.ConnectionError, ValueError):
                    return
                text = str(cmd.get("command", ""))
                if self.tag in text:  # stamped with the server's time of the command
                    self.seen.append((float(cmd["time"]), text))

    def since(self, t: float, until: float = float("inf")) -> list[str]:
        """The commands seen from ``t`` (and before ``until``), epoch seconds."""
        return [c for at, c in list(self.seen) if t <= at < until]

    def close(self) -> None:
        self._stop.set()
        self.client.ping()  # one more command wakes the reader
        self._thread.join(5)
        self.client.close()
