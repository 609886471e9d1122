#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_kmod_reload
short_description: Reload the driver's kernel modules - stop the vendor's services, unload users first, load back
version_added: 0.4.0
description:
  - Runs on the host, after the new driver's packages are installed, so the new module is what loads.
    One call does what the GPU Operator's driver container does before it loads a new driver.
  - 1. Stops the vendor's services in O(services) that are active (C(systemctl is-active)), so that
    nothing holds the device (C(nvidia-persistenced), C(nvidia-fabricmanager), C(rbln-daemon)...).
    They are restarted by the driver_upgrade role's pre-window record (M(npuops.fleet.npu_host_window)),
    not here.
  - 2. Reads the loaded modules and their holders from the kernel (C(/sys/module/<m>/holders)), as
    M(npuops.fleet.npu_driver_facts) does, and removes them users first, the main module last (C(rmmod)).
  - 3. When a module cannot be removed, names what holds it (holder modules; processes with the
    device open, by full command line) and loads nothing back. With O(reboot_allowed) it returns
    RV(reload=in_use) for the caller to reboot instead; otherwise it fails with that reason.
  - 4. Otherwise loads back exactly what was loaded, in reverse (main module first); a host that had
    none of them loaded gets the profile's C(kernel_modules). Each by the name its file has for the
    running kernel (Debian's C(nvidia-current)). A C(modprobe) failure fails the task quoting it; for
    "No such device", also what this boot's kernel log says of the host's GPUs (the driver refusing
    them - a module flavour or release that does not drive them; a GPU lost on the bus), as
    M(npuops.fleet.npu_driver_facts) RV(npuops.fleet.npu_driver_facts#module:kernel_log).
extends_documentation_fragment:
  - npuops.fleet.vendor
options:
  services:
    description:
      - systemd units to stop when active before the unload (C(.service) may be left out). Default the
        vendor profile's C(services).
    type: list
    elements: str
  stop_services:
    description: Stop O(services) first (as C(driver_upgrade_stop_services)).
    type: bool
    default: true
  reboot_allowed:
    description:
      - Whether the caller may reboot when the modules are in use. C(false) fails the task then.
    type: bool
    default: false
  pci_devices_dir:
    description: As M(npuops.fleet.npu_driver_facts)' O(npuops.fleet.npu_driver_facts#module:pci_devices_dir).
    type: path
    default: /sys/bus/pci/devices
  kernel_log_file:
    description: As M(npuops.fleet.npu_driver_facts)' O(npuops.fleet.npu_driver_facts#module:kernel_log_file).
    type: path
attributes:
  check_mode:
    support: none
    description: Unloads and loads kernel modules; it cannot preview that.
  diff_mode:
    support: none
    description: Nothing to show.
author:
  - npuops maintainers (@npuops)
"""

EXAMPLES = r"""
- name: Reload the driver's modules, or learn that a reboot is needed
  npuops.fleet.npu_kmod_reload:
    vendor: nvidia
    reboot_allowed: true
  register: reload

- name: Reboot instead
  ansible.builtin.reboot:
  when: reload.reload == 'in_use'
"""

RETURN = r"""
reload:
  description: C(done) (unloaded and loaded back) or C(in_use) (a module could not be removed; nothing loaded back).
  returned: success
  type: str
  sample: done
stopped_services:
  description: The services this call stopped.
  returned: always
  type: list
  elements: str
  sample: [nvidia-persistenced]
unload_order:
  description: The loaded modules in removal order (users first).
  returned: always
  type: list
  elements: str
  sample: [nvidia_uvm, nvidia_modeset, nvidia]
unloaded:
  description: The modules removed.
  returned: always
  type: list
  elements: str
rmmod_failures:
  description: The removals that failed, with C(rmmod)'s own words.
  returned: always
  type: list
  elements: dict
  sample: [{module: nvidia, rc: 1, stderr: "rmmod: ERROR: Module nvidia is in use"}]
in_use_reason:
  description: What holds the module (holder modules, processes by full command line); null when none.
  returned: always
  type: str
holders:
  description: The processes that have the vendor's device files open (pid, cmdline, devices).
  returned: always
  type: list
  elements: dict
loaded:
  description: The names loaded back with C(modprobe), in order.
  returned: always
  type: list
  elements: str
kernel_log:
  description:
    - After a failed C(modprobe) - what the kernel log says of the host's GPUs, C({reason, devices, lines})
      as M(npuops.fleet.npu_driver_facts) returns it; null when it says nothing of them.
  returned: failure
  type: dict
"""

from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import (  # noqa: E402
    PROFILE_ARG_SPEC,
    ProfileError,
    resolve_profile,
)
from ansible_collections.npuops.fleet.plugins.module_utils.host import driver_facts  # noqa: E402


class KmodReload:
    """Stop, read, unload, name the holders or load back - the steps of the module's description."""

    def __init__(self, module: AnsibleModule, profile: dict[str, Any]) -> None:
        self.m = module
        self.profile = profile
        self.runner = driver_facts.ModuleRunner(module)
        self.res: dict[str, Any] = dict(
            changed=False,
            stopped_services=[],
            unload_order=[],
            unloaded=[],
            rmmod_failures=[],
            in_use_reason=None,
            holders=[],
            loaded=[],
        )

    def fail(self, msg: str) -> None:
        self.m.fail_json(msg=msg, **self.res)

    def facts(self, device_holders: bool = False) -> dict[str, Any]:
        return driver_facts.gather(
            self.runner,
            self.profile,
            {"vendor": self.m.params["vendor"], "smi_query_fields": ["index"], "device_holders": device_holders,
             "pci_devices_dir": self.m.params["pci_devices_dir"], "kernel_log_file": self.m.params["kernel_log_file"]},
        )

    def why_no_device(self, words: str) -> str:
        """For a modprobe that failed with "No such device" (the driver's init found no GPU it would
        drive, and did not stay loaded): what this boot's kernel log says of the host's GPUs, as
        ``; <reason> (<devices>; kernel log: <lines>)``; "" for any other failure (a refused signature,
        a missing module: the log's last load is an earlier one then) or when the log says nothing."""
        if "No such device" not in words:
            return ""
        try:
            klog = self.facts().get("kernel_log") or {}
        except Exception:  # pylint: disable=broad-except  # the modprobe's own words must still reach the caller
            klog = {}
        self.res["kernel_log"] = klog or None
        if not klog.get("reason"):
            return ""
        devices = ", ".join(klog.get("devices") or [])
        # a failed probe that names no GPU and no refusal is not known to be the hardware's
        reason = klog["reason"] if devices else "the driver's probe failed for the host's GPUs"
        return "; %s (%skernel log: %s)" % (reason, devices + "; " if devices else "",
                                            " / ".join(x.strip() for x in (klog.get("lines") or [])[:4]))

    def stop_services(self) -> None:
        services = self.m.params["services"]
        if services is None:
            services = list(self.profile.get("services") or [])
        systemctl = self.m.get_bin_path("systemctl")
        if not self.m.params["stop_services"] or not services or not systemctl:
            return
        for svc in services:
            unit = svc if svc.endswith(".service") else svc + ".service"
            rc, _out, _err = self.runner.run([systemctl, "is-active", "--quiet", unit])
            if rc != 0:
                continue
            rc, out, err = self.runner.run([systemctl, "stop", unit])
            if rc != 0:
                self.fail("systemctl stop %s failed (rc %s): %s" % (unit, rc, (err or out).strip()))
            self.res["stopped_services"].append(svc)
            self.res["changed"] = True

    def run(self) -> None:
        self.stop_services()
        before = self.facts()
        self.res["unload_order"] = list(before.get("unload_order") or [])
        rmmod = self.m.get_bin_path("rmmod", required=True)
        for name in self.res["unload_order"]:
            rc, out, err = self.runner.run([rmmod, name])
            if rc == 0:
                self.res["unloaded"].append(name)
                self.res["changed"] = True
            else:
                self.res["rmmod_failures"].append({"module": name, "rc": rc, "stderr": (err or out).strip()})
        if self.res["rmmod_failures"]:
            held = self.facts(device_holders=True)
            self.res["holders"] = held.get("device_holders") or []
            self.res["in_use_reason"] = held.get("in_use_reason")
            why = "%s; %s" % (
                "; ".join(f["stderr"] for f in self.res["rmmod_failures"]),
                self.res["in_use_reason"] or "held by unknown processes",
            )
            if not self.m.params["reboot_allowed"]:
                self.fail("module reload impossible: %s; reboot not allowed (reboot_allowed=false)" % why)
            self.m.exit_json(reload="in_use", reload_impossible_why=why, **self.res)
        modprobe = self.m.get_bin_path("modprobe", required=True)
        names = before.get("modprobe_names") or {}
        for name in before.get("load_order") or []:
            arg = names.get(name) or name
            rc, out, err = self.runner.run([modprobe, arg])
            if rc != 0:
                self.fail("modprobe %s failed (rc %s): %s%s" % (arg, rc, (err or out).strip(),
                                                                self.why_no_device(err or out)))
            self.res["loaded"].append(arg)
            self.res["changed"] = True
        self.m.exit_json(reload="done", **self.res)


def main() -> None:
    spec: dict[str, Any] = dict(
        services=dict(type="list", elements="str"),
        stop_services=dict(type="bool", default=True),
        reboot_allowed=dict(type="bool", default=False),
        pci_devices_dir=dict(type="path", default="/sys/bus/pci/devices"),
        kernel_log_file=dict(type="path"),
    )
    spec.update(PROFILE_ARG_SPEC)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=False)
    try:
        p = module.params
        profile = resolve_profile(p["vendor"], p["vendor_profile"], p["vendor_profiles"])
    except ProfileError as e:
        module.fail_json(msg=str(e))
    KmodReload(module, profile).run()


if __name__ == "__main__":
    main()
