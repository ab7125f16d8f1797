"""Deterministic crash points for the fault-injection tests.

``SENDGROUP_DUMPS_CRASH_AT=<step>`` (or ``<step>@<n>`` for the n-th time the step is reached)
makes the command kill itself with SIGKILL at that step: no cleanup, no ``finally``, exactly
what an OOM kill or a node loss does. ``SENDGROUP_DUMPS_STOP_AT`` (same syntax) makes it stop
itself with SIGSTOP instead, so a test can run a second command against a lock that is
really held, then let the first one continue with SIGCONT. Unset in production; the step
names are listed in :data:`STEPS`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Final

ENV: Final = "SENDGROUP_DUMPS_CRASH_AT"
STOP_ENV: Final = "SENDGROUP_DUMPS_STOP_AT"
#: ``<step>=<seconds>``: sleep that long each time the step is reached (slows a run down
#: deterministically, e.g. to prove the lock is renewed).
SLOW_ENV: Final = "SENDGROUP_DUMPS_SLOW"

STEPS: Final = (
    "dump:after-stage",  # live keys renamed to staging, nothing written yet
    "dump:read-chunk",  # a chunk read from Redis (for SENDGROUP_DUMPS_SLOW)
    "dump:mid-write",  # after the n-th chunk was written to the temporary file
    "dump:before-rename",  # temporary file complete and fsynced
    "dump:after-rename",  # final name in place, directory not yet fsynced
    "dump:before-delete",  # directory fsynced, staging keys still in Redis
    "dump:after-delete",  # staging keys gone, lock still held
    "restore:mid-unstage",  # after the n-th step moving an interrupted dump's jobs back
    "restore:mid-merge",  # after the n-th chunk was merged
    "restore:after-merge",  # segment fully merged, file still on disk
    "restore:after-unlink",  # file deleted, progress record still in Redis
    "restore:before-merge",  # lock held, interrupted dump undone, all verified, nothing merged
    "purge:before-delete",  # lock taken, nothing deleted
)


def _armed(env: str, step: str, n: int) -> bool:
    want = os.environ.get(env)
    if not want:
        return False
    name, _, count = want.partition("@")
    return name == step and (not count or int(count) == n)


def checkpoint(step: str, n: int = 1) -> None:
    """Kill this process with SIGKILL if ``SENDGROUP_DUMPS_CRASH_AT`` names ``step`` (and, with
    ``@k``, if this is occurrence ``n == k``); stop it with SIGSTOP if
    ``SENDGROUP_DUMPS_STOP_AT`` does."""
    for env, sig in ((ENV, signal.SIGKILL), (STOP_ENV, signal.SIGSTOP)):
        if _armed(env, step, n):
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), sig)


def slow(step: str) -> None:
    """Sleep if ``SENDGROUP_DUMPS_SLOW`` is ``<step>=<seconds>``."""
    want = os.environ.get(SLOW_ENV)
    if want:
        name, _, seconds = want.partition("=")
        if name == step:
            time.sleep(float(seconds))
