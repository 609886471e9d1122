# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.apt_madison``: what ``apt-cache madison`` offers, per package name.

The same parser the host modules use (module_utils/host/apt_output.parse_madison), so a role task that
runs madison itself reads it the one way.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.module_utils.host.apt_output import parse_madison

DOCUMENTATION = r"""
name: apt_madison
short_description: The versions apt can install, per package, from the output of C(apt-cache madison)
description:
  - Reads C(name | version | source) lines; each version once per name, in apt's order (highest priority first).
  - A name apt does not know prints nothing (or the C(Unable to locate package) notice) and is absent from the result.
options:
  _input:
    description: The standard output of C(apt-cache madison NAME...).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The version apt would pick for the patched kernel's image
  ansible.builtin.debug:
    msg: >-
      {{ (_madison.stdout | npuops.fleet.apt_madison).get('linux-image-6.1.0-27-amd64')
         | default([], true) | first | default('') }}
"""

RETURN = r"""
_value:
  description:
    - Package name to its offered Debian versions, highest priority first; for example C(nvidia-driver) to
      C(["550.90.07-1", "535.183.06-1"]).
  type: dict
"""


def _madison(text: Any) -> dict[str, list[str]]:
    return parse_madison(text if isinstance(text, str) else "")


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"apt_madison": _madison}
