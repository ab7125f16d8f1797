"""``kubectl-sendgroup`` (the kubectl plugin) against the real control plane with the CRD:
pause/resume/cancel/complete change exactly one spec field as field manager
``kubectl-sendgroup``, the CEL rule's message reaches the user, dry-run saves nothing,
selectors pick the right groups, errors have their exit codes, and ``status`` shows the
numbers a real operator process measured in a real Redis."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis

from sendgroup_worker.queue.keys import QueueKeys
from tests.cluster.conftest import Objects
from tests.support import manifests
from tests.support.cluster import (
    KubeCluster,
    service_account_kubeconfig,
    start_cluster,
    stop_cluster,
    wait_for,
)
from tests.support.operator_proc import OperatorProcess, apply_objects
from tests.support.redis_server import free_port

pytestmark = pytest.mark.cluster

BIN = Path(sys.executable).parent
PLUGIN = BIN / "kubectl-sendgroup"


@pytest.fixture(autouse=True)
def _plugin_installed() -> None:
    if not PLUGIN.exists():
        pytest.fail(
            f"{PLUGIN} is missing: the console script comes with the package, rerun "
            "hack/bootstrap (pip install -e .) after pulling pyproject.toml",
            pytrace=False,
        )


def plugin(
    cluster: KubeCluster, *args: str, input: str | None = None, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``kubectl-sendgroup ARGS`` with KUBECONFIG set (as a user's shell would have it)."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig or cluster.kubeconfig)}
    return subprocess.run(
        [str(PLUGIN), *args],
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def sendgroup(name: str, campaign: str = "spring-sale", **meta: Any) -> str:
    spec = {"campaign": campaign, "host": f"{name}.example"}
    return manifests.stream(manifests.sendgroup(name, spec, **meta))


def managers(objects: Objects, name: str) -> dict[str, dict[str, Any]]:
    """managedFields of SendGroup ``name`` by manager name (kubectl hides them by default)."""
    out = objects.cluster.kubectl(
        "get", "sendgroup", name, "-n", objects.namespace, "-o", "json", "--show-managed-fields"
    ).stdout
    return {e["manager"]: e for e in json.loads(out)["metadata"].get("managedFields", [])}


def without(obj: dict[str, Any], *paths: str) -> dict[str, Any]:
    """A copy of ``obj`` without volatile metadata and the given ``a.b`` paths."""
    out = copy.deepcopy(obj)
    for key in ("resourceVersion", "generation", "managedFields"):
        out["metadata"].pop(key, None)
    for path in paths:
        *parents, leaf = path.split(".")
        node = out
        for p in parents:
            node = node[p]
        node.pop(leaf, None)
    return out


def test_pause_resume_change_exactly_one_field(
    kube_cluster: KubeCluster, namespace: str, sendgroup_crd: str, objects: Objects
) -> None:
    objects.apply(
        sendgroup(
            "gmail",
            labels={"tier": "bulk"},
            annotations={"team": "mail"},
        )
    )
    # A status as an operator would have written it: the plugin must never touch it.
    kube_cluster.kubectl(
        "patch",
        "sendgroup",
        "gmail",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"phase": "Running", "queue": {"ready": 5, "total": 5}}}),
    )
    before = objects.get("sendgroup", "gmail")
    assert before is not None and before["spec"]["paused"] is False  # the CRD default

    # Through kubectl itself: the plugin is found on PATH as `kubectl sendgroup`.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [str(kube_cluster.kubectl_bin), "sendgroup", "pause", "gmail", "-n", namespace,
         "--kubeconfig", str(kube_cluster.kubeconfig)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "sendgroup/gmail paused\n", "")

    after = objects.get("sendgroup", "gmail")
    assert after is not None
    assert after["spec"] == {**before["spec"], "paused": True}
    assert without(after, "spec", "status") == without(before, "spec", "status")
    assert (
        after["status"]
        == before["status"]
        == {
            "phase": "Running",
            "queue": {"ready": 5, "total": 5},
        }
    )
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    entry = managers(objects, "gmail")["kubectl-sendgroup"]
    assert entry["operation"] == "Update"
    assert entry["fieldsV1"] == {"f:spec": {"f:paused": {}}}

    # Again: nothing to do, nothing written.
    proc = plugin(kube_cluster, "pause", "gmail", "-n", namespace)
    assert proc.returncode == 0
    assert proc.stdout == "sendgroup/gmail unchanged (spec.paused is already true)\n"
    again = objects.get("sendgroup", "gmail")
    assert again is not None
    assert again["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]

    proc = plugin(kube_cluster, "resume", "gmail", "-n", namespace)
    assert (proc.returncode, proc.stdout) == (0, "sendgroup/gmail resumed\n")
    resumed = objects.get("sendgroup", "gmail")
    assert resumed is not None
    assert resumed["spec"] == {**before["spec"], "paused": False}
    assert resumed["status"] == before["status"]
    assert managers(objects, "gmail")["kubectl-sendgroup"]["fieldsV1"] == {
        "f:spec": {"f:paused": {}}
    }


def test_cancel_asks_dry_run_saves_nothing_and_cel_keeps_cancelled_final(
    kube_cluster: KubeCluster, namespace: str, sendgroup_crd: str, objects: Objects
) -> None:
    objects.apply(sendgroup("outlook"))
    rv = objects.get("sendgroup", "outlook")["metadata"]["resourceVersion"]  # type: ignore[index]

    # Declined confirmation: exit 1, nothing written.
    proc = plugin(kube_cluster, "cancel", "outlook", "-n", namespace, input="n\n")
    assert proc.returncode == 1, proc
    assert "Cancelled is final" in proc.stderr and "aborted: nothing changed" in proc.stderr
    # No answer at all (stdin at its end): no traceback, no "Aborted!", nothing written.
    proc = plugin(kube_cluster, "cancel", "outlook", "-n", namespace, input="")
    assert proc.returncode == 1, proc
    assert proc.stderr.splitlines()[-1] == (
        "error: aborted: nothing changed (pass --yes to cancel without the question)"
    )
    # Server dry run: validated and answered, not saved (no confirmation needed).
    proc = plugin(kube_cluster, "cancel", "outlook", "-n", namespace, "--dry-run=server")
    assert (proc.returncode, proc.stdout) == (0, "sendgroup/outlook cancelled (server dry run)\n")
    proc = plugin(kube_cluster, "pause", "outlook", "-n", namespace, "--dry-run=server")
    assert (proc.returncode, proc.stdout) == (0, "sendgroup/outlook paused (server dry run)\n")
    sg = objects.get("sendgroup", "outlook")
    assert sg is not None
    assert sg["metadata"]["resourceVersion"] == rv
    assert sg["spec"]["state"] == "Active" and sg["spec"]["paused"] is False
    assert "kubectl-sendgroup" not in managers(objects, "outlook")

    # Confirmed on stdin.
    proc = plugin(kube_cluster, "cancel", "outlook", "-n", namespace, input="y\n")
    assert (proc.returncode, proc.stdout) == (0, "sendgroup/outlook cancelled\n"), proc.stderr
    sg = objects.get("sendgroup", "outlook")
    assert sg is not None and sg["spec"]["state"] == "Cancelled"
    assert managers(objects, "outlook")["kubectl-sendgroup"]["fieldsV1"] == {
        "f:spec": {"f:state": {}}
    }

    # Leaving Cancelled: the API server's CEL rule says no, the user reads its message.
    for extra in ([], ["--dry-run=server"]):
        proc = plugin(kube_cluster, "complete", "outlook", "-n", namespace, *extra)
        assert proc.returncode == 1, proc
        assert "no way back from Cancelled (rule: Cancelled is final)" in proc.stderr
        assert proc.stderr.startswith("error: sendgroup/outlook: ")
        assert "Traceback" not in proc.stderr
    sg = objects.get("sendgroup", "outlook")
    assert sg is not None and sg["spec"]["state"] == "Cancelled"
    # Cancelling again is a no-op, without a question.
    proc = plugin(kube_cluster, "cancel", "outlook", "-n", namespace)
    assert proc.returncode == 0
    assert proc.stdout == "sendgroup/outlook unchanged (spec.state is already Cancelled)\n"
    # Resuming it says why nothing will be sent, not only that spec.paused is already false.
    proc = plugin(kube_cluster, "resume", "outlook", "-n", namespace)
    assert proc.returncode == 0
    assert proc.stdout == (
        "sendgroup/outlook unchanged (spec.paused is already false; "
        "the group is Cancelled: it sends nothing more)\n"
    )


def test_selectors_pick_the_right_groups(
    kube_cluster: KubeCluster, namespace: str, sendgroup_crd: str, objects: Objects
) -> None:
    other = f"{namespace}-b"
    kube_cluster.kubectl("create", "namespace", other)
    try:
        objects.apply(sendgroup("a", "c1", labels={"tier": "bulk"}))
        objects.apply(sendgroup("b", "c1", labels={"tier": "urgent"}))
        objects.apply(sendgroup("c", "c2", labels={"tier": "bulk"}))
        kube_cluster.kubectl("apply", "-n", other, "-f", "-", input=sendgroup("d", "c1"))

        def paused() -> set[str]:
            out = kube_cluster.kubectl("get", "sg", "-A", "-o", "json").stdout
            return {
                f"{o['metadata']['namespace'].removeprefix(namespace) or '.'}/"
                f"{o['metadata']['name']}"
                for o in json.loads(out)["items"]
                if o["metadata"]["namespace"] in (namespace, other) and o["spec"].get("paused")
            }

        ns = ["-n", namespace]
        proc = plugin(kube_cluster, "pause", "-l", "tier=bulk", *ns)
        assert proc.stdout.splitlines() == ["sendgroup/a paused", "sendgroup/c paused"]
        assert paused() == {"./a", "./c"}
        proc = plugin(kube_cluster, "pause", "--campaign", "c1", *ns)
        assert proc.stdout.splitlines() == [
            "sendgroup/a unchanged (spec.paused is already true)",
            "sendgroup/b paused",
        ]
        assert paused() == {"./a", "./b", "./c"}
        proc = plugin(kube_cluster, "resume", "--campaign", "c1", "-l", "tier=urgent", *ns)
        assert proc.stdout.splitlines() == ["sendgroup/b resumed"]
        assert paused() == {"./a", "./c"}
        proc = plugin(kube_cluster, "resume", "--all", *ns)
        assert paused() == set()
        # -A: every namespace, names qualified by their namespace in the output.
        proc = plugin(kube_cluster, "pause", "--campaign", "c1", "-A")
        assert f"sendgroup/d paused (namespace {other})" in proc.stdout.splitlines()
        assert paused() == {"./a", "./b", "-b/d"}
        # Names: several at once, one missing -> the others still change, exit 3.
        proc = plugin(kube_cluster, "pause", "c", "nope", *ns)
        assert proc.returncode == 3
        assert proc.stdout == "sendgroup/c paused\n"
        assert f"sendgroup/nope in namespace '{namespace}' not found" in proc.stderr
        assert paused() == {"./a", "./b", "./c", "-b/d"}
        # Status honours the same selection.
        proc = plugin(kube_cluster, "status", "-l", "tier=bulk", *ns)
        assert [line.split()[0] for line in proc.stdout.splitlines()[1:-1]] == ["a", "c"]
        # Nothing matched, missing selection, contradictory selection.
        proc = plugin(kube_cluster, "pause", "-l", "tier=none", *ns)
        assert (proc.returncode, proc.stderr) == (
            3,
            "error: no sendgroups matched: nothing changed\n",
        )
        proc = plugin(kube_cluster, "pause", *ns)
        assert proc.returncode == 2 and "say which groups to pause" in proc.stderr
        proc = plugin(kube_cluster, "pause", "a", "--all", *ns)
        assert proc.returncode == 2 and "not both" in proc.stderr
    finally:
        kube_cluster.kubectl("delete", "namespace", other, "--wait=false")


def test_errors_are_one_line_with_exit_codes(
    kube_cluster: KubeCluster, namespace: str, sendgroup_crd: str, objects: Objects, tmp_path: Path
) -> None:
    objects.apply(sendgroup("gmail"))
    # A ServiceAccount that may read SendGroups but not change them.
    apply_objects(
        kube_cluster,
        [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "viewer", "namespace": namespace}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "viewer", "namespace": namespace},
             "rules": [{"apiGroups": ["sendgroups.io"], "resources": ["sendgroups"],
                        "verbs": ["get", "list"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "viewer", "namespace": namespace},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                         "name": "viewer"},
             "subjects": [{"kind": "ServiceAccount", "name": "viewer",
                           "namespace": namespace}]},
        ],
    )  # fmt: skip
    viewer = service_account_kubeconfig(kube_cluster, namespace, "viewer", tmp_path / "viewer")
    # The namespace comes from the kubeconfig's context.
    proc = plugin(kube_cluster, "status", kubeconfig=viewer)
    assert proc.returncode == 0 and proc.stdout.splitlines()[1].split()[0] == "gmail"
    proc = plugin(kube_cluster, "pause", "gmail", kubeconfig=viewer)
    assert proc.returncode == 4, proc
    assert 'cannot patch resource "sendgroups"' in proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    proc = plugin(kube_cluster, "status", "-A", kubeconfig=viewer)
    assert proc.returncode == 4 and "cannot list resource" in proc.stderr

    # Unreachable API server, unknown context, missing kubeconfig.
    closed = tmp_path / "closed"
    closed.write_text(
        viewer.read_text().replace(kube_cluster.server()[0], f"https://127.0.0.1:{free_port()}")
    )
    proc = plugin(kube_cluster, "status", kubeconfig=closed)
    assert proc.returncode == 5 and "cannot reach the API server" in proc.stderr
    proc = plugin(kube_cluster, "status", "--context", "nope")
    assert proc.returncode == 5 and "context 'nope' not in" in proc.stderr
    proc = plugin(kube_cluster, "status", "--kubeconfig", str(tmp_path / "missing"))
    assert proc.returncode == 5 and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_crd_says_what_to_install(tmp_path: Path) -> None:
    """On a control plane without the CRD (a second, bare local one, started here even when the
    session uses an existing cluster: the session's has the CRD installed for good), every verb
    says the API is missing and how to install it."""
    bare = start_cluster(tmp_path / "bare", timeout=300)
    try:
        for args in (["status"], ["status", "-A"], ["pause", "x"], ["cancel", "--all", "-y"]):
            proc = plugin(bare, *args)
            assert proc.returncode == 3, (args, proc)
            assert proc.stderr == (
                "error: the SendGroup API (sendgroups.io/v1alpha1) is not installed on "
                f"{bare.server()[0]}: apply crds/sendgroups.yaml or install the Helm chart\n"
            )
    finally:
        stop_cluster(tmp_path / "bare")


def test_argocd_managed_group_gets_a_warning(
    kube_cluster: KubeCluster, namespace: str, sendgroup_crd: str, objects: Objects
) -> None:
    tracking = f"shop:sendgroups.io/SendGroup:{namespace}/gmail"
    objects.apply(sendgroup("gmail", annotations={"argocd.argoproj.io/tracking-id": tracking}))
    objects.apply(sendgroup("plain"))
    proc = plugin(kube_cluster, "pause", "gmail", "plain", "-n", namespace)
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["sendgroup/gmail paused", "sendgroup/plain paused"]
    assert proc.stderr.splitlines() == [
        f"warning: sendgroup/gmail is managed by ArgoCD (annotation "
        f"argocd.argoproj.io/tracking-id={tracking}): if its manifest in Git sets "
        "spec.paused, an Application with selfHeal reverts this change on its next sync. "
        "Commit the change to Git to make it stick."
    ]


# --------------------------------------------------------------------- status, real operator


def parse_table(text: str) -> list[dict[str, str]]:
    """Rows of the status table, cells cut at the header's column starts."""
    lines = text.splitlines()
    header = lines[0]
    names = header.split()
    starts = [header.index(n) for n in names]
    rows = []
    for line in lines[1:]:
        if line and not re.match(r"\d+ groups, ", line):
            cells = [
                line[s : (starts[i + 1] if i + 1 < len(starts) else None)].strip()
                for i, s in enumerate(starts)
            ]
            rows.append(dict(zip(names, cells, strict=True)))
    return rows


def push(client: redis.Redis, queue: str, n: int, age_seconds: float = 0) -> None:
    """``n`` Laravel-shaped jobs pushed ``age_seconds`` ago (ready list + notify tokens)."""
    keys = QueueKeys(queue)
    pushed = time.time() - age_seconds
    payloads = [
        json.dumps({"uuid": f"{queue}-{i}", "displayName": "sendgroups.SendMail",
                    "job": "sendgroups.SendMail", "attempts": 0, "pushedAt": f"{pushed:.4f}",
                    "data": {"to": f"u{i}@example.com"}})
        for i in range(n)
    ]  # fmt: skip
    client.rpush(keys.ready, *payloads)
    client.rpush(keys.notify, *(["1"] * n))


def test_status_table_shows_what_the_operator_measured(
    operator: OperatorProcess,
    kube_cluster: KubeCluster,
    namespace: str,
    objects: Objects,
    redis_client: redis.Redis,
) -> None:
    gmail, outlook = QueueKeys("mail-gmail"), QueueKeys("mail-outlook")
    push(redis_client, "mail-gmail", 7, age_seconds=300)
    redis_client.zadd(gmail.delayed, {'{"uuid":"d1"}': time.time() + 600, '{"uuid":"d2"}': 1})
    redis_client.zadd(gmail.reserved, {'{"uuid":"r1"}': time.time() + 90})
    redis_client.zadd(gmail.failed, {'{"uuid":"f1"}': time.time(), '{"uuid":"f2"}': 1})
    redis_client.hset(gmail.stats, mapping={"delivered": 30, "failed": 2})
    push(redis_client, "mail-outlook", 4)
    for name, workers, paused in (("gmail", 2, False), ("outlook", 1, True), ("yahoo", 1, False)):
        body = json.loads(sendgroup(name))
        body["spec"] |= {"workers": workers, "paused": paused}
        objects.apply(json.dumps(body))

    def measured() -> dict[str, dict[str, Any]] | None:
        st = {n: objects.status(n) for n in ("gmail", "outlook", "yahoo")}
        ok = (
            st["gmail"].get("queue", {}).get("total") == 10
            and st["gmail"].get("progress", {}).get("delivered") == 30
            and st["outlook"].get("phase") == "Paused"
            and st["yahoo"].get("phase") in ("Pending", "Idle")
        )
        return st if ok else None

    statuses = wait_for(measured, 40, "statuses measured", describe=lambda: objects.list("sg"))
    proc = plugin(kube_cluster, "status", "-n", namespace)
    assert proc.returncode == 0, proc.stderr
    print(proc.stdout)
    table = {row["NAME"]: row for row in parse_table(proc.stdout)}
    assert list(table) == ["gmail", "outlook", "yahoo"]

    g = table["gmail"]
    assert (g["CAMPAIGN"], g["HOST"], g["PHASE"], g["WORKERS"]) == (
        "spring-sale", "gmail.example", "Running", "0/2",
    )  # fmt: skip
    assert int(g["READY"]) == redis_client.llen(gmail.ready) == 7
    assert int(g["DELAYED"]) == redis_client.zcard(gmail.delayed) == 2
    assert int(g["RESERVED"]) == redis_client.zcard(gmail.reserved) == 1
    assert int(g["FAILED"]) == redis_client.zcard(gmail.failed) == 2
    # percent = delivered / (delivered + failed + total) = 30 / (30 + 2 + 10)
    assert g["PROGRESS"].endswith(" 71.4%"), g["PROGRESS"]
    bar = g["PROGRESS"].split("]")[0].removeprefix("[")
    assert len(bar) == 20 and bar[:14] == "█" * 14 and bar[15:] == " " * 5
    oldest = statuses["gmail"]["queue"]["oldestJobAgeSeconds"]
    assert 300 <= oldest < 400
    # OLDEST counts from oldestJobPushedAt up to the moment the plugin ran (as kubectl get sg
    # does), so it may be a few seconds past the age the status recorded when it measured.
    pushed = datetime.fromisoformat(
        statuses["gmail"]["queue"]["oldestJobPushedAt"].replace("Z", "+00:00")
    )
    minutes, _, seconds = g["OLDEST"].rstrip("s").partition("m")
    shown = int(minutes) * 60 + int(seconds or 0)
    assert oldest <= shown <= (datetime.now(UTC) - pushed).total_seconds() + 1, g["OLDEST"]
    # No node runs the pods: Ready=False while scaling needs attention, and so do the 2
    # failed jobs.
    assert g["CONDITIONS"].split(",") == ["FailedJobs=True(JobsFailed)", "Ready=False(Scaling)"]

    o = table["outlook"]
    assert (o["PHASE"], o["READY"], o["CONDITIONS"]) == ("Paused", "4", "-")
    assert int(o["READY"]) == redis_client.llen(outlook.ready)
    assert o["PROGRESS"].endswith("  0.0%")
    y = table["yahoo"]
    assert (y["READY"], y["DELAYED"], y["OLDEST"], y["CONDITIONS"]) == ("0", "0", "-", "-")
    assert proc.stdout.splitlines()[-1] == (
        "3 groups, 1 done; 14 jobs queued, 30 delivered, 2 failed"
    )

    # JSON for scripts carries the same numbers.
    rows = json.loads(plugin(kube_cluster, "status", "-n", namespace, "-o", "json").stdout)
    assert [(r["name"], r["queue"]["ready"], r["queue"]["total"], r["progress"]["percent"],
             r["done"]) for r in rows] == [
        ("gmail", 7, 10, 71.4, False), ("outlook", 4, 4, 0.0, False), ("yahoo", 0, 0, 0.0, True),
    ]  # fmt: skip

    # --watch refreshes until every group is done: drain gmail's queue, cancel outlook.
    env = {**os.environ, "KUBECONFIG": str(kube_cluster.kubeconfig)}
    watch = subprocess.Popen(
        [str(PLUGIN), "status", "-n", namespace, "--watch", "--interval", "0.5",
         "--timeout", "90"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        time.sleep(1.5)
        assert watch.poll() is None, watch.communicate()
        redis_client.delete(gmail.ready, gmail.delayed, gmail.reserved, gmail.notify)
        proc = plugin(kube_cluster, "cancel", "outlook", "-n", namespace, "--yes")
        assert proc.returncode == 0, proc.stderr
        out, err = watch.communicate(timeout=100)
    finally:
        watch.kill()
    assert watch.returncode == 0, err
    tables = [t for t in out.split("\n\n") if t.strip()]
    assert len(tables) >= 2
    final = {row["NAME"]: row for row in parse_table(tables[-1])}
    assert final["gmail"]["READY"] == "0" and final["outlook"]["PHASE"] == "Cancelled"
    assert tables[-1].splitlines()[-1].startswith("3 groups, 3 done")
