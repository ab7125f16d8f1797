"""Children built from a SendGroup: names, labels, security, env, Jobs."""

from __future__ import annotations

from typing import Any

from sendgroup_operator import builders, models
from sendgroup_operator.settings import Settings

REF = builders.GroupRef("mail", "gmail-1", "uid-1", "spring-sale", "gmail.com")
SETTINGS = Settings(default_image="img:1", default_redis_url="redis://r:6379/0")


def _spec(**kw: Any) -> models.SendGroupSpec:
    return models.SendGroupSpec.model_validate(
        {"campaign": "spring-sale", "host": "gmail.com", **kw}
    )


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_names_short_and_stable() -> None:
    assert builders.deployment_name("gmail-1") == "sg-gmail-1"
    assert builders.job_name("gmail-1", "dump", 3) == "sg-gmail-1-dump-3"
    long = "x" * 100
    name = builders.deployment_name(long)
    assert len(name) == 63 and name == builders.deployment_name(long)
    other = builders.deployment_name("x" * 99 + "y")
    assert other != name and len(other) == 63
    job = builders.job_name(long, "restore", 12)
    assert len(job) == 63 and job.endswith("-restore-12")


def test_label_values_valid() -> None:
    assert builders.label_value("gmail.com") == "gmail.com"
    odd = builders.label_value("Spring Sale/2026!")
    assert len(odd) <= 63 and odd[0].isalnum() and odd[-1].isalnum() and " " not in odd
    assert len(builders.label_value("a" * 200)) == 63


def test_deployment_shape() -> None:
    spec = _spec(workers=4, worker={"timeout": 120, "retryAfter": 200}, rate={"perMinute": 90})
    dep = builders.deployment(REF, spec, SETTINGS, replicas=3)
    meta = dep["metadata"]
    assert meta["name"] == "sg-gmail-1" and meta["namespace"] == "mail"
    assert meta["labels"]["sendgroups.io/campaign"] == "spring-sale"
    assert meta["labels"]["sendgroups.io/host"] == "gmail.com"
    assert meta["labels"]["sendgroups.io/group"] == "gmail-1"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "sendgroup-operator"
    owner = meta["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("SendGroup", "uid-1", True)
    assert dep["spec"]["replicas"] == 3
    sel = dep["spec"]["selector"]["matchLabels"]
    assert all(dep["spec"]["template"]["metadata"]["labels"][k] == v for k, v in sel.items())
    pod = dep["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > 120
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctr = pod["containers"][0]
    assert ctr["image"] == "img:1"
    sc = ctr["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    env = _env(ctr)
    assert env["SENDGROUP_QUEUE"] == "mail-gmail-1"
    assert env["REDIS_URL"] == "redis://r:6379/0"
    assert (env["WORKER_TIMEOUT"], env["WORKER_RETRY_AFTER"]) == ("120", "200")
    assert env["WORKER_BACKOFF"] == "10,60,300"
    assert (env["RATE_PER_MINUTE"], env["RATE_BURST"]) == ("90", "2")
    assert env["BACKPRESSURE_SUSPEND_FOR"] == "600"


def test_secrets_are_referenced_never_inlined() -> None:
    spec = _spec(
        redis={"secretRef": {"name": "redis-cred", "key": "url"}},
        smtp={"host": "relay", "secretRef": {"name": "smtp-cred"}},
    )
    ctr = builders.deployment(REF, spec, SETTINGS, 1)["spec"]["template"]["spec"]["containers"][0]
    env = _env(ctr)
    assert env["REDIS_URL"] == {"secretKeyRef": {"name": "redis-cred", "key": "url"}}
    assert env["SMTP_PASSWORD"] == {"secretKeyRef": {"name": "smtp-cred", "key": "password"}}


def test_image_override_only_when_allowed() -> None:
    spec = _spec(worker={"image": "evil:1"})
    ctr = builders.deployment(REF, spec, SETTINGS, 1)["spec"]["template"]["spec"]["containers"][0]
    assert ctr["image"] == "img:1"
    allowed = Settings(default_image="img:1", allow_image_override=True)
    ctr = builders.deployment(REF, spec, allowed, 1)["spec"]["template"]["spec"]["containers"][0]
    assert ctr["image"] == "evil:1"


def test_dump_job() -> None:
    job = builders.job(REF, _spec(queue="{mail-x}"), SETTINGS, "dump", 2)
    assert job["metadata"]["name"] == "sg-gmail-1-dump-2"
    spec = job["spec"]
    assert spec["backoffLimit"] >= 1 and spec["activeDeadlineSeconds"] > 0
    assert spec["ttlSecondsAfterFinished"] > 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"]["claimName"] == SETTINGS.dumps_claim_name
    ctr = pod["containers"][0]
    assert ctr["command"] == [
        "sendgroup-worker",
        "dump",
        "--queue",
        "{mail-x}",
        "--dumps-dir",
        "/dumps/mail/gmail-1",
    ]
    # issue 16: only the group's own directory of the claim is mounted
    assert {
        "name": "dumps",
        "mountPath": "/dumps/mail/gmail-1",
        "subPath": "mail/gmail-1",
    } in ctr["volumeMounts"]
    # the directory is made first, as the Job's non-root user, by the operator's own image
    [init] = pod["initContainers"]
    assert init["command"][:2] == ["python3", "-c"] and init["command"][-1] == "/dumps/mail/gmail-1"
    assert init["volumeMounts"] == [{"name": "dumps", "mountPath": "/dumps"}]
    assert init["securityContext"] == ctr["securityContext"]
    assert "DUMP_SIGNING_KEY" not in {e["name"] for e in ctr["env"]}
    signed = Settings(default_image="img:1", dump_signing_secret="dump-key/key")
    env = {
        e["name"]: e
        for e in builders.job(REF, _spec(), signed, "restore", 1)["spec"]["template"]["spec"][
            "containers"
        ][0]["env"]
    }
    assert env["DUMP_SIGNING_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "dump-key", "key": "key"}
    }
    assert (
        builders.job(REF, _spec(), SETTINGS, "purge", 1)["spec"]["template"]["spec"]["containers"][
            0
        ]["command"][1]
        == "purge"
    )


def test_worker_probes_point_at_the_health_server_and_follow_the_spec() -> None:
    dep = builders.deployment(REF, _spec(), SETTINGS, replicas=1)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "health", "containerPort": 8080} in c["ports"]
    env = _env(c)
    assert (env["HEALTH_PORT"], env["WORKER_STALL_AFTER"]) == ("8080", "30")
    assert c["livenessProbe"] == {
        "httpGet": {"path": "/livez", "port": "health"},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": 3,
        "terminationGracePeriodSeconds": 10,
    }
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    tuned = _spec(
        worker={
            "probes": {"stallAfter": 5, "liveness": {"periodSeconds": 2, "failureThreshold": 2}}
        }
    )
    c = builders.deployment(REF, tuned, SETTINGS, 1)["spec"]["template"]["spec"]["containers"][0]
    assert _env(c)["WORKER_STALL_AFTER"] == "5"
    assert (c["livenessProbe"]["periodSeconds"], c["livenessProbe"]["failureThreshold"]) == (2, 2)
    assert c["readinessProbe"]["periodSeconds"] == 10
    off = _spec(worker={"probes": {"enabled": False}})
    c = builders.deployment(REF, off, SETTINGS, 1)["spec"]["template"]["spec"]["containers"][0]
    assert "livenessProbe" not in c and "readinessProbe" not in c
    # a probe setting changes the pod template, so the Deployment rolls
    assert builders.template_hash(REF, tuned, SETTINGS) != builders.template_hash(
        REF, _spec(), SETTINGS
    )


def test_laravel_runtime_gets_no_probes_of_our_worker() -> None:
    spec = _spec(worker={"runtime": "laravel"})
    c = builders.deployment(REF, spec, SETTINGS, 1)["spec"]["template"]["spec"]["containers"][0]
    assert "livenessProbe" not in c and "readinessProbe" not in c


def test_default_redis_from_a_secret_is_never_plain_env() -> None:
    """Issue 16: with ``defaultRedisSecretRef`` a group without spec.redis reads REDIS_URL
    from that Secret (worker and Jobs); a password-less ``redis.url`` stays plain."""
    with_secret = Settings(default_image="img:1", default_redis_secret="redis-default/url")
    ctr = builders.deployment(REF, _spec(), with_secret, 1)["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert _env(ctr)["REDIS_URL"] == {"secretKeyRef": {"name": "redis-default", "key": "url"}}
    plain = _spec(redis={"url": "redis://other:6379/1"})
    ctr = builders.deployment(REF, plain, with_secret, 1)["spec"]["template"]["spec"]["containers"][
        0
    ]
    assert _env(ctr)["REDIS_URL"] == "redis://other:6379/1"
    assert builders.redis_env(_spec(), with_secret)["valueFrom"]["secretKeyRef"]["name"] == (
        "redis-default"
    )


def test_integer_quantities_become_strings() -> None:
    """Issue 16: ``cpu: 1`` (an integer, valid in any manifest) reached the Kubernetes client
    as an int; the Deployment carries quantities as strings."""
    spec = _spec(worker={"resources": {"limits": {"cpu": 1, "memory": "256Mi"},
                                       "requests": {"cpu": 0}}})  # fmt: skip
    ctr = builders.deployment(REF, spec, SETTINGS, 1)["spec"]["template"]["spec"]["containers"][0]
    assert ctr["resources"] == {"limits": {"cpu": "1", "memory": "256Mi"}, "requests": {"cpu": "0"}}


def test_a_long_metadata_name_still_gives_a_valid_default_queue() -> None:
    from sendgroup_worker.queue.keys import validate_queue_name

    for name in ("a" * 195, "a" * 196, "b." * 126 + "c", "x" * 253):
        queue = _spec().queue_name(name)
        validate_queue_name(queue)
        assert queue.startswith("mail-") and len(queue) <= 200
    assert _spec().queue_name("a" * 253) != _spec().queue_name("a" * 252)
    assert _spec().queue_name("gmail") == "mail-gmail"  # short names unchanged


def test_disruption_budget_takes_what_a_pdb_takes() -> None:
    """minAvailable / maxUnavailable: a count 0..2^31-1 (int32, strict: not "5", not true) or a
    percentage 0%..100%; ``-5`` and ``'999%'`` passed before and the API server then refused the
    PodDisruptionBudget. Exactly one of the two (the CRD's CEL rule)."""
    for good in (0, 1, 2**31 - 1, "0%", "50%", "100%"):
        for field in ("minAvailable", "maxUnavailable"):
            budget = builders.pod_disruption_budget(REF, _spec(disruptionBudget={field: good}))
            assert budget is not None and budget["spec"][field] == good
    bad: list[dict[str, Any]] = [
        *({"minAvailable": v} for v in (-5, -1, 2**31, "999%", "101%", "-5", "5", "05%", True)),
        *({"maxUnavailable": v} for v in (-1, "999%", "50%\n", " 50%", 1.5, None)),
        {"minAvailable": 1, "maxUnavailable": 1},
        {},
    ]
    for budget_spec in bad:
        try:
            models.DisruptionBudgetSpec.model_validate(budget_spec)
        except ValueError:
            continue
        raise AssertionError(f"accepted {budget_spec!r}")
