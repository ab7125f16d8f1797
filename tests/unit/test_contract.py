"""The operator-worker contract (``sendgroup_contract``): durations, the queue-name rule,
``pushedAt``, the measurement reply and the worker settings table, checked against the CRD the
API server enforces and against both sides that read them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sendgroup_contract import durations, keys, measure, timestamps
from sendgroup_contract import worker_settings as ws
from sendgroup_contract.tls import SmtpTls, parse_tls
from sendgroup_operator import builders, models
from sendgroup_operator.settings import Settings
from sendgroup_worker.config import WorkerConfig

ROOT = Path(__file__).resolve().parents[2]
CRD = yaml.safe_load((ROOT / "crds" / "sendgroups.yaml").read_text())


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _as_re2(pattern: str) -> re.Pattern[str]:
    """The API server's reading of an anchored pattern (RE2, not multi-line): ``$`` is the end
    of the text, where Python's ``$`` also matches before a trailing newline."""
    assert pattern.endswith("$"), pattern
    return re.compile(pattern[:-1] + r"\Z")


def _crd_duration_patterns() -> set[str]:
    found = set()
    for node in _walk(CRD):
        rule = node.get("rule")
        if isinstance(rule, str) and rule.startswith("self.matches('^(["):
            found.add(rule.removeprefix("self.matches('").removesuffix("')"))
    return found


CRD_DURATION = _as_re2(_crd_duration_patterns().pop())
CRD_QUEUE = _as_re2(
    CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "queue"
    ]["pattern"]
)


def test_the_crd_carries_the_contracts_patterns() -> None:
    assert _crd_duration_patterns() == {durations.DURATION_PATTERN}
    assert CRD_QUEUE.pattern == keys.QUEUE_NAME_PATTERN[:-1] + r"\Z"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("1h30m", 5400), ("2d", 172800), ("0s", 0), ("1m1m", 120),
     ("5m1h", 3900), ("007s", 7)],
)  # fmt: skip
def test_durations_parse(text: str, seconds: int) -> None:
    assert durations.parse_seconds(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "30", "5 m", "1.5h", "m", "-5s", "10w", "1s\n", " 1s", "1S", "\u0661s", "1h 30m"]
)
def test_durations_reject(text: str) -> None:
    with pytest.raises(durations.InvalidDuration):
        durations.parse_seconds(text)


def _crd_cap_rules() -> list[str]:
    return [
        node["rule"]
        for node in _walk(CRD)
        if isinstance(node.get("rule"), str) and "findAll" in node["rule"]
    ]


def _cap_cel(text: str) -> bool:
    """:data:`durations.CAP_CEL` step by step as CEL reads it (``matches`` searches, RE2;
    ``findAll`` returns every match; ``int`` of a digit string with leading zeros)."""
    if re.search(r"[1-9][0-9]{10}", text):
        return False
    unit = {"d": 86400, "h": 3600, "m": 60}
    parts = re.findall(r"[0-9]+[smhd]", text)
    return sum(int(p[:-1]) * unit.get(p[-1], 1) for p in parts) <= 3153600000


def test_the_crd_caps_every_duration_at_36500_days() -> None:
    """Every duration field has the cap rule beside its pattern (3 in the SendGroup CRD)."""
    assert durations.MAX_SECONDS == 36500 * 86400 == 3153600000
    assert str(durations.MAX_SECONDS) in durations.CAP_CEL
    assert _crd_cap_rules() == [durations.CAP_CEL] * 3
    assert len(_crd_cap_rules()) == len(
        [n for n in _walk(CRD) if str(n.get("rule", "")).startswith("self.matches('^([")]
    )


@pytest.mark.parametrize(
    ("text", "accepted"),
    [("36500d", True), ("36501d", False), ("876000h", True), ("876000h1s", False),
     ("3153600000s", True), ("3153600001s", False), ("36499d23h59m60s", True),
     ("3650d", True), ("9999d", True), ("10000000d", False), ("00000000001s", True),
     ("10000000000s", False), ("9" * 31 + "d", False), ("9999999999s", False)],
)  # fmt: skip
def test_durations_are_capped_at_36500_days(text: str, accepted: bool) -> None:
    """``10000000d`` passed the CRD and then made the operator's pass fail every second
    (year out of range): the parser and the CRD's rule refuse anything above 36500 days."""
    assert _cap_cel(text) == accepted
    if accepted:
        assert durations.parse_seconds(text) <= durations.MAX_SECONDS
    else:
        with pytest.raises(durations.InvalidDuration, match="at most 36500d"):
            durations.parse_seconds(text)


@given(st.text(alphabet="0123456789smhdw .\n-", max_size=12))
def test_duration_parser_accepts_exactly_what_the_crd_accepts(text: str) -> None:
    try:
        durations.parse_seconds(text)
        accepted = True
    except durations.InvalidDuration:
        accepted = False
    assert accepted == bool(CRD_DURATION.search(text) and _cap_cel(text)), repr(text)


@given(st.from_regex(durations.DURATION_PATTERN, fullmatch=True))
def test_every_crd_duration_parses_to_the_sum_of_its_parts(text: str) -> None:
    parts = re.findall(r"([0-9]+)([smhd])", text)
    expected = sum(int(n) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[u] for n, u in parts)
    if expected > durations.MAX_SECONDS:
        assert not _cap_cel(text)
        with pytest.raises(durations.InvalidDuration):
            durations.parse_seconds(text)
    else:
        assert _cap_cel(text)
        assert durations.parse_seconds(text) == expected


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("90", 90.0), ("1.5", 1.5), (" 10m ", 600.0), ("1h30m", 5400.0), (2, 2.0)],
)
def test_worker_env_durations_take_seconds_or_the_crd_language(
    value: str | int, seconds: float
) -> None:
    assert durations.parse_env_seconds(value) == seconds


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "10 minutes", "1.5h", "", True])
def test_worker_env_durations_reject(value: Any) -> None:
    with pytest.raises(ValueError):
        durations.parse_env_seconds(value)


@given(st.text(alphabet="ab0.-_{}:\n/", max_size=8))
def test_queue_names_the_worker_accepts_pass_the_crd(name: str) -> None:
    try:
        keys.validate_queue_name(name)
    except keys.InvalidQueueName:
        return
    assert CRD_QUEUE.search(name), repr(name)


@pytest.mark.parametrize("name", ["mail-1\n", "mail:1", "..x", "{a}{b}", "{}x", ""])
def test_queue_name_rule_rejects(name: str) -> None:
    with pytest.raises(keys.InvalidQueueName):
        keys.validate_queue_name(name)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1796002801.014", 1796002801.014), (1796000000, 1796000000.0), ("", None),
     (None, None), (True, None), ("nan", None), ("soon", None), (b"12.5", 12.5),
     (float("inf"), None)],
)  # fmt: skip
def test_pushed_at_string_or_number(value: object, expected: float | None) -> None:
    assert timestamps.parse_pushed_at(value) == expected


def test_created_at_round_trips_and_times_parse() -> None:
    at = timestamps.parse_created_at("2026-11-30T08:00:00.000123Z")
    assert timestamps.format_created_at(at) == "2026-11-30T08:00:00.000123Z"
    assert timestamps.parse_time("1796000000") == timestamps.parse_created_at(
        "2026-11-30T00:53:20+00:00"
    )
    assert timestamps.parse_time("2026-11-30T00:00:00").tzinfo is not None
    with pytest.raises(ValueError):
        timestamps.parse_time("nan")


def _reply(**over: Any) -> list[Any]:
    base: dict[str, Any] = {
        "ready": 3, "delayed": 1, "reserved": 2, "failed": 4, "pushed": b"1000.5",
        "delivered": 10, "failed_total": 4, "released": 2, "sec": b"1010", "usec": b"500000",
        "staging": 2, "purge": 1, "busy": 0, "until": b"1012500", "paused": 1,
    }  # fmt: skip
    base.update(over)
    return list(base.values())


def test_measure_reply_gives_what_the_planner_and_stats_read() -> None:
    m = measure.parse_reply(_reply())
    assert (m.ready, m.delayed, m.reserved, m.failed, m.total) == (3, 1, 2, 4, 6)
    assert (m.delivered, m.failed_total, m.released) == (10, 4, 2)
    assert m.measured_at == 1010.5 and m.oldest_job_age_seconds == 10.0
    assert (m.staging, m.purge_requested, m.busy, m.paused) == (2, True, False, True)
    assert m.suspended_seconds == 2.0  # until 1012.5 s on Redis' clock, now 1010.5 s
    assert measure.parse_reply(_reply(), now=1001).oldest_job_age_seconds == 0.5
    empty = measure.parse_reply(_reply(pushed=b"", until=b"", busy=1, paused=0))
    assert empty.oldest_job_age_seconds is None and empty.suspended_seconds == 0 and empty.busy
    assert not empty.paused
    with pytest.raises(ValueError, match="15"):
        measure.parse_reply(_reply()[:10])


def test_measure_script_keys_are_the_queues_own() -> None:
    k = keys.QueueKeys("{mail-x}", "laravel_database_")
    got = measure.script_keys(k)
    assert got[:5] == (k.ready, k.delayed, k.reserved, k.failed, k.stats)
    assert set(got) <= set(k.all_keys) | {k.lock}
    assert got[9] == k.paused
    assert got[10:] == k.staging_keys and all("{mail-x}" in name for name in got)


def test_every_setting_is_a_worker_config_field_and_every_env_the_builder_writes_is_a_setting() -> (
    None
):
    assert set(ws.BY_FIELD) <= set(WorkerConfig.model_fields)
    assert len({s.env for s in ws.WORKER_SETTINGS}) == len(ws.WORKER_SETTINGS)
    doc = yaml.safe_load((ROOT / "examples" / "sendgroup-full.yaml").read_text())
    spec = models.SendGroupSpec.model_validate(doc["spec"])
    ref = builders.GroupRef(
        namespace="mail", name="g", uid="1", campaign="c", host="h", created_at="2026-11-30"
    )
    written = {e["name"] for e in builders.worker_env(ref, spec, Settings.from_env({}))}
    assert written <= {s.env for s in ws.WORKER_SETTINGS}


def test_tls_modes() -> None:
    assert [m.value for m in SmtpTls] == ["none", "starttls", "tls"]
    assert models.SmtpTls is SmtpTls
    assert parse_tls("starttls") is SmtpTls.STARTTLS
    with pytest.raises(ValueError, match="none, starttls, tls"):
        parse_tls("ssl")


def test_the_worker_reads_every_row_and_names_the_variable_on_error() -> None:
    cfg = WorkerConfig.from_env({"SENDGROUP_QUEUE": "mail-x", "WORKER_MAX_TIME": "1h30m"})
    assert (cfg.group, cfg.max_time) == ("", 5400)
    env = {"SENDGROUP_QUEUE": "q", "SENDGROUP_NAME": "g", "SMTP_TLS": "tls", "WORKER_TIMEOUT": "2m"}
    cfg = WorkerConfig.from_env({**env, "WORKER_RETRY_AFTER": "3m"})
    assert (cfg.group, cfg.smtp_tls) == ("g", SmtpTls.TLS)
    assert (cfg.timeout, cfg.retry_after) == (120, 180)
    with pytest.raises(ValueError, match="WORKER_TIMEOUT: not a duration"):
        WorkerConfig.from_env({"SENDGROUP_QUEUE": "q", "WORKER_TIMEOUT": "soon"})
    with pytest.raises(ValueError, match="SMTP_TLS"):
        WorkerConfig.from_env({"SENDGROUP_QUEUE": "q", "SMTP_TLS": "ssl"})
