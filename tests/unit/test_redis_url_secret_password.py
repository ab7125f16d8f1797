"""A password from a Secret written without percent-encoding (``/``, ``#``, ``?``, ``@``
inside) stays whole, and no error message repeats any part of the URL (issue 16, item 5)."""

from __future__ import annotations

import pytest

from sendgroup_worker import redisurl
from sendgroup_worker.config import ConfigError, WorkerConfig

PW = "s3/cr#t?pa@ss:w0rd"
PIECES = ("s3/cr", "cr#t", "t?pa", "pa@ss", "w0rd")


@pytest.mark.parametrize(
    ("url", "nodes", "db", "password"),
    [
        (f"redis://:{PW}@h:1/2", (("h", 1),), 2, PW),
        (f"redis://user:{PW}@h/3", (("h", 6379),), 3, PW),
        (f"rediss://:{PW}@h:6380/0?ssl_ca_certs=/x/ca.pem", (("h", 6380),), 0, PW),
        ("redis://h:6379/0?ssl_ca_certs=/a@b/ca.pem", (("h", 6379),), 0, None),
        (f"redis+sentinel://:{PW}@s1:26379,s2/mymaster/1", (("s1", 26379), ("s2", 26379)), 1, PW),
        ("redis://:p%2Fw@h", (("h", 6379),), 0, "p/w"),
    ],
)
def test_an_unencoded_password_stays_whole(
    url: str, nodes: tuple[tuple[str, int], ...], db: int, password: str | None
) -> None:
    target = redisurl.parse(url)
    assert (target.nodes, target.db, target.password) == (nodes, db, password)


def test_a_socket_url_with_an_unencoded_password() -> None:
    target = redisurl.parse(f"unix://:{PW}@/run/redis.sock?db=2")
    assert (target.socket, target.db, target.password) == ("/run/redis.sock", 2, PW)


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{PW}@h:port/0",
        f"redis://:{PW}@h:99999/0",
        f"redis://:{PW}@h/zero",
        f"redis://:{PW}@/0",
        f"redis://:{PW}@h/0?connection_class=x",
        f"redis://:{PW}@h/0\r\n",
        "redis://:s3/cr@h:6379/0",  # the classic bad split: 'cr@h...' as a path
    ],
)
def test_errors_never_repeat_a_piece_of_the_url(url: str) -> None:
    try:
        redisurl.parse(url)
    except redisurl.RedisUrlError as err:
        assert not [p for p in PIECES if p in str(err)], str(err)
    with pytest.raises(ConfigError) if _bad(url) else _nothing():
        WorkerConfig.from_env({"SENDGROUP_QUEUE": "q", "REDIS_URL": url})


def _bad(url: str) -> bool:
    try:
        redisurl.parse(url)
    except redisurl.RedisUrlError:
        return True
    return False


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_describe_and_redact_hide_every_credential() -> None:
    url = f"redis://user:{PW}@redis.example:6380/1"
    assert "redis.example:6380" in redisurl.describe(url) and "w0rd" not in redisurl.describe(url)
    shown = redisurl.redact(f"failed: {url} with {PW}", url)
    assert PW not in shown and "w0rd" not in shown and "redis.example" in shown
