"""200 SendGroups: the operator reconciles them all; an idle group costs no API request, no
write and at most 2 Redis commands per minute (INFO commandstats), and a job pushed to one gets
its workers asked for within a second (median; issue 15); a busy group with a steady
Deployment costs none either (the Deployment is read from a watch-fed index, not fetched per
reaper pass). Prints the measured figures (requests/minute/group, Redis commands/minute/group,
RSS, wake-up latency)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import Objects
from tests.cluster.test_operator import push, replicas
from tests.support import manifests
from tests.support.cluster import KubeCluster, wait_for
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.cluster

GROUPS = 200
WINDOW = 30.0
WAKEUPS = 20


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A redis-server of this test's own: the Redis commands per group are counted on the
    whole server, and the session's shared one may still hear from earlier tests' leftovers
    (stop 29's CI: 2.11 against the bound of 2, 0.59 alone)."""
    server = RedisServer().start()
    yield server.url
    server.cleanup()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _counter(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in metrics")


def _redis_calls(client: redis.Redis) -> int:
    """Every command the server ran so far (INFO commandstats, a script's own commands too)."""
    info = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in info.items() if k != "cmdstat_info")


def _scripts_run(client: redis.Redis) -> int:
    """Script calls so far: each is one group's full measurement (``measure.lua``)."""
    info = client.info("commandstats")
    return sum(int(info.get(k, {}).get("calls", 0)) for k in ("cmdstat_evalsha", "cmdstat_eval"))


def _wait_until_measurements_stop(client: redis.Redis, quiet: float = 12.0) -> float:
    """Wait until no group was fully measured for ``quiet`` seconds (one reaper interval of 10 s
    and a margin): the start-up passes that leave each group idle are over, so the window
    after it sees the cost at rest alone. A stop 36 CI run counted 459 commands in its window
    (4.59 per group per minute; most likely start-up measurements of groups not yet left idle,
    ~30 groups x ~15 commands; not reproduced), where runs alone and under two busy loops count
    ~59 (the idle check's EXISTS). The window's commands are in the assertion's message. Returns
    the seconds waited; fails when measurements never stop (a group measured over and over
    is the regression this test is for)."""
    started = time.monotonic()
    last, since = _scripts_run(client), time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() - started < 90, (
            "groups were still being fully measured (measure.lua) 90 s after all reconciled"
        )
        time.sleep(1.0)
        now = _scripts_run(client)
        if now != last:
            last, since = now, time.monotonic()
    return time.monotonic() - started


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """Calls per command between two ``INFO commandstats`` (nonzero only)."""
    out = {}
    for key, value in after.items():
        calls = int(value["calls"]) - int(before.get(key, {}).get("calls", 0))
        if calls and key != "cmdstat_info":
            out[key.removeprefix("cmdstat_")] = calls
    return out


def test_two_hundred_idle_groups(
    operator_factory: Any, objects: Objects, kube_cluster: KubeCluster, redis_client: redis.Redis
) -> None:
    started = time.monotonic()
    op = operator_factory(SENDGROUP_REAPER_INTERVAL="10", SENDGROUP_STATUS_REFRESH="60")
    groups = [
        manifests.sendgroup(f"idle-{i:03d}", {"campaign": "bulk", "host": f"h{i}.example.com"})
        for i in range(GROUPS)
    ]
    objects.cluster.kubectl(
        "apply", "-n", objects.namespace, "-f", "-", input=manifests.stream(*groups), timeout=120
    )

    def all_reconciled() -> list[dict[str, Any]] | None:
        items = objects.list("sendgroups")
        done = [i for i in items if (i.get("status") or {}).get("phase") == "Pending"]
        return items if len(done) == GROUPS else None

    items = wait_for(all_reconciled, 180, f"{GROUPS} groups reconciled", interval=2)
    reconciled_after = time.monotonic() - started
    versions = {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}
    before = _counter(op.metrics(), "sendgroup_kube_requests_total")
    settled_after = _wait_until_measurements_stop(redis_client)
    stats_before = redis_client.info("commandstats")
    redis_before = _redis_calls(redis_client)
    time.sleep(WINDOW)
    redis_after = _redis_calls(redis_client)
    window_commands = _delta(stats_before, redis_client.info("commandstats"))
    after = _counter(op.metrics(), "sendgroup_kube_requests_total")
    later = {
        i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in objects.list("sendgroups")
    }
    writes = sum(1 for name, rv in later.items() if versions.get(name) != rv)
    per_group_minute = (after - before) / GROUPS / (WINDOW / 60)
    redis_per_group_minute = (redis_after - redis_before) / GROUPS / (WINDOW / 60)
    rss = _rss_mib(op.proc.pid)  # type: ignore[union-attr]
    apps = client.AppsV1Api(kube_cluster.api_client())

    def deployment(name: str) -> bool:
        try:
            apps.read_namespaced_deployment(name, objects.namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    latencies = []
    for i in range(0, GROUPS, GROUPS // WAKEUPS):
        time.sleep(0.1 + (i % 7) / 10)  # out of step with the observer's poll
        pushed = time.monotonic()
        push(redis_client, f"mail-idle-{i:03d}", 1)
        wait_for(lambda i=i: deployment(f"sg-idle-{i:03d}"), 10, "workers asked for", 0.02)
        latencies.append(time.monotonic() - pushed)
    latencies.sort()
    p50, p99 = latencies[len(latencies) // 2], latencies[-1]
    print(
        f"\n{GROUPS} idle SendGroups: reconciled in {reconciled_after:.1f}s "
        f"(no full measurement after {settled_after:.0f}s more); "
        f"reconciler API requests per idle group per minute: {per_group_minute:.3f}; "
        f"Redis commands per idle group per minute: {redis_per_group_minute:.2f}; "
        f"SendGroup writes in {WINDOW:.0f}s: {writes}; operator RSS: {rss:.0f} MiB; "
        f"push -> Deployment over {len(latencies)} idle groups: p50 {p50:.2f}s, max {p99:.2f}s"
    )
    assert writes == 0, "a steady idle group must cause no writes"
    assert per_group_minute <= 0.1
    assert redis_per_group_minute <= 2, f"commands in the {WINDOW:.0f} s window: {window_commands}"
    # the goal (p99 <= 2 s) is the benchmark's (bench/scale); under a loaded CI machine the
    # test holds what a user would notice: most wake-ups well inside the old 10 s check
    assert p50 <= 1.0 and p99 <= 5.0, latencies
    assert op.running() and rss < 400


BUSY = 30


def _versions(objects: Objects) -> dict[str, str]:
    return {
        i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in objects.list("sendgroups")
    }


def test_busy_groups_with_steady_deployments_cost_no_api_request(
    operator_factory: Any, objects: Objects, redis_client: redis.Redis
) -> None:
    """30 groups with work (Deployments created; no node, so pods stay Pending): once their
    Deployments are steady, reaper passes read them from the watch-fed index: no GET per group
    per pass, no write. A spec change is still acted on at once."""
    op = operator_factory(SENDGROUP_REAPER_INTERVAL="5", SENDGROUP_STATUS_REFRESH="600")
    for i in range(BUSY):
        push(redis_client, f"mail-busy-{i:02d}", 3)
    groups = [
        manifests.sendgroup(
            f"busy-{i:02d}", {"campaign": "bulk", "host": f"h{i}.example.com", "workers": 2}
        )
        for i in range(BUSY)
    ]
    objects.cluster.kubectl(
        "apply", "-n", objects.namespace, "-f", "-", input=manifests.stream(*groups), timeout=120
    )

    def all_running() -> bool:
        items = objects.list("sendgroups")
        running = [i for i in items if (i.get("status") or {}).get("phase") == "Running"]
        deployments = objects.list("deployments")
        return len(running) == BUSY and len(deployments) == BUSY

    wait_for(all_running, 120, f"{BUSY} busy groups Running with a Deployment", interval=2)
    time.sleep(17)  # past the write grace (15 s) after the operator's last Deployment write
    versions = _versions(objects)
    before = _counter(op.metrics(), "sendgroup_kube_requests_total")
    time.sleep(WINDOW)
    after = _counter(op.metrics(), "sendgroup_kube_requests_total")
    writes = sum(1 for name, rv in _versions(objects).items() if versions.get(name) != rv)
    passes = BUSY * WINDOW / 5
    print(
        f"\n{BUSY} busy SendGroups at rest: {after - before:.0f} reconciler API requests in "
        f"{WINDOW:.0f}s (~{passes:.0f} reaper passes); SendGroup writes: {writes}"
    )
    assert after - before <= 2, "a steady busy group must not GET its Deployment every pass"
    assert writes == 0
    objects.patch_sg("busy-07", {"workers": 1})
    wait_for(
        lambda: replicas(objects, "busy-07") == 1, 20, "the spec change reaches the Deployment"
    )
