"""The cold path, on every CI run: the install steps of the README's two commands on a machine
where what they install is absent.

``hack/fresh-machine`` gives a private mount namespace whose /usr, /etc and /var are overlays of
this machine's (writes land in the test's directory; the host's installation is never touched),
with docker.io, containerd, runc, debootstrap, the CNI plugins and redis-server purged, Go
removed (``/usr/local/go`` and the project's toolchain cache), and fresh image caches and daemon
sockets. In there, in order, as a new user's first ``hack/demo`` / ``hack/test`` would:

1. ``hack/cluster/cluster versions`` reads the (warm) Kubernetes cache with no Go anywhere;
2. ``hack/bootstrap`` installs the Debian packages again and the pinned Go toolchain from the Go
   module proxy;
3. ``hack/images/build load`` installs docker.io, debootstrap, containerd and runc, starts its
   own dockerd and containerd, builds the four images and imports them (the regression of
   issue 13: it picked its docker client before installing docker.io and recursed to SIGSEGV);
4. ``hack/images/build stop``.

Cost: about 3-5 minutes (apt downloads, the Go toolchain's 72 MB, a cold docker data root, the
wheelhouse). The base image's root filesystem tarball is taken from this machine's image cache
when it has one (debootstrap itself is still installed and checked to run);
``SENDGROUP_FRESH_DEBOOTSTRAP=1`` runs debootstrap too (about 1-2 minutes more).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.reporting import report_line

ROOT = Path(__file__).resolve().parents[2]
FRESH = ROOT / "hack" / "fresh-machine"
HOST_IMAGES_CACHE = Path(
    os.environ.get("SENDGROUP_IMAGES_CACHE")
    or Path.home() / ".cache" / "sendgroup-operator" / "images"
)

HOST_GO_CACHE = Path(
    os.environ.get("SENDGROUP_GO_CACHE") or Path.home() / ".cache" / "sendgroup-operator" / "go"
)
PURGED = ["docker.io", "containerd", "runc", "debootstrap", "containernetworking-plugins"]
PURGED += ["redis-server", "redis-tools"]

pytestmark = [pytest.mark.images, pytest.mark.timeout(2400)]

# Each step prints `STEP <name> rc=<exit code> <seconds>s` after it ran; every step runs even
# when one before failed, so one run shows every cold-path failure at once.
SCRIPT = r"""
set -u
step() {
	local name=$1 t0=$SECONDS rc=0
	shift
	echo "=== $name: $*" >&2
	"$@" >&2 || rc=$?
	echo "STEP $name rc=$rc $((SECONDS - t0))s"
}
absent() { ! type -P "$@" >/dev/null; }
step absent-before absent dockerd debootstrap containerd ctr runc go redis-server
step versions-without-go hack/cluster/cluster versions
step bootstrap hack/bootstrap
go_toolchain() {
	local dir
	dir=$(hack/go/toolchain --path) && test "$dir" = "$SENDGROUP_GO_CACHE/go1.26.8/bin" &&
		"$dir/go" version | grep -F go1.26.8
}
installed() {
	type -P dockerd debootstrap containerd ctr runc redis-server && debootstrap --version
}
tag=${SENDGROUP_IMAGE_TAG:-dev}
step go-toolchain go_toolchain
step images-load hack/images/build load
step installed installed
step lock-label hack/images/build docker image inspect \
	-f '{{index .Config.Labels "io.sendgroups.requirements-lock"}}' \
	"sendgroup-worker:$tag" "sendgroup-operator:$tag"
step containerd-images hack/images/build ctr -n k8s.io images ls -q
step stop hack/images/build stop
"""


def dpkg_status() -> str:
    """This machine's dpkg state of the packages the fresh view purges."""
    return subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status} ${Version}\\n", *PURGED],
        capture_output=True,
        text=True,
        check=False,
    ).stdout


def test_cold_install_steps_in_a_fresh_machine_view(pytestconfig: pytest.Config) -> None:
    if os.geteuid() != 0:
        pytest.fail("hack/fresh-machine needs root (mount namespace, dpkg)", pytrace=False)
    # A short path: dockerd's containerd puts sockets 40 characters below DIR/run, and a unix
    # socket path has at most 107. hack/fresh-machine removes it afterwards.
    fresh = Path(tempfile.mkdtemp(prefix="sg-fresh-", dir="/tmp"))
    go_cache_before = HOST_GO_CACHE.exists()
    packages_before = dpkg_status()
    if os.environ.get("SENDGROUP_FRESH_DEBOOTSTRAP") != "1":
        tarballs = sorted((HOST_IMAGES_CACHE / "base").glob("sendgroup-base-*.tar.gz"))
        if tarballs:
            (fresh / "images" / "base").mkdir(parents=True)
            for tarball in tarballs:
                shutil.copy(tarball, fresh / "images" / "base" / tarball.name)
    started = time.monotonic()
    proc = subprocess.run(
        [str(FRESH), "--dir", str(fresh), "--", "bash", "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        errors="replace",  # apt and debconf print bytes of other encodings
        timeout=2300,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    elapsed = time.monotonic() - started
    steps = {
        m.group(1): (int(m.group(2)), m.group(3))
        for m in re.finditer(r"^STEP (\S+) rc=(\d+) (\d+s)$", proc.stdout, re.M)
    }
    report_line(
        pytestconfig,
        f"fresh machine: {elapsed:.0f}s; "
        + ", ".join(f"{name} {secs} rc {rc}" for name, (rc, secs) in steps.items()),
    )
    failed = {name: rc for name, (rc, _) in steps.items() if rc != 0}
    assert proc.returncode == 0 and len(steps) == 9 and not failed, (
        f"hack/fresh-machine exit {proc.returncode}; failed steps {failed} of {steps}\n"
        f"--- stderr (last 8000 chars):\n{proc.stderr[-8000:]}"
    )
    lock = hashlib.sha256((ROOT / "requirements.lock").read_bytes()).hexdigest()
    # the lock-label step's two lines (containerd's listing has other sha256: lines)
    labels = re.findall(rf"^sha256:{lock}$", proc.stderr, re.M)
    assert len(labels) == 2, proc.stderr[-3000:]
    tag = os.environ.get("SENDGROUP_IMAGE_TAG", "dev")
    for image in ("sendgroup-pause:3.10", f"sendgroup-worker:{tag}", f"sendgroup-operator:{tag}"):
        assert f"docker.io/library/{image}\n" in proc.stderr, proc.stderr[-3000:]
    # Nothing of it reached the host: no Go toolchain cache appeared, the packages' state is
    # what it was.
    assert HOST_GO_CACHE.exists() == go_cache_before
    assert dpkg_status() == packages_before
