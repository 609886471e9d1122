# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.module_utils_closure``: the collection's module_utils files a script imports."""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.plugin_utils.import_closure import module_utils_closure

DOCUMENTATION = r"""
name: module_utils_closure
short_description: The module_utils files of this collection that a Python file imports, directly or through another
description:
  - Follows C(from ansible_collections.npuops.fleet.plugins.module_utils...) imports from the file through every
    module_utils file they name, and adds each package's C(__init__.py) on the way.
  - The role C(npuops.fleet.driver_drift_monitor) ships exactly this set beside its check script.
options:
  _input:
    description: Path of the Python file whose imports are followed.
    type: path
    required: true
  root:
    description: The collection's C(plugins/module_utils) folder.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Ship what the check imports
  ansible.builtin.debug:
    msg: >-
      {{ (role_path ~ '/files/check.py')
         | npuops.fleet.module_utils_closure(role_path ~ '/../../plugins/module_utils') }}
"""

RETURN = r"""
_value:
  description: Sorted paths relative to O(root), for example C(host/driver_facts.py) and C(driver/__init__.py).
  type: list
  elements: str
"""


def _closure(path: str, root: str) -> list[str]:
    try:
        return module_utils_closure(path, root)
    except (OSError, SyntaxError) as exc:
        # ValueError, as the collection's other filters: Ansible reports it with the filter's name
        raise ValueError("module_utils_closure: cannot read the imports of %s: %s" % (path, exc)) from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"module_utils_closure": _closure}
