# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared documentation of the Kubernetes connection options (same names as kubernetes.core)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path, or a list separated by C(:) (C(;) on Windows), of kubeconfig files. A list is merged by the
        kubernetes Python client - files that do not exist are skipped, the first file that defines a
        cluster, user or context name wins (as with kubectl), and the current context is the one set by
        the B(last) file that sets C(current-context) (kubectl takes the first; set O(context) when
        several files set one).
      - 'Unset: E(K8S_AUTH_KUBECONFIG), then E(KUBECONFIG) (a path or list, merged as above), then
        C(~/.kube/config), then the in-cluster service account when running in a pod.'
      - The first of these that is set is used; if it names no existing file the task fails instead of
        falling through to the next one (which could be another cluster).
      - Ignored with O(host) and O(api_key), and with O(in_cluster=true). The source and context used
        are returned as C(kube_auth).
    type: path
  context:
    description:
      - Context of the kubeconfig to use. Defaults to E(K8S_AUTH_CONTEXT) or the current context.
    type: str
  host:
    description:
      - URL of the Kubernetes API server, for example C(https://127.0.0.1:6443). With O(api_key) it
        replaces the kubeconfig. Defaults to E(K8S_AUTH_HOST).
    type: str
  api_key:
    description:
      - Bearer token used with O(host). Defaults to E(K8S_AUTH_API_KEY).
    type: str
  validate_certs:
    description:
      - Verify the API server's TLS certificate. Defaults to E(K8S_AUTH_VERIFY_SSL), then true.
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - CA bundle used to verify the API server with O(host). Defaults to E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  in_cluster:
    description:
      - Use the pod's service account (C(/var/run/secrets/kubernetes.io/serviceaccount)) and ignore
        kubeconfig. Without this option the in-cluster config is used only when no kubeconfig exists.
    type: bool
    default: false
requirements:
  - kubernetes >= 31.0.0 (the official Python client)
"""
