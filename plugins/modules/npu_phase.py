#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_phase
short_description: Close one phase of a host's upgrade and open the next, at one reading of the clock
version_added: 0.4.0
description:
  - Runs on the control node only (an action; nothing runs on the host). The driver_upgrade role calls it
    at every phase boundary.
  - Reads the clock once, and that instant is the closed phase's end and the next one's start, to the second,
    so that the phases of a host's record never overlap nor leave a gap.
  - Records the closed phase in O(result) as C(durations[phase]) (seconds, one decimal) and
    C(phases[phase]) (C(started), C(finished) as UTC RFC 3339 with a Z, C(duration_s)), and returns the
    updated result and the next phase's start as facts named O(prefix) + C(result), C(phase),
    C(phase_start) (epoch seconds), C(phase_started) (RFC 3339) and C(phase_end) (epoch seconds).
options:
  result:
    description: The host's result record so far (C(_driver_upgrade_result)).
    type: dict
    required: true
  phase:
    description:
      - The phase being closed (C(preflight), C(prepare), C(install), C(reload), C(reboot), C(verify), C(finish)).
    type: str
    required: true
  start:
    description: When the closed phase started, epoch seconds (the previous boundary's C(phase_start)).
    type: float
    required: true
  started:
    description:
      - The same instant as RFC 3339, as recorded (the previous boundary's C(phase_started)); null when unknown.
    type: str
  next:
    description: The phase that starts now; C(done) when none does.
    type: str
    required: true
  prefix:
    description: Prefix of the returned facts' names.
    type: str
    default: _driver_upgrade_
attributes:
  check_mode:
    support: full
    description: Sets facts only; the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed.
  action:
    support: full
    description: Runs on the control node.
author:
  - npuops maintainers (@npuops)
"""

EXAMPLES = r"""
- name: Close the install phase
  npuops.fleet.npu_phase:
    result: "{{ _driver_upgrade_result }}"
    phase: install
    start: "{{ _driver_upgrade_phase_start }}"
    started: "{{ _driver_upgrade_phase_started }}"
    next: reload
"""

RETURN = r"""
ansible_facts:
  description: The facts named O(prefix) + C(result), C(phase), C(phase_start), C(phase_started), C(phase_end).
  returned: always
  type: dict
"""
