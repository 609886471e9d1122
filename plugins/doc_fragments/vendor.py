# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared documentation of the vendor profile options."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  vendor:
    description:
      - Accelerator vendor whose profile (labels, operands, kernel modules, packages, tag format) is used.
      - C(nvidia) and C(rebellions) are built in; other names must be defined in O(vendor_profiles).
    type: str
    default: nvidia
  vendor_profile:
    description:
      - "Overrides for fields of the selected vendor's profile, for example
        C({presence_label: example.com/gpu.present}). Dict fields are merged one level deep."
      - Unknown keys or wrongly typed values fail before any change.
    type: dict
  vendor_profiles:
    description:
      - "Additional vendors, name -> profile. A profile may start from a built-in one with C(base: nvidia)."
    type: dict
"""
