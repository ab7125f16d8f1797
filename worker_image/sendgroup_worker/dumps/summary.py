"""The counts every dump/restore summary shares (the JSON line the operator copies)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class QueueCounts:
    """Jobs per kind (``jobs`` = ready + delayed + reserved), failed entries, ``bytes`` of the
    segment file(s) and wall ``seconds`` of one dump or restore of ``queue``."""

    queue: str
    ready: int = 0
    delayed: int = 0
    reserved: int = 0
    failed: int = 0
    bytes: int = 0
    seconds: float = 0.0

    @property
    def jobs(self) -> int:
        return self.ready + self.delayed + self.reserved

    def counts_json(self) -> dict[str, Any]:
        """``queue, jobs, ready, delayed, reserved, failed, bytes, seconds`` (ms precision)."""
        return {
            "queue": self.queue,
            "jobs": self.jobs,
            "ready": self.ready,
            "delayed": self.delayed,
            "reserved": self.reserved,
            "failed": self.failed,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
        }
