"""Transport-free half of the queue client: script texts, argument building, reply parsing.

Every queue operation is a :class:`ScriptCall`: which Lua script to run, its KEYS and ARGV, and
a pure function that turns the raw Redis reply into a Python value. The sync
:class:`~sendgroup_worker.queue.client.Queue` and the asyncio
:class:`~sendgroup_worker.queue.client.AsyncQueue` only differ in how they send a call, so the
protocol is written once, here, and unit-testable without Redis.

Scripts live in ``scripts/*.lua``; ``scripts/_lib.lua`` (local helper functions) is prepended
to each one when loaded. Semantics follow Laravel 11's ``Illuminate/Queue/LuaScripts.php`` and
``RedisQueue.php`` (see ``docs/queue-protocol.md``), with these differences:

* pop keeps the payload's bytes and rewrites only the value of its top-level ``attempts``
  (Laravel re-encodes the whole payload with cjson, which reorders keys, escapes ``/``, rounds
  numbers and turns ``[]`` into ``{}``);
* a payload that is not a JSON object or lacks ``uuid``/``attempts`` goes to the failed
  structure with a reason (Laravel's script loses it and leaves its notify token behind);
* acknowledging, migrating and popping run in one script (:func:`reserve_call`), so steady-state
  draining costs one round trip per job instead of Laravel's four.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Final, Generic, Literal, TypeVar

from sendgroup_contract import measure
from sendgroup_contract.keys import QueueKeys
from sendgroup_contract.measure import QueueMeasure
from sendgroup_contract.timestamps import parse_pushed_at

T = TypeVar("T")

#: Names of the Lua scripts in ``scripts/`` (file name without ``.lua``).
SCRIPT_NAMES: Final = (
    "reserve",
    "done",
    "release",
    "fail",
    "begin_send",
    "push",
    "later",
    "size",
    "measure",
    "clear",
    "failed_list",
    "failed_retry",
    "failed_forget",
    "claim",
    "unreserve",
    "ack_begin",
)

#: Payloads per ``push`` script call; a bigger batch is split into several calls (each atomic).
PUSH_CHUNK: Final = 1000

#: Longest exception message kept in a failed record (characters); longer ones are cut.
MESSAGE_MAX: Final = 8192

#: Deepest nesting of arrays/objects accepted in a job payload (levels, the envelope itself
#: counting 1). Deeper payloads are refused as ``InvalidPayload``: Python's json module raises
#: RecursionError on a few hundred levels, and nothing a mail job carries needs more than a few.
MAX_JSON_DEPTH: Final = 64


BeginSend = Literal["ok", "lost", "already_sent"]


@cache
def script_source(name: str) -> str:
    """Full Lua text of script ``name``: ``_lib.lua`` followed by ``<name>.lua``.

    Raises KeyError for an unknown name.
    """
    if name not in SCRIPT_NAMES:
        raise KeyError(f"unknown queue script {name!r}")
    if name == "measure":  # shared with the operator: lives in the contract, needs no _lib
        return measure.SCRIPT
    folder = resources.files("sendgroup_worker.queue") / "scripts"
    lib = (folder / "_lib.lua").read_text(encoding="utf-8")
    body = (folder / f"{name}.lua").read_text(encoding="utf-8")
    return f"{lib}\n-- ===== {name}.lua =====\n{body}"


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Tunables of one queue client (all times in seconds, counts in jobs).

    * ``retry_after``: a reservation expires this long after the pop (Laravel's
      ``retry_after``); must exceed the job ``timeout``.
    * ``migrate_limit``: at most this many due delayed jobs and as many expired reservations
      are moved to ready per ``reserve`` call (Laravel moves 100 per migration).
    * ``failed_max_count`` / ``failed_max_age``: retention of the failed structure; the oldest
      records beyond either bound are dropped when a job fails. 0 disables a bound.
    * ``sent_ttl``: idempotency markers (uuids already delivered) are kept this long.
    """

    retry_after: int = 90
    migrate_limit: int = 100
    failed_max_count: int = 100_000
    failed_max_age: int = 7 * 24 * 3600
    sent_ttl: int = 7 * 24 * 3600

    def __post_init__(self) -> None:
        if self.retry_after <= 0:
            raise ValueError(f"retry_after must be > 0 seconds, got {self.retry_after}")
        if self.migrate_limit < 0 or self.failed_max_count < 0 or self.failed_max_age < 0:
            raise ValueError("migrate_limit and the failed retention bounds must be >= 0")


@dataclass(frozen=True, slots=True)
class ScriptCall(Generic[T]):
    """One script invocation: run ``script`` with ``keys``/``args``, then ``parse`` the reply."""

    script: str
    keys: tuple[str, ...]
    args: tuple[bytes | str | int | float, ...]
    parse: Callable[[Any], T]


@dataclass(frozen=True, slots=True)
class Reserved:
    """A job handed to this worker by :func:`reserve_call`.

    * ``raw``: the payload exactly as it was popped from the ready list.
    * ``reserved``: the exact bytes stored in ``:reserved`` (``raw`` with ``attempts`` + 1).
      The ONLY value ever used to acknowledge, release or fail the job (ZREM), never a
      re-serialization of ``payload``.
    * ``payload``: ``reserved`` decoded as JSON, or None if Python cannot decode it (Lua's cjson
      is laxer; the worker should then ``fail`` the job).
    * ``uuid``: the payload's ``uuid``; ``attempts``: reservations so far, this one included.
    * ``invalid``: why the payload cannot be run (the failed record's message, exception
      ``InvalidPayload``), or "" for a usable job; ``payload`` is None whenever it is set.
    """

    raw: bytes
    reserved: bytes
    payload: dict[str, Any] | None
    uuid: str
    attempts: int
    invalid: str = ""


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """A stream entry the acknowledging script writes with the acknowledgement, atomically:
    ``XADD key MAXLEN ~ maxlen * field value ...`` (the worker's outcome entry,
    :mod:`sendgroup_worker.loopback`). ``fields``: field, value, field, value, ... (text).

    The key is not one of the queue's, so on Redis Cluster it lies in another slot: entries are
    for one-server and Sentinel deployments only (the worker writes its own XADD on a
    cluster). The script writes it with ``redis.pcall``: an entry Redis refuses (the key holds
    another type) is counted in the reply and never stops the acknowledgement."""

    key: str
    maxlen: int
    fields: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.maxlen < 1:
            raise ValueError(f"maxlen must be >= 1 entries, got {self.maxlen}")
        if not self.fields or len(self.fields) % 2:
            raise ValueError("fields must be non-empty field/value pairs")


@dataclass(frozen=True, slots=True)
class Ack:
    """A finished job to acknowledge inside the next ``reserve`` call.

    ``delivered=True`` also records the idempotency marker and counts a delivery (use it when
    the mail went out); ``False`` just removes the reservation (e.g. ``already_sent``).
    ``entry``: a stream entry written in the same script (see :class:`StreamEntry`).
    """

    reserved: bytes
    uuid: str
    delivered: bool = True
    entry: StreamEntry | None = None

    @classmethod
    def of(cls, job: Reserved, delivered: bool = True, entry: StreamEntry | None = None) -> Ack:
        """The acknowledgement of ``job``."""
        return cls(job.reserved, job.uuid, delivered, entry)


@dataclass(frozen=True, slots=True)
class ReserveResult:
    """Reply of :func:`reserve_call`.

    ``jobs``: the jobs reserved (at most ``count``); ``lost_acks``: indexes (0-based, into the
    ``ack`` sequence) of acknowledgements whose reservation was already gone; ``migrated``: jobs
    moved from delayed/reserved to ready by this call; ``invalid``: popped payloads that were
    moved to the failed structure instead of being returned; ``paused``: the group's pause
    marker (``QueueKeys.paused``) is set, so nothing was migrated or reserved (the acks were
    still applied); ``refused_entries``: the acks' stream entries Redis refused (see
    :class:`StreamEntry`; their acks were applied).
    """

    jobs: list[Reserved]
    lost_acks: list[int] = field(default_factory=list)
    migrated: int = 0
    invalid: int = 0
    paused: bool = False
    refused_entries: int = 0


@dataclass(frozen=True, slots=True)
class DoneResult:
    """Reply of :func:`done_call`: ``lost`` (the reservation was already gone) and whether
    Redis refused the acknowledgement's stream entry (``entry_refused``)."""

    lost: bool
    entry_refused: bool = False


@dataclass(frozen=True, slots=True)
class FailedJob:
    """A record of the failed structure.

    ``payload`` holds the job's exact bytes (the reserved string, or the raw popped bytes of an
    invalid payload); ``exception`` a class name (``InvalidPayload`` for payloads the queue
    could not read); ``failed_at`` unix seconds.
    """

    uuid: str
    payload: bytes
    exception: str
    message: str
    failed_at: float

    def payload_json(self) -> dict[str, Any] | None:
        """The payload decoded as a JSON object, or None if it is not one."""
        return decode_payload(self.payload)


@dataclass(frozen=True, slots=True)
class FailedPage:
    """A page of :class:`FailedJob` records, newest first, and the total count."""

    total: int
    jobs: list[FailedJob]


# --- pure helpers --------------------------------------------------------------------------


def now_seconds(now: float | None) -> float:
    """``now`` or the local clock (unix seconds, float), as Laravel uses the client clock."""
    return time.time() if now is None else float(now)


def _num(value: float) -> str:
    """A float as text Redis and Lua parse exactly (``repr`` round-trips)."""
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    return repr(float(value)) if value != int(value) else str(int(value))


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """True when ``value`` (decoded JSON) nests arrays/objects deeper than ``limit`` levels
    (a scalar is 0 levels, ``[]`` 1). Iterative: never recurses, whatever the input."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


class _Decoder(json.JSONDecoder):
    """The stdlib's default decoder, with the attribute its ``__init__`` sets declared (typeshed
    leaves it out): ``scan_once(text, index) -> (value, end)``, the C scanner, raising
    StopIteration when no value starts at ``index``."""

    scan_once: Callable[[str, int], tuple[Any, int]]


#: The scanner :func:`_loads` calls past ``json.loads``' wrapper.
_SCAN: Final = _Decoder().scan_once


def _loads(data: bytes) -> Any:
    """``json.loads(data)``, same result and same errors, ~1.5 us faster for a 1.5 KB job
    (timeit: 5.2 -> 3.6 us): a UTF-8 text that opens with ``{`` and holds nothing after its
    value goes straight to the decoder's scanner (``scan_once``: the C scanner, which clears
    its key memo after each call); anything else (another encoding, leading or trailing
    whitespace, no value, extra data) goes through ``json.loads`` itself, so its error
    messages are unchanged."""
    if data[:1] == b"{" and data[1:2] != b"\x00":  # json.detect_encoding's UTF-8 case
        text = data.decode("utf-8", "surrogatepass")  # as json.loads decodes bytes
        try:
            obj, end = _SCAN(text, 0)
        except StopIteration:
            end = -1
        if end == len(text):
            return obj
    return json.loads(data)


def decode_job(data: bytes) -> tuple[dict[str, Any] | None, str]:
    """``data`` decoded as a job envelope: ``(object, "")``, or ``(None, reason)`` when it is
    not UTF-8, not JSON, not an object, nests deeper than :data:`MAX_JSON_DEPTH`, or carries
    an ``attempts`` that is not a finite number >= 0. The one place payload bytes read from
    Redis are decoded; never raises (RecursionError and MemoryError included)."""
    try:
        obj = _loads(data)
    except UnicodeDecodeError:
        return None, "payload is not UTF-8"
    except ValueError as exc:
        return None, f"payload is not JSON: {exc}"
    except RecursionError:
        return None, f"payload nests deeper than {MAX_JSON_DEPTH} levels"
    except MemoryError:
        return None, "payload too large to decode"
    if not isinstance(obj, dict):
        return None, "payload is not a JSON object"
    # each level opens with "[" or "{": a text with no more of them than the limit (counted
    # in C, inside strings too, so never too few) cannot nest deeper; the walk below costs
    # ~5 % of the worker's CPU per no-op job (py-spy), this count ~1 us for 1.5 KB
    if (data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH) and json_depth_exceeds(
        obj, MAX_JSON_DEPTH
    ):
        return None, f"payload nests deeper than {MAX_JSON_DEPTH} levels"
    attempts = obj.get("attempts", 0)
    number = _finite(attempts)
    if number is None or number < 0:
        return None, f'payload "attempts" is not a number >= 0: {str(attempts)[:40]!r}'
    return obj, ""


def decode_payload(data: bytes) -> dict[str, Any] | None:
    """``data`` decoded as a JSON object, or None (see :func:`decode_job` for the reasons)."""
    return decode_job(data)[0]


def _finite(value: Any) -> float | None:
    """``value`` (a JSON number or a numeric string) as a finite float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | bytes):
        return None
    try:
        number = float(value.strip() if isinstance(value, str | bytes) else value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    raise TypeError(f"expected bytes from Redis, got {type(value).__name__}")


def _as_int(value: Any) -> int:
    if isinstance(value, bytes):
        return int(value)
    return int(value)


#: ``exception`` of a failed record that cannot be read (written by someone else, damaged).
UNREADABLE_RECORD: Final = "UnreadableRecord"


def parse_failed_record(data: bytes, record_id: str = "") -> FailedJob:
    """Decode a failed record written by the scripts (``cjson.encode`` of uuid, payload,
    exception, message, failedAt). Non-UTF-8 payload bytes round-trip exactly (cjson writes
    them raw; decoded here with ``surrogateescape``). Never raises: a record that is not such
    an object comes back as exception :data:`UNREADABLE_RECORD` with its raw bytes as the
    payload and ``record_id`` (its key in the hash) as uuid, so it can still be listed, shown
    and forgotten; a ``failedAt`` out of any clock's range reads as 0."""
    try:
        obj: Any = json.loads(data.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError) as exc:
        obj = exc
    if not isinstance(obj, dict):
        why = f"not JSON: {obj}" if isinstance(obj, Exception) else "not a JSON object"
        return FailedJob(record_id, data, UNREADABLE_RECORD, f"failed record is {why}", 0.0)
    try:
        payload = str(obj.get("payload", "")).encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        payload = data
    return FailedJob(
        uuid=str(obj.get("uuid", "") or record_id),
        payload=payload,
        exception=str(obj.get("exception", "")),
        message=str(obj.get("message", "")),
        failed_at=parse_pushed_at(obj.get("failedAt")) or 0.0,
    )


def _reserved_from(raw: bytes, reserved: bytes) -> Reserved:
    payload, invalid = decode_job(reserved)
    uuid = ""
    attempts = 0
    if payload is not None:
        top = payload.get("uuid")
        if isinstance(top, str) and top:
            uuid = top
            attempts = int(_finite(payload.get("attempts", 0)) or 0)
        else:
            # reserve.lua's cheap reading (sg_quick) saw a "uuid" key, not necessarily the
            # top-level one: the job is failed here, as the script's full check would have
            payload, invalid = None, 'payload has no "uuid"'
    if payload is None and invalid:
        # the script validated uuid and attempts: read the uuid back for the failed record
        match = _UUID.search(reserved)
        uuid = match.group(1).decode("utf-8", "replace") if match else ""
    return Reserved(
        raw=raw, reserved=reserved, payload=payload, uuid=uuid, attempts=attempts, invalid=invalid
    )


_UUID: Final = re.compile(rb'"uuid"\s*:\s*"([^"\\]{1,200})"')


def parse_reserve_reply(reply: Any) -> ReserveResult:
    """Turn the reply of ``reserve.lua`` into a :class:`ReserveResult`."""
    lost = [_as_int(i) - 1 for i in reply[0]]
    migrated, invalid, paused, refused = (_as_int(v) for v in reply[1])
    items = reply[2:]
    jobs = [
        _reserved_from(_as_bytes(items[i]), _as_bytes(items[i + 1]))
        for i in range(0, len(items), 2)
    ]
    return ReserveResult(
        jobs=jobs,
        lost_acks=lost,
        migrated=migrated,
        invalid=invalid,
        paused=paused == 1,
        refused_entries=refused,
    )


# --- call builders -------------------------------------------------------------------------


def reserve_call(
    keys: QueueKeys,
    settings: QueueSettings,
    count: int = 1,
    ack: Sequence[Ack] = (),
    now: float | None = None,
) -> ScriptCall[ReserveResult]:
    """Acknowledge ``ack``, migrate due jobs, reserve up to ``count`` jobs: one script.

    Order inside the script: (1) each ack ZREMs its reserved bytes; a delivered one adds its
    uuid to ``sent`` and counts ``delivered``; (2) up to ``settings.migrate_limit`` delayed
    jobs and as many expired reservations with score <= now move to the ready tail, one notify
    token each; (3) up to ``count`` LPOPs (one notify token dropped per pop), each valid job's
    ``attempts`` + 1, ZADD to reserved with score now + retry_after. Invalid payloads go to the
    failed structure. While the pause marker exists only step (1) runs. Raises ValueError if
    ``count`` < 0, or if the acks' stream entries name different keys or caps (one stream per
    call: it is the script's tenth key).

    An ack's :class:`StreamEntry` is added (``redis.pcall('XADD', ...)``) right before its
    ZREM, in the same script: the entry and the acknowledgement land together or not at all.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    stream = _one_stream(a.entry for a in ack)
    t = now_seconds(now)
    args: list[bytes | str | int | float] = [
        _num(t),
        str(settings.retry_after),
        str(count),
        str(settings.migrate_limit),
        str(settings.failed_max_count),
        str(settings.failed_max_age),
        str(settings.sent_ttl),
        str(len(ack)),
        str(stream[1]) if stream else "0",
    ]
    for a in ack:
        fields = a.entry.fields if a.entry is not None else ()
        args += ["1" if a.delivered else "0", a.reserved, a.uuid, str(len(fields)), *fields]
    queue_keys = (
        keys.ready,
        keys.delayed,
        keys.reserved,
        keys.notify,
        keys.failed,
        keys.failed_jobs,
        keys.stats,
        keys.sent,
        keys.paused,
    )
    return ScriptCall(
        "reserve",
        (*queue_keys, stream[0]) if stream else queue_keys,
        tuple(args),
        parse_reserve_reply,
    )


def _one_stream(entries: Iterable[StreamEntry | None]) -> tuple[str, int] | None:
    """The (key, maxlen) all given entries share, None without entries; ValueError if they
    differ."""
    found = {(e.key, e.maxlen) for e in entries if e is not None}
    if len(found) > 1:
        raise ValueError(f"stream entries of one call must share one key and cap: {found}")
    return found.pop() if found else None


def _lost(reply: Any) -> bool:
    return bool(_as_int(reply) & 1)


def _done(reply: Any) -> DoneResult:
    value = _as_int(reply)
    return DoneResult(lost=bool(value & 1), entry_refused=bool(value & 2))


def done_call(
    keys: QueueKeys,
    settings: QueueSettings,
    job: Reserved | Ack,
    delivered: bool = True,
    now: float | None = None,
) -> ScriptCall[bool]:
    """Remove ``job``'s reservation (ZREM of its exact reserved bytes); reply True = lost.

    With ``delivered`` the uuid is added to ``sent`` (idempotency marker, score now) and the
    ``delivered`` counter incremented, even when the reservation was lost: the mail did go out.
    The counter moves only when the marker is new, so retrying ``done`` after a dropped reply
    never counts a mail twice.
    """
    return ScriptCall("done", *_done_keys_args(keys, settings, job, delivered, now), _lost)


def done_detailed_call(
    keys: QueueKeys,
    settings: QueueSettings,
    job: Reserved | Ack,
    delivered: bool = True,
    now: float | None = None,
) -> ScriptCall[DoneResult]:
    """:func:`done_call` that also writes an :class:`Ack`'s stream entry (``job.entry``, in the
    same script, before the ZREM, as :func:`reserve_call` does) and says whether Redis refused
    it. Reply bits: 1 lost, 2 entry refused."""
    return ScriptCall("done", *_done_keys_args(keys, settings, job, delivered, now), _done)


def _done_keys_args(
    keys: QueueKeys,
    settings: QueueSettings,
    job: Reserved | Ack,
    delivered: bool,
    now: float | None,
) -> tuple[tuple[str, ...], tuple[bytes | str | int | float, ...]]:
    entry = job.entry if isinstance(job, Ack) else None
    args: tuple[bytes | str | int | float, ...] = (
        job.reserved,
        job.uuid,
        "1" if delivered else "0",
        _num(now_seconds(now)),
        str(settings.sent_ttl),
    )
    if entry is None:
        return (keys.reserved, keys.sent, keys.stats), args
    return (keys.reserved, keys.sent, keys.stats, entry.key), (
        *args,
        str(entry.maxlen),
        *entry.fields,
    )


def release_call(
    keys: QueueKeys, job: Reserved, delay: float, now: float | None = None
) -> ScriptCall[bool]:
    """Move ``job`` from reserved to delayed with score now + ``delay`` seconds, counting
    ``released``; reply True = lost (reservation gone, nothing changed)."""
    if delay < 0:
        raise ValueError(f"delay must be >= 0 seconds, got {delay}")
    return ScriptCall(
        "release",
        (keys.reserved, keys.delayed, keys.stats),
        (job.reserved, _num(now_seconds(now)), _num(delay)),
        _lost,
    )


def fail_call(
    keys: QueueKeys,
    settings: QueueSettings,
    job: Reserved,
    exception_class: str,
    message: str,
    now: float | None = None,
) -> ScriptCall[bool]:
    """Move ``job`` from reserved to the failed structure (record keyed by uuid, trimmed to the
    retention bounds) and count ``failed``; reply True = lost (nothing changed). ``message``
    is cut to :data:`MESSAGE_MAX` characters."""
    if len(message) > MESSAGE_MAX:
        message = message[: MESSAGE_MAX - 1] + "\u2026"
    return ScriptCall(
        "fail",
        (keys.reserved, keys.failed, keys.failed_jobs, keys.stats),
        (
            job.reserved,
            job.uuid,
            exception_class,
            message,
            _num(now_seconds(now)),
            str(settings.failed_max_count),
            str(settings.failed_max_age),
        ),
        _lost,
    )


def _begin_send(reply: Any) -> BeginSend:
    text = _as_bytes(reply).decode()
    if text not in ("ok", "lost", "already_sent"):
        raise ValueError(f"unexpected begin_send reply {text!r}")
    return text  # type: ignore[return-value]


def unreserve_call(keys: QueueKeys, jobs: Sequence[Reserved]) -> ScriptCall[int]:
    """Hand ``jobs`` (reserved, never started) back to the head of the ready list in their
    order, as they were popped (``raw``: ``attempts`` as before the reservation, so no attempt
    is counted), one notify token each; reply: how many went back (a job whose reservation is
    gone is left alone). For a worker that reserved a batch and will not run all of it."""
    args: list[bytes | str | int | float] = []
    for job in jobs:
        args += [job.reserved, job.raw]
    return ScriptCall("unreserve", (keys.ready, keys.reserved, keys.notify), tuple(args), _as_int)


def begin_send_call(keys: QueueKeys, job: Reserved) -> ScriptCall[BeginSend]:
    """Check before sending: ``"lost"`` if ``job``'s reservation is gone, ``"already_sent"``
    if its uuid carries an idempotency marker, else ``"ok"``."""
    return ScriptCall(
        "begin_send", (keys.reserved, keys.sent), (job.reserved, job.uuid), _begin_send
    )


@dataclass(frozen=True, slots=True)
class Screened:
    """:func:`begin_screen_call`'s answer: ``state`` as :data:`BeginSend`; ``hits``: for
    ``"ok"``, one bool per recipient given (True: in the suppression set), else empty."""

    state: BeginSend
    hits: tuple[bool, ...] = ()


def begin_screen_call(
    keys: QueueKeys, job: Reserved, suppressed: str, recipients: Sequence[str]
) -> ScriptCall[Screened]:
    """:func:`begin_send_call` and the suppression check of ``recipients`` (already
    normalized: lower-cased) against the set at key ``suppressed``, in one script: one round
    trip where there were two. The set's key is the namespace's, not the queue's: one server or
    a Sentinel service only (on Redis Cluster it lies in another slot; check it on its own)."""
    n = len(recipients)

    def parse(reply: Any) -> Screened:
        if isinstance(reply, list):
            if len(reply) != n:
                raise ValueError(f"begin_send: {len(reply)} answers for {n} recipients")
            return Screened("ok", tuple(bool(_as_int(x)) for x in reply))
        state = _begin_send(reply)
        if state == "ok":  # no recipient given: an empty Lua table comes back as an array
            raise ValueError("begin_send: 'ok' without the recipients' answers")
        return Screened(state)

    return ScriptCall(
        "begin_send",
        (keys.reserved, keys.sent, suppressed),
        (job.reserved, job.uuid, *recipients),
        parse,
    )


@dataclass(frozen=True, slots=True)
class AckBegun:
    """:func:`ack_begin_call`'s answer: ``lost_acks`` (0-based indexes into the acks whose
    reservation was gone), ``refused_entries`` (their stream entries Redis refused) and the
    begin check's answer as :class:`Screened` (``hits`` empty without a screen)."""

    lost_acks: list[int]
    refused_entries: int
    screened: Screened


def ack_begin_call(
    keys: QueueKeys,
    settings: QueueSettings,
    job: Reserved,
    ack: Sequence[Ack],
    now: float | None = None,
    suppressed: str | None = None,
    recipients: Sequence[str] = (),
) -> ScriptCall[AckBegun]:
    """``ack`` acknowledged as :func:`reserve_call` does (sent markers, ``delivered`` counter,
    stream entries), then :func:`begin_send_call` for ``job`` (with ``suppressed``, the
    suppression check of ``recipients`` as :func:`begin_screen_call`), in one script
    (``ack_begin.lua``): a lane running a batch writes its last mail's marker before the next
    send at no extra round trip. Raises ValueError if the entries name different streams."""
    stream = _one_stream(a.entry for a in ack)
    args: list[bytes | str | int | float] = [
        job.reserved,
        job.uuid,
        _num(now_seconds(now)),
        str(settings.sent_ttl),
        str(stream[1]) if stream else "0",
        "1" if suppressed is not None else "0",
        str(len(ack)),
    ]
    for a in ack:
        fields = a.entry.fields if a.entry is not None else ()
        args += ["1" if a.delivered else "0", a.reserved, a.uuid, str(len(fields)), *fields]
    call_keys: tuple[str, ...] = (keys.reserved, keys.sent, keys.stats)
    if suppressed is not None:
        call_keys += (suppressed,)
        args += list(recipients)
    if stream:
        call_keys += (stream[0],)
    n = len(recipients)

    def parse(reply: Any) -> AckBegun:
        lost = [_as_int(i) - 1 for i in reply[0]]
        answer = reply[2]
        if isinstance(answer, list):
            if suppressed is None or len(answer) != n:
                raise ValueError(f"ack_begin: {len(answer)} answers for {n} recipients")
            screened = Screened("ok", tuple(bool(_as_int(x)) for x in answer))
        else:
            state = _begin_send(answer)
            if state == "ok" and suppressed is not None:
                raise ValueError("ack_begin: 'ok' without the recipients' answers")
            screened = Screened(state)
        return AckBegun(lost, _as_int(reply[1]), screened)

    return ScriptCall("ack_begin", call_keys, tuple(args), parse)


def push_calls(keys: QueueKeys, payloads: Iterable[bytes]) -> list[ScriptCall[int]]:
    """RPUSH ``payloads`` (+ one notify token each), :data:`PUSH_CHUNK` per script call."""
    items = list(payloads)
    return [
        ScriptCall("push", (keys.ready, keys.notify), tuple(items[i : i + PUSH_CHUNK]), _as_int)
        for i in range(0, len(items), PUSH_CHUNK)
    ]


def later_call(
    keys: QueueKeys, payloads: Iterable[bytes], delay: float, now: float | None = None
) -> ScriptCall[int]:
    """ZADD ``payloads`` to delayed with score now + ``delay`` seconds (no notify token, as
    Laravel's ``laterRaw``)."""
    score = _num(now_seconds(now) + delay)
    args: list[bytes | str | int | float] = []
    for p in payloads:
        args += [score, p]
    return ScriptCall("later", (keys.delayed,), tuple(args), _as_int)


def size_call(keys: QueueKeys) -> ScriptCall[int]:
    """ready + delayed + reserved, atomically (Laravel's ``size()``)."""
    return ScriptCall("size", (keys.ready, keys.delayed, keys.reserved), (), _as_int)


def clear_call(keys: QueueKeys) -> ScriptCall[int]:
    """Delete ready/delayed/reserved/notify; reply = jobs dropped (Laravel's ``clear()``)."""
    return ScriptCall("clear", keys.laravel_keys, (), _as_int)


def measure_call(keys: QueueKeys, now: float | None = None) -> ScriptCall[QueueMeasure]:
    """The contract's one measurement (:mod:`sendgroup_contract.measure`, the script the
    operator runs too): counts, oldest job, counters, dump/purge/lock state, atomically.
    ``measured_at`` is the Redis server's clock unless ``now`` is given."""
    return ScriptCall(
        "measure",
        measure.script_keys(keys),
        (),
        lambda reply: measure.parse_reply(reply, now),
    )


def _parse_failed_page(reply: Any) -> FailedPage:
    items = reply[1:]
    return FailedPage(
        total=_as_int(reply[0]),
        jobs=[
            parse_failed_record(
                _as_bytes(items[i + 1]), _as_bytes(items[i]).decode("utf-8", "replace")
            )
            for i in range(0, len(items) - 1, 2)
        ],
    )


def failed_list_call(keys: QueueKeys, offset: int = 0, limit: int = 50) -> ScriptCall[FailedPage]:
    """A page of failed jobs, newest first: records ``offset`` .. ``offset + limit - 1``."""
    if offset < 0 or limit < 0:
        raise ValueError("offset and limit must be >= 0")
    return ScriptCall(
        "failed_list",
        (keys.failed, keys.failed_jobs),
        (str(offset), str(limit)),
        _parse_failed_page,
    )


@dataclass(frozen=True, slots=True)
class RetryResult:
    """``retried`` jobs pushed back to ready; ``missing`` uuids that had no record."""

    retried: int
    missing: list[str]


def _parse_retry(reply: Any) -> RetryResult:
    return RetryResult(
        retried=_as_int(reply[0]), missing=[_as_bytes(m).decode() for m in reply[1:]]
    )


def _failed_retry_keys(keys: QueueKeys) -> tuple[str, ...]:
    return (keys.failed, keys.failed_jobs, keys.ready, keys.notify)


def failed_retry_call(keys: QueueKeys, uuids: Sequence[str]) -> ScriptCall[RetryResult]:
    """Push the failed jobs ``uuids`` back to ready with ``attempts`` = 0 and forget them."""
    return ScriptCall("failed_retry", _failed_retry_keys(keys), ("ids", "0", *uuids), _parse_retry)


def failed_retry_oldest_call(keys: QueueKeys, limit: int = 500) -> ScriptCall[RetryResult]:
    """Retry the ``limit`` oldest failed jobs (the ``retry_all`` loop calls this until 0)."""
    if limit <= 0:
        raise ValueError("limit must be > 0")
    return ScriptCall("failed_retry", _failed_retry_keys(keys), ("all", str(limit)), _parse_retry)


def failed_forget_call(keys: QueueKeys, uuids: Sequence[str] | None) -> ScriptCall[int]:
    """Delete the failed records ``uuids`` (None: all of them); reply = records deleted."""
    args: tuple[str, ...] = ("all",) if uuids is None else ("ids", *uuids)
    return ScriptCall("failed_forget", (keys.failed, keys.failed_jobs), args, _as_int)


@dataclass(frozen=True, slots=True)
class Claim:
    """Reply of :func:`claim_call`: ``held`` True when the caller owns the queue after the call
    (for a release: it let go, or nobody held it); ``owner`` the owner then
    (``<namespace>/<name>/<uid>``, "" for none)."""

    held: bool
    owner: str


def owner_id(namespace: str, name: str, uid: str) -> str:
    """The owner string of a SendGroup: ``<namespace>/<name>/<uid>`` (the uid tells a group
    from a deleted and re-created one of the same name)."""
    for part in (namespace, name, uid):
        if not part or "/" in part:
            raise ValueError(f"owner part {part!r} must be non-empty and without '/'")
    return f"{namespace}/{name}/{uid}"


def _parse_claim(reply: Any) -> Claim:
    return Claim(held=_as_int(reply[0]) == 1, owner=_as_bytes(reply[1]).decode("utf-8", "replace"))


def claim_call(
    keys: QueueKeys, owner: str, release: bool = False, replace: str = ""
) -> ScriptCall[Claim]:
    """Claim the queue for ``owner`` (first claim wins; the owner claiming again is a no-op),
    or with ``release`` give it up (only its owner can). ``replace``: also take the queue when
    exactly this owner holds it (a deleted earlier incarnation of the same group whose release
    never ran: same namespace and name, another uid). One atomic script (``claim.lua``)."""
    if not owner:
        raise ValueError("owner must not be empty")
    if release and replace:
        raise ValueError("release and replace exclude each other")
    if replace:
        return ScriptCall("claim", (keys.owner,), (owner, "replace", replace), _parse_claim)
    return ScriptCall(
        "claim", (keys.owner,), (owner, "release" if release else "claim"), _parse_claim
    )


__all__ = [
    "MAX_JSON_DEPTH",
    "MESSAGE_MAX",
    "PUSH_CHUNK",
    "SCRIPT_NAMES",
    "UNREADABLE_RECORD",
    "Ack",
    "AckBegun",
    "BeginSend",
    "Claim",
    "DoneResult",
    "FailedJob",
    "FailedPage",
    "QueueMeasure",
    "QueueSettings",
    "ReserveResult",
    "Reserved",
    "RetryResult",
    "Screened",
    "ScriptCall",
    "StreamEntry",
    "ack_begin_call",
    "begin_screen_call",
    "begin_send_call",
    "claim_call",
    "clear_call",
    "decode_job",
    "decode_payload",
    "done_call",
    "done_detailed_call",
    "fail_call",
    "failed_forget_call",
    "failed_list_call",
    "failed_retry_call",
    "failed_retry_oldest_call",
    "json_depth_exceeds",
    "later_call",
    "measure_call",
    "now_seconds",
    "owner_id",
    "parse_failed_record",
    "parse_reserve_reply",
    "push_calls",
    "release_call",
    "reserve_call",
    "script_source",
    "size_call",
    "unreserve_call",
]
