# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Secure Boot state from the EFI variable or ``mokutil --sb-state`` (pure parsers, no I/O).

The kernel refuses an unsigned (or not enrolled-key signed) DKMS module when Secure Boot is on (D3),
so host facts record the state: ``enabled``, ``disabled`` or ``unknown``, with the source that told.
"""

from __future__ import annotations

from typing import Any, Optional

# efivarfs file: 4 bytes of variable attributes, then the one-byte value (1 = enabled)
EFIVAR_PATH = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e0a9e9d6c3ae"


def parse_efivar(data: Optional[bytes]) -> Optional[str]:
    """Contents of the SecureBoot efivarfs file -> ``enabled`` / ``disabled``; None when unreadable
    or not the 4 attribute bytes followed by the value (the last byte: 1 enabled, 0 disabled)."""
    if not data or len(data) < 5:
        return None
    value = data[-1]
    if value == 1:
        return "enabled"
    if value == 0:
        return "disabled"
    return None


def parse_mokutil(text: Optional[str]) -> Optional[str]:
    """``mokutil --sb-state`` output (stdout and stderr) -> ``enabled`` / ``disabled``; None when it
    says neither. ``EFI variables are not supported on this system`` and ``This system doesn't support
    Secure Boot`` mean a legacy BIOS boot: disabled."""
    for line in (text or "").splitlines():
        s = line.strip().lower()
        if s.startswith("secureboot enabled"):
            return "enabled"
        if s.startswith("secureboot disabled"):
            return "disabled"
        if "efi variables are not supported" in s or "doesn't support secure boot" in s:
            return "disabled"
    return None


def secure_boot_state(efivar: Optional[bytes], mokutil_text: Optional[str]) -> dict[str, Any]:
    """-> ``{"state": "enabled"|"disabled"|"unknown", "source": "efivar"|"mokutil"|None, "detail": str|None}``.

    ``efivar``: the EFI variable's bytes, None when the file is absent; ``mokutil_text``: the output of
    ``mokutil --sb-state``, None when mokutil is not installed. The variable wins; ``detail`` keeps
    mokutil's other lines (``SecureBoot validation is disabled in shim``).
    """
    state = parse_efivar(efivar)
    if state:
        return {"state": state, "source": "efivar", "detail": None}
    state = parse_mokutil(mokutil_text)
    if state:
        others = [
            x.strip()
            for x in (mokutil_text or "").splitlines()
            if x.strip() and not x.strip().lower().startswith(("secureboot enabled", "secureboot disabled"))
        ]
        return {"state": state, "source": "mokutil", "detail": "; ".join(others) or None}
    return {"state": "unknown", "source": None, "detail": None}
