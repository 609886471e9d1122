# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.longest_host``: which host of a maintenance window took longest, and why.

The summary's "longest host" line reads it. Pure Python (plugin_utils/window_record.py); the output
depends only on the input.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.plugin_utils.window_record import longest_host

DOCUMENTATION = r"""
name: longest_host
short_description: The host of a maintenance window that took longest on the wall clock, and why
description:
  - Per host, from its preflight's start to its last phase's end (the role's C(phases) records), so a
    host's wait for a lane or a batch counts (the sum of its phases leaves it out); the gaps between its
    phases are that wait.
  - The longest phase is named among those after the preflight (the fleet preflight runs for every host
    at once), or the preflight for a host that had no other phase.
  - Ties go to the host that waited less, then by name; hosts without timed phases are left out.
options:
  _input:
    description: The summary of playbook C(npuops.fleet.maintenance_window) (C(docs/maintenance-summary.schema.json)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Say which host took longest
  ansible.builtin.debug:
    msg: "{{ (_mw_summary | npuops.fleet.longest_host) or 'no host timed' }}"
"""

RETURN = r"""
_value:
  description:
    - C(host), C(span_s) (seconds from its preflight's start to its last phase's end), C(waited_s) (seconds
      between its phases), C(phase) and C(phase_s) (its longest phase after the preflight, seconds); null when
      no host has a timed phase.
  type: dict
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"longest_host": longest_host}
