#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_host_window
short_description: Record a host's pre-window state on the host, pause automatic updates, restore afterwards
version_added: 0.1.0
description:
  - Runs on the host. The record is a JSON file on the host itself, so it survives a control node that
    is killed mid-window; the next run finds it and restores from it.
  - O(state=present) - when O(path) does not exist, records the state before the window and writes it
    atomically (temporary file, fsync, rename; mode C(0600)). For each unit of O(services) - whether
    it exists, C(systemctl is-enabled), C(systemctl is-active); the packages on hold
    (C(dpkg-query -W), selection C(hold)); the state of C(apt-daily.timer), C(apt-daily-upgrade.timer)
    and C(unattended-upgrades.service); with O(mig_smi), the MIG layout while any GPU runs in MIG mode
    (the GPU instances and compute instances of each GPU, which a module reload or a reboot removes);
    O(run_id) and the creation time (UTC).
  - When O(path) already exists a previous run did not finish. The record is kept unchanged, it still
    holds the state from before that run, and RV(resumed) is true; O(services) and O(run_id) of this
    run are then not recorded.
  - Then, in both cases, automatic updates are paused for the window - C(apt-daily.timer) and
    C(apt-daily-upgrade.timer) are stopped (not disabled, not masked) when active. An
    C(unattended-upgrade) already running is left alone; wait for it with M(npuops.fleet.npu_dpkg_lock).
  - O(state=absent) - restores from the record, then deletes it. First the MIG layout - each recorded
    MIG GPU in MIG mode that lacks recorded GPU instances (all of them after a reload) gets them again,
    each with its default compute instance (C(nvidia-smi mig -i <gpu> -cgi <profile ids> -C); when the
    driver finds no room in that order, what it made on a GPU that was empty is destroyed and the
    largest-first order is tried); then every recorded MIG GPU must have its recorded devices (same
    profiles; placements are the driver's choice), else it is a failure, whatever O(strict) says, and the
    record is kept. A GPU with an instance the record does not have is never changed. Services recorded enabled and not
    enabled now are enabled; recorded active and not active now are started; packages recorded held,
    still installed and no longer held are held again (C(dpkg --set-selections), after dpkg's locks are
    free, at most O(lock_timeout) seconds); the apt timers recorded active are started, last, so that
    no unattended-upgrade can begin before the holds are back (when the holds cannot be put back the
    timers stay stopped). Without a record nothing happens.
  - Units and holds are only ever put back, never taken away - a service started during the window is
    not stopped.
options:
  state:
    description:
      - C(present) records (or keeps the record) and pauses the apt timers; C(absent) restores and
        deletes the record.
    type: str
    choices: [present, absent]
    default: present
  path:
    description:
      - The record file on the host. Its directory is created (mode C(0700)) when missing.
    type: path
    default: /var/lib/npuops-fleet/window.json
  services:
    description:
      - systemd units whose enabled and active state is recorded and restored, for example
        C(nvidia-persistenced), C(nvidia-fabricmanager), C(nvidia-dcgm), C(rbln-daemon) (the vendor
        profile's C(services)). A unit that does not exist is recorded as such and left alone.
      - Used by O(state=present) only; O(state=absent) restores the units in the record.
    type: list
    elements: str
    default: []
  run_id:
    description:
      - Identifier of this maintenance-window run, stored in the record; a resumed run returns the
        earlier one as RV(previous_run_id).
    type: str
  mig_smi:
    description:
      - O(state=present) - the C(nvidia-smi) whose MIG layout is recorded (the vendor profile's
        C(smi_command) on NVIDIA hosts). Unset, or C(nvidia-smi) not answering (no driver loaded, so no
        GPU instance exists), records none. O(state=absent) uses the command stored in the record.
    type: str
  strict:
    description:
      - O(state=absent) - fail the task when a service or apt timer could not be started or enabled, and
        keep the record for the next run. When false these are reported in RV(restored.failed), the task
        passes and the record is deleted.
      - Package holds and a MIG layout that could not be put back fail the task and keep the record whatever
        O(strict) says.
    type: bool
    default: false
  lock_timeout:
    description:
      - O(state=absent) - seconds to wait for dpkg's locks before holding packages again.
    type: int
    default: 300
attributes:
  check_mode:
    support: full
    description:
      - Reports what would be recorded, stopped, started, enabled and held; changes nothing and does not wait for locks.
  diff_mode:
    support: full
    description: The record file before and after.
author:
  - npuops maintainers (@npuops)
"""

EXAMPLES = r"""
- name: Record the pre-window state and pause automatic updates
  npuops.fleet.npu_host_window:
    state: present
    services: "{{ npu_driver.profile.services }}"
    run_id: "{{ window_run_id }}"
  register: host_window

- name: Restore on every exit path
  npuops.fleet.npu_host_window:
    state: absent
    lock_timeout: 600
  register: host_window_restore
"""

RETURN = r"""
record:
  description:
    - The record - written now, found from an earlier run (O(state=present)), or restored from
      (O(state=absent); null when there was none).
  returned: always
  type: dict
  contains:
    version:
      description: Format version of the record, C(1).
      type: int
    run_id:
      description: O(run_id) of the run that wrote the record.
      type: str
    created:
      description: When the record was written, UTC, ISO 8601.
      type: str
    services:
      description:
        - Unit -> C(exists), C(enabled) (C(is-enabled) said C(enabled) or C(enabled-runtime)),
          C(enabled_state) (the word), C(active) (C(active), C(activating), C(reloading) or C(refreshing)),
          C(active_state) (the word; null when systemctl did not answer).
      type: dict
    apt_units:
      description: The same for C(apt-daily.timer), C(apt-daily-upgrade.timer) and C(unattended-upgrades.service).
      type: dict
    held_packages:
      description: Packages on hold before the window.
      type: list
      elements: str
    timers_stopped:
      description: The apt timers the window stops (those active before it).
      type: list
      elements: str
    mig:
      description:
        - The MIG layout before the window (RV(npuops.fleet.npu_driver_facts#module:mig.layout)'s shape, with
          C(smi), the command that read it) while any GPU ran in MIG mode; null otherwise.
      type: dict
  sample:
    version: 1
    run_id: mw-20250601-0200
    created: "2025-06-01T02:00:07Z"
    services:
      nvidia-persistenced: {exists: true, enabled: true, enabled_state: enabled, active: true, active_state: active}
    apt_units:
      apt-daily.timer: {exists: true, enabled: true, enabled_state: enabled, active: true, active_state: active}
    held_packages: [linux-image-5.15.0-177-generic, nvidia-dkms-580-server-open]
    timers_stopped: [apt-daily.timer, apt-daily-upgrade.timer]
resumed:
  description: O(state=present) - the record already existed (a previous run did not finish) and was kept.
  returned: when state is present
  type: bool
previous_run_id:
  description: O(state=present) - the C(run_id) of the kept record when RV(resumed), else null.
  returned: when state is present
  type: str
timers_stopped:
  description: O(state=present) - the apt timers this task stopped (would stop, in check mode).
  returned: when state is present
  type: list
  elements: str
removed:
  description: O(state=absent) - the record file was deleted (would be, in check mode).
  returned: when state is absent
  type: bool
restored:
  description: O(state=absent) - what was put back (would be, in check mode).
  returned: when state is absent
  type: dict
  contains:
    mig_reapplied:
      description: "GPUs whose MIG devices were made again, as C(GPU <index> (<PCI bus id>): <profile names>)."
      type: list
      elements: str
    services_started:
      description: Units started.
      type: list
      elements: str
    services_enabled:
      description: Units enabled.
      type: list
      elements: str
    holds_reapplied:
      description: Packages held again.
      type: list
      elements: str
    timers_started:
      description: apt timers started.
      type: list
      elements: str
    services_left_alone:
      description:
        - Units recorded enabled or active that are gone (package removed) or masked now, as
          C(<unit> (<state now>)) - changed by someone since the record; not restored, not a failure.
      type: list
      elements: str
    failed:
      description:
        - What could not be put back - C(kind) (C(mig), C(service), C(timer), C(holds)), C(name), C(msg)
          (nvidia-smi's, systemctl's or dpkg's message, the lock holder, or how the MIG devices differ).
      type: list
      elements: dict
  sample:
    services_started: [nvidia-persistenced]
    services_enabled: []
    holds_reapplied: [nvidia-dkms-580-server-open]
    timers_started: [apt-daily.timer, apt-daily-upgrade.timer]
    failed:
      - kind: service
        name: nvidia-fabricmanager
        msg: "systemctl start nvidia-fabricmanager: Job for nvidia-fabricmanager.service failed."
"""

import json  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.npuops.fleet.plugins.module_utils.host import window_record  # noqa: E402


def _json(record) -> str:
    return json.dumps(record, indent=2) + "\n" if record is not None else ""


def present(module: AnsibleModule, hw: window_record.HostWindow, existing) -> None:
    p = module.params
    if existing is None:
        record = hw.snapshot(p["run_id"], p["services"])
        if not module.check_mode:
            window_record.write_record(p["path"], record)
    else:
        record = existing
    stopped, errors = hw.stop_timers(window_record.PAUSE_TIMERS, module.check_mode)
    result = dict(
        changed=existing is None or bool(stopped),
        record=record,
        resumed=existing is not None,
        previous_run_id=existing.get("run_id") if existing is not None else None,
        timers_stopped=stopped,
        diff={"before": _json(existing), "after": _json(record), "before_header": p["path"], "after_header": p["path"]},
    )
    if errors:
        module.fail_json(msg="could not pause automatic updates: " + "; ".join(errors), **result)
    module.exit_json(**result)


def absent(module: AnsibleModule, hw: window_record.HostWindow, existing) -> None:
    p = module.params
    if existing is None:
        module.exit_json(changed=False, record=None, removed=False, restored=hw.empty_restored())
    restored = hw.restore(existing, p["lock_timeout"], module.check_mode)
    failed = restored["failed"]
    # a MIG layout not made again is kept whatever strict says: the record is its only copy
    blocking = [f for f in failed if f["kind"] in ("holds", "mig") or p["strict"]]
    if not blocking and not module.check_mode:
        window_record.remove_record(p["path"])
    result = dict(
        changed=True,
        record=existing,
        removed=not blocking,
        restored=restored,
        diff={"before": _json(existing), "after": _json(existing) if blocking else "",
              "before_header": p["path"], "after_header": p["path"]},
    )
    if blocking:
        module.fail_json(
            msg="pre-window state not fully restored, record %s kept for the next run: %s"
            % (p["path"], "; ".join(f["msg"] for f in blocking)),
            **result,
        )
    module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            path=dict(type="path", default=window_record.DEFAULT_PATH),
            services=dict(type="list", elements="str", default=[]),
            run_id=dict(type="str"),
            strict=dict(type="bool", default=False),
            lock_timeout=dict(type="int", default=300),
            mig_smi=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["lock_timeout"] < 0:
        module.fail_json(msg="lock_timeout must be 0 or more seconds, got %s" % p["lock_timeout"])

    def run(argv, data=None):
        return module.run_command(
            argv, data=data, binary_data=True, check_rc=False, environ_update={"LC_ALL": "C"}
        )

    hw = window_record.HostWindow(
        run,
        systemctl=module.get_bin_path("systemctl", required=True),
        dpkg=module.get_bin_path("dpkg", required=True),
        dpkg_query=module.get_bin_path("dpkg-query", required=True),
        mig_smi=p["mig_smi"],
    )
    try:
        existing = window_record.read_record(p["path"])
        if p["state"] == "present":
            present(module, hw, existing)
        else:
            absent(module, hw, existing)
    except (window_record.RecordError, OSError) as e:
        module.fail_json(msg=str(e))


if __name__ == "__main__":
    main()
