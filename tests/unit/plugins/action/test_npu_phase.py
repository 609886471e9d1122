"""npu_phase: a phase boundary at one reading of the clock - the closed phase's end is the next one's
start, to the second; facts set as set_fact sets them. Run through ansible-playbook on localhost (the
action is not imported into the test process: controller code there would switch module_utils to
controller mode for the module tests that run after this file)."""

from __future__ import annotations

import json
import shutil

import pytest

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    _driver_upgrade_result: {status: running, durations: {preflight: 3.0}}
  tasks:
    - name: Open prepare at a known instant
      ansible.builtin.set_fact:
        _driver_upgrade_phase: prepare
        _driver_upgrade_phase_start: "{{ now(utc=true).timestamp() - 2.5 }}"
        _driver_upgrade_phase_started: "2026-12-05T08:00:00Z"
    - name: Close prepare
      npuops.fleet.npu_phase:
        result: "{{ _driver_upgrade_result }}"
        phase: "{{ _driver_upgrade_phase }}"
        start: "{{ _driver_upgrade_phase_start }}"
        started: "{{ _driver_upgrade_phase_started }}"
        next: install
    - name: Close install
      npuops.fleet.npu_phase:
        result: "{{ _driver_upgrade_result }}"
        phase: "{{ _driver_upgrade_phase }}"
        start: "{{ _driver_upgrade_phase_start }}"
        started: "{{ _driver_upgrade_phase_started }}"
        next: done
    - name: Keep what the facts say
      ansible.builtin.copy:
        content: "{{ {'result': _driver_upgrade_result, 'phase': _driver_upgrade_phase,
                      'started': _driver_upgrade_phase_started, 'end': _driver_upgrade_phase_end,
                      'start': _driver_upgrade_phase_start} | to_json }}"
        dest: "{{ out }}"
    - name: A bad call names the argument
      npuops.fleet.npu_phase:
        result: "{{ _driver_upgrade_result }}"
        phase: install
        next: done
      ignore_errors: true
      register: bad
    - name: Keep the bad call's message
      ansible.builtin.copy:
        content: "{{ bad.msg }}"
        dest: "{{ out }}.bad"
"""


def test_phases_meet_at_one_instant_and_keep_the_record(tmp_path, playbook):
    out = tmp_path / "facts.json"
    proc = playbook(PLAYBOOK, "-c", "local", "-e", "out=%s" % out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    f = json.loads(out.read_text())
    r = f["result"]
    assert r["status"] == "running" and r["durations"]["preflight"] == 3.0  # kept
    assert set(r["phases"]) == {"prepare", "install"}
    assert r["phases"]["prepare"]["started"] == "2026-12-05T08:00:00Z"
    assert r["durations"]["prepare"] >= 2.5 and r["durations"]["prepare"] == r["phases"]["prepare"]["duration_s"]
    # the end of prepare is the start of install, to the second
    assert r["phases"]["prepare"]["finished"] == r["phases"]["install"]["started"]
    assert r["phases"]["install"]["finished"] == f["started"]
    assert f["phase"] == "done" and f["end"] == f["start"]
    assert "start" in (tmp_path / "facts.json.bad").read_text()


GHOST = """
- hosts: ghost
  gather_facts: false
  vars:
    _driver_upgrade_result: {status: running}
  tasks:
    - name: The boundary into reload checks the host
      block:
        - name: Close install
          npuops.fleet.npu_phase:
            result: "{{ _driver_upgrade_result }}"
            phase: install
            start: "{{ now(utc=true).timestamp() - 1 }}"
            next: reload
            reach_timeout: 3
            facts: {_driver_upgrade_prepared: true}
            lease: {}
          register: reach
      rescue:
        - name: Keep what the rescue saw and which facts are set
          ansible.builtin.copy:
            content: "{{ {'failed': ansible_failed_result, 'phase': _driver_upgrade_phase | default('unset'),
                          'prepared': _driver_upgrade_prepared | default('unset')} | to_json }}"
            dest: "{{ out }}"
          delegate_to: localhost
"""


@pytest.mark.skipif(not shutil.which("ssh"), reason="needs the ssh client")
def test_a_host_that_does_not_answer_fails_the_boundary_and_the_new_phase_is_in_the_result(tmp_path, playbook):
    (tmp_path / "inv").write_text(
        "ghost ansible_host=127.0.0.1 ansible_port=1 ansible_ssh_common_args='-o ConnectTimeout=2'\n"
    )
    out = tmp_path / "rescued.json"
    proc = playbook(GHOST, "-i", str(tmp_path / "inv"), "-e", "out=%s" % out,
                    ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_SSH_RETRIES="0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    seen = json.loads(out.read_text())
    failed = seen["failed"]
    assert failed["failed"] is True and failed["host_lost"] is True
    assert failed["msg"].startswith("timed out waiting for ping module test: "), failed["msg"]
    assert "Connection refused" in failed["msg"] or "port 1" in failed["msg"], failed["msg"]
    # Ansible sets no facts of a failed task: the boundary's are in the result, for the rescue to take
    assert (seen["phase"], seen["prepared"]) == ("unset", "unset")
    facts = failed["ansible_facts"]
    assert facts["_driver_upgrade_phase"] == "reload" and facts["_driver_upgrade_prepared"] is True
    assert facts["_driver_upgrade_result"]["phases"]["install"]["finished"] == facts["_driver_upgrade_phase_started"]
    assert failed["elapsed"] >= 2  # it waited, not failed at the first refusal


BAD_LEASE = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: A boundary whose Lease has no holder
      npuops.fleet.npu_phase:
        result: {status: running}
        phase: install
        start: "{{ now(utc=true).timestamp() }}"
        next: reload
        lease: {name: some-lease, ttl: 30}
      register: reach
      ignore_errors: true
    - name: A boundary whose Lease lasts no time
      npuops.fleet.npu_phase:
        result: {status: running}
        phase: install
        start: "{{ now(utc=true).timestamp() }}"
        next: done
        lease: {holder: run-a, ttl: 0}
      register: zero
      ignore_errors: true
    - name: Keep both
      ansible.builtin.copy:
        content: "{{ {'reach': reach, 'zero': zero} | to_json }}"
        dest: "{{ out }}"
"""


def test_a_bad_lease_fails_the_boundary_without_calling_the_host_lost(tmp_path, playbook):
    out = tmp_path / "bad.json"
    proc = playbook(BAD_LEASE, "-c", "local", "-e", "out=%s" % out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    seen = json.loads(out.read_text())
    assert seen["reach"]["failed"] is True and seen["reach"]["host_lost"] is False
    assert "holder" in seen["reach"]["msg"], seen["reach"]["msg"]
    assert seen["zero"]["failed"] is True and seen["zero"]["host_lost"] is False
    assert "ttl must be >= 1" in seen["zero"]["msg"], seen["zero"]["msg"]


REFUSED = """
- hosts: localhost
  gather_facts: false
  vars:
    _driver_upgrade_result: {status: running}
    _driver_upgrade_phase: finish
  tasks:
    - name: A boundary that refuses keeps its phase open
      block:
        - name: Close finish, refused
          npuops.fleet.npu_phase:
            result: "{{ _driver_upgrade_result | combine({'final_state': 'validation-required'}) }}"
            phase: finish
            start: "{{ now(utc=true).timestamp() - 1 }}"
            next: done
            facts: {_driver_upgrade_prepared: true}
            fail_msg: "finish stopped n1 in state validation-required: timed out"
      rescue:
        - name: Keep what the rescue saw
          ansible.builtin.copy:
            content: "{{ {'failed': ansible_failed_result, 'phase': _driver_upgrade_phase} | to_json }}"
            dest: "{{ out }}"
"""


def test_a_refused_boundary_fails_with_its_reason_and_keeps_the_phase_open(tmp_path, playbook):
    out = tmp_path / "refused.json"
    proc = playbook(REFUSED, "-c", "local", "-e", "out=%s" % out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    seen = json.loads(out.read_text())
    failed = seen["failed"]
    assert failed["msg"] == "finish stopped n1 in state validation-required: timed out"
    assert failed["host_lost"] is False and seen["phase"] == "finish"
    facts = failed["ansible_facts"]
    # the record as given, the phase not closed in it, no next phase opened
    assert facts["_driver_upgrade_result"] == {"status": "running", "final_state": "validation-required"}
    assert facts["_driver_upgrade_prepared"] is True and "_driver_upgrade_phase" not in facts


RENEWAL_FAILS = """
- hosts: localhost
  gather_facts: false
  vars:
    _driver_upgrade_result: {status: running}
    _driver_upgrade_phase: prepare
    _driver_upgrade_prepared: false
  tasks:
    - name: The boundary after prepare cordoned the node, its Lease renewal failing
      block:
        - name: Close prepare
          npuops.fleet.npu_phase:
            result: "{{ _driver_upgrade_result | combine({'final_state': 'pod-restart-required'}) }}"
            phase: prepare
            start: "{{ now(utc=true).timestamp() - 1 }}"
            next: install
            facts: {_driver_upgrade_prepared: true}
            lease: {holder: run-a, ttl: 30, kubeconfig: "{{ out }}.no-kubeconfig", stamp: "{{ out }}.stamp"}
      rescue:
        - name: Keep what the rescue saw
          ansible.builtin.copy:
            content: "{{ {'failed': ansible_failed_result, 'phase': _driver_upgrade_phase,
                          'prepared': _driver_upgrade_prepared} | to_json }}"
            dest: "{{ out }}"
"""


def test_a_failed_renewal_keeps_the_phase_open_with_the_record_and_facts_for_the_rescue(tmp_path, playbook):
    out = tmp_path / "renewal.json"
    proc = playbook(RENEWAL_FAILS, "-c", "local", "-e", "out=%s" % out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    seen = json.loads(out.read_text())
    failed = seen["failed"]
    assert failed["failed"] is True and failed["host_lost"] is False
    assert failed["msg"].startswith("lease kube-system/npuops-fleet-maintenance-window: "), failed["msg"]
    # not set by the failed task, but there for the rescue: the node was prepared, its record kept
    assert seen["prepared"] is False and seen["phase"] == "prepare"
    facts = failed["ansible_facts"]
    assert facts["_driver_upgrade_prepared"] is True
    assert facts["_driver_upgrade_result"] == {"status": "running", "final_state": "pod-restart-required"}
    assert "_driver_upgrade_phase" not in facts  # the phase stays open
    assert not (tmp_path / "renewal.json.stamp").exists()  # no renewal recorded
