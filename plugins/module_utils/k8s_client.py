# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes client construction shared by every module (auth options as in kubernetes.core).

``AUTH_ARG_SPEC`` is merged into each module's argument_spec; ``get_api_client(params)`` returns a
configured ``kubernetes.client.ApiClient`` or raises :class:`K8sAuthError` with a message that names
the source that failed (kubeconfig path, context, in-cluster files).
"""

from __future__ import annotations

import os
import traceback
from typing import Any, Mapping

try:
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


class K8sAuthError(Exception):
    """No usable Kubernetes credentials could be built from the options given."""


def _param(params: Mapping[str, Any], key: str) -> Any:
    value = params.get(key)
    if value is None and key in _ENV:
        value = os.environ.get(_ENV[key])
        if key == "validate_certs" and value is not None:
            value = value.lower() not in ("0", "false", "no", "off")
    return value


def get_api_client(params: Mapping[str, Any]) -> "k8s_client_mod.ApiClient":
    """Build an ApiClient from module params (AUTH_ARG_SPEC keys).

    Order: ``host`` + ``api_key``; ``in_cluster``; kubeconfig (option, env, ``~/.kube/config``);
    in-cluster as the last resort. Raises K8sAuthError naming what was tried.
    """
    if not HAS_KUBERNETES:
        raise K8sAuthError("the kubernetes Python client is not installed")
    host = _param(params, "host")
    api_key = _param(params, "api_key")
    validate = _param(params, "validate_certs")
    ca_cert = _param(params, "ca_cert")
    configuration = k8s_client_mod.Configuration()
    try:
        if host and api_key:
            configuration.host = host
            configuration.api_key = {"authorization": "Bearer " + api_key}
        elif params.get("in_cluster"):
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            path = _param(params, "kubeconfig") or os.path.expanduser("~/.kube/config")
            path = path.split(os.pathsep)[0]
            if os.path.exists(path):
                k8s_config.load_kube_config(
                    config_file=path, context=_param(params, "context"), client_configuration=configuration
                )
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                k8s_config.load_incluster_config(client_configuration=configuration)
            else:
                raise K8sAuthError(
                    "no kubeconfig at %s and not running in a cluster; set kubeconfig, "
                    "K8S_AUTH_KUBECONFIG/KUBECONFIG, or host and api_key" % path
                )
    except ConfigException as exc:
        raise K8sAuthError("invalid Kubernetes configuration: %s" % exc) from exc
    if host and not (host and api_key):
        configuration.host = host
    if validate is not None:
        configuration.verify_ssl = bool(validate)
    if ca_cert:
        configuration.ssl_ca_cert = ca_cert
    return k8s_client_mod.ApiClient(configuration)


def core_v1(params: Mapping[str, Any]) -> "k8s_client_mod.CoreV1Api":
    """CoreV1Api on a client from :func:`get_api_client`."""
    return k8s_client_mod.CoreV1Api(get_api_client(params))
