"""Measuring one worker process (ours or a peer's) from the outside, the same way for all.

A worker is started with one end of a pipe (``--stamp-fd``); its task body writes an 8-byte
``time.time()`` stamp there per job (``bench.peer_workers``, ``bench.our_worker``). This module
reads the stamps and, at the first and the last stamp, snapshots:

* the worker's CPU seconds (user + system of the process, its live descendants and its reaped
  children: :func:`tree_cpu`, psutil), and redis-server's (INFO cpu);
* Redis's ``total_commands_processed`` (INFO stats: counts commands run inside Lua scripts too);
* the request segments Redis received: the sum of ``data_segs_in`` over Redis's established
  TCP sockets (``ss -ti``). With TCP_NODELAY on loopback every client write is one segment, so
  this counts round trips: a pipeline or MULTI/EXEC batch sent in one write is one.

Jobs/s is ``(N - 1) / (last stamp - first stamp)``: start-up and enqueueing are not timed. The
counters are divided by the number of jobs stamped between the two snapshots. The stamps are
read every 20 ms, not as they come, so the reader does not wake (and preempt) the worker.
"""

from __future__ import annotations

import os
import re
import select
import signal
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:  # psutil is in .venv-bench only: imported when a worker is measured
    import psutil

ROOT = Path(__file__).resolve().parents[1]
STAMP = struct.Struct("d")
_SEGS = re.compile(r"data_segs_in:(\d+)")


def redis_segments_in(port: int) -> int:
    """Data segments received so far by the Redis listening on ``port``, summed over its
    established connections (connections closed meanwhile drop out: short-lived clients are
    undercounted, none of the measured workers reconnects per job)."""
    out = subprocess.run(
        ["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(int(m) for m in _SEGS.findall(out))


@dataclass
class Snapshot:
    """What :func:`snapshot` reads: seconds (wall, CPU), counters."""

    cpu: float
    commands: int
    segments: int
    redis_cpu: float


def tree_cpu(proc: psutil.Process) -> float:
    """CPU seconds (user + system) of ``proc``, of the children it reaped, and of its live
    descendants: a worker that forks or runs a pool is charged for all of it."""
    import psutil

    t = proc.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in proc.children(recursive=True):
        try:
            c = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += c.user + c.system
    return float(total)


def snapshot(proc: psutil.Process, client: redis.Redis, port: int) -> Snapshot:
    cpu = tree_cpu(proc)
    info = client.info()  # one command: stats and cpu sections
    redis_cpu = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    commands = int(info["total_commands_processed"])
    return Snapshot(cpu, commands, redis_segments_in(port), redis_cpu)


@dataclass
class Drain:
    """One measured drain of ``jobs`` jobs; per-job figures over the timed window."""

    jobs: int
    seconds: float
    cpu_per_1000: float
    commands_per_job: float | None
    trips_per_job: float | None
    redis_cpu_per_1000: float | None = None
    latencies_ms: list[float] = field(default_factory=list)
    #: time.time() of the first stamp (the window's start), for events logged by the worker
    first: float | None = None

    @property
    def rate(self) -> float:
        return (self.jobs - 1) / self.seconds if self.seconds > 0 else float("nan")

    def latency(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) of the idle pickup latency, ms (None without samples)."""
        if not self.latencies_ms:
            return None
        data = sorted(self.latencies_ms)
        if len(data) == 1:
            return data[0]
        return statistics.quantiles(data, n=100, method="inclusive")[round(q * 100) - 1]


class StampedWorker:
    """A worker subprocess with a stamp pipe. ``argv`` gets ``--stamp-fd N`` appended."""

    def __init__(
        self, argv: Sequence[str], env: dict[str, str] | None = None, log: Path | None = None
    ) -> None:
        self.rfd, wfd = os.pipe()
        self.log_path = log
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*argv, "--stamp-fd", str(wfd)],
            pass_fds=(wfd,),
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        os.close(wfd)
        if log:
            out.close()  # type: ignore[union-attr]
        import psutil

        self.ps = psutil.Process(self.proc.pid)
        self._buf = b""

    def stamps(
        self, count: int, timeout: float, partial: bool = False, lazy: bool = False
    ) -> list[float]:
        """Read ``count`` stamps. After ``timeout`` seconds: the stamps read so far when
        ``partial``, else RuntimeError (with the log tail); RuntimeError when the worker
        exits. ``lazy`` reads every 20 ms instead of blocking on the pipe: a blocked reader
        would be woken (a context switch, often preempting the worker) by every job's stamp."""
        need = count * STAMP.size
        deadline = time.monotonic() + timeout
        while len(self._buf) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                if partial:
                    break
                raise RuntimeError(
                    f"worker gave {len(self._buf) // STAMP.size}/{count} stamps in {timeout:g}s"
                    + self._tail()
                )
            if lazy:
                time.sleep(min(left, 0.02))
                ready, _, _ = select.select([self.rfd], [], [], 0)
            else:
                ready, _, _ = select.select([self.rfd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.rfd, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"worker exited ({self.proc.poll()})" + self._tail())
                self._buf += chunk
        take = min(need, len(self._buf) // STAMP.size * STAMP.size)
        data, self._buf = self._buf[:take], self._buf[take:]
        return [STAMP.unpack_from(data, i * STAMP.size)[0] for i in range(take // STAMP.size)]

    def _tail(self) -> str:
        if self.log_path and self.log_path.exists():
            return "; log tail:\n" + self.log_path.read_text(errors="replace")[-2000:]
        return ""

    def stop(self) -> None:
        """SIGTERM the worker's process group, SIGKILL after 5 s; always reaps it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        os.close(self.rfd)


def measure(
    worker: StampedWorker,
    jobs: int,
    client: redis.Redis | None,
    port: int,
    timeout: float,
    cap: float | None = None,
) -> Drain:
    """Time ``jobs`` jobs already queued for ``worker`` (see the module docstring). With
    ``cap`` seconds, a slow worker is timed over the jobs it finished within ``cap`` seconds of
    its first one (``Drain.jobs`` says how many); the rest stay queued."""
    first = worker.stamps(1, timeout, lazy=True)[0]
    t0 = time.time()
    start = snapshot(worker.ps, client, port) if client is not None else None
    cpu0 = start.cpu if start else tree_cpu(worker.ps)
    rest = worker.stamps(jobs - 1, cap if cap else timeout, partial=cap is not None, lazy=True)
    t1 = time.time()
    end = snapshot(worker.ps, client, port) if client is not None else None
    cpu1 = end.cpu if end else tree_cpu(worker.ps)
    if len(rest) < jobs - 1:  # capped: the jobs stamped before the end snapshot count too
        rest += worker.stamps(jobs - 1 - len(rest), 0.05, partial=True)
    if not rest:
        raise RuntimeError("only one job finished in the timed window")
    # the counters cover (t0, t1]: divide by the jobs stamped in that window
    done = sum(1 for t in rest if t0 < t <= t1) or 1
    commands = trips = redis_cpu = None
    if start is not None and end is not None:
        redis_cpu = (end.redis_cpu - start.redis_cpu) / done * 1000
        # our own INFO (1 command, 1 segment) between the two snapshots is taken off
        commands = (end.commands - start.commands - 1) / done
        trips = (end.segments - start.segments - 1) / done
    return Drain(
        jobs=len(rest) + 1,
        seconds=rest[-1] - first,
        cpu_per_1000=(cpu1 - cpu0) / done * 1000,
        commands_per_job=commands,
        trips_per_job=trips,
        redis_cpu_per_1000=redis_cpu,
        first=first,
    )


def idle_latency(
    worker: StampedWorker, pusher_argv: Sequence[str], samples: int, timeout: float
) -> list[float]:
    """Push one job at a time to the idle ``worker`` through a ``peer_workers push`` process;
    milliseconds from just before the push call to the job's stamp. Waits 30-60 ms between
    samples so the worker is idle (blocked or polling) when the next one arrives."""
    pusher = subprocess.Popen(
        list(pusher_argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert pusher.stdin is not None and pusher.stdout is not None
    out: list[float] = []

    def one() -> float:
        pusher.stdin.write("\n")  # type: ignore[union-attr]
        pusher.stdin.flush()  # type: ignore[union-attr]
        pushed = float(pusher.stdout.readline())  # type: ignore[union-attr]
        (started,) = worker.stamps(1, timeout)
        return (started - pushed) * 1000

    try:
        one()  # warm-up: the worker is up and has taken a job (start-up not measured)
        for i in range(samples):
            time.sleep(0.03 + 0.03 * ((i * 7919) % 101) / 100)
            out.append(one())
    finally:
        pusher.stdin.close()
        pusher.wait(10)
    return out


def ping_rtt(port: int, seconds: float = 1.0) -> float:
    """Seconds per PING round trip on a raw socket (no client library): the network and
    redis-server part of a round trip, the physical limit's unit."""
    import socket

    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            s.sendall(b"PING\r\n")
            if s.recv(64) != b"+PONG\r\n":
                raise RuntimeError("unexpected PING reply")
            n += 1
        return (time.perf_counter() - start) / n


def python_for(peer: str, default: Path) -> Path:
    """The interpreter for ``peer``: arq has its own venv (``.venv-bench-arq``, made by
    bench/run: arq pins redis-py < 6, we use 7) when present; others use ``default``."""
    if peer == "arq":
        own = ROOT / ".venv-bench-arq" / "bin" / "python"
        if own.exists():
            return own
    return default


def ours_python() -> Path:
    """The interpreter running the benchmark has the project installed (bench/run's
    .venv-bench, or .venv)."""
    return Path(sys.executable)
