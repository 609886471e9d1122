"""npu_record: a step's outcome set as set_fact sets it, refused with the step's reason (the record kept
in the failed result for the rescue), written as JSON on the control node. Run through ansible-playbook."""

from __future__ import annotations

import json

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    _driver_upgrade_result: {status: running, host: h1}
  tasks:
    - name: A step that passes sets its facts and writes the record
      npuops.fleet.npu_record:
        facts:
          _driver_upgrade_result: "{{ _driver_upgrade_result | combine({'new_version': '550.90.07'}) }}"
          _driver_upgrade_host_at_target: true
        fail_msg: ""
        write_path: "{{ out }}/h1.json"
        write_key: _driver_upgrade_result
    - name: A step refused keeps its record in the failed result, for the rescue
      block:
        - name: Refused
          npuops.fleet.npu_record:
            facts:
              _driver_upgrade_result: "{{ _driver_upgrade_result | combine({'kernel_after': '6.8.0-45-generic'}) }}"
            fail_msg: "verify failed on h1: loaded module 535.183.06, expected 550.90.07"
      rescue:
        - name: Keep what the rescue saw and what is set
          ansible.builtin.copy:
            content: "{{ {'failed': ansible_failed_result, 'set': _driver_upgrade_result,
                          'at_target': _driver_upgrade_host_at_target} | to_json }}"
            dest: "{{ out }}/rescued.json"
    - name: write_path without write_key
      npuops.fleet.npu_record:
        facts: {a: 1}
        write_path: "{{ out }}/x.json"
      register: half
      ignore_errors: true
    - name: write_key that names no fact
      npuops.fleet.npu_record:
        facts: {a: 1}
        write_path: "{{ out }}/x.json"
        write_key: b
      register: wrong
      ignore_errors: true
    - name: A folder that does not exist
      npuops.fleet.npu_record:
        facts: {a: 1}
        write_path: "{{ out }}/no/such/x.json"
        write_key: a
      register: nofolder
      ignore_errors: true
    - name: In check mode nothing is written
      npuops.fleet.npu_record:
        facts: {b: 2}
        write_path: "{{ out }}/check.json"
        write_key: b
      check_mode: true
    - name: Text files, as given
      npuops.fleet.npu_record:
        files:
          - {path: "{{ out }}/a.md", content: "# a\\n\\nline"}
          - {path: "{{ out }}/b.txt", content: ""}
      register: texts
    - name: A private record published under a public name, templated once
      npuops.fleet.npu_record:
        facts:
          _rec: "{{ {'at': now().isoformat()} }}"
        copies: {rec: _rec}
    - name: copies that name no fact
      npuops.fleet.npu_record:
        facts: {a: 1}
        copies: {c: zz}
      register: nocopy
      ignore_errors: true
    - name: Keep the bad calls
      ansible.builtin.copy:
        content: "{{ {'half': half, 'wrong': wrong, 'nofolder': nofolder, 'b': b, 'texts': texts,
                      'rec': rec, '_rec': _rec, 'nocopy': nocopy} | to_json }}"
        dest: "{{ out }}/bad.json"
"""


def test_record_refuse_and_write(tmp_path, playbook):
    proc = playbook(PLAYBOOK, "-c", "local", "-e", "out=%s" % tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    written = (tmp_path / "h1.json").read_text()
    assert written.endswith("}\n")
    assert json.loads(written) == {"status": "running", "host": "h1", "new_version": "550.90.07"}
    assert oct((tmp_path / "h1.json").stat().st_mode & 0o777) == "0o644"
    seen = json.loads((tmp_path / "rescued.json").read_text())
    # the refused step's facts are not set (Ansible sets none of a failed task) ...
    assert "kernel_after" not in seen["set"] and seen["set"]["new_version"] == "550.90.07"
    assert seen["at_target"] is True  # the passed step's, a boolean
    # ... but they are in its result, with its reason
    failed = seen["failed"]
    assert failed["failed"] is True
    assert failed["msg"] == "verify failed on h1: loaded module 535.183.06, expected 550.90.07"
    assert failed["ansible_facts"]["_driver_upgrade_result"]["kernel_after"] == "6.8.0-45-generic"
    bad = json.loads((tmp_path / "bad.json").read_text())
    assert bad["half"]["failed"] and "write_path and write_key go together" in bad["half"]["msg"]
    assert bad["wrong"]["failed"] and "names no key of facts (a)" in bad["wrong"]["msg"]
    assert bad["nofolder"]["failed"] and "cannot write" in bad["nofolder"]["msg"]
    assert bad["b"] == 2 and not (tmp_path / "check.json").exists()
    assert not list(tmp_path.glob(".h1.json.*"))  # no temporary file left
    assert (tmp_path / "a.md").read_text() == "# a\n\nline" and (tmp_path / "b.txt").read_text() == ""
    assert bad["texts"]["written"] == [str(tmp_path / "a.md"), str(tmp_path / "b.txt")]
    assert bad["texts"]["ansible_facts"] == {}
    assert bad["rec"] == bad["_rec"] and "at" in bad["rec"]
    assert bad["nocopy"]["failed"] and "copies name no key of facts: zz" in bad["nocopy"]["msg"]
