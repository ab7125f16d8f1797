#!/usr/bin/env python3
"""Benchmark: dump and restore throughput beside the physical and Redis-native peers.

For each size (default 100k and 1M jobs of 1.5 KB) on a fresh local redis-server:

* ``sendgroup-worker dump`` and ``restore`` run as real processes (as in the operator's Jobs):
  jobs/s and MB/s of segment written/read, and the worst PING round trip of a parallel client;
* peers measured in the same run on the same data and the same volume: ``BGSAVE`` (fork + RDB
  write, wall time until done) and ``redis-cli --rdb`` (RDB streamed to a client file);
* the volume's sequential write speed: a file as large as the segment written in 4 MiB blocks
  and fsynced (``dd conv=fsync`` equivalent), so the ratio to the physical limit is visible.

Usage: ``.venv/bin/python bench/dump_restore.py [--jobs 100000 --jobs 1000000] [--dir DIR]``.
Prints a table and writes ``bench/results/dump_restore-<jobs>.json``. Not a test.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from sendgroup_worker.queue.keys import QueueKeys  # noqa: E402
from tests.support.dumps import SGW, push  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

MB = 1_000_000


def payload(i: int, size: int = 1500) -> bytes:
    """A Laravel-style mail envelope of ``size`` bytes whose body is random base64 text, so
    neither the RDB's LZF compression nor anything else gets a free ride from repetition."""
    head = (
        f'{{"uuid":"{i:08d}-0000-4000-8000-000000000000","displayName":"sendgroups.SendMail",'
        f'"job":"sendgroups.SendMail","maxTries":3,"attempts":0,"pushedAt":"1764460000.1",'
        f'"data":{{"to":"user{i}@example.com","subject":"bench {i}","text":"'
    ).encode()
    pad = size - len(head) - 3
    return head + base64.b64encode(os.urandom(pad))[:pad] + b'"}}'


class Pinger(threading.Thread):
    """Worst PING round trip (seconds) while a command runs."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.c = redis.Redis(host="127.0.0.1", port=port)
        self.worst = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            self.c.ping()
            self.worst = max(self.worst, time.perf_counter() - t)
            time.sleep(0.001)


def timed_cli(*args: str, url: str, port: int) -> tuple[dict[str, Any], float, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENDGROUP_")}
    env["REDIS_URL"] = url
    p = Pinger(port)
    p.start()
    t = time.perf_counter()
    proc = subprocess.run([SGW, *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    p.stop.set()
    p.join()
    if proc.returncode != 0:
        raise SystemExit(f"{args[0]} failed: {proc.stderr}")
    return json.loads(proc.stdout), wall, p.worst


def disk_write_speed(directory: Path, size: int) -> float:
    """Bytes/s of a sequential write of ``size`` bytes in 4 MiB blocks, fsynced."""
    block = os.urandom(4 << 20)
    path = directory / "disk-probe.bin"
    t = time.perf_counter()
    with open(path, "wb") as fh:
        left = size
        while left > 0:
            fh.write(block[: min(left, len(block))])
            left -= len(block)
        fh.flush()
        os.fsync(fh.fileno())
    dt = time.perf_counter() - t
    path.unlink()
    return size / dt


def bgsave_seconds(client: redis.Redis[bytes]) -> tuple[float, int]:
    """Wall seconds from BGSAVE until INFO reports the save done (``rdb_saves`` advanced)."""
    saves = int(client.info("persistence")["rdb_saves"])
    t = time.perf_counter()
    client.bgsave()
    while True:
        info = client.info("persistence")
        if not info["rdb_bgsave_in_progress"] and int(info["rdb_saves"]) > saves:
            break
        time.sleep(0.02)
    dt = time.perf_counter() - t
    assert info["rdb_last_bgsave_status"] == "ok"
    rdb = Path(client.config_get("dir")["dir"]) / client.config_get("dbfilename")["dbfilename"]
    return dt, rdb.stat().st_size


def cli_rdb_seconds(port: int, out: Path) -> tuple[float, int]:
    t = time.perf_counter()
    subprocess.run(
        ["redis-cli", "-p", str(port), "--rdb", str(out)], check=True, capture_output=True
    )
    dt = time.perf_counter() - t
    size = out.stat().st_size
    out.unlink()
    return dt, size


def run(jobs: int, base: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sg-bench-", dir=base))
    keys = QueueKeys("mail-bench")
    with RedisServer({"dir": str(work)}) as server:
        c = server.client()
        print(f"[{jobs}] filling {jobs} x 1.5 KB ...", flush=True)
        t = time.perf_counter()
        batch = 20_000
        for start in range(0, jobs, batch):
            push(c, keys, [payload(i) for i in range(start, min(jobs, start + batch))])
        fill_s = time.perf_counter() - t
        used = int(c.info("memory")["used_memory"])

        save_s, rdb_bytes = bgsave_seconds(c)
        cli_s, cli_bytes = cli_rdb_seconds(server.port, work / "cli.rdb")

        dumps = work / "dumps"
        d, d_wall, d_ping = timed_cli(
            "dump", "-q", keys.queue, "--dumps-dir", str(dumps), url=server.url, port=server.port
        )
        seg = d["bytes"]
        disk = disk_write_speed(work, seg)
        r, r_wall, r_ping = timed_cli(
            "restore", "-q", keys.queue, "--dumps-dir", str(dumps), url=server.url, port=server.port
        )
        assert r["jobs"] == jobs == c.llen(keys.ready)
    shutil.rmtree(work, ignore_errors=True)
    res = {
        "jobs": jobs,
        "loadAverage1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "payloadBytes": 1500,
        "redisUsedMemoryBytes": used,
        "segmentBytes": seg,
        "fillSeconds": round(fill_s, 2),
        "dump": {
            "seconds": d["seconds"],
            "wallSeconds": round(d_wall, 2),
            "jobsPerSecond": round(jobs / d["seconds"]),
            "MBps": round(seg / d["seconds"] / MB, 1),
            "worstPingMs": round(d_ping * 1000, 1),
        },
        "restore": {
            "seconds": r["seconds"],
            "wallSeconds": round(r_wall, 2),
            "jobsPerSecond": round(jobs / r["seconds"]),
            "MBps": round(seg / r["seconds"] / MB, 1),
            "worstPingMs": round(r_ping * 1000, 1),
        },
        "bgsave": {
            "seconds": round(save_s, 2),
            "rdbBytes": rdb_bytes,
            "MBps": round(rdb_bytes / save_s / MB, 1),
        },
        "redisCliRdb": {
            "seconds": round(cli_s, 2),
            "rdbBytes": cli_bytes,
            "MBps": round(cli_bytes / cli_s / MB, 1),
        },
        "diskSequentialWriteMBps": round(disk / MB, 1),
    }
    res["ratios"] = {
        "dumpToDisk": round(res["dump"]["MBps"] / res["diskSequentialWriteMBps"], 2),
        "dumpSecondsOverBgsave": round(d["seconds"] / save_s, 2),
        "dumpSecondsOverRedisCliRdb": round(d["seconds"] / cli_s, 2),
        "restoreSecondsOverDump": round(r["seconds"] / d["seconds"], 2),
    }
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, action="append", help="queue sizes (repeatable)")
    ap.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="volume to benchmark on (segments, RDB files, disk probe)",
    )
    args = ap.parse_args()
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    for jobs in args.jobs or [100_000, 1_000_000]:
        res = run(jobs, args.dir)
        (out_dir / f"dump_restore-{jobs}.json").write_text(json.dumps(res, indent=2) + "\n")
        print(json.dumps(res, indent=2), flush=True)
        dd, rr = res["dump"], res["restore"]
        print(
            f"[{jobs}] dump {dd['seconds']}s ({dd['jobsPerSecond']} jobs/s, {dd['MBps']} MB/s, "
            f"worst ping {dd['worstPingMs']} ms) | restore {rr['seconds']}s "
            f"({rr['jobsPerSecond']} jobs/s, {rr['MBps']} MB/s, worst ping {rr['worstPingMs']} ms)"
            f" | BGSAVE {res['bgsave']['seconds']}s | redis-cli --rdb "
            f"{res['redisCliRdb']['seconds']}s | disk {res['diskSequentialWriteMBps']} MB/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
