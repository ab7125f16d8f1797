"""Argument building and reply parsing of the queue protocol (pure, no Redis)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sendgroup_contract import measure
from sendgroup_contract.timestamps import MAX_UNIX_SECONDS, parse_pushed_at
from sendgroup_worker.queue import protocol as p
from sendgroup_worker.queue.keys import QueueKeys

KEYS = QueueKeys("{mail-x}", prefix="laravel_database_")


def test_every_script_is_lib_plus_body_and_uses_only_its_keys() -> None:
    for name in p.SCRIPT_NAMES:
        src = p.script_source(name)
        if name == "measure":  # the contract's script, the very text the operator runs
            assert src == measure.SCRIPT
            continue
        assert src.startswith("-- Shared helpers")
        assert f"===== {name}.lua =====" in src
    with pytest.raises(KeyError):
        p.script_source("nope")


def test_reserve_call_layout() -> None:
    settings = p.QueueSettings(retry_after=90, migrate_limit=50)
    ack = [p.Ack(b"R1", "u1"), p.Ack(b"R2", "u2", delivered=False)]
    call = p.reserve_call(KEYS, settings, count=3, ack=ack, now=1796000000.25)
    assert call.script == "reserve"
    assert call.keys[:4] == KEYS.laravel_keys
    assert call.keys[4:] == (KEYS.failed, KEYS.failed_jobs, KEYS.stats, KEYS.sent, KEYS.paused)
    assert call.args[:9] == (
        "1796000000.25", "90", "3", "50", "100000", "604800", "604800", "2", "0"
    )  # fmt: skip
    assert call.args[9:] == ("1", b"R1", "u1", "0", "0", b"R2", "u2", "0")
    with pytest.raises(ValueError):
        p.reserve_call(KEYS, settings, count=-1)


def test_an_ack_s_stream_entry_rides_in_the_same_call() -> None:
    settings = p.QueueSettings(retry_after=90)
    entry = p.StreamEntry("sendgroups:ns:outcomes", 1000, ("uuid", "u1", "outcome", "delivered"))
    ack = [p.Ack(b"R1", "u1", entry=entry), p.Ack(b"R2", "u2")]
    call = p.reserve_call(KEYS, settings, count=1, ack=ack, now=1796000000)
    assert call.keys[-1] == "sendgroups:ns:outcomes" and len(call.keys) == 10
    assert call.args[8] == "1000"  # the stream's MAXLEN ~ cap
    assert call.args[9:] == (
        "1", b"R1", "u1", "4", "uuid", "u1", "outcome", "delivered", "1", b"R2", "u2", "0"
    )  # fmt: skip
    done = p.done_detailed_call(KEYS, settings, ack[0], now=1796000000)
    assert done.keys == (KEYS.reserved, KEYS.sent, KEYS.stats, "sendgroups:ns:outcomes")
    assert done.args[5:] == ("1000", "uuid", "u1", "outcome", "delivered")
    assert done.parse(3) == p.DoneResult(lost=True, entry_refused=True)
    assert p.done_call(KEYS, settings, ack[0]).parse(2) is False  # refused, not lost
    other = p.StreamEntry("sendgroups:other:outcomes", 1000, ("uuid", "u2"))
    with pytest.raises(ValueError, match="one key"):
        p.reserve_call(KEYS, settings, ack=[ack[0], p.Ack(b"R2", "u2", entry=other)])
    for bad in ((), ("uuid",)):
        with pytest.raises(ValueError, match="pairs"):
            p.StreamEntry("s", 10, bad)
    with pytest.raises(ValueError, match="maxlen"):
        p.StreamEntry("s", 0, ("a", "b"))


def test_parse_reserve_reply() -> None:
    raw = b'{"uuid":"u","attempts":0}'
    res = b'{"uuid":"u","attempts":1}'
    r = p.parse_reserve_reply([[2], [3, 1, 0, 1], raw, res, b"x", b"\xff"])
    assert r.lost_acks == [1] and (r.migrated, r.invalid) == (3, 1) and not r.paused
    assert r.refused_entries == 1
    assert r.jobs[0] == p.Reserved(raw, res, {"uuid": "u", "attempts": 1}, "u", 1)
    assert r.jobs[1].payload is None  # Python cannot read it: the worker fails the job
    paused = p.parse_reserve_reply([[], [0, 0, 1, 0]])
    assert paused.paused and paused.jobs == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1796002801.014", 1796002801.014), (1796000000, 1796000000.0), ("nan", None),
     (1e20, None), ("9e99", None), (float("inf"), None), (-1.0, None), ([1], None),
     ({"a": 1}, None), (MAX_UNIX_SECONDS, MAX_UNIX_SECONDS)],
)  # fmt: skip
def test_pushed_at_out_of_any_clock_range_reads_as_none(
    value: object, expected: float | None
) -> None:
    """Issue 16: a pushedAt of 1e20 made every pass of the group raise (year out of range)."""
    assert parse_pushed_at(value) == expected


@pytest.mark.parametrize(
    ("data", "reason"),
    [(b'{"uuid":"u","attempts":0}', ""),
     (b'{"uuid":"u","attempts":"2"}', ""),
     (b'{"uuid":"u","attempts":-1}', '"attempts" is not a number >= 0'),
     (b'{"uuid":"u","attempts":"nan"}', '"attempts" is not a number >= 0'),
     (b'{"uuid":"u","attempts":1e999}', '"attempts" is not a number >= 0'),
     (b'{"uuid":"u","attempts":[1]}', '"attempts" is not a number >= 0'),
     (b'{"uuid":"u","d":' + b"[" * 64 + b"]" * 64 + b"}", "nests deeper than 64"),
     (b'{"uuid":"u","d":' + b"[" * 63 + b"]" * 63 + b"}", ""),
     (b'{"uuid":"u","d":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests deeper than 64"),
     (b"\xff", "not UTF-8"), (b"[1]", "not a JSON object"), (b"{", "not JSON")],
)  # fmt: skip
def test_decode_job_never_raises(data: bytes, reason: str) -> None:
    obj, why = p.decode_job(data)
    assert (obj is None) == bool(reason)
    assert reason in why if reason else why == ""


def test_failed_record_keeps_non_utf8_payload_bytes() -> None:
    # what cjson.encode writes: raw high bytes, escaped quotes and slashes
    record = (
        b'{"uuid":"invalid-1","payload":"\xff\xfe{\\"a\\":\\"b\\/c\\"}\\u007f",'
        b'"exception":"InvalidPayload","message":"m","failedAt":1796000000.5}'
    )
    job = p.parse_failed_record(record)
    assert job.payload == b'\xff\xfe{"a":"b/c"}\x7f'
    assert (job.uuid, job.failed_at) == ("invalid-1", 1796000000.5)
    assert job.payload_json() is None


def test_push_calls_chunk() -> None:
    calls = p.push_calls(KEYS, [b"x"] * (p.PUSH_CHUNK * 2 + 1))
    assert [len(c.args) for c in calls] == [p.PUSH_CHUNK, p.PUSH_CHUNK, 1]
    assert p.push_calls(KEYS, []) == []


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        p.QueueSettings(retry_after=0)
    with pytest.raises(ValueError):
        p.release_call(KEYS, p.Reserved(b"", b"", None, "", 0), -1)


def test_later_scores_now_plus_delay() -> None:
    call = p.later_call(KEYS, [b"a", b"b"], 60, now=1000.5)
    assert call.args == ("1060.5", b"a", "1060.5", b"b")
    assert json.loads(b"{}") == {}


def test_fail_message_is_capped() -> None:
    job = p.Reserved(b"r", b"r", None, "u", 1)
    call = p.fail_call(KEYS, p.QueueSettings(), job, "X", "m" * (p.MESSAGE_MAX + 50), now=1)
    message = call.args[3]
    assert isinstance(message, str) and len(message) == p.MESSAGE_MAX
    assert message.endswith("\u2026")


def _outcome(loads: Callable[[bytes], object], data: bytes) -> tuple[str, object]:
    try:
        return "ok", loads(data)
    except (ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4)
    ),
    max_leaves=12,
)


@given(
    value=st.dictionaries(st.text(max_size=5), _JSON, max_size=5),
    cut=st.integers(min_value=0, max_value=400),
    extra=st.sampled_from([b"", b" ", b"\n", b"x", b"{}", b"\x00", b"\xff"]),
)
@settings(max_examples=400, deadline=None)
def test_the_fast_decode_answers_as_json_loads(
    value: dict[str, object], cut: int, extra: bytes
) -> None:
    """protocol._loads (the scanner called directly for '{'-led UTF-8) gives json.loads'
    result or json.loads' error for whole, cut and padded object texts."""
    text = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    for data in (text, text[:cut], text + extra, extra + text):
        assert _outcome(p._loads, data) == _outcome(json.loads, data), data
