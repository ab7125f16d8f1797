"""Naming a Redis deployment: one URL form for standalone, Redis Cluster and Sentinel.

Pure parsing, no I/O and no ``redis`` import (the operator's CRD generator and the contract
package use it); :mod:`sendgroup_worker.redisclient` turns a :class:`RedisTarget` into a client.

Forms (``rediss`` instead of ``redis`` everywhere means TLS; user and password are an ACL user
and its password, percent-encoded; redis-py's query options such as ``ssl_ca_certs``,
``ssl_cert_reqs``, ``socket_timeout`` or ``protocol`` are passed on)::

    redis://[user:password@]host[:6379][/db]                   standalone, or a Cluster node:
                                                               detected with INFO cluster
    redis://host:6379/0?cluster=false                          standalone, never probed
    redis+cluster://[user:password@]h1:p1,h2:p2[,...][/0]      Redis Cluster, seed nodes
    redis://host:6379/?cluster=true                            Redis Cluster, one seed node
    redis+sentinel://[user:password@]s1:26379,s2:26379/mymaster[/db]
                                                               the primary of ``mymaster``,
                                                               found through these Sentinels
    unix:///run/redis.sock?db=0                                a local socket (standalone)

Sentinel: the URL's user and password authenticate to the data nodes and, unless
``sentinel_auth=none``, to the Sentinels too (the shape of the common Helm charts, where both
share one password). Cluster: database 0 only (Redis Cluster has no other).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import parse_qsl, unquote

#: URL schemes accepted everywhere a Redis URL is taken.
SCHEMES: Final = (
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
    "unix",
)

#: Regex (RE2 and Python) a network Redis URL must match: the CRD's ``redis.url`` rule.
URL_SCHEME_PATTERN: Final = r"^rediss?([+](cluster|sentinel))?://"

#: Regex (RE2 and Python) matching a URL that carries a password (``user:password@`` or a
#: ``password=``/``sentinel_password=`` query parameter): the CRD refuses those in spec.
PASSWORD_PATTERNS: Final = (
    r"^rediss?([+](cluster|sentinel))?://[^/@]*:[^/@]*@",
    r"[?&](?i:[a-z_]*password)=",
)

#: Query options of redis-py's ``parse_url`` and the connection keywords a URL may set.
_REDIS_PY_OPTIONS: Final = frozenset(
    {
        "db",
        "password",
        "username",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "retry_on_timeout",
        "max_connections",
        "health_check_interval",
        "client_name",
        "protocol",
        "timeout",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_ciphers",
    }
)

#: Our own query options (consumed here, never passed to redis-py).
_OWN_OPTIONS: Final = frozenset({"cluster", "sentinel_auth"})


def _spec_url_pattern() -> str:
    """The grammar of ``spec.redis.url`` (no user info, no password option, no fragment), one
    regex that RE2 (the CRD's CEL rule, a raw string ``r'...'``) and Python (the operator's
    model) read alike. Every URL it matches, :func:`parse`
    accepts (a property test against the API server checks the two agree):

    * ``redis[s]://host[:port][/db][?opts]``, or with ``cluster=true|false`` and database 0;
    * ``redis[s]+cluster://h1[:p1],h2[:p2]...[/[0]][?opts]``;
    * ``redis[s]+sentinel://s1[:p1],...[/]master[/db][/][?opts|sentinel_auth=none|same]``.

    ``host``: letters, digits, ``_.-``, or ``[ipv6]``; ``port`` 1..65535; ``opts``: redis-py
    options other than user, password and db (values of ``[A-Za-z0-9_./:-]``), and ``db=N``
    where a database applies."""
    host = r"([A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])"
    port = "([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
    node = f"{host}(:{port})?"
    nodes = f"{node}(,{node})*"
    free_names = sorted(_REDIS_PY_OPTIONS - {"db", "password", "username"})
    free = f"({'|'.join(free_names)})=[A-Za-z0-9_./:-]*"

    def query(*extra: str) -> str:
        option = f"({'|'.join((free, *extra))})"
        return f"([?]{option}(&{option})*)?"

    db = "db=[0-9]+"
    boolean = "cluster=(true|false)"
    standalone = f"rediss?://{node}(/[0-9]*)?{query(db)}"
    flagged = f"rediss?://{node}(/0?)?[?]({free}&)*{boolean}(&{free})*"
    cluster = f"rediss?[+]cluster://{nodes}(/0?)?{query()}"
    sentinel = (
        f"rediss?[+]sentinel://{nodes}/[A-Za-z0-9_.-]+(/[0-9]+)?/?"
        f"{query('sentinel_auth=(none|same)')}"
    )
    return f"^({standalone}|{flagged}|{cluster}|{sentinel})$"


#: Regex (RE2 and Python) of a URL allowed in ``spec.redis.url`` (see :func:`_spec_url_pattern`).
SPEC_URL_PATTERN: Final = _spec_url_pattern()

#: A query option in a URL's text (tells an '@' inside an option from user info).
_OPTION_IN_TEXT: Final = re.compile(
    r"[?&](?:" + "|".join(sorted(_REDIS_PY_OPTIONS | _OWN_OPTIONS)) + r")="
)

Kind = Literal["standalone", "cluster", "sentinel", "detect"]


class RedisUrlError(ValueError):
    """A Redis URL that cannot be used; the message never repeats the URL's password."""


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """A parsed Redis URL.

    ``kind``: ``standalone``, ``cluster``, ``sentinel``, or ``detect`` (a plain ``redis://``
    URL: standalone unless the server reports ``cluster_enabled:1``). ``nodes``: (host, port)
    pairs: the server, the cluster's seed nodes or the Sentinels. ``service``: the Sentinel
    master name. ``db``: database number (0 on a cluster). ``options``: the remaining query
    options for redis-py, as strings. ``socket``: a unix socket path (``unix://`` only).
    """

    kind: Kind
    tls: bool
    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    db: int = 0
    service: str | None = None
    sentinel_auth: bool = True
    options: tuple[tuple[str, str], ...] = ()
    socket: str | None = None

    @property
    def scheme(self) -> str:
        """``redis`` or ``rediss`` (TLS) for one node's URL."""
        return "rediss" if self.tls else "redis"

    def describe(self) -> str:
        """A log-safe description (no user, no password): ``cluster 10.0.0.1:6379,...``."""
        if self.socket is not None:
            return f"unix socket {self.socket}"
        hosts = ",".join(f"{h}:{p}" for h, p in self.nodes)
        tls = " (TLS)" if self.tls else ""
        if self.kind == "sentinel":
            return f"sentinel master {self.service!r} via {hosts}{tls}"
        if self.kind == "cluster":
            return f"cluster {hosts}{tls}"
        return f"{hosts}{tls}"


def _port(text: str, default: int) -> int:
    if not text:
        return default
    if not text.isdigit() or not 0 < int(text) < 65536:
        # never the text itself: after a bad split it may be a piece of a password
        raise RedisUrlError("bad port in the Redis URL (a number from 1 to 65535)")
    return int(text)


def _hosts(hostlist: str, default_port: int) -> tuple[tuple[str, int], ...]:
    nodes: list[tuple[str, int]] = []
    for item in hostlist.split(","):
        item = item.strip()
        if not item:
            raise RedisUrlError("empty host in the Redis URL's host list")
        if item.startswith("["):  # [ipv6]:port
            host, _, rest = item[1:].partition("]")
            port = _port(rest.removeprefix(":"), default_port)
        else:
            host, _, port_text = item.rpartition(":") if ":" in item else (item, "", "")
            port = _port(port_text, default_port)
        if not host:
            raise RedisUrlError("empty host in the Redis URL")
        nodes.append((unquote(host), port))
    return tuple(nodes)


def _bool(name: str, value: str) -> bool:
    low = value.lower()
    if low in ("1", "true", "yes", "y", "on"):
        return True
    if low in ("0", "false", "no", "n", "off"):
        return False
    raise RedisUrlError(f"Redis URL option {name}= must be true or false")


def parse(url: str) -> RedisTarget:
    """Parse a Redis URL of any form in this module's docstring.

    Raises :class:`RedisUrlError` (a ValueError) naming what is wrong, never the password.
    """
    if not isinstance(url, str) or "://" not in url:
        raise RedisUrlError(
            "not a Redis URL: expected redis://, rediss://, redis+cluster://, "
            "redis+sentinel:// or unix://"
        )
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise RedisUrlError(
            f"Redis URL scheme {scheme!r} is not one of {', '.join(s + '://' for s in SCHEMES)}"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in url):
        raise RedisUrlError("Redis URL contains a control character (a line break?)")
    # User info first, up to the LAST '@' (a host never holds one): a password from a Secret
    # written without percent-encoding may contain '/', '#', '?' or '@', which would otherwise
    # cut the URL inside the password and put a piece of it into the host, port or path.
    userinfo_raw, at_sign, rest = rest.rpartition("@")
    if not at_sign:
        userinfo_raw, rest = "", rest
    elif "/" in userinfo_raw.partition(":")[0] or _OPTION_IN_TEXT.search(userinfo_raw):
        # an '@' inside a query option (e.g. a certificate path), not user info
        rest, userinfo_raw, at_sign = url.partition("://")[2], "", ""
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    if at_sign:
        netloc = f"{userinfo_raw}@{netloc}"
    options: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in _REDIS_PY_OPTIONS and name not in _OWN_OPTIONS:
            raise RedisUrlError(
                f"unknown Redis URL option {name!r}; known: "
                f"{', '.join(sorted(_REDIS_PY_OPTIONS | _OWN_OPTIONS))}"
            )
        options[name] = value
    if scheme == "unix":
        socket = unquote("/" + path if slash else "")
        if not socket:
            raise RedisUrlError("unix:// Redis URL without a socket path")
        db = _db(options.pop("db", "0"))
        if "cluster" in options or "sentinel_auth" in options:
            raise RedisUrlError("unix:// Redis URLs name one server: no cluster/sentinel options")
        user, password = _userinfo(netloc.rpartition("@")[0])
        return RedisTarget(
            kind="standalone",
            tls=False,
            nodes=(),
            username=user,
            password=password,
            db=db,
            options=tuple(options.items()),
            socket=socket,
        )
    base, _, variant = scheme.partition("+")
    tls = base == "rediss"
    userinfo, at, hostlist = netloc.rpartition("@")
    user, password = _userinfo(userinfo if at else "")
    if "password" in options:
        password = options.pop("password")
    if "username" in options:
        user = options.pop("username")
    cluster_opt = options.pop("cluster", None)
    sentinel_auth_opt = options.pop("sentinel_auth", None)
    if not hostlist:
        raise RedisUrlError("Redis URL without a host")
    segments = [s for s in path.split("/") if s] if slash else []
    db_text = options.pop("db", None)
    if variant == "sentinel":
        nodes = _hosts(hostlist, 26379)
        if not segments:
            raise RedisUrlError(
                "redis+sentinel:// URL without a master name: "
                "redis+sentinel://s1:26379,s2:26379/mymaster[/db]"
            )
        if len(segments) > 2:
            raise RedisUrlError("redis+sentinel:// URL path must be /<master name>[/<db>]")
        service = unquote(segments[0])
        db = _db(segments[1] if len(segments) == 2 else db_text or "0")
        if cluster_opt is not None:
            raise RedisUrlError("the cluster= option does not apply to a redis+sentinel:// URL")
        sentinel_auth = True
        if sentinel_auth_opt is not None:
            if sentinel_auth_opt.lower() not in ("none", "same"):
                raise RedisUrlError("Redis URL option sentinel_auth= must be 'same' or 'none'")
            sentinel_auth = sentinel_auth_opt.lower() == "same"
        return RedisTarget(
            kind="sentinel",
            tls=tls,
            nodes=nodes,
            username=user,
            password=password,
            db=db,
            service=service,
            sentinel_auth=sentinel_auth,
            options=tuple(options.items()),
        )
    if sentinel_auth_opt is not None:
        raise RedisUrlError("the sentinel_auth= option only applies to redis+sentinel:// URLs")
    if len(segments) > 1:
        raise RedisUrlError("Redis URL path must be /<db>")
    db = _db(segments[0] if segments else db_text or "0")
    nodes = _hosts(hostlist, 6379)
    kind: Kind
    if variant == "cluster":
        if cluster_opt is not None and not _bool("cluster", cluster_opt):
            raise RedisUrlError("redis+cluster:// URL with cluster=false: use redis://")
        kind = "cluster"
    elif cluster_opt is not None:
        kind = "cluster" if _bool("cluster", cluster_opt) else "standalone"
    else:
        kind = "detect"
    if kind != "cluster" and len(nodes) > 1:
        raise RedisUrlError(
            "several hosts in a redis:// URL: use redis+cluster://h1:p1,h2:p2/ for a Redis "
            "Cluster or redis+sentinel://s1:26379,s2:26379/<master> for Sentinel"
        )
    if kind == "cluster" and db != 0:
        raise RedisUrlError(f"Redis Cluster has only database 0 (the URL names {db})")
    del fragment
    return RedisTarget(
        kind=kind,
        tls=tls,
        nodes=nodes,
        username=user,
        password=password,
        db=db,
        options=tuple(options.items()),
    )


def _userinfo(text: str) -> tuple[str | None, str | None]:
    if not text:
        return None, None
    user, colon, password = text.partition(":")
    return (unquote(user) or None), (unquote(password) if colon else None) or None


def _db(text: str) -> int:
    if not text.isdigit():
        raise RedisUrlError("Redis database must be a number")
    return int(text)


def check_spec_url(url: str) -> str:
    """``url`` if it fits :data:`SPEC_URL_PATTERN` (whole string, as RE2 reads it) and
    :func:`parse` accepts it; raises :class:`RedisUrlError` otherwise (the message never
    repeats the URL)."""
    if re.fullmatch(SPEC_URL_PATTERN, url) is None:
        raise RedisUrlError(
            "redis.url does not fit the grammar: redis[s]://host[:port][/db], "
            "redis[s]+cluster://h1:p1,h2:p2/ or redis[s]+sentinel://s1:p1,s2:p2/<master>[/db], "
            "with known options only (rule: redis.url grammar)"
        )
    parse(url)
    return url


def check(url: str) -> str:
    """``url`` if :func:`parse` accepts it; raises :class:`RedisUrlError` otherwise."""
    parse(url)
    return url


def has_password(url: str) -> bool:
    """True when ``url`` carries a password (what the CRD's rule refuses in spec)."""
    return any(re.search(p, url) for p in PASSWORD_PATTERNS)


def redact(text: str, url: str) -> str:
    """``text`` with every password of ``url`` (user info, ``password=`` query options)
    replaced by ``***``, and any ``scheme://userinfo@`` shape masked."""
    secrets: list[str] = []
    try:
        target = parse(url)
        if target.password:
            secrets.append(target.password)
    except RedisUrlError:
        pass
    _, _, query = url.partition("?")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name.endswith("password") and value:
            secrets.append(value)
    userinfo = url.partition("://")[2].partition("/")[0].rpartition("@")[0]
    if ":" in userinfo:
        raw = userinfo.partition(":")[2]
        secrets += [raw, unquote(raw)]
    for secret in sorted(filter(None, set(secrets)), key=len, reverse=True):
        text = text.replace(secret, "***")
    return re.sub(r"((?:rediss?(?:\+\w+)?|unix)://)[^@/\s]*@", r"\1***@", text)


def describe(url: str) -> str:
    """A log-safe description of ``url`` (hosts, kind, TLS; no credentials), or
    ``<invalid Redis URL>``."""
    try:
        return parse(url).describe()
    except RedisUrlError:
        return "<invalid Redis URL>"


__all__ = [
    "PASSWORD_PATTERNS",
    "SCHEMES",
    "SPEC_URL_PATTERN",
    "URL_SCHEME_PATTERN",
    "RedisTarget",
    "RedisUrlError",
    "check",
    "check_spec_url",
    "describe",
    "has_password",
    "parse",
    "redact",
]
