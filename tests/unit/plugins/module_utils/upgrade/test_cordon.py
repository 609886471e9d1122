from __future__ import annotations

import copy
import json

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import cordon

NV = resolve_profile("nvidia")
KEY = "nvidia.com/gpu-driver-upgrade-unschedulable-before"


def merge(dst, patch):
    for k, v in patch.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict):
            merge(dst.setdefault(k, {}), v)
        else:
            dst[k] = v


class FakeCore:
    def __init__(self, node):
        self.node = node
        self.patches = []

    def patch_node(self, name, body, _preload_content=True):
        self.patches.append(copy.deepcopy(body))
        merge(self.node, body)

        class R:
            data = json.dumps(self.node)

        return R()


def node(cordoned):
    return {"metadata": {"name": "n1", "annotations": {}}, "spec": {"unschedulable": True} if cordoned else {}}


def test_cordon_records_and_restore_uncordons_c15():
    core = FakeCore(node(False))
    n = cordon.cordon(core, NV, core.node, False)
    assert n["spec"]["unschedulable"] is True and n["metadata"]["annotations"][KEY] == "false"
    assert cordon.cordoned_by_upgrade(NV, n)
    again = cordon.cordon(core, NV, copy.deepcopy(n), False)  # resumed run keeps the original record
    assert again["metadata"]["annotations"][KEY] == "false" and len(core.patches) == 1
    n, uncordoned = cordon.restore(core, NV, copy.deepcopy(core.node), False)
    assert uncordoned and not n["spec"].get("unschedulable") and KEY not in n["metadata"]["annotations"]


def test_admin_cordoned_node_stays_cordoned():
    core = FakeCore(node(True))
    n = cordon.cordon(core, NV, core.node, False)
    assert n["metadata"]["annotations"][KEY] == "true" and not cordon.cordoned_by_upgrade(NV, n)
    assert "spec" not in core.patches[0]
    n, uncordoned = cordon.restore(core, NV, copy.deepcopy(core.node), False)
    assert not uncordoned and n["spec"]["unschedulable"] is True


def test_check_mode_changes_nothing():
    core = FakeCore(node(False))
    cordon.cordon(core, NV, core.node, True)
    assert core.patches == []
