# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""THE rule for "same driver version". Every comparison of driver versions in the collection — loaded
kernel module, module on disk, userspace (smi / NVML / package), node label, smi-reported KMD
version, target — goes through :func:`same_driver_version`; nothing else compares versions.

Inputs come from different sources and spell the same driver differently; each part of the rule
exists for one of them (real-world cases, ``../shared/cases/README.md``):

* Epoch and Debian revision are dropped (C2): ``dpkg -l nvidia-smi`` says ``525.85.12-1`` and
  ``1:580.126.09-0ubuntu0.22.04.1`` where the module says ``525.85.12`` / ``580.126.09``.
* Components compare numerically where both are digits: GFD labels carry ``cuda.driver.rev`` as
  written by the driver (``07``) but other sources (and users) write ``550.90.7``; both are 550.90.7.
  Non-numeric components (``0+ubuntu1``, ``0~rc1``) compare as text.
* A shorter version of at least two components that is a component-wise prefix of the longer one
  matches it (C17): when NVML refuses to start, its second line is ``NVML library version: 570.124``
  for the 570.124.06 library — major.minor only. Only a whole component counts: ``570.12`` is not
  a prefix of ``570.124.06``.
* One component is never enough for the prefix rule: ``580`` is a branch, not a driver, and would
  hide the C1 / C3 mismatches inside one branch (460.56 vs 460.73.01, 595.80 vs 595.84).
* An unknown version (None, empty, ``[N/A]``) never matches anything, itself included: "unknown"
  must never pass as "at the target".
"""

from __future__ import annotations

from typing import Optional, Union

# Values nvidia-smi prints for a field it cannot give (MIG mode, unsupported boards, errors).
NA_VALUES = frozenset(
    {
        "",
        "n/a",
        "[n/a]",
        "[not supported]",
        "not supported",
        "[unknown error]",
        "unknown error",
        "[insufficient permissions]",
        "[gpu is lost]",
        "[gpu requires reset]",
        "-",
    }
)


def na_to_none(value: Optional[str]) -> Optional[str]:
    """Strip a field; N/A-style values (``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``...) -> None."""
    if value is None:
        return None
    value = value.strip()
    if value.lower() in NA_VALUES:
        return None
    return value


def normalize_version(version: Optional[str]) -> Optional[str]:
    """Upstream version of a package or module version: epoch and Debian revision dropped.

    ``525.85.12-1`` -> ``525.85.12``; ``1:580.126.09-0ubuntu0.22.04.1`` -> ``580.126.09``;
    ``580.126.09`` unchanged; empty / N/A -> None.
    """
    version = na_to_none(version)
    if not version:
        return None
    if ":" in version.split("-", 1)[0]:
        version = version.split(":", 1)[1]
    # Debian revision: everything after the last hyphen (upstream versions of drivers have none).
    if "-" in version:
        version = version.rsplit("-", 1)[0]
    # build metadata such as 3.0.0+ubuntu... / 2.4.0~rc1 is kept: it is part of the upstream version
    return version


def _component(part: str) -> Union[int, str]:
    # 07 and 7 are the same revision (GFD label vs hand-written target)
    return int(part) if part.isdigit() else part


def _components(version: str) -> list[Union[int, str]]:
    return [_component(p) for p in version.split(".")]


def same_driver_version(a: Optional[str], b: Optional[str]) -> bool:
    """True when ``a`` and ``b`` denote the same driver (the rule in the module docstring).

    ``550.90.07`` == ``550.90.7``; ``525.85.12-1`` == ``525.85.12``;
    ``1:580.126.09-0ubuntu0.22.04.1`` == ``580.126.09``; ``570.124`` == ``570.124.06``;
    ``570.124`` != ``570.12``; ``460.56`` != ``460.73.01``; ``580`` != ``580.126.09``;
    None / empty / N/A never match.
    """
    na, nb = normalize_version(a), normalize_version(b)
    if not na or not nb:
        return False
    ca, cb = _components(na), _components(nb)
    if len(ca) == len(cb):
        return ca == cb
    short, long_ = (ca, cb) if len(ca) < len(cb) else (cb, ca)
    if len(short) < 2:
        return False
    return long_[: len(short)] == short
