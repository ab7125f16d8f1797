"""Dump files against someone who can write the dumps volume (issue 16, item 5): symbolic links
are never followed, segments are signed so a forged segment with recomputed checksums is
refused, a restore verifies every segment before merging any (one forged segment among genuine
ones: nothing merged) and merges only what it verified (a segment swapped after the check is
refused), and ``dumps --verify`` refuses a segment of another queue. Real redis-server, the
console script as the Jobs run it."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import redis

from sendgroup_worker.dumps import format as fmt
from sendgroup_worker.dumps import paths
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.dumps import (
    fill_queue,
    payload,
    run_cli,
    snapshot,
    start_stopped_at,
    summary,
)

pytestmark = pytest.mark.redis

KEY = "k" * 32
SIGNED = {"DUMP_SIGNING_KEY": KEY}


def _dump(
    client: redis.Redis[bytes], url: str, root: Path, queue: str, tag: str = "orig", **env: str
) -> Path:
    fill_queue(client, QueueKeys(queue), ready=50, delayed=3, size=200, tag=tag)
    out = summary(run_cli("dump", "-q", queue, "--dumps-dir", str(root), redis_url=url, env=env))
    return Path(out["segment"])


def test_a_symlinked_queue_directory_is_refused_and_nothing_outside_is_touched(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    root, outside = tmp_path / "dumps", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    # a file that looks like a segment outside the tree, reached through a planted link
    victim = _dump(redis_client, redis_url, tmp_path / "elsewhere", "mail-victim")
    shutil.copy(victim, outside / victim.name)
    (root / paths.safe_dir_name("mail-link")).symlink_to(outside)
    before = sorted(p.name for p in outside.iterdir())

    restore = run_cli("restore", "-q", "mail-link", "--dumps-dir", str(root), redis_url=redis_url)
    assert restore.returncode == 4 and "symbolic link" in restore.stderr, restore.stderr
    keys = QueueKeys("mail-link")
    fill_queue(redis_client, keys, ready=5, size=100)
    dump = run_cli("dump", "-q", "mail-link", "--dumps-dir", str(root), redis_url=redis_url)
    assert dump.returncode == 4 and "symbolic link" in dump.stderr, dump.stderr
    forget = run_cli("forget", "-q", "mail-link", "--dumps-dir", str(root))
    assert forget.returncode != 0
    assert sorted(p.name for p in outside.iterdir()) == before
    assert redis_client.llen(keys.ready) == 5  # the refused dump put nothing aside


def test_a_symlinked_segment_file_is_not_a_segment(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "dumps"
    victim = _dump(redis_client, redis_url, tmp_path / "elsewhere", "mail-victim2")
    qdir = root / paths.safe_dir_name("mail-victim2")
    qdir.mkdir(parents=True)
    (qdir / victim.name).symlink_to(victim)
    restore = summary(
        run_cli("restore", "-q", "mail-victim2", "--dumps-dir", str(root), redis_url=redis_url)
    )
    assert not restore.get("segments") and redis_client.dbsize() == 0, restore
    assert victim.exists() and (qdir / victim.name).is_symlink()


def test_a_forged_segment_with_recomputed_checksums_is_refused_when_signing(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "dumps"
    seg = _dump(redis_client, redis_url, root, "mail-signed", **SIGNED)
    info = fmt.verify_segment(seg, KEY.encode())
    assert "hmac" in info.trailer
    # forge: same header, every chunk plus one injected job, checksums recomputed
    forged = seg.with_name("20990101T000000000000Z-deadbeef.sgdump")
    with open(forged, "wb") as fh:
        w = fmt.SegmentWriter(fh, info.header)
        for chunk in fmt.iter_chunks(seg, info):
            w.chunk(chunk.kind, chunk.records)
        w.chunk("R", [payload(9999, "injected", 100)])
        w.finish()
    unsigned_ok = run_cli("dumps", "-q", "mail-signed", "--dumps-dir", str(root), "--verify")
    assert unsigned_ok.returncode == 0, unsigned_ok.stderr  # without the key: checksums only
    listed = run_cli("dumps", "-q", "mail-signed", "--dumps-dir", str(root), "--verify", env=SIGNED)
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert listed.returncode == 4 and [r["valid"] for r in rows] == [True, False], rows
    assert "not signed" in rows[1]["error"]
    restore = run_cli(
        "restore", "-q", "mail-signed", "--dumps-dir", str(root), redis_url=redis_url, env=SIGNED
    )
    assert restore.returncode == 4 and "not signed" in restore.stderr, restore.stderr
    # nothing merged: the genuine (older) segment waits until the forged one is gone
    assert redis_client.llen(QueueKeys("mail-signed").ready) == 0
    assert forged.exists()
    # signed with another key: refused as well
    os.unlink(forged)
    with open(forged, "wb") as fh:
        w = fmt.SegmentWriter(fh, info.header, b"z" * 32)
        w.chunk("R", [payload(9999, "injected", 100)])
        w.finish()
    restore = run_cli(
        "restore", "-q", "mail-signed", "--dumps-dir", str(root), redis_url=redis_url, env=SIGNED
    )
    assert restore.returncode == 4 and "signature mismatch" in restore.stderr, restore.stderr
    os.unlink(forged)
    summary(
        run_cli(
            "restore",
            "-q",
            "mail-signed",
            "--dumps-dir",
            str(root),
            redis_url=redis_url,
            env=SIGNED,
        )
    )
    state = snapshot(redis_client, QueueKeys("mail-signed"))
    assert len(state.ready) == 50 and not any(b"injected" in r for r in state.ready)


def test_dumps_verify_refuses_a_segment_of_another_queue(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "dumps"
    seg = _dump(redis_client, redis_url, root, "mail-a")
    other = root / paths.safe_dir_name("mail-b")
    other.mkdir()
    shutil.copy(seg, other / seg.name)
    listed = run_cli("dumps", "-q", "mail-b", "--dumps-dir", str(root), "--verify")
    [row] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert listed.returncode == 4 and row["valid"] is False, row
    assert "queue 'mail-a', not of 'mail-b'" in row["error"]


def _forge(genuine: Path, dest: Path, segment: str, key: bytes | None = None) -> Path:
    """``dest``: one injected job, then the records of ``genuine``, under a header naming
    ``segment``, every checksum recomputed; signed with ``key`` (not the installation's) when
    given."""
    info = fmt.read_info(genuine)
    with open(dest, "wb") as fh:
        w = fmt.SegmentWriter(fh, dataclasses.replace(info.header, segment=segment), key)
        w.chunk("R", [payload(9999, "injected", 100)])
        for chunk in fmt.iter_chunks(genuine, info):
            w.chunk(chunk.kind, chunk.records)
        w.finish()
    return dest


def test_one_forged_segment_among_genuine_ones_merges_nothing(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    """Two genuine signed segments and, between them, one forged: the restore refuses before
    merging anything (it merged the first genuine segment before), names the forged file, and
    leaves all three in place; without the forged file, both genuine segments restore."""
    root, queue = tmp_path / "dumps", "mail-three"
    first = _dump(redis_client, redis_url, root, queue, tag="one", **SIGNED)
    middle = first.name[: -len(".sgdump")].rsplit("-", 1)[0] + "-ffffffff"
    forged = _forge(first, first.with_name(f"{middle}.sgdump"), middle, b"z" * 32)
    assert sorted(p.name for p in first.parent.iterdir())[1] == forged.name  # in the middle
    second = _dump(redis_client, redis_url, root, queue, tag="two", **SIGNED)
    restore = run_cli(
        "restore", "-q", queue, "--dumps-dir", str(root), redis_url=redis_url, env=SIGNED
    )
    assert restore.returncode == 4, restore.stderr
    state = snapshot(redis_client, QueueKeys(queue))
    assert state.jobs == 0 and state.notify == 0, (len(state.ready), restore.stderr)
    assert "nothing merged" in restore.stderr and str(forged) in restore.stderr, restore.stderr
    assert str(first) not in restore.stderr and str(second) not in restore.stderr
    assert first.exists() and forged.exists() and second.exists()
    os.unlink(forged)
    out = summary(
        run_cli("restore", "-q", queue, "--dumps-dir", str(root), redis_url=redis_url, env=SIGNED)
    )
    assert out["segments"] == [str(first), str(second)], out
    state = snapshot(redis_client, QueueKeys(queue))
    assert len(state.ready) == 100 and len(state.delayed) == 6
    assert not any(b"injected" in r for r in state.ready)


def test_a_segment_swapped_after_the_check_is_not_merged(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    """The restore verifies every segment, then merges: a file replaced between the two (by
    someone who can write the volume, with valid checksums) is refused when its turn comes,
    before any of its chunks is merged; what was verified and merged before it stays."""
    root, queue = tmp_path / "dumps", "mail-swap"
    first = _dump(redis_client, redis_url, root, queue, tag="one")
    second = _dump(redis_client, redis_url, root, queue, tag="two")
    proc = start_stopped_at(
        "restore:before-merge", "restore", "-q", queue, "--dumps-dir", str(root),
        redis_url=redis_url,
    )  # fmt: skip
    try:
        # same name and header, one job more, checksums recomputed: valid without a key
        swapped = _forge(second, second.with_name("swap.tmp"), second.name[: -len(".sgdump")])
        os.replace(swapped, second)
        assert run_cli("dumps", "-q", queue, "--dumps-dir", str(root), "--verify").returncode == 0
    finally:
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err
    assert str(second) in err and "changed since the segment was verified" in err, err
    state = snapshot(redis_client, QueueKeys(queue))
    assert not any(b"injected" in r for r in state.ready)
    assert len(state.ready) == 50 and all(b"one-r" in r for r in state.ready), len(state.ready)
    assert not first.exists() and second.exists()
