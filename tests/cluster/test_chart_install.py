"""The Helm chart installed with the built helm into the real control plane: it creates the
CRDs, ServiceAccounts, RBAC, peering object, dumps claim and the operator Deployment (whose pod
the PodSecurity admission must accept as `restricted`; it stays Pending without a node); the
operator run here as a process under the chart-created ServiceAccount reconciles a SendGroup,
which proves the chart's RBAC is sufficient; `kubectl auth can-i` shows the worker account can
do nothing and the aggregated roles give namespace editors SendGroup rights."""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.cluster.conftest import Objects
from tests.cluster.test_operator import push, sendgroup
from tests.support.cluster import KubeCluster, service_account_kubeconfig, wait_for
from tests.support.helm import CHART, env_of, find, helm, render, values_args
from tests.support.operator_proc import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.helm]

RELEASE = "sgop"
FULLNAME = "sgop-sendgroup-operator"
WORKER_SA = f"{FULLNAME}-worker"
RULES = yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text())
# How users install it with the locally built images (README "Helm chart").
LOCAL_IMAGES = {"image.tag": "dev", "defaultImage": "sendgroup-worker:dev"}


@dataclass
class Installed:
    cluster: KubeCluster
    namespace: str
    install_seconds: float
    crd_existed_before: bool
    notes: str

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        ns = ["-n", namespace or self.namespace] if namespace != "" else []
        proc = self.cluster.kubectl("get", kind, name, *ns, "-o", "json", check=False)
        if proc.returncode != 0:
            assert "NotFound" in proc.stderr, proc.stderr
            return None
        data: dict[str, Any] = json.loads(proc.stdout)
        return data

    def can_i(self, user: str, verb: str, resource: str, namespace: str | None = None) -> bool:
        """``kubectl auth can-i VERB RESOURCE --as=USER`` (``RESOURCE`` may be
        ``plural/subresource``)."""
        resource, _, sub = resource.partition("/")
        proc = self.cluster.kubectl(
            "auth",
            "can-i",
            verb,
            resource,
            *([f"--subresource={sub}"] if sub else []),
            "-n",
            namespace or self.namespace,
            f"--as={user}",
            check=False,
        )
        assert proc.stdout.strip() in ("yes", "no"), proc.stdout + proc.stderr
        return proc.stdout.strip() == "yes"


#: What the chart's environment points at inside the cluster; a local process gets its own.
LOCAL_ONLY = ("SENDGROUP_DEFAULT_REDIS_URL", "SENDGROUP_METRICS_PORT", "SENDGROUP_HEALTH_PORT")


def _drop_local(env: dict[str, str]) -> None:
    """Take out of a chart-rendered operator environment the variables that a process run
    here sets itself (OperatorProcess: the tests' Redis, free ports)."""
    for name in LOCAL_ONLY:
        env.pop(name)


def _new_namespace(cluster: KubeCluster, prefix: str) -> str:
    name = f"{prefix}-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    # The API server's PodSecurity admission rejects any pod of this namespace that is not
    # `restricted`: the operator pod exists only if the chart's pod spec passes.
    cluster.kubectl(
        "label",
        "namespace",
        name,
        "sendgroup.test/temporary=true",
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )
    return name


@pytest.fixture(scope="module")
def installed(kube_cluster: KubeCluster, pytestconfig: pytest.Config) -> Iterator[Installed]:
    """`helm install sgop helm/sendgroup-operator` into a fresh namespace with local images."""
    ns = _new_namespace(kube_cluster, "chart")
    crd_before = (
        kube_cluster.kubectl("get", "crd", "sendgroups.sendgroups.io", check=False).returncode == 0
    )
    started = time.monotonic()
    out = helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        ns,
        *values_args(LOCAL_IMAGES),
        kubeconfig=kube_cluster.kubeconfig,
    ).stdout
    seconds = time.monotonic() - started
    print(f"\nhelm install: {seconds:.1f}s (CRD existed before: {crd_before})")
    notes = out.partition("NOTES:\n")[2]
    yield Installed(kube_cluster, ns, seconds, crd_before, notes)
    helm("uninstall", RELEASE, "--namespace", ns, kubeconfig=kube_cluster.kubeconfig, check=False)
    kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")


def test_install_creates_crds_accounts_rbac_and_a_restricted_operator_pod(
    installed: Installed,
) -> None:
    c = installed.cluster
    status = json.loads(
        helm(
            "status", RELEASE, "-n", installed.namespace, "-o", "json", kubeconfig=c.kubeconfig
        ).stdout
    )
    assert status["info"]["status"] == "deployed"
    # CRDs from the chart's crds/ (Helm skips them when they already exist).
    c.kubectl(
        "wait",
        "--for=condition=Established",
        "crd/sendgroups.sendgroups.io",
        "crd/kopfpeerings.kopf.dev",
        "crd/clusterkopfpeerings.kopf.dev",
        "--timeout=60s",
        timeout=90,
    )
    crd = installed.get("crd", "sendgroups.sendgroups.io", namespace="")
    assert crd is not None
    chart_crd = yaml.safe_load((CHART / "crds" / "sendgroups.yaml").read_text())
    assert crd["spec"]["versions"][0]["schema"] == chart_crd["spec"]["versions"][0]["schema"]

    operator_sa = installed.get("serviceaccount", FULLNAME)
    worker_sa = installed.get("serviceaccount", WORKER_SA)
    assert operator_sa is not None and worker_sa is not None
    assert worker_sa["automountServiceAccountToken"] is False
    role = installed.get("role", FULLNAME)
    assert role is not None and role["rules"] == RULES["namespaced"]
    binding = installed.get("rolebinding", FULLNAME)
    assert binding is not None
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": installed.namespace}
    ]
    cluster_role = installed.get("clusterrole", f"{FULLNAME}-{installed.namespace}", "")
    assert cluster_role is not None and cluster_role["rules"] == RULES["cluster"]
    assert installed.get("kopfpeering", FULLNAME) is not None
    pvc = installed.get("persistentvolumeclaim", "sendgroup-dumps")
    assert pvc is not None and pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert installed.get("service", f"{FULLNAME}-metrics") is not None

    dep = installed.get("deployment", FULLNAME)
    assert dep is not None and dep["spec"]["strategy"]["type"] == "Recreate"
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "sendgroup-operator:dev"
    assert env_of(dep, installed.namespace)["SENDGROUP_DEFAULT_IMAGE"] == "sendgroup-worker:dev"

    def operator_pods() -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in dep["spec"]["selector"]["matchLabels"].items())
        out = c.kubectl("get", "pods", "-n", installed.namespace, "-l", selector, "-o", "json")
        items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
        return items

    def events() -> str:
        return c.kubectl("get", "events", "-n", installed.namespace).stdout

    # Created by the ReplicaSet controller only if PodSecurity `restricted` admits it.
    [pod] = wait_for(operator_pods, 60, "the operator pod", describe=events)
    assert pod["spec"]["serviceAccountName"] == FULLNAME
    assert pod["status"]["phase"] == "Pending"  # no node in this tier


@pytest.fixture
def chart_operator(
    installed: Installed, redis_url: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The operator as a local process under the chart-created ServiceAccount, with the
    environment of the chart's Deployment (only ports, listen address and Redis changed), and
    peering on (the chart's KopfPeering), at a priority above the (Pending) pod's."""
    c = installed.cluster
    kubeconfig = service_account_kubeconfig(
        c, installed.namespace, FULLNAME, tmp_path / "chart-operator.kubeconfig"
    )
    dep = installed.get("deployment", FULLNAME)
    assert dep is not None
    env = env_of(dep, installed.namespace)
    _drop_local(env)
    env |= {
        "SENDGROUP_STANDALONE": "false",
        "SENDGROUP_PEERING_PRIORITY": "1000",
        "SENDGROUP_REAPER_INTERVAL": "1",
    }
    proc = OperatorProcess(
        kubeconfig, installed.namespace, redis_url, tmp_path / "chart-operator.log", **env
    ).start()
    try:
        proc.wait_started()
        yield proc
    finally:
        proc.stop()
        print(f"--- {proc.log_path}\n{proc.log()[-6000:]}")


def test_operator_under_the_chart_account_reconciles_a_sendgroup(
    installed: Installed, chart_operator: OperatorProcess, redis_client: redis.Redis
) -> None:
    objects = Objects(installed.cluster, installed.namespace)
    push(redis_client, "mail-gmail", 5)
    objects.apply(sendgroup("gmail", workers=2))
    dep = wait_for(lambda: objects.get("deployment", "sg-gmail"), 30, "Deployment sg-gmail")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == WORKER_SA
    assert pod["automountServiceAccountToken"] is False
    assert pod["containers"][0]["image"] == "sendgroup-worker:dev"
    status = wait_for(
        lambda: (
            (objects.status("gmail").get("queue") or {}).get("total") == 5
            and objects.status("gmail")
        ),
        30,
        "status.queue.total = 5",
    )
    assert status["workers"]["desired"] == 2
    # The peering object of the chart carries this process as a peer with its priority.
    peering = installed.get("kopfpeering", FULLNAME)
    assert peering is not None
    assert [p["priority"] for p in (peering.get("status") or {}).values() if p] == [1000]
    log = chart_operator.log()
    # A 403 as kopf and the client log it (status=403, (403), HTTP 403), not a timestamp's
    # milliseconds (",403 INFO") or the API server's port (127.0.0.1:40371).
    forbidden = re.search(r"status=403\b|\(403\)|\b403 Forbidden|Forbidden", log)
    assert "RBAC: cannot" not in log and not forbidden, log[-4000:]


def test_ha_instances_share_the_chart_peering_and_fail_over(
    installed: Installed, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Two instances with the environments the chart renders for replicas=2 (priorities 100
    and 99), as processes under the chart's ServiceAccount: the second one stands by; when the
    first stops, it takes over and reconciles."""
    c = installed.cluster
    kubeconfig = service_account_kubeconfig(
        c, installed.namespace, FULLNAME, tmp_path / "ha.kubeconfig"
    )
    rendered = render(
        {**LOCAL_IMAGES, "replicas": 2}, namespace=installed.namespace, release=RELEASE
    )
    procs = []
    for i, dep in enumerate(find(rendered, "Deployment")):
        env = env_of(dep, installed.namespace)
        _drop_local(env)
        env |= {"SENDGROUP_STANDALONE": "false", "SENDGROUP_REAPER_INTERVAL": "1"}
        procs.append(
            OperatorProcess(
                kubeconfig, installed.namespace, redis_url, tmp_path / f"ha-{i}.log", **env
            )
        )
    active, standby = procs
    assert (
        active.env["SENDGROUP_PEERING_PRIORITY"],
        standby.env["SENDGROUP_PEERING_PRIORITY"],
    ) == (
        "100",
        "99",
    )
    objects = Objects(c, installed.namespace)
    try:
        active.start().wait_started()
        standby.start().wait_started()
        wait_for(lambda: "Pausing operations in favour of" in standby.log(), 30, "standby pauses")
        push(redis_client, "mail-ha", 3)
        objects.apply(sendgroup("ha", queue="mail-ha", workers=1))
        dep = wait_for(lambda: objects.get("deployment", "sg-ha"), 30, "Deployment sg-ha")
        assert dep["spec"]["replicas"] == 1
        assert "sg-ha" not in standby.log()
        active.stop()
        wait_for(
            lambda: "Resuming operations after the pause" in standby.log(),
            60,
            "standby takes over",
        )
        objects.patch_sg("ha", {"workers": 3})
        wait_for(
            lambda: (objects.get("deployment", "sg-ha") or {}).get("spec", {}).get("replicas") == 3,
            30,
            "the former standby scales sg-ha to 3",
        )
    finally:
        for proc in procs:
            proc.stop()
            print(f"--- {proc.log_path}\n{proc.log()[-3000:]}")
        objects.cluster.kubectl(
            "delete", "sendgroup", "ha", "-n", installed.namespace, "--wait=false",
            "--ignore-not-found",
        )  # fmt: skip


def test_sharded_install_runs_every_instance_active_under_the_chart_account(
    kube_cluster: KubeCluster, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """``sharding.enabled`` with ``replicas: 2`` (issue 15): the chart renders two instances
    with their shard identities and no KopfPeering, grants Leases in its own namespace only and
    installs its FlowSchema, which the API server accepts. The two instances, run as processes
    with the rendered environments under the chart-created ServiceAccount, meet through their
    Leases and split the groups (each group's Deployment written by exactly one of them); when
    one stops, the other takes its groups and applies a change to one of them. No request of
    theirs is refused (403)."""
    home = _new_namespace(kube_cluster, "chart-shard")
    release, full = "sgsh", "sgsh-sendgroup-operator"
    # a second release in the cluster: the cluster-scoped defaults belong to the first one
    values = {
        **LOCAL_IMAGES,
        "replicas": 2,
        "sharding.enabled": True,
        "sharding.leaseDuration": 6,
        "rbac.aggregatedRoles": False,
        "defaultProviders.enabled": False,
    }
    names = [f"sh{i}" for i in range(16)]
    procs: dict[str, OperatorProcess] = {}
    objects = Objects(kube_cluster, home)
    get = kube_cluster.kubectl
    try:
        helm(
            "install", release, str(CHART), "-n", home, *values_args(values),
            kubeconfig=kube_cluster.kubeconfig,
        )  # fmt: skip
        deployments = json.loads(get("get", "deployments", "-n", home, "-o", "json").stdout)
        assert sorted(d["metadata"]["name"] for d in deployments["items"]) == [full, f"{full}-1"]
        assert get("get", "kopfpeerings", "-n", home, "-o", "name").stdout.strip() == ""
        flow = json.loads(
            get("get", "flowschema", f"{full}-{home}-shard-leases", "-o", "json").stdout
        )
        assert flow["spec"]["priorityLevelConfiguration"]["name"] == "leader-election"
        operator = f"system:serviceaccount:{home}:{full}"
        for verb in ("list", "create", "patch", "delete"):
            can = get("auth", "can-i", verb, "leases.coordination.k8s.io", "-n", home,
                      f"--as={operator}", check=False)  # fmt: skip
            assert can.stdout.strip() == "yes", (verb, can.stdout, can.stderr)
        elsewhere = get("auth", "can-i", "create", "leases.coordination.k8s.io", "-n",
                        "default", f"--as={operator}", check=False)  # fmt: skip
        assert elsewhere.stdout.strip() == "no"

        kubeconfig = service_account_kubeconfig(kube_cluster, home, full, tmp_path / "shard.kc")
        for dep in deployments["items"]:
            env = env_of(dep, home)
            assert env["SENDGROUP_SHARDING"] == "true" and "SENDGROUP_PEERING_NAME" not in env
            _drop_local(env)
            env |= {"SENDGROUP_STANDALONE": "false", "SENDGROUP_REAPER_INTERVAL": "1"}
            who = env["POD_ID"]
            procs[who] = OperatorProcess(
                kubeconfig, home, redis_url, tmp_path / f"{who}.log", **env
            ).start()
        assert sorted(procs) == [full, f"{full}-1"]
        for who, proc in procs.items():
            settled = f"members {full},{full}-1; this replica ({who}) owns"
            wait_for(lambda p=proc, s=settled: s in p.log(), 60, f"{who} sees both members")

        for name in names:
            push(redis_client, f"mail-{name}", 1)
        objects.apply("\n---\n".join(sendgroup(name) for name in names))

        def writers(name: str) -> list[str]:
            line = f"deployment sg-{name} replicas="
            return [who for who, proc in procs.items() if line in proc.log()]

        owner: dict[str, str] = {}
        for name in names:
            wait_for(lambda n=name: writers(n), 60, f"Deployment sg-{name} written")
            wrote = writers(name)
            assert len(wrote) == 1, f"sg-{name} written by {wrote}"
            owner[name] = wrote[0]
        assert set(owner.values()) == set(procs), owner  # 16 groups: both have a share

        stopped, survivor = procs[full], procs[f"{full}-1"]
        moved = next(n for n in names if owner[n] == full)
        stopped.stop()  # a clean stop deletes its Lease: the survivor takes over at once
        wait_for(
            lambda: f"members {full}-1; this replica ({full}-1) owns 16" in survivor.log(),
            30,
            "the survivor owns every group",
        )
        objects.patch_sg(moved, {"workers": 3})
        wait_for(
            lambda: (
                (objects.get("deployment", f"sg-{moved}") or {}).get("spec", {}).get("replicas")
                == 3
            ),
            30,
            f"the survivor scales sg-{moved} to 3",
        )
        for proc in procs.values():
            log = proc.log()
            forbidden = re.search(r"status=403\b|\(403\)|\b403 Forbidden|Forbidden", log)
            assert "RBAC: cannot" not in log and not forbidden, log[-4000:]
    finally:
        for proc in procs.values():
            proc.stop()
            print(f"--- {proc.log_path}\n{proc.log()[-3000:]}")
        get("delete", "sendgroups", "--all", "-n", home, "--wait=false", check=False)
        helm("uninstall", release, "-n", home, kubeconfig=kube_cluster.kubeconfig, check=False)
        get("delete", "namespace", home, "--wait=false", "--ignore-not-found")


def test_all_namespaces_install_gives_cluster_wide_rights_that_suffice(
    kube_cluster: KubeCluster, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """watchNamespaces="*": ClusterRole + ClusterRoleBinding and a ClusterKopfPeering; the
    operator under that account reconciles a SendGroup in a namespace the chart never heard
    of, and its workers use that namespace's default ServiceAccount (no token)."""
    home = _new_namespace(kube_cluster, "chart-all")
    other = _new_namespace(kube_cluster, "chart-elsewhere")
    release, full = "sgall", "sgall-sendgroup-operator"
    # A second release in the cluster: the default ClusterSendProviders (cluster-scoped) belong
    # to the first one (one release per cluster may ship them).
    values = {
        **LOCAL_IMAGES,
        "watchNamespaces": "*",
        "rbac.aggregatedRoles": False,
        "defaultProviders.enabled": False,
    }
    proc: OperatorProcess | None = None
    try:
        helm(
            "install", release, str(CHART), "-n", home, *values_args(values),
            kubeconfig=kube_cluster.kubeconfig,
        )  # fmt: skip
        get = kube_cluster.kubectl
        assert get("get", "role", "-n", home, "-o", "name").stdout.strip() == ""
        assert get("get", "clusterkopfpeering", full, "-o", "name").returncode == 0
        operator = f"system:serviceaccount:{home}:{full}"
        can = get("auth", "can-i", "create", "deployments.apps", "-n", other, f"--as={operator}")
        assert can.stdout.strip() == "yes"
        kubeconfig = service_account_kubeconfig(kube_cluster, home, full, tmp_path / "all.kc")
        dep = json.loads(get("get", "deployment", full, "-n", home, "-o", "json").stdout)
        env = env_of(dep, home)
        assert env["SENDGROUP_WATCH_NAMESPACES"] == "*"
        assert "SENDGROUP_WORKER_SERVICE_ACCOUNT" not in env
        _drop_local(env)
        env |= {"SENDGROUP_STANDALONE": "false", "SENDGROUP_PEERING_PRIORITY": "1000"}
        proc = OperatorProcess(kubeconfig, home, redis_url, tmp_path / "all.log", **env).start()
        proc.wait_started()
        objects = Objects(kube_cluster, other)
        # all namespaces watched: the queue-name policy is on (issue 16), queues carry theirs
        push(redis_client, f"{other}.mail-far", 2)
        objects.apply(sendgroup("far", queue=f"{other}.mail-far"))
        workers = wait_for(lambda: objects.get("deployment", "sg-far"), 30, "Deployment sg-far")
        pod = workers["spec"]["template"]["spec"]
        assert "serviceAccountName" not in pod and pod["automountServiceAccountToken"] is False
        assert "RBAC: cannot" not in proc.log()
    finally:
        if proc is not None:
            proc.stop()
            print(f"--- {proc.log_path}\n{proc.log()[-3000:]}")
        helm("uninstall", release, "-n", home, kubeconfig=kube_cluster.kubeconfig, check=False)
        for ns in (home, other):
            kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")


def test_worker_account_can_do_nothing_and_edit_users_manage_sendgroups(
    installed: Installed,
) -> None:
    ns = installed.namespace
    worker = f"system:serviceaccount:{ns}:{WORKER_SA}"
    for verb, resource in [
        ("get", "secrets"),
        ("list", "pods"),
        ("create", "pods"),
        ("get", "configmaps"),
        ("create", "deployments.apps"),
        ("get", "sendgroups.sendgroups.io"),
        ("create", "sendgroups.sendgroups.io"),
        ("create", "events"),
        ("list", "namespaces"),
    ]:
        assert not installed.can_i(worker, verb, resource), (verb, resource)
    operator = f"system:serviceaccount:{ns}:{FULLNAME}"
    assert installed.can_i(operator, "create", "deployments.apps")
    assert not installed.can_i(operator, "create", "deployments.apps", namespace="default")
    assert not installed.can_i(operator, "list", "secrets")  # get only, by name

    c = installed.cluster
    for user, role in (("alice", "edit"), ("bob", "view"), ("carol", "admin")):
        c.kubectl(
            "create", "rolebinding", f"{user}-{role}", f"--clusterrole={role}",
            f"--user={user}", "-n", ns,
        )  # fmt: skip
    # The clusterrole-aggregation controller folds sendgroups-edit/view into edit/view/admin.
    wait_for(
        lambda: installed.can_i("alice", "create", "sendgroups.sendgroups.io"),
        30,
        "edit users may create SendGroups (aggregation)",
    )
    wait_for(lambda: installed.can_i("bob", "list", "sendgroups"), 30, "view users may list")
    wait_for(lambda: installed.can_i("carol", "delete", "sendgroups"), 30, "admins may delete")
    assert installed.can_i("alice", "patch", "sendgroups")
    assert not installed.can_i("alice", "patch", "sendgroups/status")
    assert not installed.can_i("bob", "create", "sendgroups")
    assert not installed.can_i("alice", "create", "sendgroups", namespace="default")


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"watchNamespaces": "*"},
        {
            "watchNamespaces": "*",
            "networkPolicy.enabled": True,
            "networkPolicy.redis.cidrs": ["10.1.2.0/24"],
            "networkPolicy.smtp.cidrs": ["0.0.0.0/0"],
            "rbac.aggregatedRoles": False,
        },
        {
            "networkPolicy.enabled": True,
            "networkPolicy.redis.cidrs": ["10.1.2.0/24"],
            "networkPolicy.smtp.cidrs": ["192.0.2.10/32"],
            "replicas": 2,
            "maxTotalWorkers": 100,
            "rbac.aggregatedRoles": False,
            "podDisruptionBudget.maxUnavailable": "50%",
        },
    ],
    ids=["default", "all-namespaces", "all-namespaces-netpol", "namespaced-ha"],
)
def test_variants_are_accepted_by_the_api_server(
    installed: Installed, values: dict[str, Any]
) -> None:
    """Server-side dry run of the chart's renderings: the default values, cluster-wide mode,
    and the optional objects (schemas and admission of the real API server; the ServiceMonitor
    variant is checked by the render tests only: its CRD is not here). Each rendered object
    must come back from the API server."""
    rendered = helm(
        "template", "sgdry", str(CHART), "--namespace", installed.namespace, *values_args(values)
    ).stdout
    objects = [d for d in yaml.safe_load_all(rendered) if d]
    proc = installed.cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=rendered, timeout=90
    )
    lines = [line for line in proc.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(lines) == len(objects), proc.stdout
    kinds = {o["kind"] for o in objects}
    assert "PodDisruptionBudget" in kinds and "Deployment" in kinds
    assert ("NetworkPolicy" in kinds) == bool(values.get("networkPolicy.enabled"))
    assert ("ClusterKopfPeering" in kinds) == (values.get("watchNamespaces") == "*")


def test_notes_name_the_release_and_their_commands_work(installed: Installed) -> None:
    """NOTES.txt (printed by helm install) says where the operator runs and what to do next;
    its `kubectl get pods` line finds the operator pod."""
    notes, ns = installed.notes, installed.namespace
    assert f"is installed in namespace {ns}" in notes
    assert f"kubectl -n {ns} logs deploy/{FULLNAME}" in notes
    assert f"kubectl -n {ns} apply -f examples/sendgroup-basic.yaml" in notes
    assert "docs/gitops.md" in notes and f"svc/{FULLNAME}-metrics" in notes
    [get_pods] = [line.split() for line in notes.splitlines() if " get pods " in line]
    assert get_pods[:4] == ["kubectl", "-n", ns, "get"]
    out = installed.cluster.kubectl(*get_pods[1:], "-o", "name").stdout.split()
    assert len(out) == 1 and out[0].startswith(f"pod/{FULLNAME}-"), out


def test_disruption_budget_covers_the_instance_and_never_blocks_its_eviction(
    installed: Installed,
) -> None:
    """The disruption controller finds the operator's pod through the PDB's selector and its
    Deployment, and budgets 0 pods that must stay: the single instance may always be evicted
    (a node drain never waits on it)."""

    def status() -> dict[str, Any] | None:
        pdb = installed.get("poddisruptionbudget", FULLNAME)
        st = (pdb or {}).get("status") or {}
        return st if st.get("expectedPods") == 1 else None

    st = wait_for(status, 60, "PDB status from the disruption controller")
    assert st["desiredHealthy"] == 0
    pdb = installed.get("poddisruptionbudget", FULLNAME)
    assert pdb is not None and pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_upgrade_changes_settings_and_uninstall_keeps_the_dumps_claim(
    kube_cluster: KubeCluster,
) -> None:
    ns = _new_namespace(kube_cluster, "chart-uninstall")
    try:
        args = values_args(
            {**LOCAL_IMAGES, "rbac.aggregatedRoles": False, "defaultProviders.enabled": False}
        )
        helm("install", "gone", str(CHART), "-n", ns, *args, kubeconfig=kube_cluster.kubeconfig)
        helm(
            "upgrade", "gone", str(CHART), "-n", ns, "--reuse-values",
            *values_args({"maxTotalWorkers": 7}), kubeconfig=kube_cluster.kubeconfig,
        )  # fmt: skip
        dep = json.loads(
            kube_cluster.kubectl(
                "get", "deployment", "gone-sendgroup-operator", "-n", ns, "-o", "json"
            ).stdout
        )
        env = env_of(dep, ns)
        assert env["SENDGROUP_MAX_TOTAL_WORKERS"] == "7"
        assert env["SENDGROUP_DEFAULT_IMAGE"] == "sendgroup-worker:dev"  # reused values
        helm("uninstall", "gone", "-n", ns, kubeconfig=kube_cluster.kubeconfig)
        get = kube_cluster.kubectl
        assert get(
            "get", "deployment,role,serviceaccount,kopfpeering", "-n", ns, "-o", "name"
        ).stdout.strip() in ("", "serviceaccount/default")
        assert get("get", "pvc", "sendgroup-dumps", "-n", ns, "-o", "name").stdout.strip() == (
            "persistentvolumeclaim/sendgroup-dumps"
        )
        assert (
            get("get", "clusterrole", f"gone-sendgroup-operator-{ns}", check=False).returncode != 0
        )
    finally:
        kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")
