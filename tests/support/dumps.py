"""Helpers for the dump/restore tests: build queues with raw Redis commands, take exact
snapshots of a queue's logical contents, run the console script as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from sendgroup_worker.queue.keys import QueueKeys

#: The console script of this checkout's venv.
SGW = str(Path(sys.executable).parent / "sendgroup-worker")

# Laravel's push (RedisQueue::pushRaw + LuaScripts::push): RPUSH the payload, RPUSH one token.
_PUSH = """
for i = 1, #ARGV do
  redis.call('RPUSH', KEYS[1], ARGV[i])
  redis.call('RPUSH', KEYS[2], 1)
end
return #ARGV
"""


def payload(i: int, tag: str = "orig", size: int = 1500) -> bytes:
    """A Laravel-style job envelope of about ``size`` bytes, unique per (tag, i)."""
    body: dict[str, Any] = {
        "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tag}/{i}")),
        "displayName": "sendgroups.SendMail",
        "job": "sendgroups.SendMail",
        "maxTries": 3,
        "attempts": 0,
        "pushedAt": "1764460000.1234",
        "data": {"to": f"user{i}@example.com", "subject": f"{tag} {i}", "text": ""},
    }
    raw = json.dumps(body, separators=(",", ":"))
    pad = max(0, size - len(raw))
    body["data"]["text"] = (f"{tag}-{i}-" * (pad // 8 + 1))[:pad]
    return json.dumps(body, separators=(",", ":")).encode()


def push(client: Any, keys: QueueKeys, payloads: list[bytes], batch: int = 500) -> None:
    """Push ``payloads`` the way Laravel does (payload + notify token, atomically)."""
    script = client.register_script(_PUSH)
    for i in range(0, len(payloads), batch):
        script(keys=[keys.ready, keys.notify], args=payloads[i : i + batch])


def fill_queue(
    client: Any,
    keys: QueueKeys,
    *,
    ready: int = 0,
    delayed: int = 0,
    reserved: int = 0,
    failed: int = 0,
    tag: str = "orig",
    size: int = 1500,
) -> None:
    """Populate a queue: ``ready`` pushed jobs, ``delayed``/``reserved`` members with distinct
    fractional scores, ``failed`` entries (index + record hash)."""
    push(client, keys, [payload(i, f"{tag}-r", size) for i in range(ready)])
    for key, n, kind, base in (
        (keys.delayed, delayed, "d", 1_900_000_000.0),
        (keys.reserved, reserved, "v", 1_700_000_000.0),
    ):
        for start in range(0, n, 1000):
            mapping = {
                payload(i, f"{tag}-{kind}", size): base + i + 0.123456789
                for i in range(start, min(n, start + 1000))
            }
            client.zadd(key, mapping)
    for i in range(failed):
        u = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tag}-f/{i}"))
        client.zadd(keys.failed, {u: 1_760_000_000.5 + i})
        rec = {"payload": payload(i, f"{tag}-f", 300).decode(), "exception": "SMTP 550"}
        client.hset(keys.failed_jobs, u, json.dumps(rec))


@dataclass
class QueueState:
    """A queue's logical contents, exactly: ready items in order, sorted sets as
    member -> score, failed records, notify length."""

    ready: list[bytes] = field(default_factory=list)
    delayed: dict[bytes, float] = field(default_factory=dict)
    reserved: dict[bytes, float] = field(default_factory=dict)
    failed: dict[bytes, float] = field(default_factory=dict)
    failed_jobs: dict[bytes, bytes] = field(default_factory=dict)
    notify: int = 0

    @property
    def jobs(self) -> int:
        return len(self.ready) + len(self.delayed) + len(self.reserved)


def snapshot(client: Any, keys: QueueKeys) -> QueueState:
    """Read a queue's contents (for tests; reads whole keys)."""
    return QueueState(
        ready=list(client.lrange(keys.ready, 0, -1)),
        delayed=dict(client.zrange(keys.delayed, 0, -1, withscores=True)),
        reserved=dict(client.zrange(keys.reserved, 0, -1, withscores=True)),
        failed=dict(client.zrange(keys.failed, 0, -1, withscores=True)),
        failed_jobs=dict(client.hgetall(keys.failed_jobs)),
        notify=int(client.llen(keys.notify)),
    )


def assert_merged(final: QueueState, original: QueueState, *pushed: list[bytes]) -> None:
    """``final`` holds exactly the original jobs plus every pushed ready job, each once:
    ready as a multiset (original items keep their relative order), sorted sets with the same
    scores, failed entries kept, one notify token per ready job."""
    extra = [p for batch in pushed for p in batch]
    want = Counter(original.ready) + Counter(extra)
    got = Counter(final.ready)
    missing, doubled = want - got, got - want
    assert not missing and not doubled, (
        f"ready differs: {sum(missing.values())} missing, {sum(doubled.values())} extra"
    )
    orig_set = set(original.ready)
    assert [p for p in final.ready if p in orig_set] == original.ready, "original order lost"
    assert final.delayed == original.delayed
    assert final.reserved == original.reserved
    assert final.failed == original.failed
    assert final.failed_jobs == original.failed_jobs
    assert final.notify == len(final.ready), "notify tokens != ready jobs"


def _cli_env(redis_url: str | None, env: dict[str, str] | None) -> dict[str, str]:
    """This process's environment without SENDGROUP_* and Redis settings, then ``redis_url``
    as REDIS_URL and ``env``."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SENDGROUP_")}
    full_env.pop("REDIS_URL", None)
    full_env.pop("REDIS_URL_FILE", None)
    if redis_url:
        full_env["REDIS_URL"] = redis_url
    full_env.update(env or {})
    return full_env


def run_cli(
    *args: str,
    redis_url: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``sendgroup-worker <args>`` as a real process; returns the finished process."""
    return subprocess.run(
        [SGW, *args], capture_output=True, text=True, env=_cli_env(redis_url, env), timeout=timeout
    )


def start_cli(
    *args: str, redis_url: str | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start ``sendgroup-worker <args>`` as a real process (stdout and stderr piped, text)."""
    return subprocess.Popen(
        [SGW, *args],
        env=_cli_env(redis_url, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start_stopped_at(point: str, *args: str, redis_url: str) -> subprocess.Popen[str]:
    """Start ``sendgroup-worker <args>`` with ``SENDGROUP_DUMPS_STOP_AT=<point>`` and return it
    once it has stopped itself there (:func:`wait_stopped`); SIGCONT lets it go on."""
    proc = start_cli(*args, redis_url=redis_url, env={"SENDGROUP_DUMPS_STOP_AT": point})
    try:
        wait_stopped(proc)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc


def summary(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON summary line of a successful command (asserts success and one line)."""
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr.strip()}"
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    data: dict[str, Any] = json.loads(lines[0])
    return data


def live_keys(client: redis.Redis[bytes]) -> set[bytes]:
    """Every key of a (test) database."""
    return set(client.scan_iter(count=1000))


def wait_stopped(proc: subprocess.Popen[str], deadline_s: float = 60) -> None:
    """Wait until ``proc`` stopped itself (``SENDGROUP_DUMPS_STOP_AT``: state ``T``)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"process ended early: {proc.communicate()}"
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.02)
    raise AssertionError("process did not reach its stop point")
