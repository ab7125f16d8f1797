"""Whatever the API server accepts, the operator accepts the same way (issue 16, item 2), as a
property test: generated values for a spec field go to the real API server (server-side dry-run
create, the CRD from crds/, its OpenAPI schema and CEL rules) and to the operator's own parse
(``models.SendGroupSpec`` plus the parser the planner uses); both must accept, or both refuse.
Fields: reaper durations, redis.url, spec.queue (the queue rule), metadata.name without
spec.queue (the default queue name, the Deployment and Job names), and the resource quantities
of spec.worker and spec.jobs, whose rendered Deployment and Job the API server must accept too,
alone and as request/limit pairs (a request above its limit: the CRD's CEL ``quantity()``
rule and the model's own reading of a quantity must agree, down to ParseQuantity's rounding to
1n and its cap at 2^63-1), and resource names (cpu, memory, ephemeral-storage only: the API
server's rules for other names, extended resources and huge pages are not the model's), and
spec.podTemplate (nodeSelector, pod labels and annotations, tolerations, topology spread
constraints: the pod template rules of the worker Deployment and the Jobs), and
spec.disruptionBudget (counts and percentages), whose rendered PodDisruptionBudget the API
server must accept too. Deterministic (``derandomize``), a few hundred examples per field,
one API request each."""

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

from sendgroup_contract import durations, keys
from sendgroup_operator import builders, models
from sendgroup_operator.settings import Settings
from sendgroup_worker import redisurl
from tests.support.cluster import KubeCluster

pytestmark = pytest.mark.cluster

EXAMPLES = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: ``api_create(spec, name="grammar")``: the spec as the API server would store it (defaults
#: applied, ``1.0`` read as ``1``: what the operator is handed), or its refusal message.
DryRun = Callable[..., dict[str, Any] | str]
SpecOf = Callable[[Any], dict[str, Any]]
#: ``children(spec, name)``: the rendered worker Deployment, a dump Job and the worker
#: PodDisruptionBudget (when spec.disruptionBudget is set), each dry-run created; returns the
#: API server's refusals (``[]`` when all were accepted).
Children = Callable[[models.SendGroupSpec, str], list[str]]


def _dry_run(create: Callable[[], Any]) -> dict[str, Any] | str:
    """The object as the dry-run create would have stored it, or the API server's message on
    a 422 (Invalid); any other error fails the test."""
    try:
        created = create()
    except ApiException as exc:
        if exc.status == 422:
            return str(exc.body)
        raise
    return created if isinstance(created, dict) else {}


@pytest.fixture
def api_client(kube_cluster: KubeCluster) -> Iterator[k8s.ApiClient]:
    client = kubernetes.config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    yield client
    client.close()


@pytest.fixture
def api_create(api_client: k8s.ApiClient, sendgroup_crd: str, namespace: str) -> DryRun:
    """``api_create(spec, name="grammar")``: the ``spec`` of SendGroup ``name`` as the API server
    would store it (dry-run, nothing stored), else its refusal message (a 422, Invalid)."""
    custom = k8s.CustomObjectsApi(api_client)

    def create(spec: dict[str, Any], name: str = "grammar") -> dict[str, Any] | str:
        body = {
            "apiVersion": models.API_VERSION,
            "kind": models.KIND,
            "metadata": {"name": name},
            "spec": spec,
        }
        stored = _dry_run(
            lambda: custom.create_namespaced_custom_object(
                models.GROUP, models.VERSION, namespace, models.PLURAL, body, dry_run="All"
            )
        )
        return stored if isinstance(stored, str) else dict(stored["spec"])

    return create


SETTINGS = Settings(default_image="sendgroup-worker:grammar", default_redis_url="redis://r:6379/0")


@pytest.fixture
def children_accepted(api_client: k8s.ApiClient, namespace: str) -> Children:
    """What the builders render for an accepted group, dry-run created: the worker Deployment
    (``spec.worker.resources``, name ``sg-<name>`` shortened), a dump Job
    (``spec.jobs.resources``, name ``sg-<name>-dump-<n>`` shortened) and, when
    ``spec.disruptionBudget`` is set, the worker PodDisruptionBudget (``sg-<name>``)."""
    apps = k8s.AppsV1Api(api_client)
    batch = k8s.BatchV1Api(api_client)
    policy = k8s.PolicyV1Api(api_client)

    def refusals(spec: models.SendGroupSpec, name: str) -> list[str]:
        ref = builders.GroupRef(namespace, name, "0d9e6f3c-uid", "c", spec.host)
        deployment = builders.deployment(ref, spec, SETTINGS, replicas=1)
        job = builders.job(ref, spec, SETTINGS, "dump", 12345)
        found = [
            _dry_run(
                lambda: apps.create_namespaced_deployment(namespace, deployment, dry_run="All")
            ),
            _dry_run(lambda: batch.create_namespaced_job(namespace, job, dry_run="All")),
        ]
        budget = builders.pod_disruption_budget(ref, spec)
        if budget is not None:
            found.append(
                _dry_run(
                    lambda: policy.create_namespaced_pod_disruption_budget(
                        namespace, budget, dry_run="All"
                    )
                )
            )
        return [message for message in found if isinstance(message, str)]

    return refusals


def operator_accepts(spec: dict[str, Any], name: str = "grammar") -> bool:
    """The operator's model, the duration parser the planner runs on both clocks, and the
    queue rule (``sendgroup_contract.keys``) on the effective queue name."""
    try:
        parsed = models.SendGroupSpec.model_validate(spec)
        durations.parse_seconds(parsed.reaper.idle_after)
        durations.parse_seconds(parsed.reaper.dump_after)
        keys.validate_queue_name(parsed.queue_name(name))
    except (pydantic.ValidationError, durations.InvalidDuration, keys.InvalidQueueName):
        return False
    return True


BASE = {"campaign": "c", "host": "gmail.com"}

DURATIONS = st.one_of(
    st.from_regex(r"([0-9]{1,8}[smhd]){1,4}", fullmatch=True),
    st.text(alphabet="0123456789smhdSMHw .:+-\n\t", max_size=14),
    st.text(max_size=40),
    st.sampled_from(
        [
            *["", "0s", "1h30m", "1h\n", "\n1h", "1.5h", " 1s", "1S", "\u0663s", "1s1s"],
            "9" * 31 + "d",
            # the 36500-day cap (durations.MAX_SECONDS) and its edges
            *["36500d", "36501d", "876000h", "876000h1s", "3153600000s", "3153600001s"],
            *["36499d23h59m60s", "3650d", "9999999999s", "10000000000s"],
            *["10000000d", "0000000001s", "100000000s", "99999999s", "0" * 30 + "1d"],
        ]
    ),
)


def agree(
    api_create: DryRun,
    values: st.SearchStrategy[Any],
    spec: SpecOf,
    children: Children | None = None,
) -> Counter[bool]:
    """Run the property over ``values``; returns how many were accepted and refused (a
    property that only ever saw one side proves little: the callers check both occur). With
    ``children``, what the builders render for every accepted spec must be accepted too."""
    seen: Counter[bool] = Counter()

    @EXAMPLES
    @given(value=values)
    def check(value: Any) -> None:
        body = spec(value)
        created = api_create(body)
        accepted = not isinstance(created, str)
        seen[accepted] += 1
        # the operator is handed what the API server stored; a refused spec never reaches it,
        # but the model must refuse it as well (an older CRD, a client-side check)
        handed = body if isinstance(created, str) else created
        assert accepted == operator_accepts(handed), (repr(value), created)
        if accepted and children is not None:
            rendered = children(models.SendGroupSpec.model_validate(handed), "grammar")
            assert not rendered, (repr(value), rendered)

    check()
    return seen


def test_durations_agree(api_create: DryRun) -> None:
    seen = agree(
        api_create, DURATIONS, lambda v: {**BASE, "reaper": {"idleAfter": v, "dumpAfter": "1m"}}
    )
    assert seen[True] >= 50 and seen[False] >= 50, seen


TTL_CAP = 36500 * 86400
TTLS = st.one_of(
    st.integers(min_value=-2, max_value=10**6),
    st.integers(min_value=TTL_CAP - 3, max_value=TTL_CAP + 3),
    st.integers(min_value=TTL_CAP, max_value=2**64),
    st.sampled_from([0.5, "60", None, 3e11, True]),
)


def test_ttl_after_finished_agrees(api_create: DryRun) -> None:
    """ttlSecondsAfterFinished: the API server and the model take the same values (at most
    36500 days; a larger one overflowed the operator's deadline date)."""
    seen = agree(
        api_create, TTLS, lambda v: {**BASE, "state": "Completed", "ttlSecondsAfterFinished": v}
    )
    assert seen[True] >= 20 and seen[False] >= 20, seen


INT32_MAX = 2**31 - 1
BUDGET_VALUES = st.one_of(
    st.integers(min_value=-5, max_value=1000),
    st.integers(min_value=0, max_value=100).map(lambda n: f"{n}%"),
    st.integers(min_value=INT32_MAX - 2, max_value=INT32_MAX + 2),
    st.integers(min_value=INT32_MAX, max_value=2**64),
    st.integers(min_value=-5, max_value=1005).map(lambda n: f"{n}%"),
    st.from_regex(r"[0-9]{1,4}%", fullmatch=True),
    st.text(alphabet="0123456789%-+. \n", max_size=6),
    st.sampled_from(
        [
            *["0%", "100%", "101%", "999%", "1000%", "-5%", "-5", "5", "50", "05%", "007%"],
            *["50%\n", " 50%", "50 %", "50.5%", "1e2%", "%", "", "\u0665%"],
            *[0.5, 5.0, 1e3, -1.0, True, False, None, [], {}],
        ]
    ),
)


def _budget_spec(p: tuple[str, Any]) -> dict[str, Any]:
    field, value = p
    if field == "both":  # refused by the CEL rule (exactly one), whatever the value
        return {**BASE, "disruptionBudget": {"minAvailable": value, "maxUnavailable": value}}
    return {**BASE, "disruptionBudget": {field: value}}


def test_disruption_budgets_agree(api_create: DryRun, children_accepted: Children) -> None:
    """spec.disruptionBudget: ``minAvailable: -5`` and ``maxUnavailable: '999%'`` passed the CRD,
    then the API server refused the rendered PodDisruptionBudget (422) and the group ran with
    none. Now the CRD and the model take the same counts and percentages, and every accepted
    one renders a PodDisruptionBudget (and Deployment and Job) the API server accepts."""
    seen = agree(
        api_create,
        st.tuples(
            st.sampled_from(["minAvailable", "maxUnavailable"] * 3 + ["both"]), BUDGET_VALUES
        ),
        _budget_spec,
        children=children_accepted,
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


def test_redis_urls_agree(api_create: DryRun) -> None:
    seen = agree(
        api_create,
        URLS,
        lambda v: {**BASE, "queue": "{q}", "redis": {"url": v}},
    )
    assert seen[True] >= 50 and seen[False] >= 50, seen


QUEUES = st.one_of(
    # strings the grammar itself generates: each one the queue rule must take too
    st.from_regex(keys.QUEUE_NAME_PATTERN, fullmatch=True),
    st.text(alphabet="ab09Z.-_{}:/ \n\u00e9", max_size=12),
    st.text(max_size=20),
    # lengths near the limit (200), with and without a hash tag
    st.integers(min_value=195, max_value=205).map(lambda n: "q" * n),
    st.integers(min_value=193, max_value=203).map(lambda n: "{" + "t" * n + "}"),
    st.integers(min_value=190, max_value=200).map(lambda n: "team-a." + "q" * n),
    st.sampled_from(
        [
            "mail-1",
            "{mail-x}",
            "team-a.mail-1",
            "team-a.{mail-1}",
            "{team-a}.mail.1",
            "mail_1",
            "a..b",
            "a.{.b}",
            "{a}{b}",
            "{}",
            "a{}",
            "a}{b",
            "{a",
            "a}",
            "{{a}}",
            ".a",
            "-a",
            "_a",
            "a.",
            "mail-1\n",
            "mail-1:delayed",
            "mail/1",
            "m\u00e4il",
            "\u0661",
            "",
        ]
    ),
)


def test_queue_names_agree(api_create: DryRun) -> None:
    seen = agree(api_create, QUEUES, lambda v: {**BASE, "queue": v})
    assert seen[True] >= 50 and seen[False] >= 50, seen


_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
NAMES = st.one_of(
    st.from_regex(
        r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", fullmatch=True
    ),
    # DNS subdomains of 240..260 characters: labels joined by dots, cut to length
    st.tuples(st.lists(_LABEL, min_size=12, max_size=40), st.integers(240, 260)).map(
        lambda p: ".".join(p[0])[: p[1]]
    ),
    st.integers(min_value=55, max_value=260).map(lambda n: "n" * n),
    st.integers(min_value=55, max_value=70).map(lambda n: "a-" * (n // 2) + "z"),
    st.integers(min_value=178, max_value=200).map(lambda n: "a" * n + "." + "b" * 40),
    st.text(alphabet="az09-.A_", min_size=1, max_size=20),
    st.sampled_from(["a", "a-", "-a", "a..b", "a.-b", "Grammar", "a_b", "n" * 253, "n" * 254]),
)


def test_default_names_fit_every_accepted_name(
    api_create: DryRun, children_accepted: Children
) -> None:
    """No spec.queue: for every metadata.name the API server accepts, the default queue name
    passes the queue rule, and the worker Deployment and the Jobs (names shortened with a hash)
    are accepted by the API server too."""
    seen: Counter[bool] = Counter()

    @EXAMPLES
    @given(name=NAMES)
    def check(name: str) -> None:
        accepted = not isinstance(api_create(BASE, name), str)
        seen[accepted] += 1
        if not accepted:
            return
        assert operator_accepts(BASE, name), name
        spec = models.SendGroupSpec.model_validate(BASE)
        keys.validate_queue_name(spec.queue_name(name))
        assert not children_accepted(spec, name), name

    check()
    # both sides exercised: the example stream is derandomized but not the same in every
    # session (24 refused of 300 when this file runs alone, 16 in CI's whole lane 1 session
    # of 2026-12-04), so the floor is a sanity bound, not a count
    assert seen[True] >= 50 and seen[False] >= 10, seen


QUANTITY_VALUES = st.one_of(
    st.integers(min_value=-3, max_value=10**4),
    st.integers(min_value=2**62, max_value=2**64),
    st.from_regex(models.QUANTITY_PATTERN, fullmatch=True).filter(lambda q: len(q) <= 40),
    st.text(alphabet="0123456789.+-eEmkKMGiu ", max_size=8),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
    st.sampled_from(
        [
            "1",
            "500m",
            "1Gi",
            "64Mi",
            "1e3",
            "1E3",
            "1e-3",
            "0.5",
            ".5",
            "1.",
            "+1",
            "-1",
            "0",
            "1Ki",
            "1k",
            "1K",
            "1KiB",
            "1.5Gi",
            "0.1m",
            "1m",
            "1e",
            "e3",
            "",
            " 1",
            "1 ",
            "1\n",
            "9" * 30,
            "9" * 30 + "E",
            "1e100",
            True,
            None,
            [],
        ]
    ),
)
WHERE = st.sampled_from(
    [
        ("worker", "requests", "cpu"),
        ("worker", "requests", "memory"),
        ("worker", "limits", "memory"),
        ("worker", "limits", "cpu"),
        ("jobs", "requests", "cpu"),
        ("jobs", "limits", "memory"),
        ("jobs", "requests", "ephemeral-storage"),
    ]
)


def _resources_spec(where_value: tuple[tuple[str, str, str], Any]) -> dict[str, Any]:
    (section, kind, resource), value = where_value
    return {**BASE, section: {"resources": {kind: {resource: value}}}}


def test_resource_quantities_agree(api_create: DryRun, children_accepted: Children) -> None:
    """spec.worker.resources and spec.jobs.resources: the API server and the model accept the
    same quantities, and the Deployment and Job rendered from an accepted one are accepted."""
    seen = agree(
        api_create,
        st.tuples(WHERE, QUANTITY_VALUES),
        _resources_spec,
        children=children_accepted,
    )
    assert seen[True] >= 50 and seen[False] >= 50, seen


#: Quantities that compare in interesting ways: one number under many suffixes (``1500m`` vs
#: ``2``, ``1Gi`` vs ``1G``), values past int64 (capped by ParseQuantity's slow path, not by
#: its fast path: ``1e99`` stays 1e99), values finer than 1n (rounded up), integers.
_SCALED = st.tuples(
    st.integers(min_value=0, max_value=3000),
    st.sampled_from(["", "m", "u", "n", "k", "M", "G", "Ki", "Mi", "Gi", "Ei", "E", "e3", "e-3"]),
).map(lambda p: f"{p[0]}{p[1]}")
PAIR_QUANTITIES = st.one_of(
    _SCALED,
    _SCALED,
    st.integers(min_value=0, max_value=3000),
    st.tuples(st.integers(0, 99), st.integers(0, 30)).map(lambda p: f"0.{'0' * p[1]}{p[0]}"),
    st.sampled_from(
        [
            "1",
            "1000m",
            "1.5",
            "1500m",
            "2",
            "1Gi",
            "1G",
            "1024Mi",
            "0.1n",
            "0.2n",
            "1n",
            "1e99",
            "1e98",
            "8Ei",
            "7Ei",
            "9" * 18,
            "9" * 19,
            "9" * 20,
            "9223372036854775807",
            "9223372036854775806",
            "10E",
            "9.223372036854775807E",
            "1.",
            ".5",
            "x",
            "-1",
        ]
    ),
)
PAIR_WHERE = st.tuples(
    st.sampled_from(["worker", "jobs"]), st.sampled_from(["cpu", "memory", "ephemeral-storage"])
)


def _pair_spec(p: tuple[tuple[str, str], Any, Any, bool]) -> dict[str, Any]:
    (section, resource), request, limit, other = p
    resources: dict[str, Any] = {"requests": {resource: request}, "limits": {resource: limit}}
    if other:  # a second resource that fits, so the rule is checked key by key
        spare = "memory" if resource != "memory" else "cpu"
        resources["requests"][spare] = "1"
        resources["limits"][spare] = "2"
    return {**BASE, section: {"resources": resources}}


def test_requests_within_limits_agree(api_create: DryRun, children_accepted: Children) -> None:
    """A request above the limit of the same resource (requests.cpu 2, limits.cpu 1) passed the
    CRD and the model, then the API server refused the Deployment (or Job) and the group was
    stuck. Now the CRD refuses it, the model refuses the same specs, and every accepted pair
    renders a Deployment and a Job the API server accepts."""
    seen = agree(
        api_create,
        st.tuples(PAIR_WHERE, PAIR_QUANTITIES, PAIR_QUANTITIES, st.booleans()),
        _pair_spec,
        children=children_accepted,
    )
    assert seen[True] >= 50 and seen[False] >= 50, seen


RESOURCE_NAMES = st.one_of(
    st.sampled_from(["cpu", "memory", "ephemeral-storage"]),
    st.sampled_from(
        [
            "cpu",
            "memory",
            "ephemeral-storage",
            "CPU",
            "gpu",
            "storage",
            "pods",
            "hugepages-2Mi",
            "hugepages-1Gi",
            "example.com/foo",
            "nvidia.com/gpu",
            "kubernetes.io/cpu",
            "requests.cpu",
            "",
            "cpu ",
        ]
    ),
    st.text(alphabet="abcpumemory-./", max_size=12),
)
NAMED_VALUES = st.sampled_from(["1", "2", "1Gi", "500m", 1])


def test_resource_names_agree(api_create: DryRun, children_accepted: Children) -> None:
    """Resource names in requests and limits (a request alone, a limit alone, or both with the
    same value): the CRD and the model accept cpu, memory and ephemeral-storage only, and the
    Deployment and Job rendered from every accepted spec are accepted."""

    def spec(p: tuple[str, str, Any, str]) -> dict[str, Any]:
        section, name, value, where = p
        kinds = ["requests", "limits"] if where == "both" else [where]
        return {**BASE, section: {"resources": {kind: {name: value} for kind in kinds}}}

    seen = agree(
        api_create,
        st.tuples(
            st.sampled_from(["worker", "jobs"]),
            RESOURCE_NAMES,
            NAMED_VALUES,
            st.sampled_from(["requests", "limits", "both"]),
        ),
        spec,
        children=children_accepted,
    )
    assert seen[True] >= 30 and seen[False] >= 50, seen


#: Label keys and annotation keys around the qualified-name rule: generated by the rule, near
#: its limits (a 63-character name, a 253-character prefix), the Job's own pod labels, upper
#: case in the prefix (refused for labels, allowed for annotations once lower-cased), and
#: strings the rule refuses.
_NAME_PART = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,8}[A-Za-z0-9])?", fullmatch=True)
_PREFIX = st.lists(_LABEL, min_size=1, max_size=3).map(".".join)
QUALIFIED_KEYS = st.one_of(
    _NAME_PART,
    st.tuples(_PREFIX, _NAME_PART).map(lambda p: f"{p[0]}/{p[1]}"),
    st.text(alphabet="aZ09-_./ !\n\u212a", min_size=0, max_size=10),
    st.integers(min_value=61, max_value=65).map(lambda n: "k" * n),
    st.integers(min_value=250, max_value=256).map(
        lambda n: (("p" * 60 + ".") * 5)[: n - 1].rstrip(".") + "p/name"
    ),
    st.sampled_from(
        [
            "bad key!!",
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
            "Example.com/x",
            "example.com/X_y.z",
            "a/b/c",
            "/a",
            "a/",
            "-a",
            "a-",
            "_a",
            "a.b",
            "app",
            "controller-uid",
            "job-name",
            "batch.kubernetes.io/job-name",
            "batch.kubernetes.io/controller-uid",
            "sendgroups.io/group",
            "scheduler.alpha.kubernetes.io/tolerations",
            "controller.kubernetes.io/pod-deletion-cost",
            "container.apparmor.security.beta.kubernetes.io/worker",
            "seccomp.security.alpha.kubernetes.io/pod",
            "kubernetes.io/config.mirror",
            "\u212aey",
            "",
        ]
    ),
)
LABEL_VALUES = st.one_of(
    st.from_regex(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,8}[A-Za-z0-9])?)?", fullmatch=True),
    st.text(alphabet="aZ09-_./ !\n", max_size=8),
    st.integers(min_value=62, max_value=64).map(lambda n: "v" * n),
    st.sampled_from(["", "v", "a b", "-v", "v-", "x\n", "\u00e9", "1", 1, None, True]),
)
TOLERATIONS = st.fixed_dictionaries(
    {},
    optional={
        "key": QUALIFIED_KEYS,
        "operator": st.sampled_from(["Exists", "Equal", "", "Lt", "exists"]),
        "value": st.one_of(LABEL_VALUES, st.just("")),
        "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute", ""]),
        "tolerationSeconds": st.sampled_from([0, 30, -5, 3153600000, 3153600001, 2**63, "60", 1.5]),
    },
)
#: Tolerations near the valid ones (TOLERATIONS alone is mostly refused): a good key, Exists
#: without a value or Equal with one, tolerationSeconds with NoExecute, one thing off at times.
PLAUSIBLE_TOLERATIONS = st.one_of(
    st.tuples(_NAME_PART, st.sampled_from(["NoSchedule", "NoExecute", None])).map(
        lambda p: {"key": p[0], "operator": "Exists", **({"effect": p[1]} if p[1] else {})}
    ),
    st.tuples(_NAME_PART, LABEL_VALUES).map(lambda p: {"key": p[0], "value": p[1]}),
    st.tuples(_NAME_PART, st.sampled_from([0, 1, 300, 3153600000, 3153600001, -1])).map(
        lambda p: {"key": p[0], "effect": "NoExecute", "tolerationSeconds": p[1]}
    ),
    st.just({"operator": "Exists"}),
)
SPREAD = st.fixed_dictionaries(
    {
        "maxSkew": st.sampled_from([1, 2, 0, 2**31 - 1, 2**31]),
        "topologyKey": st.one_of(QUALIFIED_KEYS, st.sampled_from(["kubernetes.io/hostname"])),
    },
    optional={
        "whenUnsatisfiable": st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]),
        "minDomains": st.sampled_from([1, 3, 0, 2**31]),
        "matchLabelKeys": st.lists(QUALIFIED_KEYS, max_size=2),
    },
)
POD_TEMPLATES = st.one_of(
    st.dictionaries(QUALIFIED_KEYS, LABEL_VALUES, max_size=3).map(lambda m: {"nodeSelector": m}),
    st.dictionaries(QUALIFIED_KEYS, LABEL_VALUES, max_size=3).map(
        lambda m: {"metadata": {"labels": m}}
    ),
    st.dictionaries(
        QUALIFIED_KEYS, st.sampled_from(["", "x", "free text: 1, 2\n"]), max_size=3
    ).map(lambda m: {"metadata": {"annotations": m}}),
    st.lists(TOLERATIONS, min_size=1, max_size=3).map(lambda t: {"tolerations": t}),
    st.lists(PLAUSIBLE_TOLERATIONS, min_size=1, max_size=3).map(lambda t: {"tolerations": t}),
    st.lists(SPREAD, min_size=1, max_size=3).map(lambda c: {"topologySpreadConstraints": c}),
)


def test_pod_templates_agree(api_create: DryRun, children_accepted: Children) -> None:
    """spec.podTemplate: nodeSelector, pod labels and annotations, tolerations and topology
    spread constraints. Values the API server refuses in a pod template (a key that is not a
    qualified name, a label value too long, a toleration with operator Exists and a value, ...)
    passed the CRD and the model, then the worker Deployment was refused (Degraded ApplyFailed
    for good). Now the CRD and the model refuse the same specs, and the Deployment and the Job
    rendered from every accepted one are accepted."""
    seen = agree(
        api_create,
        POD_TEMPLATES,
        lambda v: {**BASE, "podTemplate": v},
        children=children_accepted,
    )
    assert seen[True] >= 50 and seen[False] >= 50, seen


#: One spec.podTemplate per rule, on both sides of it (the generated stream may miss some).
POD_TEMPLATE_EDGES: list[dict[str, Any]] = [
    {"nodeSelector": {"bad key!!": "v"}},
    {"nodeSelector": {"kubernetes.io/hostname": "node-1"}},
    {"nodeSelector": {"disk": "v" * 63}},
    {"nodeSelector": {"disk": "v" * 64}},
    {"nodeSelector": {"disk": "a b"}},
    {"nodeSelector": {"Example.com/disk": "ssd"}},
    {"nodeSelector": {"p" * 253 + "/disk": "ssd"}},
    {"nodeSelector": {"p" * 254 + "/disk": "ssd"}},
    {"nodeSelector": {"k" * 63: ""}},
    {"nodeSelector": {"k" * 64: ""}},
    {"tolerations": [{"operator": "Exists", "value": "x"}]},
    {"tolerations": [{"operator": "Exists", "value": ""}]},
    {"tolerations": [{"operator": "Exists"}]},
    {"tolerations": [{"key": "", "operator": "Equal"}]},
    {"tolerations": [{"operator": "Equal", "value": "x"}]},
    {"tolerations": [{"key": "dedicated", "value": "mail"}]},
    {"tolerations": [{"key": "dedicated", "value": "a b"}]},
    {"tolerations": [{"key": "bad key", "operator": "Exists"}]},
    {"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute"}]},
    {"tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 30}]},
    {"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 30}]},
    {"tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 30}]},
    {"tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": -1}]},
    {"tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 2**63}]},
    {"tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": "30"}]},
    {"metadata": {"labels": {"team": "mail", "example.com/tier": "bulk"}}},
    {"metadata": {"labels": {"bad key!!": "v"}}},
    {"metadata": {"labels": {"team": "-x"}}},
    {"metadata": {"labels": {"job-name": "x"}}},
    {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "x"}}},
    {"metadata": {"labels": {"Example.com/tier": "bulk"}}},
    {"metadata": {"annotations": {"Example.com/Note": "free text\n"}}},
    {"metadata": {"annotations": {"bad key!!": "x"}}},
    {"metadata": {"annotations": {"\u212aey": "x"}}},
    {"metadata": {"annotations": {"a/b/c": "x"}}},
    {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "x"}}},
    {"metadata": {"annotations": {"scheduler.alpha.kubernetes.io/tolerations": "[]"}}},
    {"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/w": "x"}}},
    {"metadata": {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}},
    {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "bad key!!"}]},
    {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname"}]},
    {"topologySpreadConstraints": [{"maxSkew": 2**31, "topologyKey": "zone"}]},
    {
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
            {"maxSkew": 1, "topologyKey": "zone"},
        ]
    },
    {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}] * 2},
    {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "minDomains": 2}]},
    {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "minDomains": 2,
                "whenUnsatisfiable": "ScheduleAnyway",
            }
        ]
    },
    {
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "matchLabelKeys": ["pod-template-hash"]}
        ]
    },
    {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "matchLabelKeys": ["a b"]}]},
]


def test_pod_template_edges_agree(api_create: DryRun, children_accepted: Children) -> None:
    """Each rule of spec.podTemplate on both sides (POD_TEMPLATE_EDGES): the CRD and the model
    agree, and every accepted one renders a Deployment and a Job the API server accepts."""
    seen: Counter[bool] = Counter()
    for value in POD_TEMPLATE_EDGES:
        body = {**BASE, "podTemplate": value}
        created = api_create(body)
        accepted = not isinstance(created, str)
        seen[accepted] += 1
        handed = body if isinstance(created, str) else created
        assert accepted == operator_accepts(handed), (value, created)
        if accepted:
            rendered = children_accepted(models.SendGroupSpec.model_validate(handed), "grammar")
            assert not rendered, (value, rendered)
    assert seen[True] >= 15 and seen[False] >= 25, seen
