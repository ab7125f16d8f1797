"""Postfix's ``smtp-sink`` (Debian's postfix package; a C server with one event loop, the
receiving side of the benchmarks) on a free loopback port, every mail transaction dumped to a
file so a test can count what arrived.

``PostfixSink("-p").start()``: extra arguments are smtp-sink options (``man
smtp-sink``): ``-p`` no PIPELINING in the EHLO reply, ``-Q RCPT`` a 421 reply and a disconnect
after every RCPT, ``-f MAIL`` / ``-r RCPT`` 5xx / 4xx refusals (those two imply ``-p``).
:meth:`messages` parses the dumps: ``X-Mail-Args``/``X-Rcpt-Args`` records, then the content
exactly as received (dot-stuffing undone by the server).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import free_port


def smtp_sink_binary() -> str:
    """The smtp-sink path; RuntimeError naming the fix when it is missing."""
    for candidate in (shutil.which("smtp-sink"), "/usr/sbin/smtp-sink"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError(
        "smtp-sink not found: apt-get install postfix (hack/bootstrap does; only the "
        "smtp-sink tool is used, no Postfix daemon is configured or started)"
    )


@dataclass(frozen=True)
class Dumped:
    """One mail transaction smtp-sink received: sender, recipients, content."""

    sender: str
    recipients: tuple[str, ...]
    content: bytes


class PostfixSink:
    """smtp-sink on 127.0.0.1 (see the module docstring)."""

    def __init__(self, *options: str) -> None:
        self.options = options
        self.port = free_port()
        #: the dump folder: its own under the system temp folder, because smtp-sink drops
        #: root privileges to nobody (-u), who cannot enter pytest's 0700 tmp_path
        self.dumps = Path(tempfile.mkdtemp(prefix="smtp-sink-"))
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> PostfixSink:
        self.dumps.chmod(0o777)
        self._proc = subprocess.Popen(
            [
                smtp_sink_binary(),
                "-u",
                "nobody",
                "-d",
                f"{self.dumps}/%H%M%S.",
                *self.options,
                f"127.0.0.1:{self.port}",
                "64",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"220"):
                        return self
            except OSError:
                pass
            if self._proc.poll() is not None or time.monotonic() > deadline:
                err = self._proc.stderr.read().decode() if self._proc.stderr else ""
                self.stop()
                raise RuntimeError(f"smtp-sink did not start on :{self.port}: {err}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop smtp-sink and delete the dumps (read :meth:`messages` before)."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        self._proc = None
        shutil.rmtree(self.dumps, ignore_errors=True)

    def __enter__(self) -> PostfixSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def messages(self) -> list[Dumped]:
        """Every transaction dumped so far (file order: modification time, then name). A
        transaction that ended before DATA also leaves a file, with empty ``content`` (and
        its records possibly not written yet)."""
        out = []
        for path in sorted(self.dumps.iterdir(), key=lambda p: (p.stat().st_mtime, p.name)):
            raw = path.read_bytes()
            sender, recipients, content = "", [], b""
            lines = raw.split(b"\n")
            for i, line in enumerate(lines):
                if line.startswith(b"X-Mail-Args: "):
                    sender = line[13:].decode().strip("<>")
                elif line.startswith(b"X-Rcpt-Args: "):
                    recipients.append(line[13:].decode().strip("<>"))
                elif line.startswith(b"Received: "):  # smtp-sink's own header starts the content
                    rest = b"\n".join(lines[i + 1 :])
                    content = rest.split(b"\n", 2)[2] if rest.count(b"\n") >= 2 else b""
                    break
            out.append(Dumped(sender, tuple(recipients), content))
        return out
