"""The ``sgdump`` v1 segment format, segment paths and URL redaction (no Redis needed)."""

from __future__ import annotations

import hashlib
import io
import math
import struct
from pathlib import Path

import pytest

from sendgroup_worker.dumps import format as fmt
from sendgroup_worker.dumps import paths
from sendgroup_worker.dumps.redisconn import ConfigError, redact, resolve_url


def _write(path: Path, chunks: list[tuple[str, list[object]]]) -> fmt.SegmentInfo:
    header = fmt.SegmentHeader(
        queue="{mail-x}",
        prefix="laravel_database_",
        segment="20261130T010203000004Z-deadbeef",
        created_at="2026-11-30T01:02:03.000004Z",
        redis_version="7.0.15",
    )
    with open(path, "wb") as fh:
        w = fmt.SegmentWriter(fh, header)
        for kind, records in chunks:
            w.chunk(kind, records)
        w.finish()
    return fmt.verify_segment(path)


CHUNKS: list[tuple[str, list[object]]] = [
    ("R", [b"", b"\x00\xff binary", "caf\u00e9 \u2603".encode(), b"x" * 70_000]),
    ("R", [b"second chunk"]),
    ("D", [(1764460000.123456789, b"a"), (-1.5, b"b"), (math.inf, b"c"), (0.0, b"")]),
    ("V", [(1700000000.0, b'{"uuid":"r"}')]),
    (
        "F",
        [
            fmt.FailedEntry(b"u1", 1760000000.25, b'{"e":1}'),
            fmt.FailedEntry(b"u2", None, b"{}"),
            fmt.FailedEntry(b"u3", 3.0, None),
        ],
    ),
]


def test_every_record_kind_round_trips_exactly(tmp_path: Path) -> None:
    info = _write(tmp_path / "s.sgdump", CHUNKS)
    assert info.counts.as_dict() == {
        "ready": 5,
        "delayed": 4,
        "reserved": 1,
        "failed": 3,
        "chunks": 5,
    }
    assert info.counts.jobs == 10
    assert info.header.queue == "{mail-x}" and info.header.prefix == "laravel_database_"
    assert info.header.format_version == fmt.FORMAT_VERSION == 1
    got = [(c.kind, c.records) for c in fmt.iter_chunks(tmp_path / "s.sgdump")]
    assert got == CHUNKS
    assert [c.index for c in fmt.iter_chunks(tmp_path / "s.sgdump")] == [0, 1, 2, 3, 4]
    raw = (tmp_path / "s.sgdump").read_bytes()
    assert raw.startswith(b"SGDUMP\x00\x01") and raw.endswith(b"SGDUMPEN")
    assert info.bytes == len(raw)


def test_empty_segment_is_valid(tmp_path: Path) -> None:
    info = _write(tmp_path / "e.sgdump", [])
    assert info.counts.chunks == 0 and list(fmt.iter_chunks(tmp_path / "e.sgdump")) == []


def _damaged(tmp_path: Path, mutate: str) -> Path:
    p = tmp_path / "d.sgdump"
    _write(p, CHUNKS)
    data = bytearray(p.read_bytes())
    if mutate == "every-truncation":
        return p
    if mutate == "body-byte":
        data[2_000] ^= 0x01  # inside the first chunk's 70 kB item
    elif mutate == "version":
        data[6:8] = struct.pack(">H", 2)
    elif mutate == "footer":
        data[-1] ^= 0x01
    elif mutate == "appended":
        data += b"garbage"
    p.write_bytes(bytes(data))
    return p


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        ("body-byte", "checksum mismatch in chunk"),
        ("version", "format version 2 is not supported"),
        ("footer", "no valid footer"),
        ("appended", "no valid footer"),
    ],
)
def test_damaged_files_are_refused_with_a_clear_reason(
    tmp_path: Path, mutate: str, message: str
) -> None:
    p = _damaged(tmp_path, mutate)
    with pytest.raises(fmt.SegmentError, match=message) as e:
        fmt.verify_segment(p)
    assert str(p) in str(e.value)


def test_every_truncation_is_refused(tmp_path: Path) -> None:
    """Cut the file at every length from 0 to size-1: each one is refused, none verifies."""
    p = _damaged(tmp_path, "every-truncation")
    data = p.read_bytes()
    cut = tmp_path / "cut.sgdump"
    for n in range(0, len(data), max(1, len(data) // 400)):
        cut.write_bytes(data[:n])
        with pytest.raises(fmt.SegmentError):
            fmt.verify_segment(cut)
    cut.write_bytes(data[:-1])
    with pytest.raises(fmt.SegmentError):
        fmt.verify_segment(cut)


def test_a_swapped_pair_of_valid_chunks_fails_the_digest(tmp_path: Path) -> None:
    """Each chunk's CRC still matches, but the SHA-256 over the whole file does not."""
    a, b = tmp_path / "a.sgdump", tmp_path / "b.sgdump"
    _write(a, [("R", [b"one"]), ("R", [b"two"])])
    _write(b, [("R", [b"two"]), ("R", [b"one"])])
    da, db = a.read_bytes(), b.read_bytes()
    trailer_a = fmt.read_info(a).trailer_offset
    a.write_bytes(db[:trailer_a] + da[trailer_a:])
    with pytest.raises(fmt.SegmentError, match="SHA-256 mismatch"):
        fmt.verify_segment(a)


@pytest.mark.parametrize(
    ("queue", "name"),
    [
        ("mail-1", "mail-1"),
        ("{mail-x}", "%7Bmail-x%7D"),
        ("a.b_c-d", "a.b_c-d"),
    ],
)
def test_queue_directory_names_are_escaped(queue: str, name: str) -> None:
    assert paths.safe_dir_name(queue) == name
    assert paths.queue_dir("/dumps/ns/group", queue) == Path("/dumps/ns/group") / name


def test_segment_ids_sort_by_creation_time_and_never_repeat() -> None:
    from datetime import UTC, datetime, timedelta

    t = datetime(2026, 11, 30, 1, 2, 3, tzinfo=UTC)
    ids = [paths.new_segment_id(t + timedelta(microseconds=i)) for i in (5, 1, 3, 1)]
    assert sorted(ids[:3]) == [ids[1], ids[2], ids[0]]
    assert len(set(ids)) == 4
    assert all(paths.SEGMENT_RE.match(i) for i in ids)
    with pytest.raises(ValueError):
        paths.segment_path(Path("/d"), "../x")


def test_password_is_redacted_and_url_sources(tmp_path: Path) -> None:
    url = "redis://user:p%40ss-w0rd@redis.example:6379/0"
    text = f"cannot connect to {url} (auth p%40ss-w0rd)"
    out = redact(text, url)
    assert "p%40ss-w0rd" not in out and "redis://***@redis.example:6379/0" in out
    query_url = "redis://redis.example:6379/0?password=s3cr3t"  # redis-py honours it too
    assert "s3cr3t" not in redact(f"cannot connect to {query_url}", query_url)
    f = tmp_path / "url"
    f.write_text("rediss://:x@h:1/0\n")
    assert resolve_url(None, str(f)) == "rediss://:x@h:1/0"
    with pytest.raises(ConfigError, match="no Redis URL"):
        resolve_url(None, None)
    with pytest.raises(ConfigError, match="cannot read"):
        resolve_url(None, str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="scheme"):
        resolve_url("http://x", None)


def test_verified_chunks_are_the_bytes_that_were_verified(tmp_path: Path) -> None:
    """A restore merges only what it verified (issue 16, item 5): a segment rewritten after
    verify_segment, with valid checksums, is refused at its first changed chunk; chunks before
    it are handed out (each matched its verified digest); an unverified info is refused."""
    path = tmp_path / "s.sgdump"
    info = _write(path, CHUNKS)
    assert len(info.digests) == 1 + len(CHUNKS)  # the header, then each chunk
    assert [(c.kind, c.records) for c in fmt.iter_verified_chunks(path, info)] == CHUNKS
    altered = [*CHUNKS[:2], ("D", [(1.0, b"injected")]), *CHUNKS[3:]]
    _write(path, altered)  # valid checksums, third chunk changed
    got = fmt.iter_verified_chunks(path, info)
    assert [next(got).records, next(got).records] == [CHUNKS[0][1], CHUNKS[1][1]]
    with pytest.raises(fmt.SegmentError, match=r"chunk 2 \(byte \d+\) changed since"):
        next(got)
    _write(path, CHUNKS[:3])  # shorter: the verified chunk count is not met
    with pytest.raises(fmt.SegmentError, match="changed since"):
        list(fmt.iter_verified_chunks(path, info))
    with pytest.raises(ValueError, match="not verified"):
        list(fmt.iter_verified_chunks(path, fmt.read_info(path)))


def test_a_chunk_written_in_parts_is_the_frame_byte_for_byte() -> None:
    """SegmentWriter.chunk writes a frame as head, body and checksum (no joined copy of the
    body); the bytes and the running SHA-256 are those of the one frame (:func:`_frame`)."""
    records = [b"x" * 100, b"", b"y" * 5]
    buf = io.BytesIO()
    writer = fmt.SegmentWriter.__new__(fmt.SegmentWriter)  # no header: the chunk alone
    writer._fh, writer._key, writer._sha = buf, None, hashlib.sha256()
    writer.counts, writer.bytes = fmt.Counts(), 0
    writer.chunk("R", records)
    expected = fmt._frame(b"R", len(records), fmt.encode_body("R", records))
    assert buf.getvalue() == expected
    assert writer.bytes == len(expected)
    assert writer._sha.digest() == hashlib.sha256(expected).digest()
