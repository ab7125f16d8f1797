"""The operator's Redis adapter for a provider's shared state (keys of
``sendgroup_worker.provider.ProviderKeys``, all under the provider's hash tag).

* :func:`write_shares`: replace the ``shares`` hash atomically (MULTI: DEL + HSET), so a
  worker never sees half of an allocation; a group absent from it has no share limit.
* :func:`read_state`: the rules in force and the latest firing of each rule (the reply that
  fired it), with Redis' clock, in one round trip.

Errors are :class:`ProviderStateUnavailable` with a message that never carries the URL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

import redis.asyncio as aioredis

from sendgroup_operator.provider_plan import RuleState, share_fields
from sendgroup_operator.queueio import safe_host
from sendgroup_worker.provider import ProviderKeys
from sendgroup_worker.redisclient import REDIS_ERRORS, is_cluster


class ProviderStateUnavailable(Exception):
    """The provider's Redis could not be reached; the message is safe to show."""


@dataclass(frozen=True, slots=True)
class ProviderState:
    """``rules``: effects in force (or recovering); ``replies``: rule -> the reply that last
    fired it; ``now``: Redis' clock, unix seconds; ``shares_present``: the shares hash exists;
    ``demand``: group id -> unix seconds of its workers' last permit request."""

    rules: list[RuleState] = field(default_factory=list)
    replies: dict[str, str] = field(default_factory=dict)
    now: float = 0.0
    #: whether the ``shares`` hash exists (gone after a Redis restart without persistence)
    shares_present: bool = False
    demand: dict[str, float] = field(default_factory=dict)


@contextlib.contextmanager
def _unavailable(url: str) -> Iterator[None]:
    """Redis and socket errors of the calls inside as :class:`ProviderStateUnavailable`, whose
    message names the host only (never the URL's password)."""
    try:
        yield
    except (*REDIS_ERRORS, OSError) as exc:
        raise ProviderStateUnavailable(
            f"provider state at {safe_host(url)}: {type(exc).__name__}"
        ) from None


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


#: Seconds the shares hash lives after its last write (the operator rewrites it at least every
#: 30 s): with no operator to follow the rules' recovery, the shares (split from a scaled rate,
#: a normal group's maybe 0) go, and the groups share the provider's own level without
#: priorities instead of staying held at the scaled split.
SHARES_TTL: Final = 150
#: Seconds after which a group's entry in the ``demand`` hash is deleted (a deleted group's).
DEMAND_FORGET: Final = 86400.0


async def write_shares(
    client: aioredis.Redis[bytes], url: str, provider_id: str, allocation: Mapping[str, float]
) -> None:
    """Replace the provider's shares with ``allocation`` (group key -> recipients/min); the
    hash expires :data:`SHARES_TTL` seconds later unless written again."""
    keys = ProviderKeys(provider_id)
    with _unavailable(url):
        async with client.pipeline(transaction=True) as pipe:
            pipe.delete(keys.shares)
            fields = share_fields(allocation)
            if fields:
                pipe.hset(keys.shares, mapping=fields)  # type: ignore[arg-type]
                pipe.expire(keys.shares, SHARES_TTL)
            await pipe.execute()


async def read_state(client: aioredis.Redis[bytes], url: str, provider_id: str) -> ProviderState:
    """The provider's rules, recent firings and groups' last permit requests, one MULTI/EXEC
    round trip. On Redis Cluster (whose pipelines refuse keyless commands such as TIME) the
    reads go in a plain pipeline (redis-py 7.4's cluster MULTI fails on HGETALL's reply
    callback) and the clock is read by a second call, on the node that owns the provider's
    hash tag: the clock the workers' scripts use."""
    keys = ProviderKeys(provider_id)
    cluster = is_cluster(client)
    with _unavailable(url):
        async with client.pipeline(transaction=not cluster) as pipe:
            pipe.hgetall(keys.rules)
            pipe.lrange(keys.fired, 0, 99)
            if not cluster:
                pipe.time()
            pipe.exists(keys.shares)
            pipe.hgetall(keys.demand)
            results = await pipe.execute()
        if cluster:
            raw_rules, fired, present, raw_demand = results
            c = cast(Any, client)
            now = await c.time(target_nodes=c.get_node_from_key(keys.rules))
        else:
            raw_rules, fired, now, present, raw_demand = results
    rules = []
    for name, value in raw_rules.items():
        parsed = RuleState.parse(_text(name), _text(value))
        if parsed is not None:
            rules.append(parsed)
    replies: dict[str, str] = {}
    for entry in fired:  # newest first: the first seen per rule wins
        parts = _text(entry).split("|", 5)
        if len(parts) == 6 and parts[0] not in replies:
            replies[parts[0]] = parts[5]
    demand: dict[str, float] = {}
    for group, value in raw_demand.items():
        try:
            demand[_text(group)] = int(_text(value)) / 1000
        except ValueError:
            continue
    return ProviderState(rules, replies, int(now[0]) + int(now[1]) / 1e6, bool(present), demand)


async def forget_demand(
    client: aioredis.Redis[bytes], url: str, provider_id: str, groups: Sequence[str]
) -> None:
    """Delete ``groups``' entries from the provider's ``demand`` hash (entries older than
    :data:`DEMAND_FORGET`: groups deleted or long idle; the hash would otherwise keep every
    group that ever sent)."""
    if not groups:
        return
    with _unavailable(url):
        await client.hdel(ProviderKeys(provider_id).demand, *groups)
