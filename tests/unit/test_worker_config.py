from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from sendgroup_worker.config import ConfigError, WorkerConfig, parse_backoff, parse_duration
from sendgroup_worker.jobopts import JobOptions


def test_defaults_follow_the_api_contract() -> None:
    c = WorkerConfig.from_env({"SENDGROUP_QUEUE": "mail-a"})
    assert (c.tries, c.backoff, c.timeout, c.retry_after) == (3, [10, 60, 300], 60, 90)
    assert c.rate_per_minute is None and c.burst is None
    assert c.backpressure_suspend_after == 20 and c.backpressure_suspend_for == 600
    assert c.smtp_pipelining is True


def test_every_variable_is_read(tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text("redis://:pw@10.0.0.1:6380/2\n")
    c = WorkerConfig.from_env(
        {
            "SENDGROUP_QUEUE": "{mail-x}",
            "SENDGROUP_KEY_PREFIX": "laravel_database_",
            "REDIS_URL": "redis://ignored",
            "REDIS_URL_FILE": str(secret),
            "SMTP_HOST": "relay",
            "SMTP_PORT": "587",
            "SMTP_TLS": "starttls",
            "SMTP_USERNAME": "u",
            "SMTP_PASSWORD": "p",
            "SMTP_PIPELINING": "off",
            "WORKER_TRIES": "5",
            "WORKER_BACKOFF": "5, 1m,1h",
            "WORKER_TIMEOUT": "30",
            "WORKER_RETRY_AFTER": "2m",
            "WORKER_CONCURRENCY": "8",
            "WORKER_MAX_JOBS": "100",
            "WORKER_MAX_TIME": "1h",
            "RATE_PER_MINUTE": "600",
            "WARMUP_START_PER_HOUR": "100",
            "WARMUP_GROWTH_PER_DAY": "1.5",
            "WARMUP_SINCE": "2026-11-01T00:00:00Z",
            "BACKPRESSURE_SUSPEND_AFTER": "7",
            "BACKPRESSURE_SUSPEND_FOR": "15m",
            "BACKPRESSURE_PATTERNS": '["4\\\\.7\\\\.28", "try again later"]',
            "METRICS_PORT": "0",
        }
    )
    assert c.redis_url == "redis://:pw@10.0.0.1:6380/2"
    assert (c.smtp_port, c.smtp_tls) == (587, "starttls")
    assert (c.smtp_username, c.smtp_password) == ("u", "p")
    assert c.smtp_pipelining is False
    assert c.backoff == [5, 60, 3600] and c.retry_after == 120 and c.max_time == 3600
    assert c.burst == 10  # ceil(600 / 60)
    assert c.warmup_since == datetime(2026, 11, 1, tzinfo=UTC)
    assert c.backpressure_suspend_for == 900
    assert [p.pattern for p in c.patterns()] == ["4\\.7\\.28", "try again later"]
    assert "smtp_password" not in repr(c)


def test_timeout_must_be_below_retry_after() -> None:
    with pytest.raises(ConfigError, match=r"WORKER_TIMEOUT .* smaller than WORKER_RETRY_AFTER"):
        WorkerConfig.from_env(
            {"SENDGROUP_QUEUE": "q", "WORKER_TIMEOUT": "90", "WORKER_RETRY_AFTER": "90"}
        )


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({}, "SENDGROUP_QUEUE"),
        ({"SENDGROUP_QUEUE": "q", "SMTP_TLS": "ssl"}, "SMTP_TLS"),
        ({"SENDGROUP_QUEUE": "q", "WORKER_BACKOFF": "soon"}, "WORKER_BACKOFF"),
        ({"SENDGROUP_QUEUE": "q", "WORKER_TRIES": "0"}, "WORKER_TRIES"),
        ({"SENDGROUP_QUEUE": "q", "SMTP_PIPELINING": "maybe"}, "SMTP_PIPELINING"),
        (
            {"SENDGROUP_QUEUE": "q", "BACKPRESSURE_PATTERNS": "(unclosed"},
            "is not an RE2 regular expression",
        ),
        ({"SENDGROUP_QUEUE": "q", "BACKPRESSURE_PATTERNS": "[unclosed"}, "not a JSON list"),
        ({"SENDGROUP_QUEUE": "q", "REDIS_URL": "http://redis:6379"}, "REDIS_URL: .*redis://"),
        ({"SENDGROUP_QUEUE": "q", "REDIS_URL_FILE": "/nonexistent/url"}, "REDIS_URL_FILE: cannot"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        WorkerConfig.from_env(env)


def test_smtp_timeout_stays_below_the_job_timeout() -> None:
    c = WorkerConfig.from_env({"SENDGROUP_QUEUE": "q", "WORKER_TIMEOUT": "10"})
    assert c.smtp_command_timeout == 9.0


def test_durations_and_backoff_parse_like_laravel() -> None:
    assert parse_duration("90") == 90 and parse_duration("1.5") == 1.5
    assert parse_duration("10m") == 600 and parse_duration("1h30m") == 5400
    assert parse_backoff("5,10") == [5, 10]
    assert parse_backoff([1, 2]) == [1, 2] and parse_backoff(7) == [7]
    with pytest.raises(ValueError):
        parse_duration("-1")


def _opts(**payload: object) -> JobOptions:
    return JobOptions.of(payload, WorkerConfig.from_env({"SENDGROUP_QUEUE": "q"}))


def test_payload_options_win_over_defaults() -> None:
    o = _opts(maxTries=5, backoff="5,10", timeout=20, failOnTimeout=True)
    assert (o.max_tries, o.backoff, o.timeout, o.fail_on_timeout) == (5, [5, 10], 20, True)
    d = _opts(maxTries=None, backoff=None, timeout=None)
    assert (d.max_tries, d.backoff, d.timeout) == (3, [10, 60, 300], 60)


def test_backoff_per_attempt_repeats_the_last_value() -> None:
    o = _opts(backoff="5,10")
    assert [o.backoff_for(n) for n in (1, 2, 3, 9)] == [5, 10, 10, 10]


def test_tries_and_retry_until_follow_laravels_worker() -> None:
    o = _opts(maxTries=3)
    assert not o.fails_after_temporary(2, 0) and o.fails_after_temporary(3, 0)
    assert not o.exceeded_before_run(3, 0) and o.exceeded_before_run(4, 0)
    unlimited = _opts(maxTries=0)
    assert not unlimited.fails_after_temporary(1000, 0)
    # retryUntil wins over maxTries: only time counts
    r = _opts(maxTries=1, retryUntil=1000)
    assert not r.fails_after_temporary(5, 999) and r.fails_after_temporary(1, 1000)
    assert not r.exceeded_before_run(5, 1000) and r.exceeded_before_run(1, 1001)
    e = _opts(maxTries=10, maxExceptions=2)
    assert not e.fails_after_temporary(1, 0) and e.fails_after_temporary(2, 0)


def test_a_bad_redis_url_is_refused_without_printing_its_password() -> None:
    with pytest.raises(ConfigError) as caught:
        WorkerConfig.from_env({"SENDGROUP_QUEUE": "q", "REDIS_URL": "redis//:hunter2@redis:6379"})
    assert "REDIS_URL" in str(caught.value) and "hunter2" not in str(caught.value)
    for url in ("redis://:pw@h:6379/0", "rediss://h:6380", "unix:///run/redis.sock"):
        assert WorkerConfig.from_env({"SENDGROUP_QUEUE": "q", "REDIS_URL": url}).redis_url == url


def test_one_prefix_variable_with_a_deprecated_alias(caplog: pytest.LogCaptureFixture) -> None:
    """``SENDGROUP_KEY_PREFIX`` names the prefix for the worker and every CLI command; the CLI's
    old ``QUEUE_PREFIX`` still works for the worker too (it used to be ignored there, so the
    worker silently watched unprefixed keys), with a deprecation warning; disagreeing values
    are refused, naming both variables."""
    base = {"SENDGROUP_QUEUE": "mail-a"}
    assert WorkerConfig.from_env(base).key_prefix == ""
    new = WorkerConfig.from_env({**base, "SENDGROUP_KEY_PREFIX": "laravel_database_"})
    assert new.key_prefix == "laravel_database_"
    assert "deprecated" not in caplog.text
    old = WorkerConfig.from_env({**base, "QUEUE_PREFIX": "laravel_database_"})
    assert old.key_prefix == "laravel_database_"
    assert "QUEUE_PREFIX is deprecated and will be removed: set SENDGROUP_KEY_PREFIX" in caplog.text
    same = {**base, "QUEUE_PREFIX": "app_", "SENDGROUP_KEY_PREFIX": "app_"}
    assert WorkerConfig.from_env(same).key_prefix == "app_"
    with pytest.raises(ConfigError) as err:
        WorkerConfig.from_env({**base, "QUEUE_PREFIX": "app_", "SENDGROUP_KEY_PREFIX": "other_"})
    assert str(err.value) == (
        "SENDGROUP_KEY_PREFIX='other_' and QUEUE_PREFIX='app_' disagree: set only "
        "SENDGROUP_KEY_PREFIX (QUEUE_PREFIX is a deprecated alias)"
    )


def test_backpressure_patterns_match_in_linear_time() -> None:
    """Issue 16: a tenant's catastrophic-backtracking pattern froze a worker for 15 s with
    Python's ``re``; RE2 matches it at once. Patterns RE2 cannot run are refused by name."""
    import time

    cfg = WorkerConfig.from_env(
        {"SENDGROUP_QUEUE": "q", "BACKPRESSURE_PATTERNS": '["(a+)+$", "(a|aa)+$", "DEFERRED"]'}
    )
    compiled = cfg.patterns()
    reply = "451 " + "a" * 50_000 + "!"
    started = time.monotonic()
    assert not any(p.search(reply) for p in compiled)
    assert time.monotonic() - started < 0.5
    assert compiled[2].search("421 4.7.0 deferred, try later")  # case-insensitive
    with pytest.raises(ConfigError, match="RE2"):
        WorkerConfig.from_env({"SENDGROUP_QUEUE": "q", "BACKPRESSURE_PATTERNS": "(a)\\1"})


def test_a_pattern_is_searched_in_one_reply_lines_length_only() -> None:
    """Review finding (issue 14): RE2 is linear in the reply, but a heavy pattern such as
    ``(\\w+\\s?){1,999}$`` costs ~0.3 ms per character, and a server controls its replies'
    length (8.5 s on 64 KB, in the event loop). Patterns see the first 512 characters (one
    SMTP reply line, RFC 5321 4.5.3.1.5), for the group's and the provider's patterns alike."""
    from sendgroup_worker.patterns import MAX_REPLY_SEARCHED, compile_pattern, search
    from sendgroup_worker.provider import ProviderConfig, ProviderPacer
    from sendgroup_worker.ratelimit import RatePolicy

    marker = compile_pattern("tail-marker")
    padded = "421 4.7.0 " + "x" * MAX_REPLY_SEARCHED + " tail-marker"
    assert not search(marker, padded)
    assert search(marker, "421 4.7.0 tail-marker, try later")
    cfg = WorkerConfig.from_env({"SENDGROUP_QUEUE": "q", "BACKPRESSURE_PATTERNS": "tail-marker"})
    assert not any(search(p, padded) for p in cfg.patterns())
    provider = ProviderConfig.model_validate(
        {
            "id": "csp/x",
            "group": "ns/a",
            "rules": [{"name": "r", "pattern": "tail-marker", "action": "suspend", "duration": 60}],
        }
    )
    pacer = ProviderPacer(None, provider, RatePolicy(per_minute=None), 30)  # type: ignore[arg-type]
    assert pacer.matching_rule(padded) is None
    assert pacer.matching_rule("421 tail-marker") is not None


def test_a_pattern_too_heavy_to_match_quickly_is_refused_everywhere() -> None:
    """Review finding (issue 14): linear time is not quick time: ``(\\w+\\s?){1,999}$``
    compiles to ~16,000 RE2 instructions and cost ~146 ms per 512-character reply. Patterns over
    MAX_PROGRAM_SIZE are refused by the group's backpressure settings (worker and operator
    model), the worker's provider rules and the operator's provider model; ordinary ones and
    the chart's default providers' pass."""
    import pydantic

    from sendgroup_operator import models, provider_models
    from sendgroup_worker.patterns import MAX_PROGRAM_SIZE, re2_problem
    from sendgroup_worker.provider import PushbackRuleConfig

    heavy = r"(?i)(\w+\s?){1,999}$"
    problem = re2_problem(heavy)
    assert problem is not None and f"more than {MAX_PROGRAM_SIZE}" in problem
    assert re2_problem("(?i)unusual rate") is None
    assert re2_problem("[a-z0-9._%+-]{1,64}@[a-z0-9.-]{1,255}") is None
    with pytest.raises(ConfigError, match="RE2 instructions"):
        WorkerConfig.from_env({"SENDGROUP_QUEUE": "q", "BACKPRESSURE_PATTERNS": heavy})
    with pytest.raises(pydantic.ValidationError, match="RE2 instructions"):
        PushbackRuleConfig(name="r", pattern=heavy, action="suspend", duration=60)
    with pytest.raises(pydantic.ValidationError, match="RE2 instructions"):
        provider_models.PushbackRule.model_validate(
            {
                "name": "r",
                "pattern": heavy,
                "trigger": {"immediate": True},
                "action": {"suspend": True},
                "duration": "10m",
            }
        )
    with pytest.raises(pydantic.ValidationError, match="RE2 instructions"):
        models.BackpressureSpec.model_validate({"patterns": [heavy]})
