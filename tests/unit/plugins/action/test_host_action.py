"""The host modules' action: where a task ignores unreachable results, a host that does not answer is
an ordinary failure that a block's rescue sees (named host, phase and step); elsewhere it stays
unreachable, as with Ansible's own action. Run through ansible-playbook against a port nobody
listens on (the connection is refused at once), with the real ssh connection plugin. The plugin is not
imported here: controller code imported into the test process would switch module_utils to controller
mode for the module tests that run after this file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

PLAYBOOK = """
- hosts: ghost
  gather_facts: false
  vars:
    _driver_upgrade_phase: install
  tasks:
    - name: Host steps that ignore unreachable results
      ignore_unreachable: true
      block:
        - name: Wait for the lock
          npuops.fleet.npu_dpkg_lock:
            timeout: 0
        - name: Never reached
          ansible.builtin.set_fact:
            reached: true
      rescue:
        - name: Keep what the rescue saw
          ansible.builtin.copy:
            content: "{{ ansible_failed_result | to_json }}"
            dest: "{{ out }}"
          delegate_to: localhost
    - name: Without ignore_unreachable the host is unreachable
      npuops.fleet.npu_driver_facts: {}
"""


@pytest.mark.skipif(not (Path("/usr/bin/ssh").exists()), reason="needs the ssh client")
def test_rescue_sees_a_lost_host_and_plain_tasks_stay_unreachable(tmp_path, playbook):
    (tmp_path / "inv").write_text(
        "ghost ansible_host=127.0.0.1 ansible_port=1 ansible_ssh_common_args='-o ConnectTimeout=3'\n"
    )
    out = tmp_path / "rescued.json"
    proc = playbook(
        PLAYBOOK,
        "-i",
        str(tmp_path / "inv"),
        "-e",
        "out=%s" % out,
        ANSIBLE_HOST_KEY_CHECKING="False",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_SSH_RETRIES="0",
    )
    rescued = json.loads(out.read_text())
    assert rescued["failed"] is True and rescued["host_lost"] is True
    assert rescued["msg"].startswith("host ghost unreachable during install (Wait for the lock): ")
    stats = json.loads(proc.stdout)["stats"]["ghost"]
    assert stats["rescued"] == 1 and stats["unreachable"] == 1, stats
