# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The one frame of the collection's Kubernetes modules, in the spirit of kubernetes.core's AnsibleK8SModule.

``K8sModule(argument_spec, require_kubernetes=True, **AnsibleModule kwargs)`` is an AnsibleModule whose
argument_spec is the module's own merged with the auth options (``client.AUTH_ARG_SPEC``, documented by
the doc fragment npuops.fleet.k8s_auth). It

* fails the task with ``missing_required_lib("kubernetes")`` (and the import traceback) when the
  kubernetes client is missing: at once, or - ``require_kubernetes=False``, for a module that works
  without a cluster for some options - when :meth:`K8sModule.client` is first called;
* builds the client once (:meth:`K8sModule.client`, ``client.get_api_client_and_source``) and keeps
  where its credentials came from in ``kube_auth``; every exit_json/fail_json after that carries
  ``kube_auth`` (a value the module sets itself wins);
* counts the API requests of that client by HTTP method in ``api_requests`` (``{"GET": 3, "PATCH": 1}``;
  a watch counts once): the client is a :class:`CountingApiClient`, whose REST layer the frame owns;
* ends the task for a :class:`~errors.FleetError` in one place: :meth:`K8sModule.fail_error` is
  ``fail_json(msg=exc.message, **exc.result, **extra)``, and :meth:`K8sModule.run` calls the module's
  body and sends any FleetError it lets out there (a K8sAuthError from client() included).

Imports ansible (it is the module frame), k8s/ and errors.py only.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.client import (
    AUTH_ARG_SPEC,
    HAS_KUBERNETES,
    KUBERNETES_IMPORT_ERROR,
    get_api_client_and_source,
)

try:
    from kubernetes.client import ApiClient as _ApiClient
    from kubernetes.client.rest import RESTClientObject as _RESTClientObject
except ImportError:  # the frame fails the task through missing_required_lib before any client is built
    _ApiClient = _RESTClientObject = object  # type: ignore[assignment,misc]


class CountingRESTClient(_RESTClientObject):
    """The REST layer of a :class:`CountingApiClient`: adds each request to ``counts`` by HTTP method.

    ``request`` is the one way to the wire for every API call of the client (its GET/POST/... helpers
    call it too), so each call - a watch stream included - counts exactly once."""

    def __init__(self, configuration: Any, counts: dict[str, int]) -> None:
        super().__init__(configuration)
        self.counts = counts

    def request(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self.counts[method] = self.counts.get(method, 0) + 1
        return super().request(method, *args, **kwargs)


class CountingApiClient(_ApiClient):
    """A kubernetes ``ApiClient`` whose REST layer is a :class:`CountingRESTClient` writing to ``counts``."""

    def __init__(self, configuration: Any, counts: dict[str, int]) -> None:
        super().__init__(configuration)
        # replaces the default REST layer before any request was made (it holds no connection yet)
        self.rest_client = CountingRESTClient(self.configuration, counts)


class K8sModule(AnsibleModule):
    """AnsibleModule with the auth options, the kubernetes import check, one counted client, ``kube_auth``
    in every result once the client is built, and FleetError -> fail_json (see the file's docstring)."""

    def __init__(
        self, argument_spec: Mapping[str, Any], require_kubernetes: bool = True, **kwargs: Any
    ) -> None:
        # set before AnsibleModule.__init__: it may fail_json (bad arguments) before returning
        self.kube_auth: Optional[dict[str, Optional[str]]] = None
        self.api_requests: dict[str, int] = {}
        self._api_client: Any = None
        spec = dict(argument_spec)
        spec.update(AUTH_ARG_SPEC)
        super().__init__(argument_spec=spec, **kwargs)
        if require_kubernetes:
            self.require_kubernetes()

    def require_kubernetes(self) -> None:
        """Fail the task when the kubernetes Python client cannot be imported."""
        if not HAS_KUBERNETES:
            self.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)

    def client(self) -> Any:
        """The module's ApiClient, built at the first call from the auth options; raises K8sAuthError
        (a FleetError: :meth:`run` fails the task with its message, without ``kube_auth``)."""
        if self._api_client is None:
            self.require_kubernetes()
            self._api_client, self.kube_auth = get_api_client_and_source(self.params, new_client=self._new_client)
        return self._api_client

    def _new_client(self, configuration: Any) -> Any:
        return CountingApiClient(configuration, self.api_requests)

    def _with_kube_auth(self, result: dict[str, Any]) -> dict[str, Any]:
        if self.kube_auth is not None:
            result.setdefault("kube_auth", self.kube_auth)
        return result

    def exit_json(self, **kwargs: Any) -> None:
        super().exit_json(**self._with_kube_auth(kwargs))

    def fail_json(self, msg: str, **kwargs: Any) -> None:
        super().fail_json(msg=msg, **self._with_kube_auth(kwargs))

    def fail_error(self, exc: FleetError, **extra: Any) -> None:
        """End the task for ``exc``: ``fail_json(msg=exc.message, **exc.result, **extra)`` (``extra``
        wins over the exception's partial result)."""
        result = dict(exc.result or {})
        result.update(extra)
        self.fail_json(msg=exc.message, **result)

    def run(self, body: Callable[[], Any]) -> None:
        """Call ``body()`` (the module's work, which ends with exit_json or fail_json); a FleetError it
        lets out ends the task through :meth:`fail_error`."""
        try:
            body()
        except FleetError as exc:
            self.fail_error(exc)
