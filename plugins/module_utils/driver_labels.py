# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver version a node advertises in its labels (GFD / NPU feature discovery). Pure function
over the node's label dict and the vendor profile; compare the result with
driver_version.same_driver_version."""

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
