"""npu_node_upgrade's routes through the module: what the role's preflight (a check-mode prepare) and
prepare boundary read - route, resume_route, resumed_from - and their RETURN documentation."""

from __future__ import annotations

import json

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import module as k8s_module
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import node_upgrade
from ansible_collections.npuops.fleet.plugins.modules import npu_node_upgrade as mod

STATE = "nvidia.com/gpu-driver-upgrade-state"


def gpu_node(name, **labels):
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "7",
            "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/cuda.driver.major": "535", **labels},
            "annotations": {},
        },
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


class Resp:
    def __init__(self, obj):
        self.data = json.dumps(obj)


class Core:
    """read_node only: a prepare that finds its work done, or the skip label, reads the node and nothing else."""

    def __init__(self, nodes):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}

    def read_node(self, name, _preload_content=True):
        return Resp(self.nodes[name])


class Client:
    rest_client = None


@pytest.fixture
def cluster(monkeypatch):
    core = Core(
        [
            gpu_node("rebooting", **{STATE: "reboot-required"}),
            gpu_node("validating", **{STATE: "validation-required"}),
            gpu_node("ready", **{STATE: "pod-restart-required"}),
            gpu_node("skipme", **{"nvidia.com/gpu-driver-upgrade.skip": "true"}),
        ]
    )
    for api in ("CoreV1Api", "PolicyV1Api", "CoordinationV1Api", "ResourceV1Api"):
        monkeypatch.setattr(node_upgrade.k8s, api, lambda _client, _core=core: _core, raising=False)
    monkeypatch.setattr(k8s_module, "get_api_client_and_source", lambda p, **kw: (Client(), {"source": "test"}))
    return core


def prepare(capsys, node, check):
    args = {"node": node, "phase": "prepare", "target_version": "550.90.07", "_ansible_check_mode": check}
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "node, route, resumed",
    [
        ("rebooting", "reboot", "reboot-required"),
        ("validating", "finish", "validation-required"),
        ("ready", "install", "pod-restart-required"),
        ("skipme", "none", None),
    ],
)
@pytest.mark.parametrize("check", [True, False])
def test_prepare_returns_the_route_and_the_resume(cluster, capsys, node, route, resumed, check):
    out = prepare(capsys, node, check)
    assert not out.get("failed"), out
    assert out["route"] == route and out["resumed_from"] == resumed
    # the preflight plan's route: from the state found, install where none starts
    assert out["resume_route"] == ("install" if route == "none" else route)


def test_the_new_keys_are_documented():
    ret = yaml.safe_load(mod.RETURN)  # RETURN stays valid YAML
    for key in ("route", "resume_route", "resumed_from"):
        assert ret[key]["returned"] == "always" and ret[key]["type"] == "str", key
