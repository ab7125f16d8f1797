"""The dump segment file format, ``sgdump`` version 1.

A segment holds the *logical* contents of one queue (never Redis' own ``DUMP`` payloads, which
are tied to the server's RDB version and exceed ``proto-max-bulk-len`` for big keys), so it
restores into any Redis version, in chunks small enough that Redis never stalls.

Layout (all integers big-endian)::

    header   b"SGDUMP" | u16 version (=1) | u32 n | n bytes of UTF-8 JSON (SegmentHeader)
    chunk*   u8 kind | u32 count | u32 body_len | body | u32 crc32(kind..body)
    trailer  u8 b"E" | u32 data_chunks | u32 body_len | JSON body | u32 crc32(kind..body)
    footer   u64 offset of the trailer | b"SGDUMPEN"

Chunk kinds and the records of their bodies:

* ``R`` ready list items, in list order (head first): ``u32 len | bytes``
* ``D`` delayed / ``V`` reserved sorted-set members: ``f64 score | u32 len | member``
* ``F`` failed entries: ``u8 flags | f64 failedAt | u32 len | uuid | u32 len | record JSON``
  (flags: bit 0 = failedAt present in the failed index, bit 1 = record present in the hash)

The trailer's JSON holds the record counts per kind and the SHA-256 of every byte before the
trailer; :func:`verify_segment` checks every chunk CRC, the counts and the digest, so a
truncated or corrupted file is refused before anything is merged.

Integrity is not authenticity: anyone who can write the volume can recompute every checksum.
With a signing key (:data:`KEY_ENV`, a Secret the operator holds, given to the dump and restore
Jobs through ``secretKeyRef``) the trailer also carries ``hmac``: HMAC-SHA256 under the key of
the trailer's canonical JSON without it (counts + the SHA-256 of everything before, header
with queue, prefix and segment id included). With a key set, a segment whose ``hmac`` is
missing or wrong is refused (:func:`verify_segment`).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Literal

#: Environment variables holding the segment signing key (``_FILE``: a file holding it, e.g.
#: a mounted Secret key; the file wins). Unset: segments are checksummed, not signed.
KEY_ENV: Final = "DUMP_SIGNING_KEY"

MAGIC: Final = b"SGDUMP"
FOOTER_MAGIC: Final = b"SGDUMPEN"
FORMAT_NAME: Final = "sgdump"
FORMAT_VERSION: Final = 1
SUFFIX: Final = ".sgdump"

Kind = Literal["R", "D", "V", "F"]
KIND_NAMES: Final[dict[str, str]] = {
    "R": "ready",
    "D": "delayed",
    "V": "reserved",
    "F": "failed",
}

_CHUNK_HEAD: Final = struct.Struct(">cII")
_U32: Final = struct.Struct(">I")
_F64: Final = struct.Struct(">d")
_FOOTER: Final = struct.Struct(">Q8s")
_MAX_HEADER: Final = 1 << 20
_MAX_BODY: Final = 1 << 30


class SegmentError(Exception):
    """A segment file that cannot be trusted: truncated, corrupted, or of an unknown format.

    The message names the file and what is wrong; the file is left where it is.
    """


def signing_key(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The segment signing key from :data:`KEY_ENV` (or its ``_FILE``), or None. Raises
    :class:`SegmentError` when the file cannot be read or the key is shorter than 16 bytes."""
    env = os.environ if environ is None else environ
    path = env.get(f"{KEY_ENV}_FILE")
    if path:
        try:
            raw = Path(path).read_bytes().strip()
        except OSError as e:
            raise SegmentError(f"{KEY_ENV}_FILE: cannot read {path}: {e.strerror}") from None
    else:
        raw = env.get(KEY_ENV, "").strip().encode()
    if not raw:
        return None
    if len(raw) < 16:
        raise SegmentError(f"{KEY_ENV}: the signing key must be at least 16 bytes")
    return raw


def _mac(key: bytes, trailer: Mapping[str, Any]) -> str:
    canonical = json.dumps({k: v for k, v in trailer.items() if k != "hmac"}, sort_keys=True)
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """What a segment says about itself (the header JSON, camelCase on disk)."""

    queue: str
    prefix: str
    segment: str
    created_at: str
    redis_version: str
    format_version: int = FORMAT_VERSION

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT_NAME,
                "formatVersion": self.format_version,
                "queue": self.queue,
                "prefix": self.prefix,
                "segment": self.segment,
                "createdAt": self.created_at,
                "redisVersion": self.redis_version,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> SegmentHeader:
        try:
            data = json.loads(raw)
            if data.get("format") != FORMAT_NAME:
                raise SegmentError(f"{where}: header names format {data.get('format')!r}")
            return cls(
                queue=str(data["queue"]),
                prefix=str(data.get("prefix", "")),
                segment=str(data["segment"]),
                created_at=str(data["createdAt"]),
                redis_version=str(data.get("redisVersion", "")),
                format_version=int(data["formatVersion"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise SegmentError(f"{where}: unreadable header ({e})") from e


@dataclass(slots=True)
class Counts:
    """Records per kind in a segment; ``jobs`` = ready + delayed + reserved."""

    ready: int = 0
    delayed: int = 0
    reserved: int = 0
    failed: int = 0
    chunks: int = 0

    @property
    def jobs(self) -> int:
        return self.ready + self.delayed + self.reserved

    def add(self, kind: str, n: int) -> None:
        name = KIND_NAMES[kind]
        setattr(self, name, getattr(self, name) + n)
        self.chunks += 1

    def as_dict(self) -> dict[str, int]:
        return {
            "ready": self.ready,
            "delayed": self.delayed,
            "reserved": self.reserved,
            "failed": self.failed,
            "chunks": self.chunks,
        }


@dataclass(frozen=True, slots=True)
class FailedEntry:
    """One failed job: uuid, failedAt (unix s) from the index, JSON record from the hash."""

    uuid: bytes
    failed_at: float | None
    record: bytes | None


Record = bytes | tuple[float, bytes] | FailedEntry


@dataclass(slots=True)
class Chunk:
    """One decoded chunk: its position among the data chunks, kind and records.

    ``records`` holds ``bytes`` for ``R``, ``(score, member)`` for ``D``/``V`` and
    :class:`FailedEntry` for ``F``.
    """

    index: int
    kind: str
    records: list[Any] = field(default_factory=list)
    size: int = 0  # body bytes on disk


# --- encoding -------------------------------------------------------------------------------


def encode_body(kind: str, records: list[Any]) -> bytes:
    """Body bytes for ``records`` of ``kind`` (see the module docstring)."""
    parts: list[bytes] = []
    if kind == "R":
        for item in records:
            parts += (_U32.pack(len(item)), item)
    elif kind in ("D", "V"):
        for score, member in records:
            parts += (_F64.pack(score), _U32.pack(len(member)), member)
    elif kind == "F":
        for e in records:
            flags = (1 if e.failed_at is not None else 0) | (2 if e.record is not None else 0)
            rec = e.record or b""
            parts += (
                bytes((flags,)),
                _F64.pack(e.failed_at or 0.0),
                _U32.pack(len(e.uuid)),
                e.uuid,
                _U32.pack(len(rec)),
                rec,
            )
    else:
        raise ValueError(f"unknown chunk kind {kind!r}")
    return b"".join(parts)


def _frame_parts(kind: bytes, count: int, body: bytes) -> tuple[bytes, bytes, bytes]:
    """A frame as its three parts, (head, body, checksum), to write or hash one after the
    other without joining them (a body is up to 4 MiB)."""
    head = _CHUNK_HEAD.pack(kind, count, len(body))
    return head, body, _U32.pack(zlib.crc32(body, zlib.crc32(head)))


def _frame(kind: bytes, count: int, body: bytes) -> bytes:
    return b"".join(_frame_parts(kind, count, body))


class SegmentWriter:
    """Writes one segment to an open binary file; call :meth:`chunk` per batch, then
    :meth:`finish`. Keeps the running SHA-256 and counts for the trailer.

    The caller owns durability (fsync, rename): see ``dump.py``.
    """

    def __init__(self, fh: IO[bytes], header: SegmentHeader, key: bytes | None = None) -> None:
        self._fh = fh
        self._key = key
        self._sha = hashlib.sha256()
        self.counts = Counts()
        self.bytes = 0
        raw = header.to_json()
        self._write(MAGIC + struct.pack(">HI", FORMAT_VERSION, len(raw)) + raw)

    def _write(self, data: bytes) -> None:
        self._fh.write(data)
        self._sha.update(data)
        self.bytes += len(data)

    def chunk(self, kind: str, records: list[Any]) -> None:
        """Append one chunk of ``records`` (no-op when empty): its frame written as its three
        parts (:func:`_frame_parts`), so that the body (up to :data:`~sendgroup_worker.dumps.
        dump.CHUNK_BYTES`) is not copied once more into one frame (a 100,000-job dump of 1.5 KB
        jobs: ~118,000 -> ~10,300 page faults, 0.35 -> 0.10 s of system CPU)."""
        if not records:
            return
        for part in _frame_parts(kind.encode(), len(records), encode_body(kind, records)):
            self._write(part)
        self.counts.add(kind, len(records))

    def finish(self) -> None:
        """Write the trailer (counts + SHA-256 of everything before it) and the footer."""
        offset = self.bytes
        trailer: dict[str, Any] = {**self.counts.as_dict(), "sha256": self._sha.hexdigest()}
        if self._key is not None:
            trailer["hmac"] = _mac(self._key, trailer)
        body = json.dumps(trailer, sort_keys=True).encode()
        tail = _frame(b"E", self.counts.chunks, body) + _FOOTER.pack(offset, FOOTER_MAGIC)
        self._fh.write(tail)
        self.bytes += len(tail)


# --- decoding -------------------------------------------------------------------------------


def decode_body(kind: str, count: int, body: bytes, where: str) -> list[Any]:
    """Records of one chunk body; raises :class:`SegmentError` when it does not parse."""
    out: list[Any] = []
    pos = 0
    mv = memoryview(body)
    try:
        for _ in range(count):
            if kind == "R":
                (n,) = _U32.unpack_from(mv, pos)
                pos += 4
                out.append(bytes(mv[pos : pos + n]))
                pos += n
            elif kind in ("D", "V"):
                (score,) = _F64.unpack_from(mv, pos)
                (n,) = _U32.unpack_from(mv, pos + 8)
                pos += 12
                out.append((score, bytes(mv[pos : pos + n])))
                pos += n
            elif kind == "F":
                flags = mv[pos]
                (score,) = _F64.unpack_from(mv, pos + 1)
                (n,) = _U32.unpack_from(mv, pos + 9)
                pos += 13
                uuid = bytes(mv[pos : pos + n])
                pos += n
                (m,) = _U32.unpack_from(mv, pos)
                pos += 4
                rec = bytes(mv[pos : pos + m])
                pos += m
                out.append(
                    FailedEntry(uuid, score if flags & 1 else None, rec if flags & 2 else None)
                )
            else:
                raise SegmentError(f"{where}: unknown chunk kind {kind!r}")
    except struct.error as e:
        raise SegmentError(f"{where}: chunk body does not parse ({e})") from e
    if pos != len(body):
        raise SegmentError(f"{where}: chunk body has {len(body) - pos} stray bytes")
    return out


#: A SHA-256 digest (a name of its own: :class:`SegmentInfo` has a field called ``bytes``).
Digest = bytes


@dataclass(slots=True)
class SegmentInfo:
    """Header, trailer counts and size of a segment, read without scanning the body."""

    path: str
    header: SegmentHeader
    counts: Counts
    sha256: str
    bytes: int
    trailer_offset: int
    #: the trailer as written (for the signature check)
    trailer: dict[str, Any] = field(default_factory=dict)
    #: filled by :func:`verify_segment` only: the SHA-256 of the header's bytes, then of each
    #: data chunk's frame, as verified (32 bytes a chunk: 320 KB for ten million jobs in
    #: 1000-job chunks), so that :func:`iter_verified_chunks` hands out nothing else
    digests: list[Digest] = field(default_factory=list)


def _open_segment(path: str | os.PathLike[str]) -> IO[bytes]:
    """``path`` opened for reading, never through a symbolic link (``O_NOFOLLOW``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SegmentError(f"{path}: a symbolic link, not a segment: refused") from None
        raise
    return os.fdopen(fd, "rb")


def _read_exact(fh: IO[bytes], n: int, where: str, what: str) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise SegmentError(f"{where}: truncated ({what}: wanted {n} bytes, got {len(data)})")
    return data


def _read_header(fh: IO[bytes], where: str) -> tuple[SegmentHeader, bytes]:
    head = _read_exact(fh, len(MAGIC) + 6, where, "header")
    if head[: len(MAGIC)] != MAGIC:
        raise SegmentError(f"{where}: not an {FORMAT_NAME} file (bad magic)")
    version, n = struct.unpack(">HI", head[len(MAGIC) :])
    if version != FORMAT_VERSION:
        raise SegmentError(
            f"{where}: format version {version} is not supported (this build reads "
            f"{FORMAT_NAME} v{FORMAT_VERSION})"
        )
    if n > _MAX_HEADER:
        raise SegmentError(f"{where}: header length {n} is implausible")
    raw = _read_exact(fh, n, where, "header")
    return SegmentHeader.from_json(raw, where), head + raw


def _read_frame(
    fh: IO[bytes], where: str, offset: int, what: str = "chunk"
) -> tuple[str, int, bytes, tuple[bytes, bytes, bytes]]:
    """(kind, count, body, the frame's raw bytes as its three parts: head, body, checksum) of
    the frame at the file's position. The parts are hashed one after the other, never joined:
    a copy of every body (up to 4 MiB each) cost a restore of 100,000 1.5 KB jobs ~100,000
    page faults."""
    head = _read_exact(fh, _CHUNK_HEAD.size, where, f"{what} header at byte {offset}")
    kind_b, count, n = _CHUNK_HEAD.unpack(head)
    if n > _MAX_BODY:
        raise SegmentError(f"{where}: {what} at byte {offset} claims {n} bytes (corrupted)")
    body = _read_exact(fh, n, where, f"{what} body at byte {offset}")
    checksum = _read_exact(fh, 4, where, f"{what} checksum at byte {offset}")
    if zlib.crc32(body, zlib.crc32(head)) != _U32.unpack(checksum)[0]:
        raise SegmentError(f"{where}: checksum mismatch in {what} at byte {offset} (corrupted)")
    return kind_b.decode("latin-1"), count, body, (head, body, checksum)


def _digest(parts: tuple[bytes, ...]) -> bytes:
    """SHA-256 of ``parts`` joined (without joining them)."""
    sha = hashlib.sha256()
    for part in parts:
        sha.update(part)
    return sha.digest()


def read_info(path: str | os.PathLike[str]) -> SegmentInfo:
    """Header and trailer of a segment (cheap: reads both ends of the file only).

    Raises :class:`SegmentError` when the header, footer or trailer is missing or corrupted
    (a truncated file loses its footer).
    """
    where = str(path)
    with _open_segment(path) as fh:
        header, _ = _read_header(fh, where)
        size = os.fstat(fh.fileno()).st_size
        if size < _FOOTER.size:
            raise SegmentError(f"{where}: truncated (no footer)")
        fh.seek(size - _FOOTER.size)
        offset, magic = _FOOTER.unpack(fh.read(_FOOTER.size))
        if magic != FOOTER_MAGIC or offset >= size - _FOOTER.size:
            raise SegmentError(f"{where}: truncated or corrupted (no valid footer)")
        fh.seek(offset)
        kind, nchunks, body, _ = _read_frame(fh, where, offset, "trailer")
        if kind != "E" or fh.tell() != size - _FOOTER.size:
            raise SegmentError(f"{where}: corrupted trailer")
        try:
            t = json.loads(body)
            counts = Counts(
                ready=int(t["ready"]),
                delayed=int(t["delayed"]),
                reserved=int(t["reserved"]),
                failed=int(t["failed"]),
                chunks=int(t["chunks"]),
            )
            digest = str(t["sha256"])
        except (ValueError, KeyError, TypeError) as e:
            raise SegmentError(f"{where}: unreadable trailer ({e})") from e
        if counts.chunks != nchunks:
            raise SegmentError(f"{where}: trailer chunk counts disagree (corrupted)")
    return SegmentInfo(where, header, counts, digest, size, offset, dict(t))


def iter_chunks(path: str | os.PathLike[str], info: SegmentInfo | None = None) -> Iterator[Chunk]:
    """Decoded data chunks of a segment, in file order, checking each chunk's CRC.

    Does not check the SHA-256 or the counts (that is :func:`verify_segment`); raises
    :class:`SegmentError` on any malformed chunk.
    """
    return _chunks(path, info or read_info(path), None)


def iter_verified_chunks(path: str | os.PathLike[str], info: SegmentInfo) -> Iterator[Chunk]:
    """Like :func:`iter_chunks`, but ``info`` comes from :func:`verify_segment` and every chunk
    (and the header) must be byte for byte what was verified: a file swapped or altered
    between the verification and this read raises :class:`SegmentError` *before* the first
    changed chunk is handed out. Raises ``ValueError`` when ``info`` was not verified."""
    if not info.digests:
        raise ValueError(f"{info.path}: not verified (use verify_segment's info)")
    return _chunks(path, info, info.digests)


def _changed(where: str, what: str) -> SegmentError:
    return SegmentError(f"{where}: {what} changed since the segment was verified; left in place")


def _chunks(
    path: str | os.PathLike[str], info: SegmentInfo, digests: list[bytes] | None
) -> Iterator[Chunk]:
    where = str(path)
    with _open_segment(path) as fh:
        _, raw = _read_header(fh, where)
        if digests is not None and hashlib.sha256(raw).digest() != digests[0]:
            raise _changed(where, "header")
        index = 0
        while fh.tell() < info.trailer_offset:
            offset = fh.tell()
            kind, count, body, frame = _read_frame(fh, where, offset)
            if digests is not None and (
                index + 1 >= len(digests) or _digest(frame) != digests[index + 1]
            ):
                raise _changed(where, f"chunk {index} (byte {offset})")
            if kind not in KIND_NAMES:
                raise SegmentError(f"{where}: unknown chunk kind {kind!r} at byte {offset}")
            yield Chunk(index, kind, decode_body(kind, count, body, where), len(body))
            index += 1
        if fh.tell() != info.trailer_offset:
            raise SegmentError(f"{where}: chunks overrun the trailer (corrupted)")
        if digests is not None and index + 1 != len(digests):
            raise _changed(where, f"chunk count ({index}, verified {len(digests) - 1})")


def verify_segment(path: str | os.PathLike[str], key: bytes | None = None) -> SegmentInfo:
    """Read the whole segment and check header, every chunk CRC and body, the per-kind
    counts and the SHA-256 against the trailer; with ``key``, the trailer's ``hmac`` too
    (default: :func:`signing_key` from the environment). Returns its :class:`SegmentInfo`.

    Raises :class:`SegmentError` naming the file and the first problem found.
    """
    where = str(path)
    info = read_info(path)
    key = key if key is not None else signing_key()
    if key is not None:
        given = info.trailer.get("hmac")
        if not isinstance(given, str):
            raise SegmentError(f"{where}: not signed (this installation signs its segments)")
        if not hmac.compare_digest(given, _mac(key, info.trailer)):
            raise SegmentError(
                f"{where}: signature mismatch (not written by this installation's dump Jobs, "
                "or altered since)"
            )
    sha = hashlib.sha256()
    seen = Counts()
    digests: list[bytes] = []
    with _open_segment(path) as fh:
        _, raw = _read_header(fh, where)
        sha.update(raw)
        digests.append(hashlib.sha256(raw).digest())
        while fh.tell() < info.trailer_offset:
            offset = fh.tell()
            kind, count, body, frame = _read_frame(fh, where, offset)
            if kind not in KIND_NAMES:
                raise SegmentError(f"{where}: unknown chunk kind {kind!r} at byte {offset}")
            decode_body(kind, count, body, where)
            for part in frame:
                sha.update(part)
            digests.append(_digest(frame))
            seen.add(kind, count)
        if fh.tell() != info.trailer_offset:
            raise SegmentError(f"{where}: chunks overrun the trailer (corrupted)")
    if sha.hexdigest() != info.sha256:
        raise SegmentError(f"{where}: SHA-256 mismatch (corrupted)")
    if seen.as_dict() != info.counts.as_dict():
        raise SegmentError(
            f"{where}: counts {seen.as_dict()} disagree with the trailer "
            f"{info.counts.as_dict()} (corrupted)"
        )
    info.digests = digests
    return info
