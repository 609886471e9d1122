#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_phase
short_description: Close one phase of a host's upgrade and open the next, at one reading of the clock
version_added: 0.4.0
description:
  - Runs on the control node (an action). The driver_upgrade role calls it at every phase boundary. On the
    host it runs only the C(ping) module, when O(reach_timeout) asks that the next phase find the host answering.
  - Reads the clock once, and that instant is the closed phase's end and the next one's start, to the second,
    so that the phases of a host's record never overlap nor leave a gap.
  - Records the closed phase in O(result) as C(durations[phase]) (seconds, one decimal) and
    C(phases[phase]) (C(started), C(finished) as UTC RFC 3339 with a Z, C(duration_s)), and returns the
    updated result and the next phase's start as facts named O(prefix) + C(result), C(phase),
    C(phase_start) (epoch seconds), C(phase_started) (RFC 3339) and C(phase_end) (epoch seconds).
  - Before that, with O(lease) and O(next) other than C(done), renews the run's Lease when a third of its TTL
    has passed since the last renewal this control node knows of, as M(npuops.fleet.npu_upgrade_lease) with
    C(renew_only) does, from ansible-core's own Python (which needs the kubernetes client; checked at every
    boundary with O(lease), the preflight's included, so a control node without it fails before any cordon).
    A Lease gone or held by another run fails the task (C(operation=lost), C(lease_lost=true)) and the phase
    stays open; as for O(fail_msg), the failed result's C(ansible_facts) then holds O(result) and O(facts).
    No renewal into C(done), as a failed renewal must not fail a host whose upgrade is over.
  - After that, with O(reach_timeout) and O(next) other than C(done), waits up to O(reach_timeout) seconds
    for the host to run a module (as C(ansible.builtin.wait_for_connection), every 2 s). A host that does not
    answer fails the task with C(host_lost=true); as Ansible sets no facts of a failed task, the new phase's
    facts are then in the result's C(ansible_facts) (the role's rescue takes them from there, so the failure
    is the next phase's). Any other failure (bad arguments, the renewal) says C(host_lost=false).
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
  facts:
    description: More facts to set with the boundary's, names as given.
    type: dict
    default: {}
  fail_msg:
    description:
      - The closing phase's refusal (a step's outcome judged at its boundary); empty when it passed. When not
        empty the task fails with it, the phase stays open (nothing renewed, the host not checked), and the
        result's C(ansible_facts) holds O(result) as O(prefix) + C(result) and O(facts) (Ansible sets no facts
        of a failed task; the role's rescue takes the record from there, the failure being this phase's).
    type: str
    default: ""
  reach_timeout:
    description:
      - Seconds the host may take to answer at the start of O(next); C(0) checks nothing. Not checked when
        O(next) is C(done). Also in check mode (the check is read-only).
    type: int
    default: 0
  lease:
    description:
      - The run's Lease to renew at this boundary when due; C({}) or null renews nothing. Keys as
        M(npuops.fleet.npu_upgrade_lease) takes them - C(name) (default C(npuops-fleet-maintenance-window)),
        C(namespace) (default C(kube-system)), C(holder) (required), C(ttl) (seconds written as the Lease's
        C(leaseDurationSeconds), default 3600 as that module's), C(kubeconfig), C(context) (the client also
        honours C(K8S_AUTH_KUBECONFIG) and C(KUBECONFIG)) - plus C(renewed_at), epoch seconds of the window's
        own last renewal, C(stamp), a file on the control node whose modification time is the last
        renewal by any host of this run (the maintenance window passes one in its run folder; without it, a
        file in this ansible-playbook process's temporary folder, named after the cluster and the Lease),
        and C(participant), this process's name in a window shared by several processes (its participant
        record is renewed with the window).
      - Due when a third of C(ttl) has passed since the later of C(renewed_at) and the stamp. Not renewed in
        check mode.
    type: dict
attributes:
  check_mode:
    support: full
    description: Sets facts and checks the host as outside check mode; the Lease is not renewed.
  diff_mode:
    support: none
    description: Nothing is changed.
  action:
    support: full
    description: Runs on the control node; only the host check reaches the host.
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
elapsed:
  description: Seconds the host check took.
  returned: when the host was checked
  type: float
operation:
  description: C(lost) when the renewal found the Lease gone or another run's.
  returned: on a failed renewal
  type: str
lease_lost:
  description: True when the renewal found the Lease gone or another run's.
  returned: on a failed renewal
  type: bool
host_lost:
  description: True when the host did not answer within O(reach_timeout); false for any other failure.
  returned: on failure
  type: bool
ansible_facts:
  description: The facts named O(prefix) + C(result), C(phase), C(phase_start), C(phase_started), C(phase_end).
  returned: always
  type: dict
"""
