"""The reaper follows kopf's operator-wide pause (peering: a replica that sees a peer of higher
priority pauses; kopf stopped every daemon then, and the reaper is no kopf daemon any more):
no pass starts while kopf is paused, and every group passes when it resumes."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace
from typing import Any

import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._core.engines import daemons
from kopf._core.reactor import running

from sendgroup_operator import kopfpause
from tests.unit.test_handover import BODY, INITIAL, passes, see, with_reaper  # noqa: F401


def test_kopf_hands_its_pause_to_the_daemon_killer_we_wrap() -> None:
    """The installed kopf still starts its daemon killer from ``spawn_tasks`` through the
    module attribute, with the pause toggles as ``operator_paused`` (what install() relies on)."""
    source = inspect.getsource(running.spawn_tasks)
    assert "daemons.daemon_killer(" in source
    assert "operator_paused=operator_paused" in source
    assert "operator_paused" in inspect.signature(daemons.daemon_killer).parameters


def test_install_captures_the_toggles_kopf_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daemons, "daemon_killer", daemons.daemon_killer)  # undone after
    monkeypatch.setattr(kopfpause, "_toggles", None)
    kopfpause.install()
    kopfpause.install()  # idempotent: one wrapper

    async def scenario() -> list[bool]:
        toggles = aiotoggles.ToggleSet(any)
        coro = daemons.daemon_killer(settings=None, memories=None, operator_paused=toggles)
        coro.close()  # kopf would run it; here only the call matters
        seen = [kopfpause.paused()]
        toggle = await toggles.make_toggle(name="peering conflicts")
        await toggle.turn_to(True)
        seen.append(kopfpause.paused())
        await toggle.turn_to(False)
        seen.append(kopfpause.paused())
        return seen

    assert asyncio.run(scenario()) == [False, True, False]


def test_no_reaper_pass_while_kopf_is_paused_and_all_pass_on_resume(
    passes: list[float],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    toggles = aiotoggles.ToggleSet(any)
    monkeypatch.setattr(kopfpause, "_toggles", toggles)  # as install() left it

    async def scenario(memo: SimpleNamespace) -> None:
        toggle: Any = await toggles.make_toggle(True, name="peering conflicts")
        await see(memo, BODY)
        await asyncio.sleep(INITIAL + 0.1)
        assert passes == []  # paused: due, but parked
        memo.runtime.kick("mail/g", 0)
        await asyncio.sleep(0.05)
        assert passes == []
        await toggle.turn_to(False)  # kopf resumes
        await asyncio.sleep(0.1)
        assert len(passes) == 1

    with_reaper(scenario)
