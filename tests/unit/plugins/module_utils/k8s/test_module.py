"""The Kubernetes module frame (k8s/module.py): auth options merged, the kubernetes import check, the
auth error and any FleetError as fail_json with the partial result, kube_auth once the client is built,
and API requests counted by the frame's own REST layer (a fake connection pool under it)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from kubernetes import client as k8s

from ansible_collections.npuops.fleet.plugins.module_utils.driver.node_labels import LabelError
from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import module as k8s_module
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.client import AUTH_ARG_SPEC, K8sAuthError

SPEC = {"node": {"type": "str"}}
API_KEY = {"host": "https://api.example:6443", "api_key": "t0ken"}


def finish(capsys, args, body, **frame_kwargs):
    """Run ``body(module)`` in a K8sModule under ``args``: (exit code, the JSON result)."""
    with patch_module_args(args), pytest.raises(SystemExit) as ei:
        module = k8s_module.K8sModule(argument_spec=SPEC, **frame_kwargs)
        module.run(lambda: body(module))
    return ei.value.code, json.loads(capsys.readouterr().out)


class FakeHTTP:
    """What urllib3 answers (the layer under the REST client)."""

    status = 200
    reason = "OK"

    def __init__(self, obj):
        self.data = json.dumps(obj).encode()
        self.headers = {"Content-Type": "application/json"}

    def getheaders(self):
        return self.headers


class FakePool:
    def __init__(self):
        self.sent = []

    def request(self, method, url, **kwargs):
        self.sent.append((method, url.split("/api", 1)[-1]))
        return FakeHTTP({"kind": "Node", "metadata": {"name": "n1"}})

    def clear(self):
        pass


def test_auth_options_are_merged_into_the_module_options(capsys):
    def body(module):
        assert set(AUTH_ARG_SPEC) | {"node"} <= set(module.argument_spec)
        assert module.params["in_cluster"] is False and module.params["node"] == "n1"
        module.exit_json(changed=False)

    rc, res = finish(capsys, {"node": "n1"}, body)
    assert rc == 0 and "kube_auth" not in res  # no client built: no kube_auth


def test_an_auth_error_fails_the_task_with_its_message(capsys, monkeypatch):
    def no_credentials(params, new_client=None):
        raise K8sAuthError("no Kubernetes credentials: option kubeconfig ... unset")

    monkeypatch.setattr(k8s_module, "get_api_client_and_source", no_credentials)
    rc, res = finish(capsys, {}, lambda module: module.client())
    assert rc == 1 and res["failed"]
    assert res["msg"] == "no Kubernetes credentials: option kubeconfig ... unset"
    assert "kube_auth" not in res


def test_a_fleet_error_fails_the_task_with_its_partial_result(capsys):
    def body(module):
        raise FleetError("node n1: state label did not change", result={"node": "n1", "changed": True})

    rc, res = finish(capsys, {}, body)
    assert rc == 1 and res["msg"] == "node n1: state label did not change"
    assert res["node"] == "n1" and res["changed"] is True


def test_a_fleet_error_after_the_client_carries_kube_auth_and_extra_wins(capsys):
    def body(module):
        module.client()
        module.fail_error(LabelError("n1", "nvidia.com/cuda.driver.major"), node="n1", missing_label="x")

    rc, res = finish(capsys, dict(API_KEY), body)
    assert rc == 1 and res["msg"] == "node n1: label nvidia.com/cuda.driver.major is missing"
    assert (res["node"], res["missing_label"]) == ("n1", "x")
    assert res["kube_auth"] == {"source": "host+api_key", "kubeconfig": None, "context": None}


def test_every_collection_error_is_a_fleet_error_and_keeps_its_own_base():
    err = LabelError("n1", "k")
    assert isinstance(err, ValueError) and isinstance(err, FleetError)
    assert err.result is None and err.message == str(err)


def test_other_exceptions_are_not_mapped(capsys):
    def body(module):
        raise RuntimeError("a bug")

    with patch_module_args({}), pytest.raises(RuntimeError, match="a bug"):
        module = k8s_module.K8sModule(argument_spec=SPEC)
        module.run(lambda: body(module))


def test_requests_are_counted_by_method_through_the_frames_rest_layer(capsys):
    pool = FakePool()

    def body(module):
        api_client = module.client()
        assert module.client() is api_client  # built once
        assert isinstance(api_client.rest_client, k8s_module.CountingRESTClient)
        api_client.rest_client.pool_manager = pool
        core = k8s.CoreV1Api(api_client)
        core.read_node("n1", _preload_content=False)
        core.list_node(_preload_content=False)
        core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}}, _preload_content=False)
        module.exit_json(changed=True, api_requests=module.api_requests)

    rc, res = finish(capsys, dict(API_KEY), body)
    assert rc == 0
    assert res["api_requests"] == {"GET": 2, "PATCH": 1}
    assert [m for m, _url in pool.sent] == ["GET", "GET", "PATCH"]
    assert res["kube_auth"]["source"] == "host+api_key"


def test_a_value_the_module_sets_for_kube_auth_wins(capsys):
    def body(module):
        module.client()
        module.exit_json(changed=False, kube_auth={"source": "mine"})

    _rc, res = finish(capsys, dict(API_KEY), body)
    assert res["kube_auth"] == {"source": "mine"}


def test_a_missing_kubernetes_client_is_named(capsys, monkeypatch):
    monkeypatch.setattr(k8s_module, "HAS_KUBERNETES", False)
    monkeypatch.setattr(k8s_module, "KUBERNETES_IMPORT_ERROR", "Traceback: No module named 'kubernetes'")
    rc, res = finish(capsys, {}, lambda module: module.exit_json(changed=False))
    assert rc == 1 and "Failed to import the required Python library (kubernetes)" in res["msg"]


def test_without_require_kubernetes_the_check_waits_for_the_client(capsys, monkeypatch):
    monkeypatch.setattr(k8s_module, "HAS_KUBERNETES", False)
    rc, res = finish(capsys, {}, lambda module: module.exit_json(changed=False), require_kubernetes=False)
    assert rc == 0
    rc, res = finish(capsys, {}, lambda module: module.client(), require_kubernetes=False)
    assert rc == 1 and "(kubernetes)" in res["msg"]
