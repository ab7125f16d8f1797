"""``kubectl-sendgroup``: the kubectl plugin for the daily operations on SendGroups.

``kubectl sendgroup pause|resume|cancel|complete`` change one spec field of the selected
groups (``spec.paused`` or ``spec.state``) with a JSON merge patch as field manager
``kubectl-sendgroup`` (why not server-side apply: :mod:`sendgroup_operator.cli.api`), never
``status``; ``kubectl sendgroup status`` prints a table per group from the status the operator
wrote. Exit codes: 0 ok, 1 rejected by the API server (or aborted), 2 usage, 3 not found
(object, CRD, nothing matched), 4 forbidden/unauthorized, 5 no kubeconfig/API server
unreachable. docs/cli.md has the long story.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import click

from sendgroup_operator.cli import api, explain, gitops, render

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT: Final = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@dataclass(frozen=True)
class Change:
    """One verb: set ``spec.<field>`` to ``value``; ``done`` is the word printed after."""

    field: str
    value: Any
    default: Any
    done: str


CHANGES: Final = {
    "pause": Change("paused", True, False, "paused"),
    "resume": Change("paused", False, False, "resumed"),
    "cancel": Change("state", "Cancelled", "Active", "cancelled"),
    "complete": Change("state", "Completed", "Active", "completed"),
}


@dataclass(frozen=True)
class Target:
    """Where to look: kubeconfig/context, namespace (None: all) and how to select."""

    kubeconfig: str | None
    context: str | None
    namespace: str | None
    all_namespaces: bool
    names: tuple[str, ...]
    selector: str | None
    campaign: str | None
    all_in_scope: bool


def target_options(fn: F) -> F:
    """The selection and connection options every verb shares (kubectl's names)."""
    options = [
        click.argument("names", nargs=-1),
        click.option(
            "-l", "--selector", help="Label selector, e.g. sendgroups.io/tier=bulk,env!=test."
        ),
        click.option("--campaign", help="Only groups whose spec.campaign is this."),
        click.option(
            "--all", "all_in_scope", is_flag=True, help="Every group in the namespace (or -A)."
        ),
        click.option("-n", "--namespace", help="Namespace (default: the context's)."),
        click.option("-A", "--all-namespaces", is_flag=True, help="Look in every namespace."),
        click.option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, ~/.kube)."),
        click.option("--context", help="Kubeconfig context (default: the current one)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _target(kw: dict[str, Any]) -> Target:
    names = tuple(kw.pop("names"))
    target = Target(
        kubeconfig=kw.pop("kubeconfig"),
        context=kw.pop("context"),
        namespace=kw.pop("namespace"),
        all_namespaces=kw.pop("all_namespaces"),
        names=names,
        selector=kw.pop("selector"),
        campaign=kw.pop("campaign"),
        all_in_scope=kw.pop("all_in_scope"),
    )
    if names and (target.selector or target.all_in_scope or target.all_namespaces):
        raise click.UsageError("give names, or -l/--all/-A, not both")
    if names and target.campaign:
        raise click.UsageError("give names, or --campaign, not both")
    if target.all_namespaces and target.namespace:
        raise click.UsageError("-n and -A exclude each other")
    return target


def _kind_name(obj: dict[str, Any]) -> str:
    return f"sendgroup/{obj['metadata']['name']}"


def _where(obj: dict[str, Any], all_namespaces: bool) -> str:
    """`` (namespace x)`` after a line about ``obj`` when several namespaces are in play."""
    return f" (namespace {obj['metadata'].get('namespace')})" if all_namespaces else ""


def _err(message: str) -> None:
    click.echo(f"error: {message}", err=True)


def _select(client: api.Client, t: Target) -> tuple[list[dict[str, Any]], int]:
    """The selected SendGroups and the exit code of the lookup (3 if a named one is
    missing; the others are still returned). Raises CliError for failures of the list."""
    namespace = None if t.all_namespaces else (t.namespace or client.namespace)
    if t.names:
        found: list[dict[str, Any]] = []
        code = api.EXIT_OK
        assert namespace is not None
        for name in dict.fromkeys(t.names):
            try:
                found.append(client.get(namespace, name))
            except api.NotFound as exc:
                _err(str(exc))
                code = max(code, exc.exit_code)
        return found, code
    items = client.list(namespace, t.selector)
    if t.campaign is not None:
        items = [o for o in items if (o.get("spec") or {}).get("campaign") == t.campaign]
    return items, api.EXIT_OK


def _connect(t: Target) -> api.Client:
    return api.connect(t.kubeconfig, t.context)


def _cancelled(obj: dict[str, Any]) -> bool:
    """Whether the group's ``spec.state`` is Cancelled (final: it sends nothing more)."""
    return bool((obj.get("spec") or {}).get("state") == CHANGES["cancel"].value)


def _change_one(
    client: api.Client, obj: dict[str, Any], change: Change, dry_run: bool, all_ns: bool
) -> int:
    """Set the field on one object (retrying a 409 with a fresh read); print the outcome."""
    meta = obj["metadata"]
    ns, name = meta["namespace"], meta["name"]
    label = _kind_name(obj)
    where = _where(obj, all_ns)
    for attempt in range(3):
        current = (obj.get("spec") or {}).get(change.field, change.default)
        if current == change.value:
            # a Cancelled group sends nothing again, whatever spec.paused says
            final = _cancelled(obj) and change.field != "state"
            note = "; the group is Cancelled: it sends nothing more" if final else ""
            click.echo(
                f"{label} unchanged (spec.{change.field} is already {_js(current)}{note}){where}"
            )
            return api.EXIT_OK
        evidence = gitops.argocd_evidence(obj)
        if evidence and attempt == 0:
            click.echo(gitops.warning(label + where, change.field, evidence), err=True)
        try:
            client.set_spec_field(
                ns, name, change.field, change.value, meta.get("resourceVersion"), dry_run
            )
        except api.Conflict:
            obj = client.get(ns, name)
            meta = obj["metadata"]
            continue
        suffix = " (server dry run)" if dry_run else ""
        click.echo(f"{label} {change.done}{suffix}{where}")
        return api.EXIT_OK
    raise api.Rejected("it kept changing while being updated; try again")


def _js(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def _run_change(verb: str, t: Target, dry_run: bool, yes: bool) -> int:
    change = CHANGES[verb]
    if not (t.names or t.selector or t.campaign or t.all_in_scope):
        raise click.UsageError(
            f"say which groups to {verb}: NAME..., -l SELECTOR, --campaign ID or --all"
        )
    client = _connect(t)
    objs, code = _select(client, t)
    if not objs:
        if code == api.EXIT_OK:
            _err("no sendgroups matched: nothing changed")
            code = api.EXIT_NOT_FOUND
        return code
    if verb == "cancel" and not yes and not dry_run:
        todo = [o for o in objs if not _cancelled(o)]
        if todo:
            names = ", ".join(_kind_name(o) + _where(o, t.all_namespaces) for o in todo)
            click.echo(
                f"Cancelling stops the workers and purges the queued jobs and dumps of: {names}."
                "\nCancelled is final (no way back to Active).",
                err=True,
            )
            try:
                confirmed = click.confirm("Cancel?", default=False, err=True)
            except click.Abort:  # end of input (no terminal, nothing piped in)
                click.echo("", err=True)
                confirmed = False
            if not confirmed:
                _err("aborted: nothing changed (pass --yes to cancel without the question)")
                return api.EXIT_REJECTED
    for obj in objs:
        try:
            code = max(code, _change_one(client, obj, change, dry_run, t.all_namespaces))
        except api.CliError as exc:
            _err(f"{_kind_name(obj)}{_where(obj, t.all_namespaces)}: {exc}")
            code = max(code, exc.exit_code)
    return code


def _guard(fn: Callable[[], int]) -> None:
    """Run a command body; CliError -> one line on stderr and its exit code; Ctrl-C -> 130."""
    try:
        code = fn()
    except api.CliError as exc:
        _err(str(exc))
        code = exc.exit_code
    except KeyboardInterrupt:
        click.echo("", err=True)
        code = 130
    sys.exit(code)


@click.group(context_settings=CONTEXT)
def main() -> None:
    """Daily operations on SendGroups: pause, resume, cancel, complete and status.

    Changes touch exactly one spec field (spec.paused or spec.state) with a JSON merge
    patch as field manager kubectl-sendgroup; status is never written. As a kubectl plugin:
    kubectl sendgroup VERB ...
    """


def _change_command(verb: str, help_text: str) -> None:
    @main.command(verb, help=help_text, context_settings=CONTEXT)
    @target_options
    @click.option(
        "--dry-run",
        type=click.Choice(["none", "server"]),
        default="none",
        help="server: the API server validates the change (CEL rules too), nothing is saved.",
    )
    @click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation (cancel).")
    def command(dry_run: str, yes: bool, **kw: Any) -> None:
        t = _target(kw)
        _guard(lambda: _run_change(verb, t, dry_run == "server", yes))


_change_command(
    "pause",
    "Pause groups: spec.paused=true. Workers go to 0 at once; a queue left unchanged for "
    "reaper.dumpAfter is dumped to the volume.",
)
_change_command(
    "resume",
    "Resume paused groups: spec.paused=false. A dumped queue is restored before workers start.",
)
_change_command(
    "cancel",
    "Cancel groups: spec.state=Cancelled. Workers stop, then the queue and any dump are "
    "purged. Final: asks for confirmation unless --yes.",
)
_change_command(
    "complete",
    "Mark groups Completed: spec.state=Completed. No more jobs will be pushed; workers drain "
    "the queue, then go.",
)


class Seconds(click.FloatRange):
    """A finite number of seconds within the range: ``click.FloatRange`` alone lets ``nan``
    through (it compares false with every bound) and ``inf``/``1e400`` when there is no
    maximum, so ``--timeout nan`` never ran out and ``time.sleep(nan)`` was a traceback."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds.", param, ctx)
        return super().convert(number, param, ctx)


#: --interval's maximum: the operator refreshes a group's status every few seconds, so a
#: longer pause between refreshes shows nothing new (and time.sleep overflows near 1e10)
MAX_INTERVAL: Final = 3600.0


def _render(rows: list[render.Row], t: Target, output: str, ascii_only: bool) -> str:
    if output == "json":
        return json.dumps([r.to_json() for r in rows], indent=2)
    if not rows:
        where = "any namespace" if t.all_namespaces else f"namespace {t.namespace or 'default'}"
        return f"No sendgroups found in {where}."
    return f"{render.table(rows, t.all_namespaces, ascii_only)}\n{render.summary(rows)}"


def _run_status(t: Target, output: str, watch: bool, interval: float, timeout: float | None) -> int:
    client = _connect(t)
    if t.namespace is None and not t.all_namespaces:
        t = Target(**{**asdict(t), "namespace": client.namespace})
    ascii_only = "utf" not in (sys.stdout.encoding or "").lower()
    tty = sys.stdout.isatty()
    deadline = None if timeout is None else time.monotonic() + timeout
    last = None
    while True:
        objs, code = _select(client, t)
        rows = [render.Row.from_object(o) for o in objs]
        text = _render(rows, t, output, ascii_only)
        if not watch:
            click.echo(text)
            return code
        if tty:  # redraw in place every time: the clock shows it is alive
            click.clear()
            stamp = datetime.now(UTC).strftime("%H:%M:%S UTC")
            click.echo(f"{text}\n({stamp}, every {interval:g}s until done)")
        elif text != last:  # a log: a new table only when something changed
            click.echo(f"{text}\n")
            last = text
        if all(r.done() for r in rows):
            return code
        if deadline is not None and time.monotonic() >= deadline:
            _err(f"not done after {timeout:g}s")
            return api.EXIT_REJECTED
        time.sleep(interval)


@main.command("status", context_settings=CONTEXT)
@target_options
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@click.option("-w", "--watch", is_flag=True, help="Refresh until every group is done.")
@click.option(
    "--interval",
    type=Seconds(min=0.2, max=MAX_INTERVAL),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes with --watch, 0.2 to 3600 (the operator refreshes the "
    "status every few seconds: an hour apart is already more than enough).",
)
@click.option(
    "--timeout", type=Seconds(min=0), help="Give up --watch after seconds (finite, >= 0)."
)
def status(output: str, watch: bool, interval: float, timeout: float | None, **kw: Any) -> None:
    """Per-group table: campaign, host, phase, workers ready/desired, queue ready/delayed/
    reserved/failed, progress, oldest job age, and the conditions that are not ok.

    Without names or selectors: every group in the namespace. --watch refreshes until every
    group is done (Completed, Cancelled, Failed, Idle, or its queue is empty)."""
    t = _target(kw)
    _guard(lambda: _run_status(t, output, watch, interval, timeout))


@main.command("explain", context_settings=CONTEXT)
@click.argument("name")
@click.option("-n", "--namespace", help="Namespace of the group (default: the context's).")
@click.option("--kubeconfig", help="Path of the kubeconfig file.")
@click.option("--context", help="kubeconfig context to use.")
def explain_group(
    name: str, namespace: str | None, kubeconfig: str | None, context: str | None
) -> None:
    """Which provider paces GROUP and why (spec.provider, its domain or its MX host), the
    provider's budget and effective rate now, this group's share now, and the active rules."""

    def run() -> int:
        client = api.connect(kubeconfig, context)
        ns = namespace or client.namespace
        group = client.get(ns, name)
        resolved = (group.get("status") or {}).get("provider") or {}
        provider = None
        if resolved.get("kind") and resolved.get("name"):
            provider = client.get_provider(resolved["kind"], resolved["name"], ns)
        click.echo(explain.explain(group, provider))
        return api.EXIT_OK

    _guard(run)
