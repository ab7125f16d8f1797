"""The one Redis URL parser (sendgroup_worker.redisurl): every form users write, the errors
they get, and that no message or log form ever shows a password."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sendgroup_operator import models
from sendgroup_worker import redisurl
from sendgroup_worker.redisurl import RedisUrlError, parse


@pytest.mark.parametrize(
    ("url", "kind", "tls", "nodes", "db", "service"),
    [
        ("redis://r:6379/0", "detect", False, [("r", 6379)], 0, None),
        ("redis://r", "detect", False, [("r", 6379)], 0, None),
        ("rediss://r:6380/2", "detect", True, [("r", 6380)], 2, None),
        ("redis://r:6379/3?cluster=false", "standalone", False, [("r", 6379)], 3, None),
        ("redis://r:7000/?cluster=true", "cluster", False, [("r", 7000)], 0, None),
        (
            "redis+cluster://a:7000,b:7001,c/",
            "cluster",
            False,
            [("a", 7000), ("b", 7001), ("c", 6379)],
            0,
            None,
        ),
        (
            # AWS ElastiCache cluster mode: the configuration endpoint, TLS
            "rediss+cluster://app:pw@clustercfg.x.cache.amazonaws.com:6379",
            "cluster",
            True,
            [("clustercfg.x.cache.amazonaws.com", 6379)],
            0,
            None,
        ),
        (
            # Bitnami redis chart, sentinel.enabled=true: one Service on 26379, master set mymaster
            "redis+sentinel://:pw@redis.ns.svc:26379/mymaster/1",
            "sentinel",
            False,
            [("redis.ns.svc", 26379)],
            1,
            "mymaster",
        ),
        (
            "rediss+sentinel://s1,s2:26380/main",
            "sentinel",
            True,
            [("s1", 26379), ("s2", 26380)],
            0,
            "main",
        ),
        ("redis://[::1]:7000/0", "detect", False, [("::1", 7000)], 0, None),
    ],
)
def test_every_form_parses(
    url: str,
    kind: str,
    tls: bool,
    nodes: list[tuple[str, int]],
    db: int,
    service: str | None,
) -> None:
    t = parse(url)
    assert (t.kind, t.tls, list(t.nodes), t.db, t.service) == (kind, tls, nodes, db, service)


def test_acl_user_password_and_options() -> None:
    t = parse("rediss+cluster://mailer:p%40ss@h:1/?ssl_cert_reqs=none&socket_timeout=2")
    assert (t.username, t.password) == ("mailer", "p@ss")
    assert dict(t.options) == {"ssl_cert_reqs": "none", "socket_timeout": "2"}
    s = parse("redis+sentinel://u:pw@s:26379/m?sentinel_auth=none")
    assert s.sentinel_auth is False and s.password == "pw"


def test_unix_socket() -> None:
    t = parse("unix:///run/redis.sock?db=2")
    assert (t.socket, t.db, t.kind) == ("/run/redis.sock", 2, "standalone")
    t = parse("unix://u:p%40ss@/run/redis.sock")
    assert (t.username, t.password, t.socket) == ("u", "p@ss", "/run/redis.sock")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://r:6379", "scheme 'http'"),
        ("r:6379", "not a Redis URL"),
        ("redis://a:1,b:2/0", "redis\\+cluster://"),
        ("redis+cluster://a:1,b:2/3", "only database 0"),
        ("redis+sentinel://s:26379", "without a master name"),
        ("redis+sentinel://s:26379/m/x", "must be a number"),
        ("redis://r:6379/0?cluster=maybe", "cluster= must be true or false"),
        ("redis://r:6379/0?clustre=true", "unknown Redis URL option 'clustre'"),
        ("redis://r:99999/0", "bad port"),
        ("redis://:6379/0", "empty host"),
        ("redis://r:6379/0?sentinel_auth=none", "only applies to redis\\+sentinel"),
        ("redis+cluster://a,,b/", "empty host"),
    ],
)
def test_bad_urls_get_one_clear_error(url: str, message: str) -> None:
    with pytest.raises(RedisUrlError, match=message):
        parse(url)


def test_errors_and_descriptions_never_show_the_password() -> None:
    url = "redis+cluster://u:hunter2@a:1,b:2/?password=hunter3"
    t = parse(url)
    assert t.password == "hunter3"  # the query option wins, as in redis-py
    assert "hunter" not in t.describe() and "hunter" not in repr(t)
    text = f"cannot reach {url}: auth failed for hunter2 and hunter3"
    assert "hunter" not in redisurl.redact(text, url)
    with pytest.raises(RedisUrlError) as caught:
        parse("redis://u:hunter2@r:1/0?bogus=1")
    assert "hunter2" not in str(caught.value)
    assert redisurl.describe("redis+sentinel://:pw@s1:26379,s2/m") == (
        "sentinel master 'm' via s1:26379,s2:26379"
    )


@pytest.mark.parametrize(
    ("url", "has"),
    [
        ("redis://r:6379/0", False),
        ("redis://user@r:6379/0", False),
        ("redis+cluster://a:1,b:2/", False),
        ("redis+sentinel://s1:26379,s2:26379/m", False),
        ("redis://:pw@r:6379/0", True),
        ("rediss+cluster://u:pw@a:1,b:2/", True),
        ("redis+sentinel://s:26379/m?sentinel_password=x", True),
        ("redis://r/0?Password=x", True),
    ],
)
def test_password_rule_matches_the_crd(url: str, has: bool) -> None:
    assert redisurl.has_password(url) is has
    rule = models.RedisSpec.model_json_schema()["properties"]["url"]["x-kubernetes-validations"]
    scheme_rule = rule[0]["rule"]
    assert redisurl.URL_SCHEME_PATTERN in scheme_rule
    assert re.search(redisurl.URL_SCHEME_PATTERN, url)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(st.from_regex(redisurl.SPEC_URL_PATTERN, fullmatch=True))
def test_every_url_of_the_spec_grammar_parses(url: str) -> None:
    """The CRD's ``redis.url`` grammar (issue 16) never lets through a URL the parser refuses
    (against the API server: tests/cluster/test_spec_grammar_agreement.py)."""
    assert redisurl.check_spec_url(url) == url


def test_spec_grammar_refuses_what_the_parser_would_and_more() -> None:
    for url in (
        "redis://",
        "redis://h:0",
        "redis://h:65536",
        "redis://h/0/1",
        "redis://h?foo=1",
        "redis://a,b",
        "redis://h/0?cluster=true&db=2",
        "redis+cluster://a,b/3",
        "redis+sentinel://s1,s2",
        "redis://u:p@h",
        "redis://h?password=x",
        "unix:///run/redis.sock",
    ):
        with pytest.raises(redisurl.RedisUrlError, match=r"rule: redis\.url grammar"):
            redisurl.check_spec_url(url)
    for url in (
        "redis://redis.mail.svc:6379/0",
        "rediss://[::1]:6380/2?ssl_cert_reqs=none",
        "redis://h:7000/?cluster=true",
        "redis+cluster://h1:7000,h2:7001/",
        "redis+sentinel://s1:26379,s2:26379/mymaster/1?sentinel_auth=none",
    ):
        assert redisurl.check_spec_url(url) == url
