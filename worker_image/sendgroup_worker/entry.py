"""The ``sendgroup-worker`` console script's first instructions.

A container's main process may be PID 1, for which the kernel drops every signal that has no
handler; and even when it is not, Python needs a few hundred milliseconds of start-up and
imports before the worker installs its asyncio signal handlers. A pod scaled down or paused in
that window would ignore SIGTERM (issue: a pause right after a worker started was ignored and
19 mails went out after the group showed ``Paused``). So, before importing anything else, this
module installs plain handlers for SIGTERM and SIGINT that only record the signal; the worker
stops at once, before taking a job, when it finds one recorded (:func:`early_signal`).

Only ``work`` gets them: the dump/restore/purge commands keep the default action (the process
ends; those commands are crash-safe by design and resume on the next run). Code that runs
before the asyncio handlers and needs its own (the worker's first question to Redis, which
may wait) installs :func:`record` too, so a signal is never kept anywhere else and lost.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Final

#: The signals that stop the worker: recorded here until its asyncio handlers take over
#: (``Worker.run``), and by the code before them that must wait (see the module docstring).
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)

_received: list[str] = []


def record(signum: int, _frame: FrameType | None) -> None:
    """A ``signal.signal`` handler: remember the signal for :func:`early_signal`."""
    _received.append(signal.Signals(signum).name)


def early_signal() -> str:
    """The name of the first signal recorded before the worker's own handlers, or ""."""
    return _received[0] if _received else ""


def main() -> None:
    """Install the early handlers (``work`` only), then run the click group."""
    if len(sys.argv) > 1 and sys.argv[1] == "work":
        for sig in STOP_SIGNALS:
            signal.signal(sig, record)
    from sendgroup_worker.cli import main as cli_main

    cli_main()
