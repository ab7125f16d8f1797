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

from sendgroup_operator import sharding
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
    # both past their join wait and seeing each other (before that, the first replica acts
    # alone for a moment and may write a group the second one then owns: correct, but this
    # test tells owners by who wrote)
    for who, proc in procs.items():
        settled = f"members alpha,beta; this replica ({who}) owns"
        wait_for(lambda proc=proc, settled=settled: settled in proc.log(), 30, f"{who} settled")
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


def test_a_joining_replica_takes_its_share_and_a_clean_stop_hands_it_back_at_once(
    operator_factory: Any, objects: Objects, redis_client: redis.Redis
) -> None:
    lease = 9.0
    env = {"SENDGROUP_SHARDING": "true", "SENDGROUP_SHARD_LEASE_DURATION": str(int(lease))}
    names = [f"j{i}" for i in range(16)]
    alpha = operator_factory(POD_ID="alpha", **env)
    for name in names:
        push(redis_client, f"mail-{name}", 1)
    objects.apply("\n---\n".join(sendgroup(name) for name in names))
    wait_for(lambda: all(replicas(objects, n) == 1 for n in names), 60, "alpha alone: all")
    assert all(writers({"alpha": alpha}, n) == ["alpha"] for n in names)

    uids = {n: (objects.get("sendgroup", n) or {})["metadata"]["uid"] for n in names}
    to_beta = [n for n in names if sharding.owner(uids[n], ["alpha", "beta"]) == "beta"]
    stays = [n for n in names if n not in to_beta]
    # random uids: fewer than 2 on one side about once in 2,000 runs
    assert len(to_beta) >= 2 and stays, to_beta
    beta = operator_factory(POD_ID="beta", **env)
    wait_for(partial(owns, beta, len(to_beta)), lease + 10, "beta owns its share")
    wait_for(partial(owns, alpha, len(stays)), 5, "alpha gave it up")

    # a change of a moved group is applied by beta only; of a kept one by alpha only
    objects.patch_sg(to_beta[0], {"workers": 2})
    objects.patch_sg(stays[0], {"workers": 2})
    wait_for(lambda: replicas(objects, to_beta[0]) == 2, 15, "beta applies its group")
    wait_for(lambda: replicas(objects, stays[0]) == 2, 15, "alpha applies its group")
    assert f"deployment sg-{to_beta[0]} replicas=2" in beta.log()
    assert f"deployment sg-{to_beta[0]} replicas=2" not in alpha.log()
    assert f"deployment sg-{stays[0]} replicas=2" in alpha.log()
    assert f"deployment sg-{stays[0]} replicas=2" not in beta.log()

    # a group deleted while both run: finalized by its owner, purged once; the other
    # replica's deletion handler only waits (kopf keeps the finalizer for the owner)
    objects.cluster.kubectl("delete", "sg", to_beta[1], "-n", objects.namespace, "--wait=false")
    wait_for(lambda: objects.get("sendgroup", to_beta[1]) is None, 30, "the owner's deletion")
    assert beta.log().count("queue purged") == 1 and "queue purged" not in alpha.log()
    assert not redis_client.exists(f"queues:mail-{to_beta[1]}")

    # SIGTERM: beta stops its passes and deletes its Lease; alpha takes over at its next poll
    beta.stop()
    assert "left the set" in beta.log()
    stopped = time.monotonic()
    objects.patch_sg(to_beta[0], {"workers": 3})
    wait_for(lambda: replicas(objects, to_beta[0]) == 3, lease, "alpha takes over at once")
    print(f"taken over {time.monotonic() - stopped:.1f}s after the clean stop (lease {lease}s)")
    wait_for(partial(owns, alpha, len(names) - 1), 5, "alpha owns every group again")
    assert "Traceback" not in alpha.log() + beta.log()
