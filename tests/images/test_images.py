"""The container images, built by `hack/images/build` with a local docker engine.

What a platform team checks before it runs an image under the `restricted` Pod Security
Standard: it runs as a non-root uid with a read-only root filesystem, its entrypoint works, it
carries no compiler, it imports the project; and the pod sandbox ("pause") image really exits
on SIGTERM and reaps orphans. Building is cached (base image, wheelhouse, docker layers), so a
warm run of this module takes under a minute; a cold one a few minutes more (debootstrap, wheels).
"""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import shutil
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "hack" / "images" / "build"
# The tag hack/images/build gives the project images (SENDGROUP_IMAGE_TAG, default dev).
TAG = os.environ.get("SENDGROUP_IMAGE_TAG", "dev")
WORKER = f"sendgroup-worker:{TAG}"
OPERATOR = f"sendgroup-operator:{TAG}"
PAUSE = "sendgroup-pause:3.10"
UID = "10001"

pytestmark = [pytest.mark.images, pytest.mark.timeout(1800)]


def build(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    """Run `hack/images/build ARGS` (its docker/ctr subcommands talk to the script's daemons)."""
    return subprocess.run(
        [str(BUILD), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return build("docker", *args, timeout=timeout)


def run(
    image: str, *args: str, entrypoint: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`docker run` the way the `restricted` Pod Security Standard will: no network, read-only
    root with /tmp writable, all capabilities dropped, no privilege escalation.

    A container still running after `timeout` seconds is removed and the test fails."""
    name = f"sg-images-test-{time.monotonic_ns()}"
    cmd = ["run", "--rm", "--name", name, "--network", "none", "--read-only", "--tmpfs", "/tmp"]
    cmd += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    if entrypoint is not None:
        cmd += ["--entrypoint", entrypoint]
    try:
        return docker(*cmd, image, *args, timeout=timeout)
    except subprocess.TimeoutExpired:
        docker("rm", "-f", name)
        pytest.fail(f"{image} {' '.join(args)} still running after {timeout}s")


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def images() -> Iterator[None]:
    """All images built (or taken from the cache); the daemons this module started are stopped
    afterwards, the ones that were already running are left alone."""
    before = ok(build("status"))
    result = build("all")
    if result.returncode != 0:
        pytest.fail(f"hack/images/build all failed:\n{result.stderr[-4000:]}")
    print(result.stdout)
    yield
    if "dockerd: running" not in before:
        build("stop-docker", timeout=60)
    if "containerd: running" not in before:
        build("stop-containerd", timeout=60)


@pytest.mark.parametrize("image", [WORKER, OPERATOR])
def test_runs_as_numeric_non_root_user(images: None, image: str) -> None:
    assert ok(docker("image", "inspect", "-f", "{{.Config.User}}", image)).strip() == "10001:10001"
    ids = ok(run(image, "-c", "id -u; id -g; echo $HOME", entrypoint="sh")).split()
    assert ids == [UID, UID, "/tmp"]


def test_worker_entrypoint_and_default_command(images: None) -> None:
    config = ok(
        docker("image", "inspect", "-f", "{{json .Config.Entrypoint}} {{json .Config.Cmd}}", WORKER)
    )
    assert config.strip() == '["sendgroup-worker"] ["work"]'
    out = ok(run(WORKER, "--help"))
    assert "Usage: sendgroup-worker" in out


def test_operator_entrypoint_help(images: None) -> None:
    config = ok(docker("image", "inspect", "-f", "{{json .Config.Entrypoint}}", OPERATOR))
    assert config.strip() == '["sendgroup-operator"]'
    result = run(OPERATOR, "--help", timeout=30)
    if "executable file not found" in result.stderr:
        pytest.fail(
            "the operator image has no `sendgroup-operator` console script: the operator package "
            "(operator/sendgroup_operator, [project.scripts] sendgroup-operator) has not landed"
        )
    # Help, not an operator start: no API server is reachable here, so a start would show up
    # as kopf's startup errors or a timeout.
    out = ok(result)
    assert "sendgroup-operator" in out
    assert "kopf" not in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("image", [WORKER, OPERATOR])
def test_no_compiler_in_final_image(images: None, image: str) -> None:
    script = (
        "for c in gcc cc c++ g++ clang tcc ld as; do command -v $c; done; "
        "find / -xdev -type f -perm /111 \\( -name 'gcc*' -o -name '*-gcc' "
        "-o -name '*-gcc-[0-9]*' -o -name 'cc1*' -o -name 'clang*' \\)"
    )
    result = run(image, "-c", script, entrypoint="sh")
    assert result.stdout.strip() == "", f"compiler pieces in {image}:\n{result.stdout}"


@pytest.mark.parametrize("image", [WORKER, OPERATOR])
def test_no_setuid_programs(images: None, image: str) -> None:
    result = run(image, "-c", "find / -xdev -type f -perm /6000", entrypoint="sh")
    assert result.stdout.strip() == "", f"setuid/setgid files in {image}:\n{result.stdout}"


def test_worker_image_imports_the_project(images: None) -> None:
    out = ok(
        run(
            WORKER,
            "-c",
            "import sys, sendgroup_worker, sendgroup_worker.cli, redis, pydantic; "
            "print(sys.version_info[:2], sendgroup_worker.__file__)",
            entrypoint="python3",
        )
    )
    assert out.startswith("(3, 11) /opt/venv/lib/python3.11/site-packages/sendgroup_worker/")


@pytest.mark.parametrize("image", [WORKER, OPERATOR])
def test_labelled_with_the_lock_digest(images: None, image: str) -> None:
    """Which requirements.lock an image was built from: its label (hack/images/build)."""
    label = '{{index .Config.Labels "io.sendgroups.requirements-lock"}}'
    got = ok(docker("image", "inspect", "-f", label, image)).strip()
    want = hashlib.sha256((ROOT / "requirements.lock").read_bytes()).hexdigest()
    assert got == f"sha256:{want}"


def test_worker_image_has_only_the_worker_part_of_the_lock(images: None) -> None:
    code = (
        "import importlib.util as u; "
        "print([m for m in ('kopf', 'kubernetes', 'pytest', 'mypy', 'uv') if u.find_spec(m)])"
    )
    assert ok(run(WORKER, "-c", code, entrypoint="python3")).strip() == "[]"


def test_operator_image_imports_its_libraries(images: None) -> None:
    modules = ["kopf", "kubernetes.client", "sendgroup_worker"]
    if (ROOT / "operator" / "sendgroup_operator" / "handlers.py").is_file():
        # Everything the operator's handlers import must be in the image (operator extra).
        modules.append("sendgroup_operator.handlers")
    code = f"import kubernetes, {', '.join(modules)}; print(kubernetes.__version__)"
    out = ok(run(OPERATOR, "-c", code, entrypoint="python3"))
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", out.strip()), out


def test_operator_source_does_not_use_kubernetes_aio() -> None:
    """The operator Dockerfile removes `kubernetes/aio` (about 70 MB); nothing may import it."""
    pattern = re.compile(r"kubernetes\.aio|from\s+kubernetes\s+import\s+[^\n]*\baio\b")
    users = [
        str(path.relative_to(ROOT))
        for folder in ("operator", "worker_image")
        for path in (ROOT / folder).rglob("*.py")
        if pattern.search(path.read_text())
    ]
    assert users == [], f"{users} import kubernetes.aio: drop the prune from Dockerfile"


@pytest.mark.parametrize(("image", "budget_mb"), [(WORKER, 200), (OPERATOR, 300), (PAUSE, 2)])
def test_image_size_budget(images: None, image: str, budget_mb: int) -> None:
    size = int(ok(docker("image", "inspect", "-f", "{{.Size}}", image)))
    print(f"{image}: {size / 1e6:.1f} MB")
    assert size <= budget_mb * 1_000_000


@pytest.fixture
def pause_container(images: None) -> Iterator[str]:
    name = f"sg-pause-test-{time.monotonic_ns()}"
    ok(docker("run", "-d", "--name", name, "--network", "none", "--read-only", PAUSE))
    yield name
    docker("rm", "-f", name)


def wait_exit(name: str) -> tuple[int, float]:
    """Exit code of a container once it stopped, and seconds waited."""
    started = time.monotonic()
    code = int(ok(docker("wait", name, timeout=60)).strip())
    return code, time.monotonic() - started


@pytest.mark.parametrize("signal", ["TERM", "INT"])
def test_pause_exits_on_signal(pause_container: str, signal: str) -> None:
    assert ok(docker("inspect", "-f", "{{.State.Running}}", pause_container)).strip() == "true"
    ok(docker("kill", "--signal", signal, pause_container))
    code, waited = wait_exit(pause_container)
    assert code == 0
    assert waited < 10


# Fork a child that forks a grandchild and exits at once: the grandchild is orphaned and
# re-parented to PID 1 of the PID namespace. It exits 0.3 s later; then its /proc entry shows
# whether PID 1 reaped it (entry gone) or left a zombie (state Z for 2 s after it exited).
ORPHAN = """
import os, sys, time
r, w = os.pipe()
if os.fork() == 0:
    pid = os.fork()
    if pid == 0:
        time.sleep(0.3)
        os._exit(0)
    os.write(w, str(pid).encode())
    os._exit(0)
os.wait()
orphan = int(os.read(r, 32))
deadline = time.monotonic() + 10
zombie_since = None
while time.monotonic() < deadline:
    try:
        state = open(f"/proc/{orphan}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        print("reaped")
        sys.exit(0)
    if state == "Z":
        zombie_since = zombie_since or time.monotonic()
        if time.monotonic() - zombie_since > 2:
            break
    time.sleep(0.05)
print("left", state)
"""


def orphan_fate(init_container: str) -> str:
    """Run ORPHAN in the PID namespace of `init_container`; 'reaped' or 'left <state>'."""
    out = docker(
        "run",
        "--rm",
        "--network",
        "none",
        "--pid",
        f"container:{init_container}",
        "--entrypoint",
        "python3",
        WORKER,
        "-c",
        ORPHAN,
    )
    return ok(out).strip()


def test_pause_reaps_orphans(pause_container: str) -> None:
    assert orphan_fate(pause_container) == "reaped"


def test_orphans_stay_zombies_under_an_init_that_does_not_reap(images: None) -> None:
    """Control for the test above: the same check sees the zombie when PID 1 never waits."""
    name = f"sg-noreap-test-{time.monotonic_ns()}"
    ok(
        docker(
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "none",
            "--entrypoint",
            "python3",
            WORKER,
            "-c",
            "import time; time.sleep(120)",
        )
    )
    try:
        assert orphan_fate(name) == "left Z"
    finally:
        docker("rm", "-f", name)


def test_load_into_containerd_k8s_namespace(images: None) -> None:
    result = build("load")
    assert result.returncode == 0, result.stderr[-4000:]
    listing = ok(build("ctr", "-n", "k8s.io", "images", "ls"))
    for image in (PAUSE, WORKER, OPERATOR):
        docker_id = ok(docker("image", "inspect", "-f", "{{.Id}}", image)).strip()
        ref = f"docker.io/library/{image} "
        line = next(row for row in listing.splitlines() if row.startswith(ref))
        assert f"io.sendgroups.docker-id={docker_id}" in line, line
    # Unpacked and runnable there, as the kubelet will run it.
    name = f"sg-ctr-test-{time.monotonic_ns()}"
    out = build(
        "ctr",
        "-n",
        "k8s.io",
        "run",
        "--rm",
        "--read-only",
        f"docker.io/library/{WORKER}",
        name,
        "sendgroup-worker",
        "--help",
    )
    assert "Usage: sendgroup-worker" in ok(out)


def test_worker_dockerfile_without_wheelhouse_installs_from_an_index(
    images: None, tmp_path: Path
) -> None:
    """Elsewhere nobody has a wheelhouse: the Dockerfile then installs from the package index,
    requirements.lock's hashes checked.

    Here the index is a PEP 503 directory of the wheelhouse's wheels served on loopback (the
    build container shares the host's network for this one build), and the build context is the
    repository with an empty wheelhouse/, as a fresh checkout has it."""
    wheels = sorted((ROOT / "wheelhouse").glob("*.whl"))
    assert wheels, "hack/images/build all left no wheels in wheelhouse/"
    index = tmp_path / "index" / "simple"
    for wheel in wheels:
        project = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
        (index / project).mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel, index / project / wheel.name)
    context = tmp_path / "context"
    context.mkdir()
    parts = ("pyproject.toml", "requirements.lock", "README.md", ".dockerignore", "Dockerfile")
    # the package folders pyproject.toml names (setuptools' packages.find), as a checkout has
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for part in (*parts, "hack/lock/lockfile.py", *packages["packages"]["find"]["where"]):
        source = ROOT / part
        (context / part).parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, context / part, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            shutil.copy(source, context / part)
    (context / "wheelhouse").mkdir()
    shutil.copy(ROOT / "wheelhouse" / "README.md", context / "wheelhouse" / "README.md")

    requested: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(index.parent), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            requested.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    image = "sendgroup-worker:index-test"
    try:
        base = ok(build("base-name")).strip()
        url = f"http://127.0.0.1:{server.server_address[1]}/simple"
        result = docker(
            "build", "--quiet", "--force-rm", "--network", "host",
            "--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"PIP_INDEX_URL={url}",
            "-f", str(context / "Dockerfile"), "--target", "worker", "-t", image, str(context),
            timeout=900,
        )  # fmt: skip
        ok(result)
        assert "/simple/redis/" in requested
        assert "Usage: sendgroup-worker" in ok(run(image, "--help"))
    finally:
        server.shutdown()
        server.server_close()
        docker("rmi", image)
        docker("image", "prune", "--force")
