"""The plugin's only contact with the API server: list, get and patch SendGroups.

Kubeconfig comes from the usual places, as kubectl finds it: ``--kubeconfig``, else
``$KUBECONFIG`` (a list of files, merged), else ``~/.kube/config``; else the in-cluster
ServiceAccount when running in a pod. ``--context`` picks a context; the namespace defaults to
the context's namespace, else ``default``.

Every failure becomes a :class:`CliError` whose ``exit_code`` the commands return
(:data:`EXIT_REJECTED` ... :data:`EXIT_UNREACHABLE`); no traceback reaches the user.

How a change is written (:meth:`Client.set_spec_field`): a JSON merge patch (RFC 7386) of one
field, e.g. ``{"spec": {"paused": true}}``, with field manager ``kubectl-sendgroup`` and the
``resourceVersion`` that was read as a precondition. Server-side apply was considered and not
chosen: an apply configuration that names only ``spec.paused`` makes the next apply by the same
manager that names only ``spec.state`` *remove* ``spec.paused`` (SSA drops fields a manager
stops listing), and applying a field that a GitOps tool owns either fails with a conflict or,
forced, takes the field away from it. A merge patch changes exactly the one field, never
removes anything, and still records ``kubectl-sendgroup`` in ``managedFields``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sendgroup_operator import models

FIELD_MANAGER: Final = "kubectl-sendgroup"
MERGE_PATCH: Final = "application/merge-patch+json"

#: Exit codes (documented in docs/cli.md). 2 is click's code for a usage error.
EXIT_OK: Final = 0
EXIT_REJECTED: Final = 1
EXIT_USAGE: Final = 2
EXIT_NOT_FOUND: Final = 3
EXIT_FORBIDDEN: Final = 4
EXIT_UNREACHABLE: Final = 5


class CliError(Exception):
    """A failure to report in one line; ``exit_code`` is what the command exits with."""

    exit_code: int = EXIT_REJECTED


class Rejected(CliError):
    """The API server refused the change (validation such as a CEL rule, a conflict)."""

    exit_code = EXIT_REJECTED


class BadRequest(Rejected):
    """The API server refused the request itself as malformed (400)."""


class BadSelector(CliError):
    """The API server refused ``-l``'s label selector as malformed: a usage error."""

    exit_code = EXIT_USAGE


class Conflict(Rejected):
    """The object changed between read and write (409): read it again and retry."""


class NotFound(CliError):
    """The SendGroup, or the SendGroup CRD itself, does not exist."""

    exit_code = EXIT_NOT_FOUND


class Forbidden(CliError):
    """RBAC denied the request (403) or the credentials were rejected (401)."""

    exit_code = EXIT_FORBIDDEN


class Unreachable(CliError):
    """No usable kubeconfig, or the API server could not be reached."""

    exit_code = EXIT_UNREACHABLE


def _status_message(exc: Any) -> str:
    """The ``message`` of the Status object in an ApiException's body, else its reason."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if body:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        if message:
            return str(message)
        return str(body).strip()
    return f"{getattr(exc, 'status', '?')} {getattr(exc, 'reason', '')}".strip()


@dataclass
class Client:
    """A connected client: ``api`` (kubernetes.client.ApiClient), the context's default
    ``namespace`` and the API server URL (for messages)."""

    api: Any
    namespace: str
    server: str

    def _custom(self) -> Any:
        from kubernetes import client as k8s

        return k8s.CustomObjectsApi(self.api)

    def _call(self, fn: Any, *args: Any, what: str, **kwargs: Any) -> dict[str, Any]:
        """Call ``fn`` and return the decoded JSON; translate every failure to a CliError.

        ``what`` names the object for messages (``sendgroup/x in namespace y``)."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            response = fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            raise self._translate(exc, what) from None
        except urllib3.exceptions.HTTPError as exc:
            raise Unreachable(f"cannot reach the API server at {self.server}: {exc}") from None
        data: dict[str, Any] = json.loads(response.data)
        return data

    def _translate(self, exc: Any, what: str) -> CliError:
        status = getattr(exc, "status", None)
        message = _status_message(exc)
        if status == 404:
            if not self.crd_installed():
                return NotFound(
                    f"the SendGroup API ({models.API_VERSION}) is not installed on "
                    f"{self.server}: apply crds/sendgroups.yaml or install the Helm chart"
                )
            return NotFound(f"{what} not found")
        if status in (401, 403):
            return Forbidden(message)
        if status == 409:
            return Conflict(f"{what} changed while being updated, try again: {message}")
        if status == 400:
            return BadRequest(message)
        if status == 422:
            return Rejected(message)
        if status is None or status == 0:
            return Unreachable(f"cannot reach the API server at {self.server}: {exc}")
        return Rejected(f"{what}: {status} {message}")

    def crd_installed(self) -> bool:
        """Whether the API server serves ``sendgroups.io/v1alpha1`` sendgroups."""
        from kubernetes.client.exceptions import ApiException

        try:
            response = self._custom().get_api_resources(
                models.GROUP, models.VERSION, _preload_content=False
            )
        except ApiException:
            return False
        except Exception:  # unreachable now: report the 404 as it was
            return True
        resources = json.loads(response.data).get("resources", [])
        return any(r.get("name") == models.PLURAL for r in resources)

    def list(self, namespace: str | None, selector: str | None) -> list[dict[str, Any]]:
        """SendGroups in ``namespace`` (None: all namespaces) matching the label
        ``selector``, sorted by (namespace, name)."""
        custom = self._custom()
        kwargs: dict[str, Any] = {"label_selector": selector} if selector else {}
        where = "in all namespaces" if namespace is None else f"in namespace {namespace!r}"
        what = f"sendgroups {where}"
        try:
            if namespace is None:
                data = self._call(
                    custom.list_cluster_custom_object,
                    models.GROUP,
                    models.VERSION,
                    models.PLURAL,
                    what=what,
                    **kwargs,
                )
            else:
                data = self._call(
                    custom.list_namespaced_custom_object,
                    models.GROUP,
                    models.VERSION,
                    namespace,
                    models.PLURAL,
                    what=what,
                    **kwargs,
                )
        except BadRequest as exc:
            # The selector is the only query parameter of this LIST: a 400 (BadRequest, e.g.
            # "unable to parse requirement") is the API server refusing it, a usage error.
            if selector:
                raise BadSelector(f"-l {selector!r}: not a valid label selector: {exc}") from None
            raise
        items: list[dict[str, Any]] = data.get("items", [])
        return sorted(
            items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        )

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        """The SendGroup ``namespace/name``; raises NotFound (object or CRD missing)."""
        return self._call(
            self._custom().get_namespaced_custom_object,
            models.GROUP,
            models.VERSION,
            namespace,
            models.PLURAL,
            name,
            what=f"sendgroup/{name} in namespace {namespace!r}",
        )

    def set_spec_field(
        self,
        namespace: str,
        name: str,
        field: str,
        value: Any,
        resource_version: str | None,
        dry_run: bool,
    ) -> dict[str, Any]:
        """Merge-patch ``spec.<field> = value`` (and nothing else) as field manager
        :data:`FIELD_MANAGER`; returns the object the server answered with.

        ``resource_version``: precondition (409 Conflict -> :class:`Rejected` if the object
        changed since it was read). ``dry_run``: the server validates (CEL rules included)
        and answers without persisting (``dryRun=All``)."""
        body: dict[str, Any] = {"spec": {field: value}}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_content_type": MERGE_PATCH}
        if dry_run:
            kwargs["dry_run"] = "All"
        return self._call(
            self._custom().patch_namespaced_custom_object,
            models.GROUP,
            models.VERSION,
            namespace,
            models.PLURAL,
            name,
            body,
            what=f"sendgroup/{name} in namespace {namespace!r}",
            **kwargs,
        )

    def get_provider(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """A SendProvider (in ``namespace``) or ClusterSendProvider; None when it is missing
        or its API is not installed."""
        custom = self._custom()
        try:
            if kind == models.CLUSTER_PROVIDER_KIND:
                return self._call(
                    custom.get_cluster_custom_object,
                    models.GROUP,
                    models.VERSION,
                    "clustersendproviders",
                    name,
                    what=f"clustersendprovider/{name}",
                )
            return self._call(
                custom.get_namespaced_custom_object,
                models.GROUP,
                models.VERSION,
                namespace,
                "sendproviders",
                name,
                what=f"sendprovider/{name} in namespace {namespace!r}",
            )
        except NotFound:
            return None


def connect(kubeconfig: str | None, context: str | None) -> Client:
    """A :class:`Client` from ``kubeconfig`` (else ``$KUBECONFIG``, else ``~/.kube/config``,
    else the in-cluster ServiceAccount) and ``context`` (else the current one).

    Raises :class:`Unreachable` when no configuration is usable (the message says which file
    and what is wrong)."""
    try:
        from kubernetes import client as k8s
        from kubernetes import config as k8s_config
    except ImportError:
        raise Unreachable(
            "the kubernetes client is not installed: pip install 'sendgroup-operator[operator]'"
        ) from None

    files = kubeconfig or os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
    paths = [p for p in files.split(os.pathsep) if p]
    existing = [p for p in paths if Path(p).expanduser().is_file()]
    configuration = k8s.Configuration()
    namespace = "default"
    if not existing:
        if kubeconfig:
            raise Unreachable(f"kubeconfig {kubeconfig} does not exist")
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not context:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except k8s_config.ConfigException as exc:
                raise Unreachable(f"in-cluster configuration: {exc}") from None
            ns_file = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
            if ns_file.is_file():
                namespace = ns_file.read_text().strip() or namespace
            return Client(k8s.ApiClient(configuration), namespace, configuration.host)
        raise Unreachable(
            f"no kubeconfig found (looked at {', '.join(paths)}): pass --kubeconfig or set "
            "KUBECONFIG"
        )
    config_file = os.pathsep.join(existing)
    try:
        contexts, current = k8s_config.list_kube_config_contexts(config_file=config_file)  # type: ignore[no-untyped-call]
        chosen = current
        if context:
            chosen = next((c for c in contexts if c.get("name") == context), None)
            if chosen is None:
                names = ", ".join(str(c.get("name")) for c in contexts) or "none"
                raise Unreachable(f"context {context!r} not in {config_file} (have: {names})")
        namespace = (chosen or {}).get("context", {}).get("namespace") or namespace
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=config_file, context=context, client_configuration=configuration
        )
    except k8s_config.ConfigException as exc:
        raise Unreachable(f"kubeconfig {config_file}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise Unreachable(f"kubeconfig {config_file}: {exc}") from None
    return Client(k8s.ApiClient(configuration), namespace, configuration.host)
