"""Secure Boot state from the efivarfs variable and mokutil output; inputs written by hand."""

from __future__ import annotations

from ansible_collections.npuops.fleet.plugins.module_utils.host import secure_boot as sb


def test_efivar_last_byte():
    assert sb.parse_efivar(b"\x06\x00\x00\x00\x01") == "enabled"
    assert sb.parse_efivar(b"\x06\x00\x00\x00\x00") == "disabled"
    assert sb.parse_efivar(b"\x06\x00\x00\x00") is None
    assert sb.parse_efivar(b"") is None and sb.parse_efivar(None) is None
    assert sb.parse_efivar(b"\x06\x00\x00\x00\x07") is None


def test_mokutil_words():
    assert sb.parse_mokutil("SecureBoot enabled\n") == "enabled"
    assert sb.parse_mokutil("SecureBoot disabled\nPlatform is in Setup Mode\n") == "disabled"
    assert sb.parse_mokutil("\nEFI variables are not supported on this system\n") == "disabled"
    assert sb.parse_mokutil("This system doesn't support Secure Boot\n") == "disabled"
    assert sb.parse_mokutil("mokutil: command failed\n") is None
    assert sb.parse_mokutil(None) is None


def test_state_sources():
    assert sb.secure_boot_state(b"\x07\x00\x00\x00\x01", "SecureBoot disabled") == {
        "state": "enabled",
        "source": "efivar",
        "detail": None,
    }
    assert sb.secure_boot_state(None, "SecureBoot enabled\nSecureBoot validation is disabled in shim\n") == {
        "state": "enabled",
        "source": "mokutil",
        "detail": "SecureBoot validation is disabled in shim",
    }
    assert sb.secure_boot_state(None, "EFI variables are not supported on this system")["state"] == "disabled"
    assert sb.secure_boot_state(None, None) == {"state": "unknown", "source": None, "detail": None}
    assert sb.secure_boot_state(b"\x06", "garbage")["state"] == "unknown"
