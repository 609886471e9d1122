"""Filter npuops.fleet.apt_madison over real apt-cache madison output."""

from __future__ import annotations

from ansible_collections.npuops.fleet.plugins.filter.apt_madison import FilterModule

MADISON = """\
linux-image-6.1.0-27-amd64 | 6.1.115-1 | http://deb.debian.org/debian bookworm-updates/main amd64 Packages
linux-image-6.1.0-27-amd64 | 6.1.115-1 | http://security.debian.org bookworm-security/main amd64 Packages
linux-image-6.1.0-27-amd64 | 6.1.112-1 | http://deb.debian.org/debian bookworm/main amd64 Packages
"""


def madison(text):
    return FilterModule().filters()["apt_madison"](text)


def test_versions_in_apt_order_once_each():
    assert madison(MADISON) == {"linux-image-6.1.0-27-amd64": ["6.1.115-1", "6.1.112-1"]}


def test_unknown_package_and_missing_output_are_empty():
    assert madison("N: Unable to locate package linux-image-9.9.9-amd64\n") == {}
    assert madison("") == {}
    assert madison(None) == {}
