"""A ``runtime: laravel`` group on an operator that does not allow worker images: the pods
would run the operator's own image, which has no ``php`` (exit 127, CrashLoopBackOff, the group
``Scaling`` forever and holding its share of the global cap). Instead the group gets no worker
Deployment and says why; pause, dump and cancel go on as for any group."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from sendgroup_operator import builders, models
from sendgroup_operator import plan as p
from sendgroup_operator.conditions import find
from sendgroup_operator.models import Phase
from sendgroup_operator.settings import Settings

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CLOSED = Settings(default_image="sendgroup-worker:1", allow_image_override=False)
OPEN = dataclasses.replace(CLOSED, allow_image_override=True)
GROUP = p.Group("shop", "invoices", "uid-1", 1, T0)
LARAVEL = {"runtime": "laravel", "image": "shop/app:1"}


def spec(**kw: Any) -> models.SendGroupSpec:
    base: dict[str, Any] = {"campaign": "c", "host": "gmail.com", "workers": 2, "worker": LARAVEL}
    base.update(kw)
    return models.SendGroupSpec.model_validate(base)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run(
    s: models.SendGroupSpec,
    settings: Settings = CLOSED,
    status: models.SendGroupStatus | None = None,
    obs: p.Observed | None = None,
    total: int = 10,
    now: datetime = T0,
    paused: bool = False,
) -> p.Plan:
    """One pass, with ``allowed`` as the adapter computes it (the global cap's grant is never
    more than :func:`p.desired_workers`)."""
    return p.plan(
        GROUP,
        s,
        status or models.SendGroupStatus(),
        obs or p.Observed(jobs_listed=True),
        p.QueueMeasure(ready=total, paused=paused),
        p.desired_workers(s, settings, GROUP.namespace),
        settings,
        now,
    )


def ready(plan: p.Plan) -> tuple[str, str, str]:
    c = find(plan.status.conditions, "Ready")
    assert c is not None
    return c.status, c.reason, c.message


def test_no_deployment_and_ready_false_naming_the_setting() -> None:
    s = spec()
    first = run(s)
    assert not any(isinstance(a, p.EnsureDeployment) for a in first.actions), first.actions
    status, reason, message = ready(first)
    assert (status, reason) == ("False", "RuntimeNotAllowed")
    assert "allowedImages" in message and "spec.worker.runtime laravel" in message
    assert first.status.phase is Phase.PENDING and first.write_status
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "RuntimeNotAllowed")]
    # nothing asked of the global cap, and the status says no worker will run
    assert first.demand == 0 and p.desired_workers(s, CLOSED, GROUP.namespace) == 0
    assert first.status.workers.summary == "0/0"
    # the next pass: the same, no second event, nothing written
    again = run(s, status=first.status, now=at(10))
    assert again.actions == [] and again.events == [] and not again.write_status
    assert ready(again)[1] == "RuntimeNotAllowed"


def test_the_same_group_runs_where_images_are_allowed_and_python_groups_run_anyway() -> None:
    s = spec()
    assert run(s, OPEN).actions == [p.EnsureDeployment(2)]
    assert p.runtime_refusal(s, OPEN, GROUP.namespace) is None
    python = spec(worker={"image": "shop/worker:1"})
    assert run(python).actions == [p.EnsureDeployment(2)]  # the operator's image, as always


def test_a_deployment_left_from_before_the_setting_changed_is_deleted() -> None:
    s = spec()
    current = builders.template_hash(GROUP.ref(s), s, OPEN)
    obs = p.Observed(p.DeploymentObs(2, 2, current), pods=2, jobs_listed=True)
    result = run(s, obs=obs)
    assert result.actions == [p.DeleteDeployment()]
    assert ready(result)[1] == "RuntimeNotAllowed" and result.demand == 0


def test_pause_dump_and_cancel_go_on() -> None:
    paused = spec(paused=True, reaper={"dumpAfter": "30s"})
    first = run(paused, total=40)
    assert first.status.phase is Phase.PAUSED
    dumping = run(paused, status=first.status, total=40, now=at(60), paused=True)
    assert dumping.actions == [p.CreateJob("dump", 1)]
    job = builders.job(GROUP.ref(paused), paused, CLOSED, "dump", 1)
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "sendgroup-worker:1"
    cancelled = run(spec(state="Cancelled"), total=40)
    assert p.PurgeQueue() in cancelled.actions and cancelled.status.phase is Phase.CANCELLING


def test_allowed_images_per_namespace_or_prefix() -> None:
    """Issue 18: the shop's app image allowed by an operator setting per namespace or image
    prefix (``allowedImages``), not only the whole-cluster ``allowImageOverride``."""
    from sendgroup_operator.settings import image_allowed

    settings = dataclasses.replace(
        CLOSED, allowed_images=("shop=registry.example/shop/", "registry.example/shared/")
    )
    s = spec(worker={"runtime": "laravel", "image": "registry.example/shop/app:1"})
    assert p.runtime_refusal(s, settings, "shop") is None
    assert run(s, settings).actions == [p.EnsureDeployment(2)]
    ref = GROUP.ref(s)
    container = builders.deployment(ref, s, settings, 2)["spec"]["template"]["spec"]
    assert container["containers"][0]["image"] == "registry.example/shop/app:1"
    # another namespace may not run shop's image; a prefix without namespace is for all
    assert p.runtime_refusal(s, settings, "team-b") is not None
    assert image_allowed(settings, "registry.example/shared/app:2", "team-b")
    # a prefix ends at a reference boundary (review: a bare string prefix let
    # ghcr.io/shop allow ghcr.io/shopevil, a namespace anyone can register)
    assert not image_allowed(settings, "registry.example/shopping/app:1", "shop")
    bare = dataclasses.replace(
        CLOSED, allowed_images=("ghcr.io/shop", "registry.example:5000", "=evil.example/")
    )
    for image, allowed in (
        ("ghcr.io/shop/app:1", True),
        ("ghcr.io/shop:1", True),
        ("ghcr.io/shop@sha256:" + "a" * 64, True),
        ("ghcr.io/shopevil/x:1", False),
        ("registry.example:5000/app:1", True),
        ("registry.example:50001/app:1", False),
        ("evil.example/app:1", False),
    ):
        assert image_allowed(bare, image, "shop") is allowed, image
    # a Python group naming an image not allowed gets the operator's image, as before
    python = spec(worker={"image": "registry.example/other/worker:1"})
    dep = builders.deployment(ref, python, settings, 2)["spec"]["template"]["spec"]
    assert dep["containers"][0]["image"] == "sendgroup-worker:1"
    assert Settings.from_env(
        {"SENDGROUP_ALLOWED_IMAGES": " shop=registry.example/shop/ , registry.example/x/ "}
    ).allowed_images == ("shop=registry.example/shop/", "registry.example/x/")
