"""The worker's asyncio Redis connections pack commands with hiredis' C packer
(``redisclient._HiredisPack``): the same bytes as redis-py's own Python packer, for every
argument type the queue code sends (memoryviews through redis-py's own packer), and the same
error for one RESP cannot carry."""

from __future__ import annotations

import pytest
import redis.asyncio.connection
import redis.exceptions
from hypothesis import given, settings
from hypothesis import strategies as st

from sendgroup_worker import redisclient
from sendgroup_worker.redisurl import parse

_ARG = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.binary(max_size=40).map(memoryview),  # redis-py sends these as is; hiredis refuses them
)


def _pair() -> tuple[redis.asyncio.connection.Connection, redis.asyncio.connection.Connection]:
    client = redisclient.build_async(parse("redis://127.0.0.1:1/0"), "standalone")
    ours = client.connection_pool.connection_class(host="127.0.0.1", port=1)
    return ours, redis.asyncio.connection.Connection(host="127.0.0.1", port=1)


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(["EVALSHA", "CONFIG GET", b"LPUSH", b"SCRIPT LOAD"]),
    args=st.lists(_ARG, max_size=25),
)
def test_hiredis_packs_the_bytes_redis_py_packs(name: str | bytes, args: list[object]) -> None:
    ours, theirs = _pair()
    assert isinstance(ours, redisclient._HiredisPack)
    assert b"".join(ours.pack_command(name, *args)) == b"".join(theirs.pack_command(name, *args))


def test_an_argument_resp_cannot_carry_is_a_data_error_as_in_redis_py() -> None:
    ours, theirs = _pair()
    for bad in (None, object()):
        with pytest.raises(redis.exceptions.DataError):
            theirs.pack_command("SET", "k", bad)
        with pytest.raises(redis.exceptions.DataError):
            ours.pack_command("SET", "k", bad)


def test_every_kind_of_client_gets_the_packer_and_the_direct_write() -> None:
    standalone = redisclient.build_async(parse("redis://127.0.0.1:1/0"), "standalone")
    sentinel = redisclient.build_async(parse("redis+sentinel://127.0.0.1:1/mymaster/0"), "sentinel")
    cluster = redisclient.build_async(parse("redis://127.0.0.1:1/0"), "cluster")
    for pool in (standalone.connection_pool, sentinel.connection_pool):  # type: ignore[union-attr]
        assert issubclass(pool.connection_class, redisclient._HiredisPack)
        assert issubclass(pool.connection_class, redisclient._DirectWrite)
    kwargs = cluster.connection_kwargs  # type: ignore[union-attr]
    assert issubclass(kwargs["connection_class"], redisclient._HiredisPack)
    assert issubclass(kwargs["connection_class"], redisclient._DirectWrite)
