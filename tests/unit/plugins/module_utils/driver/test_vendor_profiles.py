from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import (
    ProfileError,
    annotation_key,
    deploy_label_keys,
    is_accelerator_resource,
    resolve_profile,
)


def test_builtin_nvidia():
    p = resolve_profile("nvidia")
    assert p["presence_label"] == "nvidia.com/gpu.present"
    assert p["upgrade_state_label"] == "nvidia.com/gpu-driver-upgrade-state"
    assert deploy_label_keys(p)[2] == "nvidia.com/gpu.deploy.device-plugin"
    assert annotation_key(p, "cordon") == "nvidia.com/gpu-driver-upgrade-cordon"


def test_rebellions_resources():
    p = resolve_profile("rebellions")
    assert is_accelerator_resource(p, "rebellions.ai/ATOM")
    assert not is_accelerator_resource(p, "nvidia.com/gpu")


def test_unknown_vendor_names_known_ones():
    with pytest.raises(ProfileError, match="unknown vendor 'amd'.*nvidia, rebellions"):
        resolve_profile("amd")


def test_extra_vendor_from_base():
    p = resolve_profile("amd", extra_vendors={"amd": {"base": "nvidia", "presence_label": "amd.com/gpu.present"}})
    assert p["presence_label"] == "amd.com/gpu.present"
    assert p["name"] == "amd"


def test_override_merges_dicts_and_rejects_unknown_key():
    p = resolve_profile("nvidia", {"driver_version_labels": {"major": "x/major"}})
    assert p["driver_version_labels"]["minor"] == "nvidia.com/cuda.driver.minor"
    with pytest.raises(ProfileError, match="unknown key 'presense_label'"):
        resolve_profile("nvidia", {"presense_label": "x"})
    with pytest.raises(ProfileError, match="'operands' must be a list"):
        resolve_profile("nvidia", {"operands": "device-plugin"})


def test_host_side_keys():
    n, r = resolve_profile("nvidia"), resolve_profile("rebellions")
    assert n["main_module"] == "nvidia" and n["kernel_modules"][-1] == "nvidia"
    assert n["userspace_package"] == "libnvidia-compute-{branch}-server"
    default = [f for f in n["packaging"] if f["name"] == n["packaging_default"]][0]
    assert n["userspace_package"] in default["packages"] and "packages" not in n
    assert r["main_module"] == "rebellions" and r["userspace_package"] == "rbln-driver"
    p = resolve_profile("nvidia", {"main_module": "nvidia_open", "userspace_package": "libnvidia-gl-{branch}"})
    assert p["main_module"] == "nvidia_open" and p["userspace_package"] == "libnvidia-gl-{branch}"
    with pytest.raises(ProfileError, match="'main_module' must be a str"):
        resolve_profile("nvidia", {"main_module": ["nvidia"]})


def test_packaging_flavours_are_validated():
    with pytest.raises(ProfileError, match="build must be dkms or precompiled"):
        resolve_profile("nvidia", {"packaging": [{"name": "x", "build": "rpm", "packages": ["a"]}]})
    with pytest.raises(ProfileError, match="packaging_default 'nope' is not one of its flavours"):
        resolve_profile("nvidia", {"packaging_default": "nope"})
    with pytest.raises(ProfileError, match="needs packaging flavours or a packages list"):
        resolve_profile("rebellions", {"packaging": []})
    # a custom vendor may still give a plain packages list
    p = resolve_profile(
        "acme", extra_vendors={"acme": {"base": "rebellions", "packaging": None, "packages": ["acme-drv"]}}
    )
    assert p["packages"] == ["acme-drv"]
