# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""NVIDIA fabric manager against the driver (D2): the installed package's version must equal the
driver's exactly on NVSwitch systems, else nv-fabricmanager refuses to start (pure, no I/O)."""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import normalize_version, same_driver_version
from ansible_collections.npuops.fleet.plugins.module_utils.host.kernel_log import fabricmanager_mismatch

# Package names in order of preference: the real package (Ubuntu / CUDA repo ``nvidia-fabricmanager-<branch>``,
# CUDA repo branchless ``nvidia-fabricmanager``), then the CUDA repo's ``cuda-drivers-fabricmanager-<branch>``,
# which can be a transitional package whose version is another branch's (D8).
PACKAGE_PATTERNS: tuple[str, ...] = (
    r"nvidia-fabricmanager(?:-\d+(?:-server)?)?",
    r"cuda-drivers-fabricmanager(?:-\d+)?",
)


def _key(version: Optional[str]) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in (normalize_version(version) or "").split("."))


def exact_same(a: Optional[str], b: Optional[str]) -> bool:
    """The collection's version rule without its major.minor prefix allowance: the same number of
    components too (``550.120`` is not ``550.120.05``); epoch, Debian revision and leading zeros ignored."""
    na, nb = normalize_version(a), normalize_version(b)
    if not na or not nb:
        return False
    return len(na.split(".")) == len(nb.split(".")) and same_driver_version(na, nb)


def fabricmanager_facts(
    installed: Mapping[str, Mapping[str, str]],
    driver_version: Optional[str],
    driver_source: Optional[str] = None,
    log_text: Optional[str] = None,
) -> dict[str, Any]:
    """Installed packages (``{name: {"version", "status"}}``, apt_state.parse_dpkg_query) -> ::

        {"installed": bool, "package": name or None, "version": upstream version or None,
         "version_raw": str or None, "packages": {name: version}, "driver_version": str or None,
         "driver_source": str or None, "matches_driver": bool or None, "message": str or None,
         "log_mismatch": [{"fabricmanager", "driver", "message"}]}

    ``matches_driver`` is null when fabricmanager is not installed or the driver version is unknown;
    ``message`` e.g. ``fabricmanager 530.30.02 != driver 530.41.03``. ``log_text``: the service's log,
    whose version refusals (kernel_log.fabricmanager_mismatch) are returned as ``log_mismatch``.
    """
    packages: dict[str, str] = {}
    package = None
    for pattern in PACKAGE_PATTERNS:
        names = sorted(n for n in installed if re.fullmatch(pattern, n.split(":", 1)[0]))
        for n in names:
            packages[n] = installed[n]["version"]
        if names and package is None:
            package = max(names, key=lambda n: (_key(installed[n]["version"]), n))
    raw = installed[package]["version"] if package else None
    version = normalize_version(raw)
    driver = normalize_version(driver_version)
    matches = exact_same(version, driver) if version and driver else None
    log = fabricmanager_mismatch(log_text or "") if package else []
    message = None
    if matches is False:
        message = "fabricmanager %s != driver %s" % (version, driver)
    elif log:
        message = log[-1]["message"]
    return {
        "installed": package is not None,
        "package": package,
        "version": version,
        "version_raw": raw,
        "packages": packages,
        "driver_version": driver,
        "driver_source": driver_source if driver else None,
        "matches_driver": matches,
        "message": message,
        "log_mismatch": log,
    }
