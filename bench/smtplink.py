"""SMTP targets for scenario 2: Postfix's ``smtp-sink`` on loopback, and the same sink behind a
network-namespace link with added latency, which this module creates and removes itself.

The link: ``ip netns add``, a veth pair (host end 10.213.N.1/30, namespace end 10.213.N.2/30),
the sink inside the namespace on 10.213.N.2. Latency: ``tc qdisc ... netem delay`` on both veth
ends when the kernel has netem; when it has not ("Specified qdisc kind is unknown": no
``CONFIG_NET_SCH_NETEM``), a delay relay (``bench.delay_relay``) inside the namespace on the
veth address, holding every chunk ``delay`` seconds in each direction before passing it to the
sink. Either way the SMTP round trip (NOOP on an open connection) is measured and reported.

Needs root (ip netns), ``ip``, ``tc`` and ``smtp-sink`` (Debian's postfix; bench/run installs
it without letting a Postfix daemon start).
"""

from __future__ import annotations

import os
import shutil
import signal
import smtplib
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SINK_PORT = 2525
RELAY_PORT = 2526


def smtp_sink_binary() -> str:
    """The smtp-sink path; RuntimeError naming the fix when it is missing."""
    found = shutil.which("smtp-sink") or (
        "/usr/sbin/smtp-sink" if os.path.exists("/usr/sbin/smtp-sink") else None
    )
    if found is None:
        raise RuntimeError("smtp-sink not found: run bench/run (installs Debian's postfix)")
    return found


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def _must(*argv: str) -> None:
    out = _run(*argv)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {out.stderr.strip()}")


def wait_smtp(host: str, port: int, timeout: float = 10.0) -> None:
    """Poll until an SMTP greeting comes from ``host:port``; RuntimeError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with smtplib.SMTP(host, port, timeout=2) as s:
                s.noop()
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no SMTP server on {host}:{port}: {exc}") from exc
            time.sleep(0.05)


def smtp_rtt(host: str, port: int, count: int = 300) -> float:
    """Median seconds of an SMTP NOOP round trip on one open connection."""
    with smtplib.SMTP(host, port, local_hostname="bench", timeout=10) as s:
        s.noop()
        times = []
        for _ in range(count):
            start = time.perf_counter()
            s.noop()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


@dataclass
class SmtpTargets:
    """Started sinks: ``loopback`` and ``delayed`` are (host, port); ``how`` says how the
    latency was made; ``rtt`` holds measured NOOP round trips (seconds) per target."""

    loopback: tuple[str, int] = ("127.0.0.1", 0)
    direct: tuple[str, int] = ("", 0)
    delayed: tuple[str, int] = ("", 0)
    how: str = ""
    rtt: dict[str, float] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    netns: str = ""
    relay_pid: int = 0

    def relay_cpu(self) -> float | None:
        """CPU seconds the delay relay used so far (None without a relay)."""
        if not self.relay_pid:
            return None
        import psutil

        times = psutil.Process(self.relay_pid).cpu_times()
        return float(times.user + times.system)


def _sink(argv_prefix: list[str], listen: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*argv_prefix, smtp_sink_binary(), "-u", "nobody", listen, "1024"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def start(delay: float = 0.0005, log: object = print) -> SmtpTargets:
    """Start the loopback sink and the namespace link with ``delay`` seconds each way.
    RuntimeError when a step fails (whatever was started is stopped)."""
    from tests.support.redis_server import free_port

    t = SmtpTargets()
    try:
        port = free_port()
        t.procs.append(_sink([], f"127.0.0.1:{port}"))
        t.loopback = ("127.0.0.1", port)
        wait_smtp(*t.loopback)
        n = os.getpid() % 250 + 1
        t.netns = f"sgbench{os.getpid()}"
        host_if, ns_if = f"sgbh{os.getpid()}"[:15], f"sgbn{os.getpid()}"[:15]
        host_ip, ns_ip = f"10.213.{n}.1", f"10.213.{n}.2"
        _must("ip", "netns", "add", t.netns)
        _must("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _must("ip", "link", "set", ns_if, "netns", t.netns)
        _must("ip", "addr", "add", f"{host_ip}/30", "dev", host_if)
        _must("ip", "link", "set", host_if, "up")
        _must("ip", "-n", t.netns, "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        _must("ip", "-n", t.netns, "link", "set", ns_if, "up")
        _must("ip", "-n", t.netns, "link", "set", "lo", "up")
        inside = ["ip", "netns", "exec", t.netns]
        t.procs.append(_sink(inside, f"{ns_ip}:{SINK_PORT}"))
        t.direct = (ns_ip, SINK_PORT)
        wait_smtp(*t.direct)
        t.rtt["loopback"] = smtp_rtt(*t.loopback)
        t.rtt["netns link"] = smtp_rtt(*t.direct)
        usec = f"{delay * 1e6:.0f}us"
        netem = _run("tc", "qdisc", "add", "dev", host_if, "root", "netem", "delay", usec)
        if netem.returncode == 0:
            _must(*inside, "tc", "qdisc", "add", "dev", ns_if, "root", "netem", "delay", usec)
            t.delayed = t.direct
            t.how = f"tc netem delay {usec} on both veth ends (host and namespace)"
        else:
            log(f"netem unavailable ({netem.stderr.strip()}): using the delay relay")
            relay = subprocess.Popen(
                [*inside, sys.executable, "-m", "bench.delay_relay", "--listen",
                 f"{ns_ip}:{RELAY_PORT}", "--to", f"{ns_ip}:{SINK_PORT}", "--delay", str(delay)],
                stdout=subprocess.PIPE, cwd=ROOT, start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
            t.procs.append(relay)
            t.relay_pid = relay.pid
            assert relay.stdout is not None
            if relay.stdout.readline().strip() != b"READY":
                raise RuntimeError("delay relay did not start")
            t.delayed = (ns_ip, RELAY_PORT)
            t.how = (
                f"the kernel has no netem (tc: {netem.stderr.strip()!r}); a delay relay "
                f"(bench/delay_relay.py) inside the namespace, on the veth address, holds every "
                f"chunk {delay * 1e3:g} ms in each direction before passing it to the sink"
            )
        wait_smtp(*t.delayed)
        t.rtt["netns link + delay"] = smtp_rtt(*t.delayed)
        return t
    except BaseException:
        stop(t)
        raise


def stop(t: SmtpTargets) -> None:
    """Stop the sinks and the relay, delete the namespace (and with it the veth pair)."""
    for proc in t.procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            except ProcessLookupError:
                pass
    t.procs.clear()
    if t.netns:
        _run("ip", "netns", "del", t.netns)
        t.netns = ""
