"""The kubectl plugin against a fake API server answer: a label selector the API server refuses
as malformed (400 BadRequest on the LIST) is a usage error, exit 2 (docs/cli.md's table), not
exit 1 as a refused change; other answers keep their codes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from kubernetes.client.exceptions import ApiException

from sendgroup_operator.cli import api, main


def _status(code: int, reason: str, message: str) -> ApiException:
    """An ApiException as kubernetes' client raises it for an API server Status answer."""
    exc = ApiException(status=code, reason=reason)
    exc.body = json.dumps(
        {"kind": "Status", "status": "Failure", "message": message, "reason": reason, "code": code}
    ).encode()
    return exc


class FakeCustomObjects:
    """CustomObjectsApi whose LISTs raise ``error`` and record their keyword arguments."""

    def __init__(self, error: ApiException) -> None:
        self.error = error
        self.calls: list[dict[str, Any]] = []

    def _list(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        raise self.error

    list_namespaced_custom_object = _list
    list_cluster_custom_object = _list


def _run(
    monkeypatch: pytest.MonkeyPatch, error: ApiException, args: list[str]
) -> tuple[Any, FakeCustomObjects]:
    fake = FakeCustomObjects(error)
    client = api.Client(api=None, namespace="mail", server="https://127.0.0.1:6443")
    monkeypatch.setattr(api.Client, "_custom", lambda self: fake)
    monkeypatch.setattr(api, "connect", lambda kubeconfig, context: client)
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    return result, fake


# 400 messages for `-l 'a b c'` and `-l '!!'` as k8s.io/apimachinery's labels.Parse words
# them (written from its source, not captured from a live API server).
MALFORMED = [
    ("a b c", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    ("!!", "unable to parse requirement: found '!', expected: identifier"),
]


@pytest.mark.parametrize(("selector", "message"), MALFORMED)
@pytest.mark.parametrize(
    "verb", [["status"], ["status", "-A"], ["pause"], ["cancel", "-y"], ["status", "-w"]]
)
def test_a_malformed_selector_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, selector: str, message: str, verb: list[str]
) -> None:
    result, fake = _run(monkeypatch, _status(400, "BadRequest", message), [*verb, "-l", selector])
    assert result.exit_code == 2, result.output
    assert fake.calls == [{"_preload_content": False, "label_selector": selector}]
    lines = result.output.splitlines()
    assert lines == [f"error: -l {selector!r}: not a valid label selector: {message}"]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (_status(403, "Forbidden", "sendgroups is forbidden: User cannot list"), 4),
        (_status(500, "InternalError", "etcd timed out"), 1),
    ],
)
def test_other_list_failures_with_a_selector_keep_their_codes(
    monkeypatch: pytest.MonkeyPatch, error: ApiException, code: int
) -> None:
    result, _ = _run(monkeypatch, error, ["status", "-l", "tier=bulk"])
    assert result.exit_code == code, result.output


def test_a_bad_request_without_a_selector_stays_a_rejection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 400 on a LIST without -l is not the user's selector: exit 1, the server's message."""
    result, _ = _run(monkeypatch, _status(400, "BadRequest", "something else"), ["pause", "--all"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == ["error: something else"]
