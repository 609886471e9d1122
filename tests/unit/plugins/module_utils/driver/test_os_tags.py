"""OS tag rules per distribution (as the GPU Operator names its driver images).

The expected tags are written by hand from NVIDIA/gpu-operator: ``getGPUNodeOSInfo`` in
controllers/state_manager.go and ``getOSTag`` in internal/state/nodepool.go (ID joined with
VERSION_ID; rhel, rocky and ol keep only the major version) and the cases of their tests
(controllers/state_manager_test.go, internal/state/nodepool_test.go).
"""

from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.driver.os_tags import (
    OS_TAG_RULES,
    OsTagError,
    os_image_matches,
    os_tag,
)

# (ID label, VERSION_ID label) -> the tag the GPU Operator builds
UPSTREAM_TAGS = [
    # ubuntu: VERSION_ID whole
    ("ubuntu", "20.04", "ubuntu20.04"),
    ("ubuntu", "22.04", "ubuntu22.04"),
    ("ubuntu", "24.04", "ubuntu24.04"),
    # rhel: major only, for every release (was rhel9.4 / rhel8.10 here before)
    ("rhel", "8.10", "rhel8"),
    ("rhel", "9.4", "rhel9"),
    ("rhel", "9.6", "rhel9"),
    ("rhel", "10.0", "rhel10"),
    ("rhel", "10.2", "rhel10"),
    # rocky: major only (was refused here before)
    ("rocky", "9.4", "rocky9"),
    ("rocky", "9.5", "rocky9"),
    ("rocky", "8.10", "rocky8"),
    # ol (Oracle Linux): major only (was refused here before)
    ("ol", "9.5", "ol9"),
    ("ol", "8.10", "ol8"),
    # rhcos: VERSION_ID is the OpenShift release, whole
    ("rhcos", "4.13", "rhcos4.13"),
    ("rhcos", "4.15", "rhcos4.15"),
    ("rhcos", "4.18", "rhcos4.18"),
    # sles / sl-micro: VERSION_ID whole, also the service-pack spelling
    ("sles", "15.5", "sles15.5"),
    ("sles", "15.6", "sles15.6"),
    ("sles", "15-SP6", "sles15-SP6"),
    ("sl-micro", "6.0", "sl-micro6.0"),
    # centos / debian: VERSION_ID whole (a bare major in their os-release)
    ("centos", "7", "centos7"),
    ("centos", "8", "centos8"),
    ("debian", "12", "debian12"),
    ("debian", "13", "debian13"),
]


@pytest.mark.parametrize("os_id,version,expected", UPSTREAM_TAGS)
def test_os_tag_equals_gpu_operator(os_id, version, expected):
    assert os_tag(os_id, version) == expected


def test_every_builtin_family_is_in_the_table():
    assert {row[0] for row in UPSTREAM_TAGS} == set(OS_TAG_RULES)


@pytest.mark.parametrize(
    "os_id,version,expected",
    [
        ("Ubuntu", " 22.04 ", "ubuntu22.04"),
        ("RHEL", "9.4", "rhel9"),
        ("rocky", "9", "rocky9"),
        ("rhel", "9", "rhel9"),
    ],
)
def test_case_and_space_and_bare_major(os_id, version, expected):
    assert os_tag(os_id, version) == expected


def test_precompiled_tag_for_rhel_and_rocky_uses_major_only():
    # <driver branch>-<kernel version>-<os tag>, as GetPrecompiledImagePath builds it
    assert "550-5.14.0-427.13.1.el9_4.x86_64-%s" % os_tag("rhel", "9.4") == "550-5.14.0-427.13.1.el9_4.x86_64-rhel9"
    assert "570-5.14.0-503.14.1.el9_5.x86_64-%s" % os_tag("rocky", "9.5") == "570-5.14.0-503.14.1.el9_5.x86_64-rocky9"


@pytest.mark.parametrize("os_id", ["arch", "archlinux", "talos", "almalinux", "fedora", "amzn"])
def test_unsupported_os_is_explicit_error(os_id):
    with pytest.raises(
        OsTagError, match="unsupported OS %r.*supported: centos, debian, ol, rhcos, rhel, rocky" % os_id
    ):
        os_tag(os_id, "1")


@pytest.mark.parametrize(
    "os_id,version",
    [
        ("ubuntu", "22"),
        ("ubuntu", "22.04.4"),  # not an os-release VERSION_ID; upstream would build ubuntu22.04.4
        ("rhel", "A.10"),
        ("rhel", "9.4.1"),
        ("rocky", "nine"),
        ("ol", "9.5-beta"),
        ("rhcos", "415.92.202402201450-0"),  # OSTREE_VERSION, not VERSION_ID
        ("rhcos", "9.6"),
        ("sles", "15-sp5"),
        ("sles", "15"),
        ("sl-micro", "6"),
        ("centos", "8.5"),
        ("debian", "12.5"),
        ("debian", "bookworm"),
    ],
)
def test_bad_version_shape(os_id, version):
    with pytest.raises(OsTagError, match="does not have the expected form"):
        os_tag(os_id, version)


def test_rhcos_refusal_names_the_expected_label():
    with pytest.raises(OsTagError, match=r"OpenShift release 4\.MINOR.*OSTREE_VERSION"):
        os_tag("rhcos", "415.92.202402201450-0")


@pytest.mark.parametrize("os_id,version", [("", "22.04"), ("ubuntu", ""), ("ubuntu", "  ")])
def test_empty_parts(os_id, version):
    with pytest.raises(OsTagError, match="empty"):
        os_tag(os_id, version)


def test_extra_rules():
    rules = {"talos": {"pattern": r"^v\d+\.\d+\.\d+$", "format": "talos{version}", "names": ["talos"]}}
    assert os_tag("talos", "v1.12.6", rules) == "talosv1.12.6"
    # a replacement rule wins over the built-in one
    assert os_tag("rhel", "9.4", {"rhel": {"pattern": r"^(?P<v>\d+\.\d+)$", "format": "rhel{v}"}}) == "rhel9.4"
    with pytest.raises(OsTagError, match="must be a mapping"):
        os_tag("rocky", "9.3", {"rocky": "x"})
    with pytest.raises(OsTagError, match="unknown field"):
        os_tag("rocky", "9.3", {"rocky": {"format": "rocky{minor}"}})


@pytest.mark.parametrize(
    "os_id,version,image,expected",
    [
        ("ubuntu", "22.04", "Ubuntu 22.04.4 LTS", True),
        ("ubuntu", "22.04", "Ubuntu 24.04.1 LTS", False),
        ("ubuntu", "20.04", "Ubuntu 22.04.4 LTS", False),
        ("rhel", "9.4", "Red Hat Enterprise Linux 9.4 (Plow)", True),
        ("rocky", "9.5", "Rocky Linux 9.5 (Blue Onyx)", True),
        ("rocky", "9.5", "Rocky Linux 8.10 (Green Obsidian)", False),
        ("ol", "9.5", "Oracle Linux Server 9.5", True),
        ("sles", "15.5", "SUSE Linux Enterprise Server 15 SP5", True),
        ("sles", "15-SP5", "SUSE Linux Enterprise Server 15 SP5", True),
        ("sles", "15.4", "SUSE Linux Enterprise Server 15 SP5", False),
        ("ubuntu", "22.04", "", None),
        ("arch", "x", "Arch Linux", None),
        ("ubuntu", "22.04", "Debian GNU/Linux 12 (bookworm)", False),
    ],
)
def test_os_image_matches(os_id, version, image, expected):
    assert os_image_matches(os_id, version, image) is expected
