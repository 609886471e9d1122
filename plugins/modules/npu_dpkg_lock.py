#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_dpkg_lock
short_description: Wait until dpkg's and apt's locks are free, naming the holder when they are not
version_added: 0.1.0
description:
  - Runs on the host. Waits, polling, until none of dpkg's and apt's lock files is locked, at most
    O(timeout) seconds.
  - A lock is held when another process has an fcntl POSIX lock on the file, as apt and dpkg take them.
    The module asks the kernel (C(F_GETLK), else C(/proc/locks)) and never takes the lock itself, not
    even for an instant, so it cannot make a concurrent apt fail.
  - When the bound passes the task fails with a message naming each held lock, the holder's PID and
    its full command line from C(/proc/<pid>/cmdline) (the 15-character process name, such as
    C(unattended-upgr), is not used), and how long it waited. Nothing is ever killed.
  - A lock file that does not exist is free.
options:
  timeout:
    description:
      - Longest wait in seconds. C(0) checks once.
    type: int
    default: 300
  poll_interval:
    description:
      - Seconds between two checks.
    type: float
    default: 2.0
  locks:
    description:
      - Lock files to check, all of which must be free at the same check.
      - The default is what C(apt-get install) takes - dpkg's frontend and database locks, apt's lists
        and archives locks. For a bare C(dpkg) run (C(dpkg --set-selections)) the first two are enough.
    type: list
    elements: path
    default:
      - /var/lib/dpkg/lock-frontend
      - /var/lib/dpkg/lock
      - /var/lib/apt/lists/lock
      - /var/cache/apt/archives/lock
attributes:
  check_mode:
    support: full
    description: Read-only; waits and fails the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed.
notes:
  - To name the holder of a lock when C(apt) itself failed on it, the role can read apt's message with
    C(parse_lock_message) of C(plugins/module_utils/host/dpkg_lock.py).
  - Lock holders in another PID namespace are reported without a PID when the kernel does not map them.
author:
  - npuops maintainers (@npuops)
"""

EXAMPLES = r"""
- name: Wait up to 10 minutes for a running unattended-upgrade or apt to finish
  npuops.fleet.npu_dpkg_lock:
    timeout: 600

- name: Check once, without waiting, before the node is cordoned
  npuops.fleet.npu_dpkg_lock:
    timeout: 0
  register: dpkg_lock
  failed_when: false

- name: Report who holds the lock
  ansible.builtin.debug:
    msg: "{{ dpkg_lock.holders | map(attribute='cmdline') | list }}"
  when: not dpkg_lock.free
"""

RETURN = r"""
free:
  description: No lock of O(locks) was held at the last check.
  returned: always
  type: bool
  sample: true
waited:
  description: Seconds spent waiting (0 when free at the first check).
  returned: always
  type: float
  sample: 12.03
holders:
  description: The held locks at the last check; empty when RV(free).
  returned: always
  type: list
  elements: dict
  contains:
    lock:
      description: Lock file path.
      type: str
    pid:
      description: PID of the holder; null when the kernel does not say.
      type: int
    cmdline:
      description:
        - The holder's full command line (C(/proc/<pid>/cmdline), arguments joined by spaces); null when unreadable.
      type: str
  sample:
    - lock: /var/lib/dpkg/lock-frontend
      pid: 24459
      cmdline: /usr/bin/python3 /usr/bin/unattended-upgrade --download-only
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.npuops.fleet.plugins.module_utils.host import dpkg_lock  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            timeout=dict(type="int", default=300),
            poll_interval=dict(type="float", default=2.0),
            locks=dict(type="list", elements="path", default=list(dpkg_lock.DEFAULT_LOCKS)),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] < 0:
        module.fail_json(msg="timeout must be 0 or more seconds, got %s" % p["timeout"])
    if p["poll_interval"] <= 0:
        module.fail_json(msg="poll_interval must be more than 0 seconds, got %s" % p["poll_interval"])
    res = dpkg_lock.wait_for_locks(p["locks"], p["timeout"], p["poll_interval"])
    if not res["free"]:
        msg = dpkg_lock.timeout_message(res["holders"], res["waited"], p["timeout"])
        module.fail_json(msg=msg, changed=False, **res)
    module.exit_json(changed=False, **res)


if __name__ == "__main__":
    main()
