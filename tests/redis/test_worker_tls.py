"""The worker talking to a relay over STARTTLS and implicit TLS, with AUTH, verifying the
relay's certificate against SMTP_CA_FILE (a self-signed certificate made by openssl here)."""

from __future__ import annotations

import json
import shutil
import signal
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess, mail_payload, sync_queue, wait_for, worker_env

pytestmark = pytest.mark.redis

Q = "mail-tls"


@pytest.fixture(scope="module")
def relay_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, self-signed, valid one day."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl not found: apt-get install openssl (makes the test certificate)")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "relay.pem", folder / "relay.key"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(params=["starttls", "tls"])
def tls_sink(request: pytest.FixtureRequest, relay_cert: tuple[Path, Path]) -> Iterator[SmtpSink]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*relay_cert)
    sink = SmtpSink(tls=request.param, ssl_context=context, credentials=("mailer", "s3cret"))
    sink.start()
    yield sink
    sink.stop()


def test_tls_relay_with_auth_delivers(
    redis_url: str, tls_sink: SmtpSink, relay_cert: tuple[Path, Path], tmp_path: Path
) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("s3cret\n")
    q = sync_queue(redis_url, Q)
    env = worker_env(
        redis_url,
        Q,
        tls_sink.port,
        SMTP_TLS=tls_sink.tls,
        SMTP_CA_FILE=relay_cert[0],
        SMTP_USERNAME="mailer",
        SMTP_PASSWORD_FILE=password_file,
    )
    w = WorkerProcess(env)
    try:
        q.push_many([mail_payload(f"t{i}@x.example") for i in range(5)])
        wait_for(lambda: len(tls_sink.snapshot()) == 5, 20, "5 mails over TLS")
    finally:
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
        w.stop()
    assert q.measure().delivered == 5


def test_wrong_relay_password_releases_instead_of_failing_the_mail(
    redis_url: str, tls_sink: SmtpSink, relay_cert: tuple[Path, Path]
) -> None:
    q = sync_queue(redis_url, Q)
    payload = mail_payload("auth@x.example")
    env = worker_env(
        redis_url,
        Q,
        tls_sink.port,
        SMTP_TLS=tls_sink.tls,
        SMTP_CA_FILE=relay_cert[0],
        SMTP_USERNAME="mailer",
        SMTP_PASSWORD="wrong",
        WORKER_BACKOFF="30",
    )
    w = WorkerProcess(env)
    try:
        q.push(payload)
        wait_for(lambda: q.measure().delayed == 1, 15, "the job released")
    finally:
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
        w.stop()
    assert tls_sink.snapshot() == []
    assert q.measure().failed == 0
    # the relay refused the login (or never answered it): the relay's fault, not the mail's
    assert f"job {json.loads(payload)['uuid']}: attempt 1:" in w.log()
