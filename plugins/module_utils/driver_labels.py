# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver version a node advertises in its labels (GFD / NPU feature discovery), and comparison
with a target version. Pure functions over the node's label dict and the vendor profile."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.node_facts import LabelError, read_driver_version


def node_driver_version(profile: Mapping[str, Any], labels: Optional[Mapping[str, str]]) -> Optional[str]:
    """``550.90.07`` from the profile's driver-version labels (same rule as the audit:
    node_facts.read_driver_version); None when the node does not advertise a usable version."""
    try:
        return read_driver_version(labels or {}, profile, "<node>")["version"]
    except LabelError:
        return None


def _parts(version: str) -> list[Any]:
    version = version.strip().split("-", 1)[0]  # drop a Debian revision (525.85.12-1)
    return [int(p) if p.isdigit() else p for p in version.split(".")]


def versions_equal(a: Optional[str], b: Optional[str]) -> bool:
    """Component-wise equality, numeric where both are digits: 550.90.07 == 550.90.7."""
    if not a or not b:
        return False
    return _parts(a) == _parts(b)
