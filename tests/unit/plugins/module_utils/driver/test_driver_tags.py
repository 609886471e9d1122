"""Tags from parts, label reading, stale labels (cases C8, C11)."""

from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.driver.node_labels import (
    KERNEL_LABEL,
    OS_ID_LABEL,
    OS_VERSION_LABEL,
    LabelError,
    read_driver_version,
    stale_label_warnings,
)
from ansible_collections.npuops.fleet.plugins.module_utils.driver.tags import (
    TagError,
    build_tag,
    compute_tag,
    format_fields,
    image_ref,
)
from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile

NV = resolve_profile("nvidia")
RB = resolve_profile("rebellions")


def nv_labels(major="550", minor="90", rev="07", kernel="5.15.0-119-generic", os_id="ubuntu", ver="22.04"):
    labels = {
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        KERNEL_LABEL: kernel,
        OS_ID_LABEL: os_id,
        OS_VERSION_LABEL: ver,
    }
    return {k: v for k, v in labels.items() if v is not None}


@pytest.mark.parametrize(
    "labels,expected",
    [
        (nv_labels(), "550-5.15.0-119-generic-ubuntu22.04"),
        (nv_labels("535", "183", "06", "5.15.0-107-generic"), "535-5.15.0-107-generic-ubuntu22.04"),
        (nv_labels(kernel="6.8.0-45-generic", ver="24.04"), "550-6.8.0-45-generic-ubuntu24.04"),
        (nv_labels("525", "105", "17", "5.15.0-69-generic"), "525-5.15.0-69-generic-ubuntu22.04"),
        (nv_labels(kernel="5.14.0-427.13.1.el9_4.x86_64", os_id="rhel", ver="9.4"),
         "550-5.14.0-427.13.1.el9_4.x86_64-rhel9"),
    ],
)
def test_nvidia_precompiled(labels, expected):
    assert compute_tag(labels, NV, "n")["tag"] == expected


def test_parts_and_keys():
    r = compute_tag(nv_labels(), NV, "n")
    assert r["parts"]["version"] == "550.90.07"
    assert r["parts"]["branch"] == "550"
    assert r["parts"]["kernel"] == "5.15.0-119-generic"
    assert r["parts"]["os_tag"] == "ubuntu22.04"
    assert r["label_keys"]["kernel"] == KERNEL_LABEL
    assert r["label_keys"]["driver"][0] == "nvidia.com/cuda.driver.major"


def test_nvidia_regular_format():
    assert compute_tag(nv_labels(), NV, "n", precompiled=False)["tag"] == "550.90.07-ubuntu22.04"


def test_nvidia_alt_driver_labels():
    labels = nv_labels(major=None, minor=None, rev=None)
    labels["nvidia.com/cuda.driver-version.full"] = "570.124.06"
    assert compute_tag(labels, NV, "n")["tag"] == "570-5.15.0-119-generic-ubuntu22.04"
    labels = nv_labels(major=None, minor=None, rev=None)
    labels.update({"nvidia.com/cuda.driver-version.major": "570", "nvidia.com/cuda.driver-version.minor": "124",
                   "nvidia.com/cuda.driver-version.revision": "06"})
    assert read_driver_version(labels, NV, "n")["version"] == "570.124.06"


def test_rebellions_tag_full_and_split_keys():
    base = {KERNEL_LABEL: "6.8.0-90-generic", OS_ID_LABEL: "ubuntu", OS_VERSION_LABEL: "22.04"}
    lab = dict(base, **{"rebellions.ai/driver-version.full": "3.0.0"})
    r = compute_tag(lab, RB, "npu")
    assert r["tag"] == "3.0.0-6.8.0-90-generic-ubuntu22.04"
    assert image_ref(RB["image"], r["tag"]) == "rebellions/rbln-driver:3.0.0-6.8.0-90-generic-ubuntu22.04"
    parts = dict(base, **{"rebellions.ai/driver-version.major": "2", "rebellions.ai/driver-version.minor": "4",
                          "rebellions.ai/driver-version.patch": "0"})
    assert compute_tag(parts, RB, "npu")["tag"] == "2.4.0-6.8.0-90-generic-ubuntu22.04"


def test_overrides_what_if():
    r = compute_tag(nv_labels("535", "183", "06", "5.15.0-107-generic"), NV, "lab-node-1", driver_version="550")
    assert r["tag"] == "550-5.15.0-107-generic-ubuntu22.04"
    assert r["overrides"] == {"driver_version": "550"}
    r = compute_tag(nv_labels(), NV, "n", kernel="5.15.0-122-generic", branch="560")
    assert r["tag"] == "560-5.15.0-122-generic-ubuntu22.04"
    # overrides replace the labels they stand for: no kernel/driver label needed
    r = compute_tag({OS_ID_LABEL: "ubuntu", OS_VERSION_LABEL: "22.04"}, NV, "n", kernel="6.8.0-1-generic",
                    driver_version="550.90.07")
    assert r["tag"] == "550-6.8.0-1-generic-ubuntu22.04"
    with pytest.raises(TagError, match="needs the full driver version"):
        compute_tag(nv_labels(), RB, "n", branch="3")


@pytest.mark.parametrize(
    "drop,key",
    [
        (KERNEL_LABEL, KERNEL_LABEL),
        (OS_ID_LABEL, OS_ID_LABEL),
        (OS_VERSION_LABEL, OS_VERSION_LABEL),
        ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.major"),
        ("nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.minor"),
    ],
)
def test_c11_missing_label_names_node_and_key(drop, key):
    labels = nv_labels()
    del labels[drop]
    with pytest.raises(LabelError) as ei:
        compute_tag(labels, NV, "gpu-7")
    assert ei.value.key == key and ei.value.node == "gpu-7"
    assert "node gpu-7" in str(ei.value) and key in str(ei.value)


@pytest.mark.parametrize("value", ["", "   "])
def test_c11_empty_label_never_gives_tag_with_hole(value):
    labels = nv_labels(kernel=value)
    with pytest.raises(LabelError, match="kernel-version.full is empty"):
        compute_tag(labels, NV, "gpu-7")


def test_driver_label_missing_names_primary_key():
    labels = nv_labels(major=None, minor=None, rev=None)
    with pytest.raises(LabelError, match="nvidia.com/cuda.driver.major"):
        compute_tag(labels, NV, "n")
    with pytest.raises(LabelError, match="rebellions.ai/driver-version.full"):
        compute_tag(nv_labels(), RB, "n")


def test_unsupported_os_is_tag_error():
    with pytest.raises(TagError, match="node n: unsupported OS 'gentoo'"):
        compute_tag(nv_labels(os_id="gentoo", ver="2.15"), NV, "n")


def test_build_tag_rejects_holes_and_bad_chars():
    with pytest.raises(TagError, match="tag part kernel is empty"):
        build_tag("{branch}-{kernel}-{os_tag}", {"branch": "550", "kernel": "", "os_tag": "ubuntu22.04"}, "n")
    with pytest.raises(TagError, match="not allowed"):
        build_tag("{branch}-{kernel}-{os_tag}", {"branch": "550", "kernel": "5.15 x", "os_tag": "u"}, "n")
    with pytest.raises(TagError, match="unknown field"):
        format_fields("{branch}-{arch}")


def test_kernel_hyphens_preserved():
    # never split: a kernel with many hyphens stays intact
    r = compute_tag(nv_labels(kernel="5.15.0-1075-aws"), NV, "n")
    assert r["parts"]["kernel"] == "5.15.0-1075-aws"
    assert r["tag"] == "550-5.15.0-1075-aws-ubuntu22.04"


def test_stale_labels():
    labels = nv_labels(ver="20.04")
    w = stale_label_warnings("n", labels, {"kernelVersion": "5.15.0-120-generic", "osImage": "Ubuntu 22.04.4 LTS"})
    assert len(w) == 2
    assert "stale labels" in w[0] and "5.15.0-120-generic" in w[0]
    assert "osImage 'Ubuntu 22.04.4 LTS'" in w[1]
    fresh = {"kernelVersion": "5.15.0-119-generic", "osImage": "Ubuntu 22.04.4 LTS"}
    assert stale_label_warnings("n", nv_labels(), fresh) == []
    assert stale_label_warnings("n", nv_labels(), None) == []
    r = compute_tag(labels, NV, "n", {"kernelVersion": "5.15.0-120-generic", "osImage": "Ubuntu 22.04.4 LTS"})
    assert len(r["warnings"]) == 2


@pytest.mark.parametrize(
    "repo,registry,expected",
    [
        ("nvcr.io/nvidia/driver", None, "nvcr.io/nvidia/driver:t"),
        ("nvcr.io/nvidia/driver", "reg.example.com/mirror", "reg.example.com/mirror/nvidia/driver:t"),
        ("rebellions/rbln-driver", "reg:5000", "reg:5000/rebellions/rbln-driver:t"),
        ("localhost/x/y", "r.io", "r.io/x/y:t"),
    ],
)
def test_image_ref(repo, registry, expected):
    assert image_ref(repo, "t", registry) == expected


def test_upgrade_side_reads_split_rebellions_labels_like_the_audit():
    # The node-upgrade validation and the audit must read the same version (3/0/1 -> 3.0.1, not 3.0).
    from ansible_collections.npuops.fleet.plugins.module_utils.driver.node_labels import node_driver_version

    labels = {"rebellions.ai/driver-version.major": "3", "rebellions.ai/driver-version.minor": "0",
              "rebellions.ai/driver-version.patch": "1"}
    assert node_driver_version(RB, labels) == "3.0.1"
    assert node_driver_version(NV, {}) is None
