"""The real operator's /metrics (``python -m sendgroup_operator`` under its ServiceAccount
against the local control plane, a real redis-server) after it reconciled a SendGroup and
counted an orphan Deployment: ``promtool check metrics`` accepts it, the per-group series say
what a user would check, and every operator metric the shipped dashboard and alert rules use is
in it. Deleting the group removes its series."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from tests.cluster.conftest import Objects
from tests.cluster.test_operator import ghost_worker_deployment, push, replicas, sendgroup
from tests.support.cluster import wait_for
from tests.support.observability import check_metrics, missing_from, promtool_bin
from tests.support.operator_proc import OperatorProcess

pytestmark = pytest.mark.cluster


def _value(text: str, sample: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return None


def test_real_operator_metrics_pass_promtool_and_cover_dashboard_and_alerts(
    operator_factory: Callable[..., OperatorProcess], objects: Objects, redis_client: redis.Redis
) -> None:
    promtool_bin()  # fail first, with the reason, when promtool is missing
    op = operator_factory(SENDGROUP_ORPHAN_GRACE="2")
    ns = objects.namespace
    push(redis_client, "mail-pm", 3)
    objects.apply(sendgroup("pm", workers=2))
    objects.apply(ghost_worker_deployment())
    wait_for(lambda: replicas(objects, "pm") == 2, 20, "workers of the group")
    group = f'namespace="{ns}",sendgroup="pm"'
    info = f'sendgroup_info{{campaign="spring-sale",host="gmail.com",{group}}}'
    orphan_deployments = 'sendgroup_orphans{kind="deployment_without_group"}'
    wait_for(lambda: _value(op.metrics(), info) == 1.0, 20, "sendgroup_info of the group")
    wait_for(lambda: _value(op.metrics(), orphan_deployments) == 1.0, 20, "orphan Deployment")
    text = op.metrics()

    check_metrics(text)
    assert _value(text, f'sendgroup_queue_jobs{{{group},state="ready"}}') == 3
    assert _value(text, f'sendgroup_workers{{kind="desired",{group}}}') == 2
    assert _value(text, f'sendgroup_operation_failed{{kind="dump",{group}}}') == 0
    assert _value(text, f"sendgroup_queue_reachable{{{group}}}") == 1
    assert _value(text, f"sendgroup_queue_unreachable{{{group}}}") == 0  # deprecated name
    assert _value(text, f'sendgroup_reconcile_errors_total{{namespace="{ns}"}}') == 0
    assert (_value(text, "sendgroup_reconcile_seconds_count") or 0) >= 1
    assert "redis://" not in text
    missing = missing_from(text, "sendgroup_", exclude="sendgroup_worker_")
    assert not missing, f"used by the dashboard/alerts, not in the operator /metrics: {missing}"

    objects.cluster.kubectl("delete", "sendgroup", "pm", "-n", ns, "--wait=false")
    wait_for(lambda: objects.get("sendgroup", "pm") is None, 30, "group deleted")
    wait_for(lambda: f"{group}" not in op.metrics(), 10, "the deleted group's series dropped")
