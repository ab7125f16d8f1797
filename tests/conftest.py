"""Shared fixtures. Importing this needs no infrastructure: servers start only when a test
asks for their fixture, so the unit tier runs anywhere."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port for the whole session."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of the session's Redis, flushed before the test."""
    redis_server.client().flushall()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def smtp_sink_server() -> Iterator[SmtpSink]:
    """A real SMTP server (aiosmtpd) on a free loopback port for the whole session."""
    sink = SmtpSink().start()
    yield sink
    sink.stop()


@pytest.fixture
def smtp_sink(smtp_sink_server: SmtpSink) -> SmtpSink:
    """The session's SMTP sink with its scripts and records cleared."""
    smtp_sink_server.reset()
    return smtp_sink_server
