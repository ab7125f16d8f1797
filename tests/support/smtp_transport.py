"""A transport that keeps what a protocol writes, for driving
:class:`sendgroup_worker.smtppipe.PipeliningProtocol` without a socket (what it sends, byte for
byte: dot-stuffing, line ends, the pipelined commands)."""

from __future__ import annotations


class NoClient:
    """Stands for the ``aiosmtplib.SMTP`` a protocol belongs to (no protocol of its own)."""

    protocol = None


class RecordingTransport:
    """The protocol's transport: ``written`` holds each ``write``'s bytes in order."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def get_extra_info(self, name: str) -> None:
        return None

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.written.append(data)
