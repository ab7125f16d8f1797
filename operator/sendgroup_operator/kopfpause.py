"""kopf's operator-wide pause, for our own reaper (issue 15).

With kopf peering (two replicas, ``SENDGROUP_STANDALONE=false``), the replica that sees a peer of
higher priority pauses: kopf stops its watch streams and stops every daemon (``pause_daemons``,
``daemon_killer``), and starts them again when it resumes. The reaper was such a daemon per
group; its scheduler (``handlers.Reaper``) is our own task now, so it asks this module instead:
:func:`paused` while kopf's pause is on (no pass starts), :func:`wait_for` to follow it.

kopf keeps the pause in a ``ToggleSet`` (``operator_paused``) that it creates inside
``spawn_tasks`` and hands to its daemon killer, never to a handler. :func:`install` (called by
``__main__`` before ``kopf.run``) wraps ``kopf._core.engines.daemons.daemon_killer``, which
``spawn_tasks`` calls once with that toggle set as a keyword argument, and keeps a reference to it.
kopf internals, checked against the installed kopf by tests/unit/test_kopf_pause.py. Without
:func:`install` (the unit tests, a standalone replica without peering), :func:`paused` is False.
"""

from __future__ import annotations

import asyncio
from typing import Any

_toggles: Any = None


def install() -> None:
    """Capture kopf's ``operator_paused`` when kopf starts its daemon killer (idempotent)."""
    from kopf._core.engines import daemons

    original = daemons.daemon_killer
    if getattr(original, "_sendgroup_pause", False):
        return

    def daemon_killer(**kwargs: Any) -> Any:
        global _toggles
        _toggles = kwargs.get("operator_paused")
        return original(**kwargs)

    daemon_killer._sendgroup_pause = True  # type: ignore[attr-defined]
    daemons.daemon_killer = daemon_killer


def paused() -> bool:
    """Whether kopf has paused the operator now (peering: a peer of higher priority)."""
    return _toggles is not None and bool(_toggles.is_on())


async def wait_for(state: bool) -> None:
    """Until kopf's pause is ``state`` (True: paused). Without a captured toggle set: never
    returns for True, at once for False."""
    if _toggles is None:
        if state:
            await asyncio.Event().wait()
        return
    await _toggles.wait_for(state)
