from __future__ import annotations

from ansible_collections.npuops.fleet.plugins.module_utils.driver.node_labels import node_driver_version
from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile

NV = resolve_profile("nvidia")


def test_gfd_labels():
    labels = {
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "90",
        "nvidia.com/cuda.driver.rev": "07",
    }
    assert node_driver_version(NV, labels) == "550.90.07"


def test_alternative_label_set_and_missing():
    assert node_driver_version(NV, {"nvidia.com/cuda.driver-version.full": "570.124.06"}) == "570.124.06"
    assert node_driver_version(NV, {"nvidia.com/cuda.driver.major": "550"}) is None
    assert node_driver_version(NV, None) is None
