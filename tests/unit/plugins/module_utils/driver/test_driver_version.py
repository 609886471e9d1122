"""THE "same driver version" rule: every expectation is a literal, written from the cases, not derived
from the code (C1, C2, C3, C17 in ../shared/cases/README.md)."""

from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import normalize_version, same_driver_version


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("525.85.12-1", "525.85.12"),  # C2: dpkg -l nvidia-smi
        ("580.159.03-0ubuntu0.22.04.1", "580.159.03"),
        ("1:580.126.09-0ubuntu1", "580.126.09"),
        ("1:580.126.09-0ubuntu0.22.04.1", "580.126.09"),
        ("520.56.06", "520.56.06"),
        (" 550.90.07\n", "550.90.07"),
        ("3.0.0", "3.0.0"),
        ("3.0.0+ubuntu1", "3.0.0+ubuntu1"),  # upstream build metadata is kept
        ("[N/A]", None),
        ("[Not Supported]", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_version(raw, expected):
    assert normalize_version(raw) == expected


SAME = [
    ("550.90.07", "550.90.7"),  # GFD rev label 07 vs hand-written 7
    ("525.85.12-1", "525.85.12"),  # C2: Debian revision
    ("1:580.126.09-0ubuntu0.22.04.1", "580.126.09"),  # epoch + Ubuntu revision
    ("570.124", "570.124.06"),  # C17: NVML mismatch line prints major.minor
    ("580.159", "580.159.03-0ubuntu0.22.04.1"),  # the same, against the package version
    ("3.0.0", "3.0.0"),  # rebellions KMD
    ("580.126.09", "580.126.09"),
    ("580", "580"),  # identical, not a prefix: equal
]

DIFFERENT = [
    ("570.124", "570.12"),  # a prefix is whole components only
    ("570.12", "570.124.06"),
    ("460.56", "460.73.01"),  # C1: unattended-upgrades moved libnvidia-common only
    ("520.56.06", "525.85.12-1"),  # C2
    ("535.54.03", "530.30.02"),  # C3: NVRM API mismatch
    ("595.80", "595.84"),  # C3 second host: DKMS built stale source
    ("580", "580.126.09"),  # one component is never enough
    ("2.4.0", "3.0.0"),
    ("550.90.07", "550.90.08"),
    ("3.0.0+ubuntu1", "3.0.0"),
    (None, "550.90.07"),
    ("", ""),
    (None, None),
    ("[N/A]", "[N/A]"),
]


@pytest.mark.parametrize("left,right", SAME)
def test_same_driver_version(left, right):
    assert same_driver_version(left, right) is True
    assert same_driver_version(right, left) is True  # symmetric


@pytest.mark.parametrize("left,right", DIFFERENT)
def test_different_driver_version(left, right):
    assert same_driver_version(left, right) is False
    assert same_driver_version(right, left) is False


def test_every_comparison_uses_the_one_rule():
    """No module keeps a rule of its own: the callers hold this very function."""
    from ansible_collections.npuops.fleet.plugins.module_utils.driver import verdict as driver_verdict
    from ansible_collections.npuops.fleet.plugins.module_utils.host import driver_facts, smi_parsers
    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import validation as upgrade_validation

    for mod in (driver_verdict, upgrade_validation, driver_facts):
        assert mod.same_driver_version is same_driver_version
    assert not hasattr(smi_parsers, "versions_match") and not hasattr(smi_parsers, "normalize_version")
    # the verdict follows it: 07 == 7 and NVML's major.minor are the same driver
    v = driver_verdict.driver_verdict(
        "550.90.7", "550.90.07", "550.90.07-0ubuntu1", device_count=1, expected="550.90.7"
    )
    assert v["verdict"] == "ok" and v["expected_match"] is True
    v = driver_verdict.driver_verdict("570.124.06", "570.124.06", "570.124", device_count=1)
    assert v["verdict"] == "ok"
