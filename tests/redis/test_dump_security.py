"""Dump files against someone who can write the dumps volume (issue 16, item 5): symbolic links
are never followed, segments are signed so a forged segment with recomputed checksums is
refused, and ``dumps --verify`` refuses a segment of another queue. Real redis-server, the
console script as the Jobs run it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import redis

from sendgroup_worker.dumps import format as fmt
from sendgroup_worker.dumps import paths
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.dumps import fill_queue, payload, run_cli, snapshot, summary

pytestmark = pytest.mark.redis

KEY = "k" * 32
SIGNED = {"DUMP_SIGNING_KEY": KEY}


def _dump(client: redis.Redis[bytes], url: str, root: Path, queue: str, **env: str) -> Path:
    fill_queue(client, QueueKeys(queue), ready=50, delayed=3, size=200)
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
    # the genuine (older) segment may be merged first; the forged one never is
    ready = redis_client.lrange(QueueKeys("mail-signed").ready, 0, -1)
    assert not any(b"injected" in r for r in ready)
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
