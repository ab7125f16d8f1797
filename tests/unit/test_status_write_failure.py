"""A status write that fails is not remembered as written (issue 15's finding: after a
429-heavy cold start some groups never got a status, because ``Runtime.written`` held a status
the API server never took, and every later pass planned from it and saw nothing to write)."""

from __future__ import annotations

import asyncio

import kubernetes.client as k8s
import pytest
import urllib3

from sendgroup_operator import handlers, models, reconcile
from sendgroup_operator.kube import Kube
from sendgroup_operator.settings import Settings
from tests.support.ports import free_port


def _closed_port() -> int:
    return free_port()  # nothing listens there: free a moment ago, below the ephemeral range


def test_a_failed_status_write_is_forgotten_so_the_next_pass_writes_again() -> None:
    config = k8s.Configuration(host=f"http://127.0.0.1:{_closed_port()}")
    config.retries = 0
    kube = Kube(k8s.ApiClient(config))
    rt = reconcile.Runtime(settings=Settings(), kube=kube)
    status = models.SendGroupStatus(phase="Running")
    rt.written["mail/gmail"] = ("uid-1", status)
    rt.written["mail/other"] = ("uid-2", status)

    with pytest.raises(urllib3.exceptions.MaxRetryError):  # connection refused, propagated
        asyncio.run(handlers.write_status(rt, "mail", "gmail", status))

    assert "mail/gmail" not in rt.written  # the next pass starts from the API server's status
    assert "mail/other" in rt.written  # other groups' records are untouched
