"""The operator's worker Deployment env is read by the worker's own config loader.

Two teams spell the same variables (``builders.worker_env`` and ``WorkerConfig.from_env``);
this test renders the env for the documented full example and parses it with the worker's
code, so a renamed or re-encoded variable fails here instead of in a pod.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sendgroup_operator import builders, models
from sendgroup_operator.settings import Settings
from sendgroup_worker.config import WorkerConfig

ROOT = Path(__file__).resolve().parents[2]


def _env_as_worker_sees_it(env: list[dict[str, Any]], secrets: dict[str, str]) -> dict[str, str]:
    """Resolve ``value`` and ``valueFrom.secretKeyRef`` entries the way the kubelet does."""
    out: dict[str, str] = {}
    for entry in env:
        if "value" in entry:
            out[entry["name"]] = str(entry["value"])
        else:
            ref = entry["valueFrom"]["secretKeyRef"]
            out[entry["name"]] = secrets[f"{ref['name']}/{ref['key']}"]
    return out


def test_full_example_env_parses_into_the_worker_config() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "sendgroup-full.yaml").read_text())
    spec = models.SendGroupSpec.model_validate(doc["spec"])
    ref = builders.GroupRef(
        namespace="mail",
        name=doc["metadata"]["name"],
        uid="0000",
        campaign=spec.campaign,
        host=spec.host,
        created_at="2026-11-30T00:00:00Z",
    )
    env = builders.worker_env(ref, spec, Settings.from_env({}))
    secrets = {
        "redis-credentials/url": "redis://:hunter2@redis.mail.svc:6379/0",
        "smtp-credentials/username": "relay-user",
        "smtp-credentials/password": "relay-pass",
    }
    cfg = WorkerConfig.from_env(_env_as_worker_sees_it(env, secrets))

    assert cfg.queue == "{mail-spring-sale-outlook}"
    assert (cfg.group, cfg.namespace) == (doc["metadata"]["name"], "mail")  # metric label
    assert cfg.redis_url == secrets["redis-credentials/url"]
    assert (cfg.smtp_host, cfg.smtp_port, cfg.smtp_tls) == ("relay.mail.svc", 587, "starttls")
    assert (cfg.smtp_username, cfg.smtp_password) == ("relay-user", "relay-pass")
    assert (cfg.tries, cfg.backoff, cfg.timeout, cfg.retry_after) == (5, [30, 120, 600], 30, 120)
    assert (cfg.rate_per_minute, cfg.rate_burst) == (300, 10)
    assert (cfg.warmup_start_per_hour, cfg.warmup_growth_per_day) == (200, 2.0)
    assert cfg.warmup_since is not None and cfg.warmup_since.year == 2026
    assert (cfg.backpressure_suspend_after, cfg.backpressure_suspend_for) == (20, 900)
    assert cfg.backpressure_patterns == spec.backpressure.patterns
    # No password in any plain value: credentials only travel as Secret references.
    plain = " ".join(str(e.get("value", "")) for e in env)
    assert "hunter2" not in plain and "relay-pass" not in plain


def test_defaults_env_parses_and_keeps_the_timeout_ladder() -> None:
    spec = models.SendGroupSpec.model_validate({"campaign": "c", "host": "gmail.com"})
    ref = builders.GroupRef(namespace="mail", name="g", uid="1", campaign="c", host="gmail.com")
    env = builders.worker_env(ref, spec, Settings.from_env({}))
    cfg = WorkerConfig.from_env(_env_as_worker_sees_it(env, {}))
    assert cfg.queue == "mail-g"
    assert cfg.timeout < cfg.retry_after
    assert (cfg.tries, cfg.backoff) == (3, [10, 60, 300])
