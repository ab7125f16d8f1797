"""Pacing per provider (issue 14): rate precision, Redis round trips, CPU and reaction to a rule,
beside a per-group-only limiter, in the same run.

Run: ``.venv/bin/python -m bench.providers [--rounds 3] [--window 30] [--out bench/results]``
(about 5 minutes with the defaults; a benchmark, not a test: nothing here asserts).

Setup, the same for both modes: one real ``redis-server`` on loopback, one real SMTP server
(aiosmtpd, ``tests.support.smtp_sink``) in this process, three groups of two campaigns
(``spring-a``, ``spring-b``, ``news-c``), each drained by three real ``sendgroup-worker work``
processes (``--lanes`` 4 each), every queue filled beyond what a run sends. Both modes'
processes (18) are started once at the beginning and wait on empty queues while the other
mode runs; a run fills its mode's queues and empties them at its end.

* ``provider`` mode: every group resolved to one provider of ``--per-minute`` (default 1200)
  recipients/min; the shares the operator would write (``provider_plan.shares``: max-min fair by
  weight, weights 1, 1, 2) are written to the provider's ``shares`` hash; each mail takes one
  hierarchical permit (``provider_permit.lua``). After the precision window, a pushback rule
  (ScaleRate 25 %, 4 s, then +100 % a second) is fired by the same call a worker makes on a
  matching reply, and the arrivals at the SMTP server show how fast every group slows down.
* ``group-only`` mode: no provider; each group's own ``rate.perMinute`` set to the share the
  provider mode gives it (300, 300, 600), the per-group GCRA the project had before issue 14.

Measured in a window of ``--window`` seconds after a warm-up (past the initial burst):

* rate precision: recipients arriving at the SMTP server per minute (RCPT times), in total and
  per group, against the target; the error in percent;
* Redis round trips per mail: ``total_reads_processed`` of ``INFO stats`` (one read event per
  request or pipeline the server took in), with commands and script calls (``EVALSHA``) per
  mail from ``INFO commandstats``;
* CPU per mail: user+system time of the nine worker processes (``/proc/<pid>/stat``) and of
  Redis (``INFO cpu``) over the window, divided by the mails that arrived in it;
* reaction to a rule (provider mode): the smallest ``r`` such that from ``fire + r`` on, the
  arrivals conform to the scaled rate's GCRA envelope (``n(t) <= burst + rate x (t - fire -
  r)`` for every later arrival t until the rule ends); the rate while the rule holds and after
  its recovery.

Rounds interleave the modes (provider, group-only, provider, ...) so load drift on a shared
machine hits both alike; the report gives the median and the range over rounds. Writes
``bench/results/providers-<UTC stamp>.md`` (and ``.json``) with the settings used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sendgroup_operator import provider_plan  # noqa: E402
from sendgroup_operator.models import Priority  # noqa: E402
from sendgroup_worker.provider import ProviderConfig, ProviderKeys, ProviderPacer  # noqa: E402
from sendgroup_worker.queue.keys import QueueKeys  # noqa: E402
from sendgroup_worker.ratelimit import RatePolicy  # noqa: E402
from tests.support.redis_server import RedisServer, server_version  # noqa: E402
from tests.support.smtp_sink import SmtpSink  # noqa: E402
from tests.support.workers import WorkerProcess, mail_payload, sync_queue, worker_env  # noqa: E402

PROVIDER_ID = "csp/bench"
#: group -> (campaign, weight)
GROUPS: dict[str, tuple[str, int]] = {
    "spring-a": ("spring", 1),
    "spring-b": ("spring", 1),
    "news-c": ("news", 2),
}
RULE_SCALE = 25
RULE_DURATION = 4.0
RULE_REPLY = "421 4.7.28 Our system has detected an unusual rate of unsolicited mail"
RULE = {
    "name": "unusual-rate",
    "codes": [421],
    "pattern": "(?i)unusual rate",
    "count": 1,
    "action": "scale",
    "value": RULE_SCALE,
    "duration": RULE_DURATION,
    "step_percent": 100,
    "every": 1.0,
}
CLK_TCK = os.sysconf("SC_CLK_TCK")
MODES = ("provider", "group-only")


def log(line: str) -> None:
    print(f"[providers] {line}", file=sys.stderr, flush=True)


@dataclass
class RunResult:
    """One mode in one round. Rates in recipients/min; CPU in microseconds per mail."""

    mode: str
    round: int
    window: float
    target_total: float
    total_per_minute: float
    per_group: dict[str, float]
    targets: dict[str, float]
    mails: int
    reads_per_mail: float
    commands_per_mail: float
    evalsha_per_mail: float
    worker_cpu_us_per_mail: float
    redis_cpu_us_per_mail: float
    reaction_s: float | None = None
    during_per_minute: float | None = None
    after_per_minute: float | None = None
    commands: dict[str, float] = field(default_factory=dict)

    @property
    def total_error_pct(self) -> float:
        return 100.0 * (self.total_per_minute - self.target_total) / self.target_total

    def group_error_pct(self, group: str) -> float:
        return 100.0 * (self.per_group[group] - self.targets[group]) / self.targets[group]


def shares(per_minute: int) -> dict[str, float]:
    """The allocation the operator writes for the three groups (all sending, normal priority)."""
    demands = [
        provider_plan.GroupDemand(key=g, priority=Priority.NORMAL, weight=w)
        for g, (_, w) in GROUPS.items()
    ]
    return provider_plan.shares(per_minute, demands)


def proc_cpu(pids: Iterable[int]) -> float:
    """User+system CPU seconds of ``pids`` (``/proc/<pid>/stat`` fields 14 and 15)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def redis_counters(client: redis.Redis) -> dict[str, float]:
    """``reads``, ``commands``, ``cpu`` seconds and ``cmd:<name>`` calls from INFO."""
    stats = client.info("stats")
    cpu = client.info("cpu")
    out: dict[str, float] = {
        "reads": float(stats["total_reads_processed"]),
        "commands": float(stats["total_commands_processed"]),
        "cpu": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
    }
    for name, value in client.info("commandstats").items():
        out["cmd:" + name.removeprefix("cmdstat_")] = float(value["calls"])
    return out


def arrivals(sink: SmtpSink, start: float, end: float, group: str = "") -> list[float]:
    suffix = f"@{group}.example" if group else ""
    with sink.lock:
        log_ = list(sink.rcpt_log)
    return sorted(t for t, rcpt in log_ if start <= t < end and rcpt.endswith(suffix))


def reaction(
    times: Sequence[float], fire: float, rate_per_s: float, burst: int, end: float
) -> float:
    """Smallest r (50 ms grid, up to 3 s) such that arrivals from ``fire + r`` to ``end``
    conform to the GCRA envelope ``burst + rate x elapsed``."""
    r = 0.0
    while r <= 3.0:
        start = fire + r
        later = [t for t in times if start <= t < end]
        if all(i + 1 <= burst + rate_per_s * (t - start) for i, t in enumerate(later)):
            return r
        r += 0.05
    return float("nan")


def queue_name(mode: str, group: str) -> str:
    return f"mail-{mode}-{group}"


def fill(url: str, mode: str, per_group: int) -> None:
    for g in GROUPS:
        q = sync_queue(url, queue_name(mode, g))
        for start in range(0, per_group, 500):
            q.push_many(
                mail_payload(f"u{i}@{g}.example") for i in range(start, min(per_group, start + 500))
            )


def empty(client: redis.Redis, mode: str) -> None:
    """Drop what is left in the mode's queues (jobs in flight finish)."""
    for g in GROUPS:
        keys = QueueKeys(queue_name(mode, g))
        client.delete(keys.ready, keys.notify, keys.delayed)


def start_workers(
    args: argparse.Namespace, sink: SmtpSink, client: redis.Redis
) -> dict[str, list[WorkerProcess]]:
    """Both modes' worker processes, started once (process start-up on a loaded machine takes
    tens of seconds and is not what is measured); a mode's workers wait on empty queues
    (one blocking BLPOP per process every ``WORKER_BLOCK_FOR`` = 30 s) while the other runs."""
    targets = shares(args.per_minute)
    client.hset(ProviderKeys(PROVIDER_ID).shares, mapping=provider_plan.share_fields(targets))
    out: dict[str, list[WorkerProcess]] = {}
    for mode in MODES:
        out[mode] = []
        for g in GROUPS:
            extra: dict[str, Any] = {
                "WORKER_CONCURRENCY": str(args.lanes),
                "WORKER_BLOCK_FOR": "30",
                "LOG_LEVEL": "WARNING",
            }
            if mode == "provider":
                cfg = {"id": PROVIDER_ID, "group": g, "perMinute": args.per_minute, "rules": [RULE]}
                extra["SENDGROUP_PROVIDER"] = json.dumps(cfg)
            else:
                extra["RATE_PER_MINUTE"] = str(round(targets[g]))
            for i in range(args.workers):
                env = worker_env(URL, queue_name(mode, g), sink.port, **extra)
                out[mode].append(WorkerProcess(env, name=f"bench-{mode}-{g}-{i}"))
    # every process up: one mail per queue through each mode
    began = time.monotonic()
    for mode in MODES:
        fill(URL, mode, 1)
    while not all(len(arrivals(sink, 0, time.time() + 1, g)) >= 2 for g in GROUPS):
        if time.monotonic() - began > 180:
            raise RuntimeError("the workers did not deliver within 180 s")
        time.sleep(0.2)
    log(f"{sum(len(v) for v in out.values())} workers up in {time.monotonic() - began:.1f}s")
    return out


async def fire_rule() -> None:
    """What a worker does on a matching reply (``ProviderPacer.record_reply``)."""
    client: redis.asyncio.Redis[bytes] = redis.asyncio.Redis.from_url(URL)
    cfg = ProviderConfig.model_validate({"id": PROVIDER_ID, "group": "spring-a", "rules": [RULE]})
    pacer = ProviderPacer(client, cfg, RatePolicy(per_minute=None), 10)
    fired = await pacer.record_reply(RULE_REPLY)
    assert fired is not None, "the rule did not fire"
    await client.connection_pool.disconnect()


URL = ""


def run_mode(
    mode: str,
    round_: int,
    args: argparse.Namespace,
    sink: SmtpSink,
    client: redis.Redis,
    workers: Sequence[WorkerProcess],
) -> RunResult:
    keys = ProviderKeys(PROVIDER_ID)
    client.delete(keys.rules, keys.matches(str(RULE["name"])), keys.fired)
    sink.reset()
    targets = shares(args.per_minute)
    need = int(args.per_minute / 60 * (args.window + args.warmup + 20)) + 100
    began = time.monotonic()
    fill(URL, mode, need)
    try:
        while not all(arrivals(sink, 0, time.time() + 1, g) for g in GROUPS):
            if time.monotonic() - began > 30:
                raise RuntimeError("no mail from every group within 30 s")
            time.sleep(0.05)
        time.sleep(args.warmup)
        pids = [w.pid for w in workers]
        c0, cpu0, t0 = redis_counters(client), proc_cpu(pids), time.time()
        time.sleep(args.window)
        c1, cpu1, t1 = redis_counters(client), proc_cpu(pids), time.time()
        mails = len(arrivals(sink, t0, t1))
        per_group = {g: len(arrivals(sink, t0, t1, g)) * 60 / (t1 - t0) for g in GROUPS}
        delta = {k: c1.get(k, 0.0) - c0.get(k, 0.0) for k in c1}
        result = RunResult(
            mode=mode,
            round=round_,
            window=t1 - t0,
            target_total=float(args.per_minute),
            total_per_minute=mails * 60 / (t1 - t0),
            per_group=per_group,
            targets=targets,
            mails=mails,
            reads_per_mail=delta["reads"] / max(1, mails),
            commands_per_mail=delta["commands"] / max(1, mails),
            evalsha_per_mail=delta.get("cmd:evalsha", 0.0) / max(1, mails),
            worker_cpu_us_per_mail=(cpu1 - cpu0) * 1e6 / max(1, mails),
            redis_cpu_us_per_mail=delta["cpu"] * 1e6 / max(1, mails),
            commands={
                k.removeprefix("cmd:"): round(v / max(1, mails), 3)
                for k, v in sorted(delta.items())
                if k.startswith("cmd:") and v > 0
            },
        )
        if mode == "provider":
            asyncio.run(fire_rule())
            fire = time.time()
            time.sleep(RULE_DURATION + 1.0 + 4.0)  # the rule, its recovery, 4 s after
            scaled = args.per_minute * RULE_SCALE / 100 / 60
            burst = max(1, -(-int(args.per_minute * RULE_SCALE / 100) // 60))
            times = arrivals(sink, fire, fire + RULE_DURATION)
            result.reaction_s = reaction(times, fire, scaled, burst, fire + RULE_DURATION)
            during = arrivals(sink, fire + 1.0, fire + RULE_DURATION)
            result.during_per_minute = len(during) * 60 / (RULE_DURATION - 1.0)
            after = arrivals(sink, fire + RULE_DURATION + 1.5, fire + RULE_DURATION + 5.0)
            result.after_per_minute = len(after) * 60 / 3.5
        return result
    finally:
        empty(client, mode)
        time.sleep(2.0)  # jobs in flight finish before the other mode's window


nan = float("nan")


def _med(values: Sequence[float]) -> str:
    vals = [v for v in values if v == v]  # drop NaN
    if not vals:
        return "-"
    return f"{statistics.median(vals):.2f} ({min(vals):.2f} .. {max(vals):.2f})"


def report(results: Sequence[RunResult], args: argparse.Namespace, meta: Mapping[str, str]) -> str:
    modes = MODES
    by = {m: [r for r in results if r.mode == m] for m in modes}
    lines = [
        "# Pacing per provider: precision, round trips, CPU, reaction (issue 14)",
        "",
        f"Run {meta['stamp']} on {meta['machine']}; {meta['redis']}; load average at start "
        f"{meta['load']}. Produced by `.venv/bin/python -m bench.providers` "
        f"(settings below); a benchmark, nothing asserted. Median (min .. max) over "
        f"{args.rounds} interleaved rounds per mode.",
        "",
        "## Settings",
        "",
        f"- provider budget {args.per_minute} recipients/min (burst default ceil(rate/60)); "
        f"3 groups x {args.workers} worker processes x {args.lanes} lanes; weights "
        + ", ".join(f"{g} {w}" for g, (_, w) in GROUPS.items())
        + " -> shares "
        + ", ".join(f"{g} {v:g}/min" for g, v in shares(args.per_minute).items()),
        "- group-only mode: each group's own rate.perMinute = that share, no provider",
        f"- warm-up {args.warmup:g} s after every group delivered, then a {args.window:g} s "
        "window; one mail = one recipient; SMTP server aiosmtpd on loopback (no delay)",
        f"- rule: ScaleRate {RULE_SCALE} % for {RULE_DURATION:g} s, recovery +100 %/s, fired "
        f'with the reply "{RULE_REPLY}"',
        "",
        "## Rate precision (recipients per minute, measured at the SMTP server)",
        "",
        "| mode | target total | measured total | error % | "
        + " | ".join(f"{g} (target {v:g})" for g, v in shares(args.per_minute).items())
        + " |",
        "|---|---|---|---|" + "---|" * len(GROUPS),
    ]
    for m in modes:
        rs = by[m]
        if not rs:
            continue
        lines.append(
            f"| {m} | {args.per_minute} | {_med([r.total_per_minute for r in rs])} | "
            f"{_med([r.total_error_pct for r in rs])} | "
            + " | ".join(
                f"{_med([r.per_group[g] for r in rs])}; "
                f"err % {_med([r.group_error_pct(g) for r in rs])}"
                for g in GROUPS
            )
            + " |"
        )
    lines += [
        "",
        "## Cost per mail",
        "",
        "| mode | Redis round trips / mail | commands / mail | EVALSHA / mail "
        "| worker CPU µs / mail | Redis CPU µs / mail |",
        "|---|---|---|---|---|---|",
    ]
    for m in modes:
        rs = by[m]
        if not rs:
            continue
        lines.append(
            f"| {m} | {_med([r.reads_per_mail for r in rs])} | "
            f"{_med([r.commands_per_mail for r in rs])} | {_med([r.evalsha_per_mail for r in rs])} "
            f"| {_med([r.worker_cpu_us_per_mail for r in rs])} | "
            f"{_med([r.redis_cpu_us_per_mail for r in rs])} |"
        )
    if by["provider"] and by["group-only"]:
        extra = [
            p.reads_per_mail - g.reads_per_mail
            for p, g in zip(by["provider"], by["group-only"], strict=False)
        ]
        lines += [
            "",
            f"Extra Redis round trips per mail the provider limit costs over the per-group "
            f"limiter (paired by round): {_med(extra)}. Both take one permit per mail in one "
            "script call (the group-only mode its own GCRA, the provider mode the hierarchical "
            "one); the provider mode's give-back on an empty reserve is not reached here (the "
            "queues never run dry).",
            "",
            "Most script calls are refused permits, in both modes: a lane that gets no permit "
            "sleeps the wait the limiter names (plus up to 25 % jitter, at most 0.5 s) and asks "
            f"again, so {args.workers * args.lanes} lanes per group sharing a few mails per "
            "second poll many times per mail; fewer lanes (`--lanes`) bring it down. The "
            "provider mode's extra commands (HGETALL rules, HGET share, lease ZADD/ZREM) run "
            "inside the one script call: Redis CPU, not round trips.",
        ]
    lines += ["", "Commands per mail by name (first round of each mode):", ""]
    for m in modes:
        if by[m]:
            cmds = ", ".join(f"{k} {v:g}" for k, v in by[m][0].commands.items())
            lines.append(f"- {m}: {cmds}")
    rs = by["provider"]
    if rs:
        target = args.per_minute * RULE_SCALE / 100
        lines += [
            "",
            "## Reaction to a rule (provider mode)",
            "",
            "| reaction s (arrivals conform to the scaled rate from) | rate while the rule holds "
            f"(target {target:g}/min, fire+1 s .. end) | rate after recovery (target "
            f"{args.per_minute}/min) |",
            "|---|---|---|",
            f"| {_med([nan if r.reaction_s is None else r.reaction_s for r in rs])} | "
            f"{_med([r.during_per_minute or 0.0 for r in rs])} | "
            f"{_med([r.after_per_minute or 0.0 for r in rs])} |",
            "",
            "The per-group-only limiter has no shared rule: a reply slows nothing; only the "
            "group that got it can suspend itself after `backpressure.suspendAfter` failures "
            "in a row, and the other groups to the same provider keep their pace.",
        ]
    lines += ["", "## Every run", "", "```json"]
    lines += [json.dumps([asdict(r) for r in results], indent=1)]
    lines += ["```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    global URL
    parser = argparse.ArgumentParser(
        prog="python -m bench.providers", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode (interleaved)")
    parser.add_argument("--window", type=float, default=25.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before the window")
    parser.add_argument("--per-minute", type=int, default=1200, help="provider budget")
    parser.add_argument("--workers", type=int, default=3, help="worker processes per group")
    parser.add_argument("--lanes", type=int, default=4, help="WORKER_CONCURRENCY per process")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument(
        "--from-json", type=Path, help="write the Markdown report again from a run's .json"
    )
    args = parser.parse_args(argv)
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text())
        for k, v in saved["settings"].items():
            if k not in ("out", "from_json"):
                setattr(args, k, v)
        runs = [RunResult(**r) for r in saved["runs"]]
        text = report(runs, args, saved["meta"]) + f"\nWall time {saved.get('wall', '?')} s.\n"
        args.from_json.with_suffix(".md").write_text(text)
        print(text)
        return 0
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    started = time.monotonic()
    server = RedisServer().start()
    URL = server.url
    sink = SmtpSink(keep_data=False).start()
    client = server.client()
    meta = {
        "stamp": stamp,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.release()}",
        "redis": server_version(server.binary),
        "load": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    results: list[RunResult] = []
    workers: dict[str, list[WorkerProcess]] = {}
    try:
        workers = start_workers(args, sink, client)
        for round_ in range(1, args.rounds + 1):
            for mode in MODES if round_ % 2 else MODES[::-1]:
                r = run_mode(mode, round_, args, sink, client, workers[mode])
                log(
                    f"round {round_} {mode}: {r.total_per_minute:.1f}/min "
                    f"({r.total_error_pct:+.2f} %), groups "
                    + ", ".join(f"{g} {v:.0f}" for g, v in r.per_group.items())
                    + f"; {r.reads_per_mail:.2f} trips/mail, {r.worker_cpu_us_per_mail:.0f} µs"
                    + (
                        f"; reaction {r.reaction_s:.2f}s, during {r.during_per_minute:.0f}/min, "
                        f"after {r.after_per_minute:.0f}/min"
                        if r.reaction_s is not None
                        else ""
                    )
                )
                results.append(r)
    finally:
        for procs in workers.values():
            for w in procs:
                w.proc.terminate()
        for procs in workers.values():
            for w in procs:
                w.stop()
        client.close()
        sink.stop()
        server.cleanup()
    args.out.mkdir(parents=True, exist_ok=True)
    wall = round(time.monotonic() - started)
    text = report(results, args, meta)
    text += f"\nWall time {wall} s.\n"
    path = args.out / f"providers-{stamp}.md"
    path.write_text(text)
    saved = {
        "settings": vars(args) | {"out": str(args.out), "from_json": None},
        "meta": meta,
        "wall": wall,
        "runs": [asdict(r) for r in results],
    }
    (args.out / f"providers-{stamp}.json").write_text(json.dumps(saved, indent=1))
    print(text)
    log(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
