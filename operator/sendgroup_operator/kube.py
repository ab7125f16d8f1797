"""The operator's Kubernetes adapter: the only module that talks to the API server (besides
kopf itself). Plain dicts in, plain dicts out; 404 -> None; 409 AlreadyExists -> adopt; every
other API error leaves as :class:`KubeError` (the client's ``ApiException`` never escapes, so
the layers above do not import the client; gafaelfawr's ``storage/kubernetes.py`` does the
same).

The ``kubernetes`` client is synchronous: every call runs in a worker thread
(``asyncio.to_thread``, or the adapter's own executor: :meth:`Kube.dedicated`) so the kopf
event loop never blocks. On the dedicated adapter a request that never reached an answer
(connection refused or reset, a timeout: urllib3's errors) leaves as :class:`KubeError` with
status 0, like an API error; the shared one lets them through as before (kopf retries the
handler).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import functools
import json
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Final, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from sendgroup_operator import metrics, models

MERGE_PATCH: Final = "application/merge-patch+json"
#: Objects per page of a start-up LIST (the API server's ``limit``; kopf's own initial LISTs
#: use the same, ``startup.configure``): what one page of JSON holds at a time.
LIST_PAGE: Final = 500
T = TypeVar("T")


class KubeError(Exception):
    """An API call failed. ``status``: the HTTP status (0 when the server was not reached);
    the message is ``HTTP <status>: <the API's message>`` (at most 300 characters), safe to
    show in a condition or an event."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _kube_error(exc: ApiException) -> KubeError:
    detail = exc.reason or ""
    with contextlib.suppress(ValueError, AttributeError):
        detail = json.loads(exc.body or "{}").get("message", detail)
    return KubeError(int(exc.status or 0), f"HTTP {exc.status}: {str(detail)[:300]}")


class Forbidden(Exception):
    """The operator's ServiceAccount lacks a permission; the message says which."""


def _json(response: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response.data)
    return data


class Kube:
    """get/create/patch/delete of the children, over one ``kubernetes.client.ApiClient``.

    ``executor``: where the blocking calls run (None: the event loop's default executor, shared
    with everything else that calls ``asyncio.to_thread``); ``unreached``: urllib3's errors
    (no answer) leave as ``KubeError(0)`` too."""

    def __init__(
        self, api: k8s.ApiClient, executor: Executor | None = None, unreached: bool = False
    ) -> None:
        self.api = api
        self.executor = executor
        self.unreached = unreached
        self.requests = 0

    # The client's API classes, each made on its first use: importing one imports the
    # (pydantic) models of all its operations, ~0.2-0.45 s of CPU each for apps, batch and
    # core (kubernetes 37), and a restart that finds every group as it left it needs none of
    # them (issue 15: ~0.8 s of a 1,000-group restart's ~6 s, py-spy and -X importtime).
    @functools.cached_property
    def apps(self) -> k8s.AppsV1Api:
        return k8s.AppsV1Api(self.api)

    @functools.cached_property
    def batch(self) -> k8s.BatchV1Api:
        return k8s.BatchV1Api(self.api)

    @functools.cached_property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api)

    @functools.cached_property
    def policy(self) -> k8s.PolicyV1Api:
        return k8s.PolicyV1Api(self.api)

    @functools.cached_property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api)

    @functools.cached_property
    def authz(self) -> k8s.AuthorizationV1Api:
        return k8s.AuthorizationV1Api(self.api)

    @functools.cached_property
    def apiext(self) -> k8s.ApiextensionsV1Api:
        return k8s.ApiextensionsV1Api(self.api)

    @functools.cached_property
    def coordination(self) -> k8s.CoordinationV1Api:
        return k8s.CoordinationV1Api(self.api)

    def dedicated(self, workers: int = 2) -> Kube:
        """A second adapter to the same API server for a few latency-critical calls (the shard
        Leases): its own connection pool, its own ``workers`` threads (a backlog of other calls
        in the default executor does not delay it), and no retry inside the client (urllib3's
        default retries a GET or DELETE answered 429 with Retry-After three times, sleeping
        Retry-After each time, and retries connection errors: the caller decides instead); a
        request without an answer leaves as ``KubeError(0)`` (urllib3's MaxRetryError ended the
        shard's poll loop)."""
        config = copy.deepcopy(self.api.configuration)
        config.retries = False
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube-dedicated")
        return Kube(k8s.ApiClient(config), executor=pool, unreached=True)

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self.requests += 1
        metrics.KUBE_REQUESTS.inc()
        try:
            if self.executor is None:
                return await asyncio.to_thread(fn, *args, **kwargs)
            call = functools.partial(fn, *args, **kwargs)
            return await asyncio.get_running_loop().run_in_executor(self.executor, call)
        except ApiException as exc:
            raise _kube_error(exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            if not self.unreached:
                raise
            raise KubeError(0, f"HTTP 0: {type(exc).__name__}: {str(exc)[:250]}") from exc

    async def _get(self, fn: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        try:
            return _json(await self._call(fn, *args, _preload_content=False))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    # --- Deployments ------------------------------------------------------------------------
    async def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment, or None."""
        return await self._get(self.apps.read_namespaced_deployment, name, namespace)

    async def apply_deployment(self, body: dict[str, Any], exists: bool) -> None:
        """Create the Deployment (409: it exists, adopt it by patching) or merge-patch it to
        ``body`` (labels, ownerReferences, replicas, template); a patch that finds no
        Deployment (404: gone since it was last seen) creates it."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        if not exists:
            try:
                await self._call(self.apps.create_namespaced_deployment, ns, body)
                return
            except KubeError as exc:
                if exc.status != 409:
                    raise
        try:
            await self._call(
                self.apps.patch_namespaced_deployment,
                name,
                ns,
                _replacing(body),
                _content_type=MERGE_PATCH,
            )
        except KubeError as exc:
            if (
                exc.status != 404
                or not exists
                or "spec" not in body
                or "template" not in body["spec"]
            ):
                raise
            await self._call(self.apps.create_namespaced_deployment, ns, body)

    async def delete_deployment(self, namespace: str, name: str) -> None:
        """Delete the Deployment; absent is fine. Its ReplicaSets/pods go by ownerReference."""
        await self._delete(self.apps.delete_namespaced_deployment, name, namespace)

    async def apply_disruption_budget(
        self, namespace: str, name: str, body: dict[str, Any] | None
    ) -> None:
        """Create or merge-patch the worker PodDisruptionBudget ``name`` to ``body``; with
        ``body`` None delete it (absent is fine)."""
        if body is None:
            await self._delete(self.policy.delete_namespaced_pod_disruption_budget, name, namespace)
            return
        try:
            await self._call(self.policy.create_namespaced_pod_disruption_budget, namespace, body)
            return
        except KubeError as exc:
            if exc.status != 409:
                raise
        # a merge patch keeps fields it does not name: null the one of minAvailable /
        # maxUnavailable the body leaves out (the API server refuses both at once)
        spec = {"minAvailable": None, "maxUnavailable": None, **body["spec"]}
        await self._call(
            self.policy.patch_namespaced_pod_disruption_budget,
            name,
            namespace,
            {**body, "spec": spec},
            _content_type=MERGE_PATCH,
        )

    # --- Jobs and pods ------------------------------------------------------------------------
    async def list_jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Jobs matching ``selector``."""
        return await self._items(self.batch.list_namespaced_job, namespace, label_selector=selector)

    async def create_job(self, body: dict[str, Any]) -> None:
        """Create the Job; 409 AlreadyExists means an earlier pass created it: adopt it."""
        try:
            await self._call(self.batch.create_namespaced_job, body["metadata"]["namespace"], body)
        except KubeError as exc:
            if exc.status != 409:
                raise

    async def delete_job(self, namespace: str, name: str) -> None:
        """Delete the Job and its pods; absent is fine."""
        await self._delete(
            self.batch.delete_namespaced_job, name, namespace, propagation_policy="Background"
        )

    def list_groups(
        self, namespace: str | None, limit: int = LIST_PAGE
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The SendGroups of ``namespace`` (None: all namespaces), as the API returns them, in
        pages of at most ``limit`` objects (:meth:`_pages`): one page is held at a time, not
        the whole list (issue 15: ~22 KB of JSON per group)."""
        return self._object_pages(models.GROUP, models.VERSION, models.PLURAL, namespace, limit)

    def list_deployments(
        self, namespace: str | None, selector: str, limit: int = LIST_PAGE
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Deployments matching ``selector`` in ``namespace`` (None: all namespaces), as the
        API returns them, in pages of at most ``limit`` (:meth:`_pages`: one page held at a
        time; a worker Deployment is ~6 KB of JSON, and the orphan count lists them all every
        ``orphanGrace``). Through the client's generic ``/apis/{group}/{version}`` lister (the
        same request as ``AppsV1Api``'s, raw JSON either way): a start lists the Deployments
        before anything else needs the apps API, whose import is ~0.3 s of CPU."""
        return self._object_pages(
            "apps", "v1", "deployments", namespace, limit, label_selector=selector
        )

    def _object_pages(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str | None,
        limit: int,
        **kwargs: Any,
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Objects of ``/apis/{group}/{version}/[namespaces/{namespace}/]{plural}`` (None: all
        namespaces) in pages of at most ``limit``, through the generic custom-object lister."""
        fn: Callable[..., Any]
        where: tuple[str, ...]
        if namespace is None:
            fn, where = self.custom.list_cluster_custom_object, ()
        else:
            fn, where = self.custom.list_namespaced_custom_object, (namespace,)
        return self._pages(fn, group, version, *where, plural, limit=limit, **kwargs)

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Pods matching ``selector``."""
        return await self._items(self.core.list_namespaced_pod, namespace, label_selector=selector)

    async def pod_log_tail(self, namespace: str, pod: str, lines: int = 5) -> str | None:
        """The last ``lines`` lines of a pod's log; None when there is none (no node ran it,
        or the pod is gone)."""
        try:
            response: Any = await self._call(
                self.core.read_namespaced_pod_log,
                pod,
                namespace,
                tail_lines=lines,
                _preload_content=False,
            )
        except KubeError as exc:
            if exc.status in (400, 404):
                return None
            raise
        return str(response.data.decode(errors="replace"))

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        """One key of a Secret, decoded; None if the Secret or key is missing."""
        secret = await self._get(self.core.read_namespaced_secret, name, namespace)
        if secret is None or key not in (secret.get("data") or {}):
            return None
        return base64.b64decode(secret["data"][key]).decode()

    async def delete_group(self, namespace: str, name: str) -> None:
        """Delete a SendGroup (its finalizer then runs the deletion policy)."""
        await self._delete(
            self.custom.delete_namespaced_custom_object,
            models.GROUP,
            models.VERSION,
            namespace,
            models.PLURAL,
            name,
        )

    async def patch_group_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        """Merge-patch a SendGroup's ``/status`` subresource (the reaper daemon's writes; the
        change handlers write through kopf's ``patch.status``). A group deleted meanwhile
        (404) is fine."""
        try:
            await self._call(
                self.custom.patch_namespaced_custom_object_status,
                models.GROUP,
                models.VERSION,
                namespace,
                models.PLURAL,
                name,
                {"status": dict(status)},
            )
        except KubeError as exc:
            if exc.status != 404:
                raise

    async def _items(
        self, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> list[dict[str, Any]]:
        """The ``items`` of one list call (raw JSON, not the client's models)."""
        data = _json(await self._call(fn, *args, _preload_content=False, **kwargs))
        items: list[dict[str, Any]] = data.get("items", [])
        return items

    async def _pages(
        self, fn: Callable[..., Any], *args: Any, limit: int, **kwargs: Any
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The ``items`` of a list call, page by page (the API's ``limit`` and ``continue``:
        at most ``limit`` objects each; raw JSON, not the client's models)."""
        token: str | None = None
        while True:
            more = {"_continue": token} if token else {}
            data = _json(
                await self._call(fn, *args, _preload_content=False, limit=limit, **more, **kwargs)
            )
            items: list[dict[str, Any]] = data.get("items", [])
            token = (data.get("metadata") or {}).get("continue")
            del data
            yield items
            if not token:
                return

    async def _delete(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        try:
            await self._call(fn, *args, **kwargs)
        except KubeError as exc:
            if exc.status != 404:
                raise

    # --- shard member Leases (shardmember.py) ----------------------------------------------
    # ``timeout``: seconds for the whole request (urllib3's total timeout; None: none); a
    # timed-out request leaves as KubeError with status 0 (its outcome on the server unknown).
    async def list_leases(
        self, namespace: str, selector: str, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        """coordination.k8s.io/v1 Leases matching ``selector`` in ``namespace`` (one call)."""
        return await self._items(
            self.coordination.list_namespaced_lease,
            namespace,
            label_selector=selector,
            _request_timeout=timeout,
        )

    async def create_lease(
        self, body: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """Create a Lease; returns it as stored (409 leaves as :class:`KubeError`)."""
        ns = body["metadata"]["namespace"]
        return _json(
            await self._call(
                self.coordination.create_namespaced_lease,
                ns,
                body,
                _preload_content=False,
                _request_timeout=timeout,
            )
        )

    async def patch_lease(
        self, namespace: str, name: str, patch: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any] | None:
        """Merge-patch a Lease (a ``metadata.resourceVersion`` in ``patch`` makes it
        conditional: 409 when the Lease changed since); None when it does not exist."""
        try:
            return _json(
                await self._call(
                    self.coordination.patch_namespaced_lease,
                    name,
                    namespace,
                    patch,
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=timeout,
                )
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def delete_lease(self, namespace: str, name: str, timeout: float | None = None) -> None:
        """Delete a Lease; absent is fine."""
        await self._delete(
            self.coordination.delete_namespaced_lease, name, namespace, _request_timeout=timeout
        )

    # --- preflight ------------------------------------------------------------------------
    async def crd_exists(self) -> bool:
        """Whether the SendGroup CRD is installed (and readable by us)."""
        try:
            await self._call(
                self.apiext.read_custom_resource_definition, f"{models.PLURAL}.{models.GROUP}"
            )
            return True
        except KubeError as exc:
            if exc.status == 404:
                return False
            if exc.status == 403:
                # Not allowed to read CRDs: fall back to API discovery of our group.
                return await self._group_served()
            raise

    async def _group_served(self) -> bool:
        try:
            resources = await self._call(
                self.custom.get_api_resources, models.GROUP, models.VERSION
            )
        except KubeError:
            return False
        return any(r.name == models.PLURAL for r in resources.resources)

    async def can(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        """SelfSubjectAccessReview: may the operator do ``verb`` on ``group/resource``?"""
        review = k8s.V1SelfSubjectAccessReview(
            spec=k8s.V1SelfSubjectAccessReviewSpec(
                resource_attributes=k8s.V1ResourceAttributes(
                    verb=verb,
                    group=group,
                    resource=resource.split("/")[0],
                    subresource=resource.split("/")[1] if "/" in resource else None,
                    namespace=namespace,
                )
            )
        )
        result = await self._call(self.authz.create_self_subject_access_review, review)
        return bool(result.status is not None and result.status.allowed)


#: Pod template keys a worker Deployment body may leave out but whose hand-added value must go
#: (``builders.owned_fingerprint`` compares them): a JSON merge patch (RFC 7386) keeps a key
#: the patch does not name, so each is sent as null (delete) when the body has none. Without
#: it an added init container stayed and the operator re-patched every pass (review finding).
_POD_KEYS_REPLACED: Final = ("initContainers",)


def _replacing(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as a merge patch that also deletes :data:`_POD_KEYS_REPLACED` it leaves out."""
    template = (body.get("spec") or {}).get("template") or {}
    pod = template.get("spec")
    if not isinstance(pod, dict) or all(k in pod for k in _POD_KEYS_REPLACED):
        return body
    nulls = {k: None for k in _POD_KEYS_REPLACED if k not in pod}
    return {
        **body,
        "spec": {**body["spec"], "template": {**template, "spec": {**pod, **nulls}}},
    }
