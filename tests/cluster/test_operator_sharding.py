"""Sharding (issue 15) against the real control plane: two operator processes with
SENDGROUP_SHARDING share ~20 groups; a SIGKILLed replica's groups are taken over within a
bounded time, and a group deleted while its owner was dead is finalized (purged once) by the
survivor. What is asserted is what a user sees: Deployments, status, events, metrics; the
operators' logs only to tell which replica wrote a Deployment."""

from __future__ import annotations

import re
import signal
import time
from functools import partial
from typing import Any

import pytest
import redis

from tests.cluster.conftest import Objects
from tests.cluster.test_operator import push, replicas, sendgroup
from tests.support.cluster import KubeCluster, wait_for
from tests.support.operator_proc import OperatorProcess

pytestmark = pytest.mark.cluster

LEASE = 6.0  # seconds: short, so the takeover is quick
GROUPS = [f"s{i}" for i in range(20)]


def gauge(proc: OperatorProcess, name: str) -> float:
    match = re.search(rf"^{name} ([0-9.e+]+)$", proc.metrics(), re.M)
    assert match, name
    return float(match.group(1))


def writers(procs: dict[str, OperatorProcess], group: str) -> list[str]:
    """The replicas whose log says they wrote the group's worker Deployment."""
    line = f"deployment sg-{group} replicas="
    return [who for who, proc in procs.items() if line in proc.log()]


def owns(proc: OperatorProcess, n: int) -> bool:
    """Whether ``proc``'s gauge sendgroup_operator_owned_groups says ``n``."""
    return gauge(proc, "sendgroup_operator_owned_groups") == n


def reconciled(objects: Objects, name: str) -> bool:
    sg = objects.get("sendgroup", name) or {}
    generation = sg.get("metadata", {}).get("generation")
    return bool((sg.get("status") or {}).get("observedGeneration") == generation)


def test_groups_are_sharded_and_a_killed_replicas_groups_are_taken_over(
    operator_factory: Any,
    objects: Objects,
    redis_client: redis.Redis,
    kube_cluster: KubeCluster,
) -> None:
    env = {"SENDGROUP_SHARDING": "true", "SENDGROUP_SHARD_LEASE_DURATION": str(int(LEASE))}
    procs = {
        "alpha": operator_factory(POD_ID="alpha", **env),
        "beta": operator_factory(POD_ID="beta", **env),
    }
    for name in GROUPS:
        push(redis_client, f"mail-{name}", 1)
    objects.apply("\n---\n".join(sendgroup(name) for name in GROUPS))

    # every group reconciled, its Deployment written by exactly one replica
    wait_for(lambda: all(reconciled(objects, n) for n in GROUPS), 90, "every group reconciled")
    wait_for(lambda: all(replicas(objects, n) == 1 for n in GROUPS), 60, "every Deployment")
    owners: dict[str, str] = {}
    for name in GROUPS:
        wait_for(partial(writers, procs, name), 15, f"the log of sg-{name}")
        wrote = writers(procs, name)
        assert len(wrote) == 1, f"sg-{name} written by {wrote}"
        owners[name] = wrote[0]
    owned = {who: sum(1 for o in owners.values() if o == who) for who in procs}
    assert min(owned.values()) >= 2, owned  # 20 groups over 2 members: both have some
    for who, proc in procs.items():
        wait_for(partial(owns, proc, owned[who]), 15, f"{who}'s owned-groups gauge")
        assert gauge(proc, "sendgroup_operator_shard_members") == 2
    leases = kube_cluster.kubectl(
        "get", "leases", "-n", objects.namespace, "-l", "sendgroups.io/shard-set", "-o", "name"
    ).stdout.split()
    assert len(leases) == 2, leases

    # SIGKILL alpha (no goodbye: its Lease stays until beta sees it unchanged for LEASE)
    victim, survivor = procs["alpha"], procs["beta"]
    moved, deleted = [n for n in GROUPS if owners[n] == "alpha"][:2]
    victim.stop(signal.SIGKILL)
    killed = time.monotonic()
    objects.patch_sg(moved, {"workers": 3})
    kube_cluster.kubectl("delete", "sg", deleted, "-n", objects.namespace, "--wait=false")

    # bound: beta drops alpha at most LEASE after its last renewal was seen (renewals every
    # LEASE/3), then one pass; a few seconds of slack for a busy machine
    bound = LEASE + LEASE / 3 + 6
    wait_for(lambda: replicas(objects, moved) == 3, bound, "the survivor applies the change")
    took = time.monotonic() - killed
    print(f"the moved group reached its Deployment {took:.1f}s after the SIGKILL")
    assert took >= LEASE - LEASE / 3 - 1, f"taken over after {took:.1f}s: before alpha expired?"
    wait_for(lambda: objects.get("sendgroup", deleted) is None, bound + 20, "deletion finalized")
    assert not redis_client.exists(f"queues:mail-{deleted}")
    purges = [e for e in objects.events(deleted) if e["reason"] == "Purged"]
    assert len(purges) <= 1, purges  # the events of a deleted object may already be gone
    # the only group deleted in this test: purged once, by the survivor
    assert survivor.log().count("queue purged") == 1
    assert "queue purged" not in victim.log()
    wait_for(partial(owns, survivor, len(GROUPS) - 1), 10, "the survivor owns all the rest")
    assert gauge(survivor, "sendgroup_operator_shard_members") == 1
    # every group the survivor took over is reconciled by it (status follows the spec)
    wait_for(lambda: reconciled(objects, moved), 10, "the moved group's status")
