"""OS tag rules per distribution (as the GPU Operator names its driver images)."""

from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.os_tags import OsTagError, os_image_matches, os_tag


@pytest.mark.parametrize(
    "os_id,version,expected",
    [
        ("ubuntu", "22.04", "ubuntu22.04"),
        ("ubuntu", "24.04", "ubuntu24.04"),
        ("Ubuntu", " 20.04 ", "ubuntu20.04"),
        ("ubuntu", "22.04.4", "ubuntu22.04"),
        ("rhel", "9.4", "rhel9.4"),
        ("rhel", "8.10", "rhel8.10"),
        ("rhcos", "415.92.202402201450-0", "rhcos4.15"),
        ("rhcos", "4.14", "rhcos4.14"),
        ("rhcos", "412.86.202303241612-0", "rhcos4.12"),
        ("sles", "15.5", "sles15.5"),
        ("sl-micro", "6.0", "sl-micro6.0"),
        ("centos", "8", "centos8"),
        ("centos", "7", "centos7"),
        ("debian", "12", "debian12"),
    ],
)
def test_os_tag(os_id, version, expected):
    assert os_tag(os_id, version) == expected


def test_unsupported_os_is_explicit_error():
    with pytest.raises(OsTagError, match="unsupported OS 'arch'.*supported: centos, debian, rhcos, rhel"):
        os_tag("arch", "rolling")


@pytest.mark.parametrize("os_id,version", [("ubuntu", "22"), ("rhel", "9"), ("rhcos", "9.6"), ("sles", "15-SP5")])
def test_bad_version_shape(os_id, version):
    with pytest.raises(OsTagError, match="does not have the expected form"):
        os_tag(os_id, version)


@pytest.mark.parametrize("os_id,version", [("", "22.04"), ("ubuntu", ""), ("ubuntu", "  ")])
def test_empty_parts(os_id, version):
    with pytest.raises(OsTagError, match="empty"):
        os_tag(os_id, version)


def test_extra_rules():
    rules = {"rocky": {"pattern": r"^(?P<major>\d+)(\.\d+)?$", "format": "rocky{major}", "names": ["rocky"]}}
    assert os_tag("rocky", "9.3", rules) == "rocky9"
    with pytest.raises(OsTagError, match="must be a mapping"):
        os_tag("rocky", "9.3", {"rocky": "x"})


@pytest.mark.parametrize(
    "os_id,version,image,expected",
    [
        ("ubuntu", "22.04", "Ubuntu 22.04.4 LTS", True),
        ("ubuntu", "22.04", "Ubuntu 24.04.1 LTS", False),
        ("ubuntu", "20.04", "Ubuntu 22.04.4 LTS", False),
        ("rhel", "9.4", "Red Hat Enterprise Linux 9.4 (Plow)", True),
        ("sles", "15.5", "SUSE Linux Enterprise Server 15 SP5", True),
        ("sles", "15.4", "SUSE Linux Enterprise Server 15 SP5", False),
        ("ubuntu", "22.04", "", None),
        ("arch", "x", "Arch Linux", None),
        ("ubuntu", "22.04", "Debian GNU/Linux 12 (bookworm)", False),
    ],
)
def test_os_image_matches(os_id, version, image, expected):
    assert os_image_matches(os_id, version, image) is expected
