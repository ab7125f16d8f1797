"""Whatever the API server accepts, the operator accepts the same way (issue 16, item 2), as a
property test: generated values for a spec field go to the real API server (server-side dry-run
create, the CRD from crds/, its OpenAPI schema and CEL rules) and to the operator's own parse
(``models.SendGroupSpec`` plus the parser the planner uses); both must accept, or both refuse.
Deterministic (``derandomize``), a few hundred examples per field, one API request each."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client as k8s
import kubernetes.config
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from sendgroup_contract import durations
from sendgroup_operator import models
from sendgroup_worker import redisurl
from tests.support.cluster import KubeCluster

pytestmark = pytest.mark.cluster

EXAMPLES = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

DryRun = Callable[[dict[str, Any]], bool]
SpecOf = Callable[[str], dict[str, Any]]


@pytest.fixture
def api_accepts(kube_cluster: KubeCluster, sendgroup_crd: str, namespace: str) -> Iterator[DryRun]:
    """``api_accepts(spec)``: whether the API server would create a SendGroup with ``spec``
    (dry-run, nothing stored). A 422 (Invalid) is a refusal; any other error fails the test."""
    client = kubernetes.config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    custom = k8s.CustomObjectsApi(client)

    def accepts(spec: dict[str, Any]) -> bool:
        body = {
            "apiVersion": models.API_VERSION,
            "kind": models.KIND,
            "metadata": {"name": "grammar"},
            "spec": spec,
        }
        try:
            custom.create_namespaced_custom_object(
                models.GROUP, models.VERSION, namespace, models.PLURAL, body, dry_run="All"
            )
        except ApiException as exc:
            if exc.status == 422:
                return False
            raise
        return True

    yield accepts
    client.close()


def operator_accepts(spec: dict[str, Any]) -> bool:
    """The operator's model, then the duration parser the planner runs on both clocks."""
    try:
        parsed = models.SendGroupSpec.model_validate(spec)
        durations.parse_seconds(parsed.reaper.idle_after)
        durations.parse_seconds(parsed.reaper.dump_after)
    except (pydantic.ValidationError, durations.InvalidDuration):
        return False
    return True


BASE = {"campaign": "c", "host": "gmail.com"}

DURATIONS = st.one_of(
    st.from_regex(r"([0-9]{1,8}[smhd]){1,4}", fullmatch=True),
    st.text(alphabet="0123456789smhdSMHw .:+-\n\t", max_size=14),
    st.text(max_size=40),
    st.sampled_from(
        ["", "0s", "1h30m", "1h\n", "\n1h", "1.5h", " 1s", "1S", "\u0663s", "1s1s", "9" * 31 + "d"]
    ),
)


def agree(api_accepts: DryRun, values: st.SearchStrategy[str], spec: SpecOf) -> Counter[bool]:
    """Run the property over ``values``; returns how many were accepted and refused (a
    property that only ever saw one side proves little: the callers check both occur)."""
    seen: Counter[bool] = Counter()

    @EXAMPLES
    @given(value=values)
    def check(value: str) -> None:
        body = spec(value)
        accepted = api_accepts(body)
        seen[accepted] += 1
        assert accepted == operator_accepts(body), (repr(value), accepted)

    check()
    return seen


def test_durations_agree(api_accepts: DryRun) -> None:
    seen = agree(
        api_accepts, DURATIONS, lambda v: {**BASE, "reaper": {"idleAfter": v, "dumpAfter": "1m"}}
    )
    assert seen[True] >= 50 and seen[False] >= 50, seen


URL_PARTS = st.tuples(
    st.sampled_from(
        ["redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "unix", "REDIS"]
    ),
    st.sampled_from(["redis", "10.0.0.1", "redis.mail.svc", "[::1]", "", "h1:7000,h2", "r_d"]),
    st.sampled_from(["", ":6379", ":0", ":65535", ":65536", ":x", ":"]),
    st.sampled_from(["", "/", "/0", "/15", "/x", "/0/1", "/mymaster", "/mymaster/2"]),
    st.sampled_from(
        [
            "",
            "?db=1",
            "?cluster=true",
            "?cluster=maybe",
            "?sentinel_auth=none",
            "?foo=1",
            "?socket_timeout=5",
            "?ssl_ca_certs=/a@b",
            "?db=x",
            "?protocol=3",
        ]
    ),
    st.sampled_from(["", "#x"]),
).map(lambda p: f"{p[0]}://{p[1]}{p[2]}{p[3]}{p[4]}{p[5]}")

URLS = st.one_of(
    URL_PARTS,
    st.text(max_size=30).map(lambda t: f"redis://{t}"),
    # strings the grammar itself generates: each one the parser must take too
    st.from_regex(redisurl.SPEC_URL_PATTERN, fullmatch=True).filter(lambda u: len(u) <= 2048),
)


def test_redis_urls_agree(api_accepts: DryRun) -> None:
    seen = agree(
        api_accepts,
        URLS,
        lambda v: {**BASE, "queue": "{q}", "redis": {"url": v}},
    )
    assert seen[True] >= 50 and seen[False] >= 50, seen
