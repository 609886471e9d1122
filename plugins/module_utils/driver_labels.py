# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver version a node advertises in its labels (GFD / NPU feature discovery), and comparison
with a target version. Pure functions over the node's label dict and the vendor profile."""

from __future__ import annotations

from typing import Any, Mapping, Optional


def _from_label_set(labels: Mapping[str, str], keys: Mapping[str, str]) -> Optional[str]:
    if not keys:
        return None
    if keys.get("full") and labels.get(keys["full"]):
        return labels[keys["full"]]
    parts = [labels.get(keys[k]) for k in ("major", "minor", "rev") if k in keys]
    if parts and all(parts):
        return ".".join(parts)
    return None


def node_driver_version(profile: Mapping[str, Any], labels: Optional[Mapping[str, str]]) -> Optional[str]:
    """``550.90.07`` from the profile's driver-version labels (then the alternative set); None if absent."""
    labels = labels or {}
    return _from_label_set(labels, profile.get("driver_version_labels") or {}) or _from_label_set(
        labels, profile.get("driver_version_labels_alt") or {}
    )


def _parts(version: str) -> list[Any]:
    version = version.strip().split("-", 1)[0]  # drop a Debian revision (525.85.12-1)
    return [int(p) if p.isdigit() else p for p in version.split(".")]


def versions_equal(a: Optional[str], b: Optional[str]) -> bool:
    """Component-wise equality, numeric where both are digits: 550.90.07 == 550.90.7."""
    if not a or not b:
        return False
    return _parts(a) == _parts(b)
