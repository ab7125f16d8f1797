"""The producer CLI (push, stats, failed ...) against a real redis-server."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from sendgroup_worker.cli import main
from sendgroup_worker.queue import Queue, QueueKeys

pytestmark = pytest.mark.redis


def run(redis_url: str, *args: str, prefix: str = "app_") -> tuple[int, str, str]:
    env = {"REDIS_URL": redis_url, "SENDGROUP_QUEUE": "{mail-cli}", "SENDGROUP_KEY_PREFIX": prefix}
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def evalsha_calls(r: redis.Redis) -> int:
    """Successful script calls since CONFIG RESETSTAT (a NOSCRIPT miss is a failed call)."""
    total = 0
    for name in ("cmdstat_evalsha", "cmdstat_eval"):
        s = r.info("commandstats").get(name, {})
        total += int(s.get("calls", 0)) - int(s.get("failed_calls", 0))
    return total


def test_push_csv_in_batches_with_progress(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    path = tmp_path / "recipients.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["to", "name", "subject"])
        for i in range(1050):
            w.writerow([f"user{i}@example.test", f"User {i}", "" if i % 2 else "Personal"])
    redis_client.config_resetstat()
    template = tmp_path / "welcome.json"
    template.write_text(json.dumps({"text": "Welcome, $name!"}))

    code, out, err = run(
        redis_url, "push", str(path), "--subject", "Hello", "--template", str(template),
        "--from", "news@example.test", "--header", "X-Campaign: c1", "--progress",
    )  # fmt: skip

    assert code == 0, err
    assert "pushed 1050 jobs to queue {mail-cli} in 11 batches" in out
    assert "1050/1050" in err  # the progress bar
    keys = QueueKeys("{mail-cli}", prefix="app_")
    assert redis_client.llen(keys.ready) == redis_client.llen(keys.notify) == 1050
    assert evalsha_calls(redis_client) == 11  # one round trip per 100 jobs
    first, second = (json.loads(x) for x in redis_client.lrange(keys.ready, 0, 1))
    assert first["data"] == {
        "to": "user0@example.test", "from": "news@example.test", "subject": "Personal",
        "template": {"text": "Welcome, $name!"}, "vars": {"name": "User 0"},
        "headers": {"X-Campaign": "c1"},
    }  # fmt: skip
    assert second["data"]["subject"] == "Hello"
    assert first["uuid"] != second["uuid"] and first["attempts"] == 0


def test_push_jsonl_refuses_a_bad_file_before_pushing(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"to":"a@example.test","text":"hi"}\n{"to":"b@example.test"}\n')
    code, _, err = run(redis_url, "push", str(path), "--from", "n@example.test")
    assert code == 1
    assert "line 2" in err and "nothing was pushed" in err
    assert redis_client.dbsize() == 0
    path.write_text('{"to":"a@example.test","text":"hi"}\n{"to":"b@example","text":"hi"}\n')
    code, _, err = run(redis_url, "push", str(path), "--from", "n@example.test")
    assert code == 1
    assert "line 2" in err and "'b@example' is not a valid address" in err
    assert redis_client.dbsize() == 0
    path.write_text(
        '{"to":"a@example.test","text":"hi"}\n{"to":["b@example.test"],"html":"<p>x</p>"}\n'
    )
    code, out, err = run(redis_url, "push", str(path), "--batch-size", "1", "--no-progress",
                         "--from", "n@example.test")  # fmt: skip
    assert code == 0, err
    assert "pushed 2 jobs" in out and "in 2 batches" in out


def test_stats_and_failed_commands(redis_url: str, redis_client: redis.Redis) -> None:
    q = Queue(redis_client, QueueKeys("{mail-cli}", prefix="app_"), 90)
    from sendgroup_worker.producer import make_mail_payload

    q.push_many([make_mail_payload(f"u{i}@example.test", text="x") for i in range(4)])
    jobs = q.reserve(count=3)
    q.fail(jobs[0], "SmtpPermanentError", "550 5.1.1 user unknown")
    q.fail(jobs[1], "SmtpPermanentError", "550 mailbox full")
    q.done(jobs[2])

    code, out, _ = run(redis_url, "stats", "--json")
    assert code == 0
    stats = json.loads(out)
    assert {k: stats[k] for k in ("ready", "delayed", "reserved", "total", "failed")} == {
        "ready": 1, "delayed": 0, "reserved": 0, "total": 1, "failed": 2,
    }  # fmt: skip
    assert (stats["delivered"], stats["failedTotal"]) == (1, 2)
    assert 0 <= stats["oldestJobAgeSeconds"] < 60

    code, out, _ = run(redis_url, "failed", "list", "--json")
    listed = [json.loads(line) for line in out.splitlines()]
    assert [j["uuid"] for j in listed] == [jobs[1].uuid, jobs[0].uuid] or {
        j["uuid"] for j in listed
    } == {jobs[0].uuid, jobs[1].uuid}
    assert {j["to"] for j in listed} == {"u0@example.test", "u1@example.test"}

    code, out, _ = run(redis_url, "failed", "show", jobs[0].uuid)
    assert code == 0 and "550 5.1.1 user unknown" in out and "u0@example.test" in out

    code, out, _ = run(redis_url, "failed", "retry", jobs[0].uuid)
    assert code == 0 and "retried 1 jobs" in out
    assert q.measure().ready == 2
    code, out, err = run(redis_url, "failed", "forget", jobs[1].uuid, "no-such-uuid")
    assert code == 1 and "forgot 1 failed jobs" in out and "1 of the uuids" in err
    assert q.failed_list().total == 0
    code, _, err = run(redis_url, "failed", "retry")
    assert code == 2 and "--all" in err


def test_unreachable_redis_is_a_clear_error_without_the_password() -> None:
    code, _, err = run("redis://user:s3cret@127.0.0.1:1/0", "stats")
    assert code == 1
    assert "cannot reach Redis at 127.0.0.1:1:" in err
    assert "s3cret" not in err


def test_push_of_a_missing_file_is_a_usage_error_not_a_traceback(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    result = CliRunner().invoke(
        main, ["push", str(tmp_path / "nosuch.csv"), "-q", "mail-x"], env={"REDIS_URL": redis_url}
    )
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "nosuch.csv' does not exist" in result.stderr
    assert redis_client.dbsize() == 0


def test_queue_has_the_same_short_option_as_the_dump_commands(
    tmp_path: Path, redis_url: str
) -> None:
    path = tmp_path / "r.csv"
    path.write_text("to,text\na@example.test,hi\n")
    env = {"REDIS_URL": redis_url}
    pushed = CliRunner().invoke(
        main, ["push", str(path), "-q", "mail-x", "--from", "n@example.test"], env=env
    )
    assert pushed.exit_code == 0, pushed.stderr
    stats = CliRunner().invoke(main, ["stats", "-q", "mail-x", "--json"], env=env)
    assert stats.exit_code == 0, stats.stderr
    assert json.loads(stats.stdout)["ready"] == 1


def test_prefix_alias_and_conflict(redis_url: str, redis_client: redis.Redis) -> None:
    """The CLI reads the worker's variable, SENDGROUP_KEY_PREFIX; the old QUEUE_PREFIX is a
    deprecated alias; two different values are refused before anything is written."""
    job = '{"to": "a@example.test", "from": "n@example.test", "text": "hi"}\n'
    base = {"REDIS_URL": redis_url, "SENDGROUP_QUEUE": "mail-alias"}
    runner = CliRunner()
    push = ["push", "--format", "jsonl", "-"]
    old = runner.invoke(main, push, input=job, env={**base, "QUEUE_PREFIX": "old_"})
    assert old.exit_code == 0, old.output
    assert redis_client.llen("old_queues:mail-alias") == 1
    assert "warning: QUEUE_PREFIX is deprecated" in old.stderr
    both = {**base, "QUEUE_PREFIX": "old_", "SENDGROUP_KEY_PREFIX": "new_"}
    bad = runner.invoke(main, push, input=job, env=both)
    assert bad.exit_code == 2
    assert "SENDGROUP_KEY_PREFIX='new_' and QUEUE_PREFIX='old_' disagree" in bad.stderr
    assert redis_client.keys("new_*") == [] and redis_client.llen("old_queues:mail-alias") == 1
