"""redis-py's asyncio cluster client reports node objects it drops after a slot-map refresh as
"Unclosed ClusterNode object" through the event loop (ERROR in the worker log at every
failover, redis-py #3572). The worker's loop logs exactly that notice at DEBUG and hands every
other report to asyncio's handler as before."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sendgroup_worker.redisclient import CLUSTER_NODE_NOTICE, quiet_cluster_node_notices


def _report(context: dict[str, object]) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        quiet_cluster_node_notices(loop)
        loop.call_exception_handler(context)

    asyncio.run(main())


def test_the_cluster_node_notice_is_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _report({"message": CLUSTER_NODE_NOTICE, "client": "node 127.0.0.1:7000"})
    levels = [(r.name, r.levelno) for r in caplog.records if CLUSTER_NODE_NOTICE in r.getMessage()]
    assert levels == [("sendgroup_worker.redisclient", logging.DEBUG)]


def test_other_reports_still_reach_asyncio_at_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _report({"message": "Task exception was never retrieved", "exception": RuntimeError("x")})
    _report({"message": CLUSTER_NODE_NOTICE, "exception": RuntimeError("a real failure")})
    errors = [r for r in caplog.records if r.name == "asyncio" and r.levelno == logging.ERROR]
    assert len(errors) == 2, [r.getMessage() for r in caplog.records]
