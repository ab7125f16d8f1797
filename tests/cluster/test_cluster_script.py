"""hack/cluster/cluster: two `up`s in parallel give two independent clusters, and `down`
leaves no process behind."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cluster import CLUSTER_SCRIPT, built_bin_dir

pytestmark = pytest.mark.cluster


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """(pid, cmdline) of every live process whose command line contains ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append((int(entry), cmdline))
    return found


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (exited, waiting to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def read_env(state: Path) -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in (state / "cluster.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )


@pytest.mark.timeout(900)
def test_two_parallel_ups_give_independent_clusters_and_down_leaves_nothing(
    tmp_path: Path,
) -> None:
    states = [tmp_path / "a", tmp_path / "b"]
    procs = [
        subprocess.Popen(
            [str(CLUSTER_SCRIPT), "--state-dir", str(s), "up"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        for s in states
    ]
    pids: list[int] = []
    try:
        outputs = [p.communicate(timeout=600)[0] for p in procs]
        for p, out in zip(procs, outputs, strict=True):
            assert p.returncode == 0, f"up failed:\n{out}"
            assert "cluster up in" in out

        envs = [read_env(s) for s in states]
        ports = [
            {
                e[k]
                for k in (
                    "ETCD_PORT",
                    "ETCD_PEER_PORT",
                    "APISERVER_PORT",
                    "KCM_PORT",
                    "SCHEDULER_PORT",
                )
            }
            for e in envs
        ]
        assert len(ports[0]) == len(ports[1]) == 5
        assert not ports[0] & ports[1], f"clusters share ports: {ports}"
        for s in states:
            pids += [int(f.read_text()) for f in (s / "pids").glob("*.pid")]
        assert len(pids) == 8

        kubectl = str(built_bin_dir() / "kubectl")

        def k(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [kubectl, f"--kubeconfig={state / 'kubeconfig'}", *args],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        made = k(states[0], "create", "namespace", "only-in-a")
        assert made.returncode == 0, made.stderr
        assert k(states[0], "get", "namespace", "only-in-a").returncode == 0
        missing = k(states[1], "get", "namespace", "only-in-a")
        assert missing.returncode != 0
        assert "NotFound" in missing.stderr

        status = subprocess.run(
            [str(CLUSTER_SCRIPT), "--state-dir", str(states[1]), "status"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.count(" running ") == 4
        assert "readyz:     ok" in status.stdout
    finally:
        for s in states:
            down = subprocess.run(
                [str(CLUSTER_SCRIPT), "--state-dir", str(s), "down"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert down.returncode == 0, down.stderr

    for s in states:
        assert not s.exists(), f"down left {s}"
        assert processes_mentioning(str(s)) == []
    assert [pid for pid in pids if alive(pid)] == []


def test_up_fails_with_the_reason_and_leaves_nothing_when_a_component_cannot_start(
    tmp_path: Path,
) -> None:
    # A binary cache whose kube-apiserver refuses to start; the other binaries are the real ones.
    real = built_bin_dir()
    fake = tmp_path / "cache" / "v1.37.2+etcd-test" / "bin"
    fake.mkdir(parents=True)
    for binary in ("etcd", "kube-controller-manager", "kube-scheduler", "kubectl"):
        (fake / binary).symlink_to(real / binary)
    apiserver = fake / "kube-apiserver"
    apiserver.write_text("#!/bin/sh\necho 'E0000 bad flag --made-up-for-the-test' >&2\nexit 1\n")
    apiserver.chmod(0o755)
    (fake / ".complete").write_text("test\n")
    state = tmp_path / "state"
    env = {
        **os.environ,
        "SENDGROUP_K8S_CACHE": str(tmp_path / "cache"),
        "K8S_VERSION": "v1.37.2",
        "ETCD_VERSION": "test",
    }
    up = subprocess.run(
        [str(CLUSTER_SCRIPT), "--state-dir", str(state), "up"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert up.returncode != 0
    assert "kube-apiserver exited while waiting for kube-apiserver /readyz" in up.stderr
    assert "bad flag --made-up-for-the-test" in up.stderr
    assert "control plane did not start" in up.stderr
    # etcd, which did start, was stopped again.
    assert processes_mentioning(str(state)) == []
    down = subprocess.run(
        [str(CLUSTER_SCRIPT), "--state-dir", str(state), "down"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert down.returncode == 0, down.stderr
    assert not state.exists()
