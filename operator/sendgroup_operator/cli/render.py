"""Pure formatting for ``kubectl sendgroup status``: one row per SendGroup from its
``status`` (written by the operator; api.md, table "status"), a progress bar, ages, the
conditions that are not ok, and whether a watch is done. No API calls here.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from tqdm import tqdm

from sendgroup_contract import timestamps

#: Phases after which a group has nothing left to send (``--watch`` stops when every group
#: is in one of them, or has an empty queue).
DONE_PHASES: Final = frozenset({"Completed", "Cancelled", "Failed", "Idle"})
#: Conditions that are ok when True; every other type is ok when False.
POSITIVE: Final = frozenset({"Ready", "QueueReachable"})
#: Conditions already told by the phase column (Paused, Dumped) are not repeated.
INFORMATIONAL: Final = frozenset({"Paused", "Dumped"})
#: Ready=False reasons that are lifecycle states the phase already shows.
LIFECYCLE_REASONS: Final = frozenset(
    {
        "Paused",
        "Idle",
        "NoWork",
        "Completed",
        "Cancelling",
        "Cancelled",
        "Deleting",
        "Restoring",
        "Stopping",
        "Purging",
    }
)
BAR_WIDTH: Final = 20

COLUMNS: Final = (
    "NAME",
    "CAMPAIGN",
    "HOST",
    "PHASE",
    "WORKERS",
    "READY",
    "DELAYED",
    "RESERVED",
    "FAILED",
    "PROGRESS",
    "OLDEST",
    "CONDITIONS",
)


def age(seconds: float | int | None) -> str:
    """A kubectl-style age: ``45s``, ``3m20s``, ``2h5m``, ``3d4h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        m, s = divmod(s, 60)
        return f"{m}m{s}s" if s else f"{m}m"
    if s < 86400:
        h, rest = divmod(s, 3600)
        m = rest // 60
        return f"{h}h{m}m" if m else f"{h}h"
    d, rest = divmod(s, 86400)
    h = rest // 3600
    return f"{d}d{h}h" if h else f"{d}d"


def progress_bar(percent: float, width: int = BAR_WIDTH, ascii_only: bool = False) -> str:
    """``[█████▌              ]  27.5%``: ``percent`` (0..100, clamped) as a bar of ``width``
    cells drawn by tqdm's meter (``ascii_only``: ``#`` cells for terminals without UTF-8)."""
    p = min(100.0, max(0.0, float(percent)))
    bar = tqdm.format_meter(
        p, 100.0, 0, bar_format=f"{{bar:{width}}}", ascii=(" #" if ascii_only else False)
    )
    return f"[{bar}] {p:5.1f}%"


def conditions_not_ok(conditions: Sequence[Mapping[str, Any]]) -> list[str]:
    """``Type=Status(Reason)`` for each condition that needs attention: a positive type
    (Ready, QueueReachable) that is not True, any other type (Suspended, Throttled,
    Degraded, ...) that is not False. Paused/Dumped and Ready's lifecycle reasons (Paused,
    Idle, Completed, ...) are left out: the phase column shows them."""
    out: list[str] = []
    for cond in conditions:
        type_ = str(cond.get("type", ""))
        status = str(cond.get("status", "Unknown"))
        reason = str(cond.get("reason") or "")
        if type_ in INFORMATIONAL:
            continue
        ok = status == "True" if type_ in POSITIVE else status == "False"
        if ok or (type_ == "Ready" and status == "False" and reason in LIFECYCLE_REASONS):
            continue
        out.append(f"{type_}={status}({reason})" if reason else f"{type_}={status}")
    return out


@dataclass(frozen=True)
class Row:
    """One SendGroup as the status table shows it (counts in jobs, age in seconds)."""

    namespace: str
    name: str
    campaign: str
    host: str
    phase: str
    workers_ready: int
    workers_desired: int
    ready: int
    delayed: int
    reserved: int
    failed: int
    total: int
    percent: float
    delivered: int
    oldest_seconds: int | None
    problems: tuple[str, ...]
    measured: bool

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], now: datetime | None = None) -> Row:
        """From a SendGroup as the API server returns it (missing status: zeros, ``-``).

        The oldest job's age is counted up to ``now`` (default: this moment) from
        ``status.queue.oldestJobPushedAt``, as ``kubectl get sg``'s OLDEST column does, so both
        agree; ``oldestJobAgeSeconds`` (the age when the queue was measured) is the fallback."""
        meta = obj.get("metadata", {})
        spec = obj.get("spec", {})
        status = obj.get("status") or {}
        workers = status.get("workers") or {}
        queue = status.get("queue") or {}
        progress = status.get("progress") or {}
        phase = status.get("phase") or ("Pending" if status else "-")
        oldest = queue.get("oldestJobAgeSeconds")
        pushed = queue.get("oldestJobPushedAt")
        if isinstance(pushed, str) and pushed:
            try:
                at = timestamps.parse_created_at(pushed)
                oldest = max(0, int(((now or datetime.now(UTC)) - at).total_seconds()))
            except ValueError:
                pass
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            campaign=str(spec.get("campaign", "")),
            host=str(spec.get("host", "")),
            phase=str(phase),
            workers_ready=int(workers.get("ready", 0)),
            workers_desired=int(workers.get("desired", 0)),
            ready=int(queue.get("ready", 0)),
            delayed=int(queue.get("delayed", 0)),
            reserved=int(queue.get("reserved", 0)),
            failed=int(queue.get("failed", 0)),
            total=int(queue.get("total", 0)),
            percent=float(progress.get("percent", 0.0)),
            delivered=int(progress.get("delivered", 0)),
            oldest_seconds=None if oldest is None else int(oldest),
            problems=tuple(conditions_not_ok(status.get("conditions") or [])),
            measured=bool(queue.get("measuredAt")),
        )

    def done(self) -> bool:
        """Nothing left to send: a finished phase, or a measured empty queue outside the
        dump cycle (a paused group with jobs is not done)."""
        if self.phase in DONE_PHASES:
            return True
        return (
            self.measured
            and self.total == 0
            and self.phase not in ("Paused", "Dumping", "Dumped", "Restoring")
        )

    def to_json(self) -> dict[str, Any]:
        """The row for ``-o json``: camelCase keys as in the SendGroup's status, plus
        ``conditionsNotOk`` and ``done``."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "campaign": self.campaign,
            "host": self.host,
            "phase": self.phase,
            "workers": {"ready": self.workers_ready, "desired": self.workers_desired},
            "queue": {
                "ready": self.ready,
                "delayed": self.delayed,
                "reserved": self.reserved,
                "failed": self.failed,
                "total": self.total,
                "oldestJobAgeSeconds": self.oldest_seconds,
            },
            "progress": {"delivered": self.delivered, "percent": self.percent},
            "conditionsNotOk": list(self.problems),
            "done": self.done(),
        }

    def cells(self, ascii_only: bool = False) -> list[str]:
        """The row's cells in :data:`COLUMNS` order."""
        return [
            self.name,
            self.campaign,
            self.host,
            self.phase,
            f"{self.workers_ready}/{self.workers_desired}",
            str(self.ready),
            str(self.delayed),
            str(self.reserved),
            str(self.failed),
            progress_bar(self.percent, ascii_only=ascii_only),
            age(self.oldest_seconds),
            ",".join(self.problems) or "-",
        ]


#: An ANSI escape sequence (CSI ``ESC [ ... final``, OSC ``ESC ] ... BEL/ST``, or ESC + one
#: character), then any single control or format character left (C0, DEL, C1, bidi overrides).
_ESCAPES: Final = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?|\x9b[0-?]*[ -/]*[@-~]"
)


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: escape sequences removed, every other control or
    format character (line breaks, C1, bidi overrides such as U+202E) shown as ``?``. A
    tenant's ``spec.campaign`` or ``spec.host`` can then never move the cursor, recolour or
    rewrite the operator's screen."""
    text = _ESCAPES.sub("", text)
    return "".join("?" if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in text)


def table(rows: Sequence[Row], all_namespaces: bool = False, ascii_only: bool = False) -> str:
    """The rows as a kubectl-style table: columns separated by at least 3 spaces, a
    NAMESPACE column first when ``all_namespaces``. No trailing newline. Every cell goes
    through :func:`printable`."""
    header = list(COLUMNS)
    body = [[printable(c) for c in r.cells(ascii_only)] for r in rows]
    if all_namespaces:
        header.insert(0, "NAMESPACE")
        body = [[printable(r.namespace), *cells] for r, cells in zip(rows, body, strict=True)]
    widths = [max(len(c) for c in col) for col in zip(header, *body, strict=True)]
    lines = [
        "   ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *body]
    ]
    return "\n".join(lines)


def summary(rows: Sequence[Row]) -> str:
    """One line under the table: groups, done, jobs queued, delivered, failed."""
    done = sum(r.done() for r in rows)
    queued = sum(r.total for r in rows)
    delivered = sum(r.delivered for r in rows)
    failed = sum(r.failed for r in rows)
    return (
        f"{len(rows)} groups, {done} done; {queued} jobs queued, {delivered} delivered, "
        f"{failed} failed"
    )
