"""Slim the bodies kopf keeps in memory (issue 15): every object kopf's watch streams yield
loses ``metadata.managedFields``, and its dict keys and short strings are interned, before
kopf sees it.

kopf keeps the last body of every object that has a daemon (``live_fresh_body``, one per
SendGroup for the group's lifetime). A resting SendGroup parsed from JSON is ~30 KB, of which
``managedFields`` ~14 KB (the server-side field ownership: one entry per field manager,
mirroring every field it set, status included) and repeated strings most of the rest:
``json.loads`` shares equal keys only inside one document, and every watch event is a
document of its own. Measured on a real resting SendGroup, 1,000 copies (tracemalloc):
30.9 KB each as parsed, 12.8 KB without managedFields, 9.3 KB with the keys interned too,
6.1 KB with the short strings as well.

Nothing the operator or kopf reads is in ``managedFields``: kopf's diff base holds spec,
labels and annotations; the planner reads spec and status; the kubectl plugin that reads
managedFields reads it from the API server. Interning changes no value (equal strings become
the same object; CPython frees an interned string like any other once unreferenced).

kopf has no hook for this. :func:`install` wraps ``kopf._cogs.clients.watching.
infinite_watch``, the generator kopf's queueing reads each resource's events from (looked up
as a module attribute on every (re)start of a watch, ``kopf._core.reactor.queueing``), and
raises :class:`RuntimeError` at start-up when this kopf has none of that shape
(``tests/unit/test_slimbodies.py`` fails on such a kopf upgrade). ``SENDGROUP_SLIM_BODIES=
false`` leaves kopf's stream as it is.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

#: strings up to this many characters are interned (timestamps, reasons, names; not messages)
INTERN_MAX: Final = 40


def slim(obj: Any) -> Any:
    """``obj`` (parsed JSON: str keys) rebuilt without any ``managedFields`` key in a
    ``metadata`` dict, with every dict key and every string of at most :data:`INTERN_MAX`
    characters interned; other values as they are."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if key == "metadata" and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k != "managedFields"}
            out[sys.intern(key)] = slim(value)
        return out
    if isinstance(obj, list):
        return [slim(value) for value in obj]
    if type(obj) is str and len(obj) <= INTERN_MAX:
        return sys.intern(obj)
    return obj


def slim_event(event: Any) -> Any:
    """A raw watch event (``{"type": ..., "object": {...}}``) with its object slimmed
    (:func:`slim`); anything else (kopf's bookmarks) as it is."""
    if isinstance(event, dict) and isinstance(event.get("object"), dict):
        return {**event, "object": slim(event["object"])}
    return event


def _watching() -> Any:
    from kopf._cogs.clients import watching

    return watching


#: kopf's own ``infinite_watch`` while :func:`install` has replaced it, else None
_original: Callable[..., AsyncIterator[Any]] | None = None


def install() -> bool:
    """Wrap kopf's ``infinite_watch`` once (module docstring); returns False when it was
    already wrapped. Raises RuntimeError when kopf has no such async generator."""
    global _original
    if _original is not None:
        return False
    watching = _watching()
    original = getattr(watching, "infinite_watch", None)
    if original is None or not inspect.isasyncgenfunction(original):
        raise RuntimeError(
            "kopf._cogs.clients.watching.infinite_watch is not an async generator in this "
            "kopf: slimbodies cannot wrap it (set SENDGROUP_SLIM_BODIES=false)"
        )

    async def infinite_watch(**kwargs: Any) -> AsyncIterator[Any]:
        async for event in original(**kwargs):
            yield slim_event(event)

    _original = original
    watching.infinite_watch = infinite_watch
    return True


def uninstall() -> None:
    """Put kopf's own ``infinite_watch`` back (tests)."""
    global _original
    if _original is not None:
        _watching().infinite_watch = _original
        _original = None
