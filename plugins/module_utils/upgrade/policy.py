# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The operators' ``upgradePolicy`` block: parsing, validation, chart defaults.

``parse_policy(raw)`` accepts the block as users have it in Helm values (camelCase) or in
snake_case, fills in the chart defaults (see ../shared/domain.md) and raises :class:`PolicyError`
naming the key path (``policy.drain.timeoutSeconds``) for an unknown key or an invalid value.
``max_unavailable_count()`` turns ``maxUnavailable`` (int or "25%") into a node count.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import selectors


class PolicyError(ValueError, FleetError):
    """Unknown key or invalid value in the upgrade policy (message names the key path)."""


@dataclass
class WaitForCompletion:
    timeout_seconds: int = 0  # 0 = wait forever
    pod_selector: str = ""  # "" = skip the step


@dataclass
class PodDeletion:
    force: bool = False  # False: accelerator pods without a controller block
    timeout_seconds: int = 300
    delete_empty_dir_data: bool = False


@dataclass
class Drain:
    enable: bool = False
    force: bool = False
    delete_empty_dir_data: bool = False
    pod_selector: str = ""
    timeout_seconds: int = 300  # 0 = forever


@dataclass
class Reboot:
    enable: bool = False
    reboot_timeout_seconds: int = 0  # 0 = no timeout


@dataclass
class UpgradePolicy:
    auto_upgrade: bool = False
    max_parallel_upgrades: int = 1  # 0 = unlimited
    max_unavailable: Any = "25%"  # int or "N%"
    wait_for_completion: WaitForCompletion = field(default_factory=WaitForCompletion)
    pod_deletion: PodDeletion = field(default_factory=PodDeletion)
    drain: Drain = field(default_factory=Drain)
    reboot: Reboot = field(default_factory=Reboot)


# Accepted spellings -> attribute. Sub-blocks: key -> (attribute, dataclass, field spellings).
_TOP_SCALARS = {
    "autoUpgrade": "auto_upgrade",
    "auto_upgrade": "auto_upgrade",
    "maxParallelUpgrades": "max_parallel_upgrades",
    "max_parallel_upgrades": "max_parallel_upgrades",
    "maxUnavailable": "max_unavailable",
    "max_unavailable": "max_unavailable",
}
_TIMEOUT = {"timeoutSeconds": "timeout_seconds", "timeout_seconds": "timeout_seconds"}
_SELECTOR = {"podSelector": "pod_selector", "pod_selector": "pod_selector"}
_FORCE = {"force": "force"}
# NVIDIA's Helm values and ClusterPolicy spell it deleteEmptyDir; kubectl/domain docs deleteEmptyDirData.
_EMPTYDIR = {
    "deleteEmptyDirData": "delete_empty_dir_data",
    "delete_empty_dir_data": "delete_empty_dir_data",
    "deleteEmptyDir": "delete_empty_dir_data",
    "delete_empty_dir": "delete_empty_dir_data",
}
_ENABLE = {"enable": "enable"}
_SUB_BLOCKS: dict[str, tuple[str, dict[str, str]]] = {
    "waitForCompletion": ("wait_for_completion", {**_TIMEOUT, **_SELECTOR}),
    "wait_for_completion": ("wait_for_completion", {**_TIMEOUT, **_SELECTOR}),
    "drain": ("drain", {**_ENABLE, **_FORCE, **_EMPTYDIR, **_SELECTOR, **_TIMEOUT}),
    "reboot": (
        "reboot",
        {
            **_ENABLE,
            "rebootTimeoutSeconds": "reboot_timeout_seconds",
            "reboot_timeout_seconds": "reboot_timeout_seconds",
        },
    ),
}
for _name in (
    "npuPodDeletion",
    "gpuPodDeletion",
    "podDeletion",
    "npu_pod_deletion",
    "gpu_pod_deletion",
    "pod_deletion",
):
    _SUB_BLOCKS[_name] = ("pod_deletion", {**_FORCE, **_TIMEOUT, **_EMPTYDIR})

_BOOL_FIELDS = {"auto_upgrade", "force", "delete_empty_dir_data", "enable"}
_INT_FIELDS = {"max_parallel_upgrades", "timeout_seconds", "reboot_timeout_seconds"}
_STR_FIELDS = {"pod_selector"}
_PERCENT = re.compile(r"^\s*(\d+)\s*%\s*$")


def _to_bool(path: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
        return value.strip().lower() in ("true", "yes")
    raise PolicyError("%s must be a boolean (true/false), got %r" % (path, value))


def _to_int(path: str, value: Any) -> int:
    if isinstance(value, bool):
        raise PolicyError("%s must be a non-negative integer, got %r" % (path, value))
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    else:
        raise PolicyError("%s must be a non-negative integer, got %r" % (path, value))
    if number < 0:
        raise PolicyError("%s must be a non-negative integer, got %r" % (path, value))
    return number


def _to_selector(path: str, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PolicyError("%s must be a label selector string such as 'app=trainer', got %r" % (path, value))
    for term in selectors.split(value):
        try:
            selectors.parse_term(term)
        except ValueError:
            raise PolicyError("%s: %r is not a valid label selector term" % (path, term)) from None
    return value.strip()


def _max_unavailable(path: str, value: Any) -> Any:
    pct_match = _PERCENT.match(value) if isinstance(value, str) else None
    if pct_match:
        pct = int(pct_match.group(1))
        if pct > 100:
            raise PolicyError("%s must be at most 100%%, got %r" % (path, value))
        return "%d%%" % pct
    try:
        return _to_int(path, value)
    except PolicyError:
        raise PolicyError("%s must be a non-negative integer or a whole percentage such as '25%%', got %r"
                          % (path, value))


def _convert(path: str, attr: str, value: Any) -> Any:
    if attr in _BOOL_FIELDS:
        return _to_bool(path, value)
    if attr in _INT_FIELDS:
        return _to_int(path, value)
    if attr in _STR_FIELDS:
        return _to_selector(path, value)
    if attr == "max_unavailable":
        return _max_unavailable(path, value)
    raise PolicyError("%s: unsupported field" % path)  # pragma: no cover


def _claim(seen: dict, field: str, path: str) -> None:
    """PolicyError when another spelling (camelCase/snake_case, gpu/npuPodDeletion) set ``field`` already."""
    if not field:
        return
    if field in seen:
        raise PolicyError("%s and %s set the same policy field; keep one of them" % (seen[field], path))
    seen[field] = path


def parse_policy(raw: Optional[Mapping[str, Any]]) -> UpgradePolicy:
    """Validate ``raw`` and return the policy with chart defaults filled in. Raises PolicyError."""
    policy = UpgradePolicy()
    if raw is None:
        return policy
    if not isinstance(raw, Mapping):
        raise PolicyError("policy must be a mapping (the upgradePolicy block), got %s" % type(raw).__name__)
    known = sorted(set(_TOP_SCALARS) | set(_SUB_BLOCKS))
    seen: dict[str, str] = {}  # field -> the key that set it: two spellings of one field must not race
    for key, value in raw.items():
        path = "policy.%s" % key
        _claim(seen, _TOP_SCALARS.get(key) or (_SUB_BLOCKS[key][0] if key in _SUB_BLOCKS else ""), path)
        if key in _TOP_SCALARS:
            setattr(policy, _TOP_SCALARS[key], _convert(path, _TOP_SCALARS[key], value))
        elif key in _SUB_BLOCKS:
            attr, fields = _SUB_BLOCKS[key]
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise PolicyError("%s must be a mapping, got %r" % (path, value))
            block = getattr(policy, attr)
            for sub_key, sub_value in value.items():
                if sub_key not in fields:
                    raise PolicyError("%s.%s: unknown key; known keys: %s" % (path, sub_key, ", ".join(sorted(fields))))
                _claim(seen, "%s.%s" % (attr, fields[sub_key]), "%s.%s" % (path, sub_key))
                setattr(block, fields[sub_key], _convert("%s.%s" % (path, sub_key), fields[sub_key], sub_value))
        else:
            raise PolicyError("%s: unknown key; known keys: %s" % (path, ", ".join(known)))
    return policy


def max_unavailable_count(value: Any, total_nodes: int) -> int:
    """Nodes allowed to be unavailable: percent of ``total_nodes`` rounded up (as the operators
    scale an IntOrString), never below 1 so that an upgrade can always start."""
    pct_match = _PERCENT.match(value) if isinstance(value, str) else None
    if pct_match:
        count = math.ceil(total_nodes * int(pct_match.group(1)) / 100.0)
    else:
        count = int(value)
    return max(1, count)


def timeout_or_none(seconds: int) -> Optional[int]:
    """The chart's "0 = forever" as None."""
    return None if not seconds else seconds
