"""Names of the jobs a SendGroup queue carries (the payload's ``job`` and ``displayName``).

Producers (``sendgroup_worker.producer``, a Laravel application) write them; the worker's
handler table (``sendgroup_worker.handlers``) dispatches on them.
"""

from __future__ import annotations

from typing import Final

#: The mail job: ``data`` holds the message (see ``docs/queue-protocol.md``).
MAIL_JOB: Final = "sendgroups.SendMail"

#: A job that does nothing (benchmarks and smoke tests).
NOOP_JOB: Final = "sendgroups.Noop"
