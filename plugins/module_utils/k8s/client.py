# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Kubernetes client construction shared by every module (auth options as in kubernetes.core).

``AUTH_ARG_SPEC`` is merged into each module's argument_spec. ``get_api_client_and_source(params)``
returns a configured ``kubernetes.client.ApiClient`` and a dict naming where the credentials came
from (see :func:`get_api_client_and_source`); ``get_api_client(params)`` returns only the client.
Both raise :class:`K8sAuthError` with a message that names what was tried (each kubeconfig path,
the context, the in-cluster files).
"""

from __future__ import annotations

import os
import traceback
from typing import Any, Callable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError

try:
    import yaml
    from kubernetes import client as k8s_client_mod
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:  # reported through missing_required_lib() by the module
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

AUTH_ARG_SPEC: dict[str, dict[str, Any]] = {
    "kubeconfig": {"type": "path"},
    "context": {"type": "str"},
    "host": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"]},
    "ca_cert": {"type": "path", "aliases": ["ssl_ca_cert"]},
    "in_cluster": {"type": "bool", "default": False},
}

# Same environment fallbacks as kubernetes.core.
_ENV = {
    "kubeconfig": "K8S_AUTH_KUBECONFIG",
    "context": "K8S_AUTH_CONTEXT",
    "host": "K8S_AUTH_HOST",
    "api_key": "K8S_AUTH_API_KEY",
    "validate_certs": "K8S_AUTH_VERIFY_SSL",
    "ca_cert": "K8S_AUTH_SSL_CA_CERT",
}

# Values of the "source" key of the dict returned by get_api_client_and_source().
SOURCE_OPTION = "option kubeconfig"
SOURCE_ENV_K8S_AUTH = "env K8S_AUTH_KUBECONFIG"
SOURCE_ENV_KUBECONFIG = "env KUBECONFIG"
SOURCE_DEFAULT = "~/.kube/config"
SOURCE_IN_CLUSTER = "in-cluster"
SOURCE_HOST_API_KEY = "host+api_key"

# KubeConfigMerger splits on ':' (';' on Windows), which is os.pathsep on both.
_LIST_SEP = os.pathsep


class K8sAuthError(FleetError):
    """No usable Kubernetes credentials could be built from the options given."""


def _param(params: Mapping[str, Any], key: str) -> Any:
    value = params.get(key)
    if value is None and key in _ENV:
        value = os.environ.get(_ENV[key])
        if key == "validate_certs" and value is not None:
            value = value.lower() not in ("0", "false", "no", "off")
    return value


def _kubeconfig_source(params: Mapping[str, Any]) -> tuple[Optional[str], Optional[str]]:
    """Pick the kubeconfig to load: ``(source, path or os.pathsep-separated list)``.

    Order: option ``kubeconfig``, env ``K8S_AUTH_KUBECONFIG``, env ``KUBECONFIG``, ``~/.kube/config``
    (only when it exists). ``(None, None)`` when none applies (the caller may try in-cluster). An empty
    variable counts as unset, as with kubectl.
    """
    if params.get("kubeconfig"):
        return SOURCE_OPTION, params["kubeconfig"]
    for name, source in (("K8S_AUTH_KUBECONFIG", SOURCE_ENV_K8S_AUTH), ("KUBECONFIG", SOURCE_ENV_KUBECONFIG)):
        value = os.environ.get(name)
        if value:
            return source, value
    default = os.path.expanduser("~/.kube/config")
    if os.path.exists(default):
        return SOURCE_DEFAULT, default
    return None, None


def _list_paths(value: str) -> list[str]:
    """The paths of a kubeconfig list, expanded as KubeConfigMerger expands them (empty entries dropped)."""
    return [os.path.expanduser(p) for p in value.split(_LIST_SEP) if p]


def _load_kubeconfig(
    source: str, value: str, context: Optional[str], configuration: "k8s_client_mod.Configuration"
) -> str:
    """Load ``value`` (path or list) into ``configuration``; return the name of the context used.

    The list string goes to the client unchanged so that its KubeConfigMerger merges it: files that do
    not exist are skipped, the first file defining a cluster/user/context name wins, and the last file
    that sets ``current-context`` sets it. Refusing a list with no existing file here keeps a set but
    wrong variable from falling through to ``~/.kube/config`` (another cluster).
    """
    paths = _list_paths(value)
    tried = ", ".join(paths) or repr(value)
    if not any(os.path.exists(p) for p in paths):
        raise K8sAuthError(
            "%s names no existing kubeconfig file (tried: %s); fix it or unset it - it is not skipped "
            "in favour of the next source" % (source, tried)
        )
    try:
        k8s_config.load_kube_config(config_file=value, context=context, client_configuration=configuration)
        if context:
            return context
        _contexts, current = k8s_config.list_kube_config_contexts(config_file=value)
        return current["name"]
    except (ConfigException, OSError, yaml.YAMLError) as exc:
        raise K8sAuthError(
            "invalid Kubernetes configuration from %s (%s)%s: %s"
            % (source, tried, ", context %s" % context if context else "", exc)
        ) from exc


def get_api_client_and_source(
    params: Mapping[str, Any],
    new_client: Optional[Callable[["k8s_client_mod.Configuration"], "k8s_client_mod.ApiClient"]] = None,
) -> tuple["k8s_client_mod.ApiClient", dict[str, Optional[str]]]:
    """Build an ApiClient from module params (AUTH_ARG_SPEC keys) and say where its credentials came from.

    Order: ``host`` + ``api_key`` (options or K8S_AUTH_HOST/K8S_AUTH_API_KEY); ``in_cluster``; a
    kubeconfig - option ``kubeconfig``, env K8S_AUTH_KUBECONFIG, env KUBECONFIG, ``~/.kube/config`` -
    where each of the first three may be an os.pathsep-separated list merged by the kubernetes client;
    the in-cluster service account as the last resort (only when no kubeconfig source is set).

    Returns ``(api_client, kube_auth)`` with ``kube_auth`` =
    ``{"source": "option kubeconfig" | "env K8S_AUTH_KUBECONFIG" | "env KUBECONFIG" | "~/.kube/config"
    | "in-cluster" | "host+api_key", "kubeconfig": <path or list as given, None without kubeconfig>,
    "context": <context used: option/K8S_AUTH_CONTEXT, else current-context of the merged config;
    None without kubeconfig>}``. Raises K8sAuthError naming what was tried. ``new_client(configuration)``
    builds the client (the module frame's request-counting one); ``kubernetes.client.ApiClient`` by default.
    """
    if not HAS_KUBERNETES:
        raise K8sAuthError("the kubernetes Python client is not installed")
    host = _param(params, "host")
    api_key = _param(params, "api_key")
    validate = _param(params, "validate_certs")
    ca_cert = _param(params, "ca_cert")
    configuration = k8s_client_mod.Configuration()
    kube_auth: dict[str, Optional[str]] = {"source": None, "kubeconfig": None, "context": None}
    try:
        if host and api_key:
            configuration.host = host
            configuration.api_key = {"authorization": "Bearer " + api_key}
            kube_auth["source"] = SOURCE_HOST_API_KEY
        elif params.get("in_cluster"):
            k8s_config.load_incluster_config(client_configuration=configuration)
            kube_auth["source"] = SOURCE_IN_CLUSTER
        else:
            source, value = _kubeconfig_source(params)
            if source is not None:
                context = _param(params, "context")
                kube_auth.update(source=source, kubeconfig=value)
                kube_auth["context"] = _load_kubeconfig(source, value or "", context, configuration)
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                k8s_config.load_incluster_config(client_configuration=configuration)
                kube_auth["source"] = SOURCE_IN_CLUSTER
            else:
                raise K8sAuthError(
                    "no Kubernetes credentials: option kubeconfig, K8S_AUTH_KUBECONFIG and KUBECONFIG are "
                    "unset, there is no %s, and this is not a pod (KUBERNETES_SERVICE_HOST unset); set "
                    "kubeconfig, K8S_AUTH_KUBECONFIG/KUBECONFIG, or host and api_key"
                    % os.path.expanduser("~/.kube/config")
                )
    except ConfigException as exc:  # in-cluster files missing or unreadable
        raise K8sAuthError("invalid in-cluster Kubernetes configuration: %s" % exc) from exc
    if host and not (host and api_key):
        configuration.host = host
    if validate is not None:
        configuration.verify_ssl = bool(validate)
    if ca_cert:
        configuration.ssl_ca_cert = ca_cert
    return (new_client or k8s_client_mod.ApiClient)(configuration), kube_auth


def get_api_client(params: Mapping[str, Any]) -> "k8s_client_mod.ApiClient":
    """The ApiClient of :func:`get_api_client_and_source`, for callers that do not report the source."""
    return get_api_client_and_source(params)[0]


def core_v1(params: Mapping[str, Any]) -> "k8s_client_mod.CoreV1Api":
    """CoreV1Api on a client from :func:`get_api_client`."""
    return k8s_client_mod.CoreV1Api(get_api_client(params))
