"""The Jinja test npuops.fleet.package_match (the roles' package family rule)."""

from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.test.package_match import package_match


@pytest.mark.parametrize(
    "name,patterns,expected",
    [
        ("nvidia-utils-550-server", ["nvidia-*"], True),
        ("libnvidia-ml1", ["nvidia-*"], False),  # whole name, not a substring
        ("libnvidia-ml1:amd64", ["libnvidia-*"], True),  # dpkg's architecture qualifier
        ("nvidia-container-toolkit", ["nvidia-container-toolkit*", "cuda-toolkit-*"], True),
        ("cuda-drivers-550", ["cuda-toolkit-*"], False),
        ("nvidia-kernel-dkms", "nvidia-kernel-?kms", True),  # one pattern as a string
        ("linux-image-6.1.0-50-amd64", ["linux-image-6.1.0-50-amd64"], True),  # dots are literal
        ("linux-image-6x1x0", ["linux-image-6.1.0"], False),
        ("NVIDIA-utils", ["nvidia-*"], False),  # case-sensitive, as dpkg names are lower case
        ("nvidia-smi", [], False),
    ],
)
def test_package_match(name, patterns, expected):
    assert package_match(name, patterns) is expected


def test_registered_under_its_name():
    from ansible_collections.npuops.fleet.plugins.test.package_match import TestModule

    assert TestModule().tests() == {"package_match": package_match}
