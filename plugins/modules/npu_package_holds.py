#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_package_holds
short_description: Hold or release the driver's and kernel's packages in dpkg, in one call
version_added: 0.4.0
description:
  - Runs on the host (Debian family). Reads C(dpkg --get-selections) and the installed packages
    (C(dpkg-query -W)), waits for dpkg's locks (as M(npuops.fleet.npu_dpkg_lock), naming the holder on
    timeout), sets every selection in one C(dpkg --set-selections) call, reads the selections again and
    fails, naming the packages, unless each one it had to change is now as asked.
  - O(state=held) holds the installed packages among O(names), O(patterns) and, with O(discover), the
    vendor profile's driver C(package_families), the booted kernel's packages (O(kernel)) and the kernel
    meta packages (O(kernel_meta)) - less those matching O(exclude). A package that is not installed is
    never held.
  - O(state=released) releases the held packages among O(names) and O(patterns), less O(exclude). A
    package that is not held is never touched, so the release of an install step can be put back
    exactly (RV(changed_packages)).
  - O(state=query) only reads (RV(held)).
  - Every pattern is an fnmatch glob over the whole name, an architecture qualifier ignored - the rule
    of the C(npuops.fleet.package_match) test.
  - A change that dpkg refuses because another process took its lock in between is retried up to 5
    times, each after a new lock wait.
  - A package installed for two architectures (Multi-Arch, C(libnvidia-gl-550:i386) beside C(:amd64))
    is held or released on every instance, by the qualified names dpkg lists; it counts as held when
    any instance is.
extends_documentation_fragment:
  - npuops.fleet.vendor
options:
  state:
    description:
      - C(held), C(released) or C(query).
    type: str
    choices: [held, released, query]
    default: query
  names:
    description:
      - Exact package names (an C(:arch) qualifier is dropped).
    type: list
    elements: str
    default: []
  patterns:
    description:
      - fnmatch patterns of package names.
    type: list
    elements: str
    default: []
  discover:
    description:
      - With O(state=held), also hold what a driver host must keep - the vendor's installed driver
        packages (O(driver)), the booted kernel's packages (O(kernel)) and the kernel meta packages (O(kernel_meta)).
    type: bool
    default: false
  driver:
    description: With O(discover), hold the installed packages of the vendor profile's C(package_families).
    type: bool
    default: true
  kernel:
    description:
      - With O(discover), hold the booted kernel's packages (C(linux-image-$(uname -r)), C(linux-modules-...), headers).
    type: bool
    default: true
  kernel_meta:
    description:
      - With O(discover), hold the kernel meta packages (C(linux-generic), C(linux-image-amd64), ...).
    type: bool
    default: true
  exclude:
    description:
      - fnmatch patterns never held nor released (the container and CUDA toolkits match the driver's
        families but are not the driver).
    type: list
    elements: str
    default: []
  lock_timeout:
    description:
      - Seconds to wait for dpkg's locks before each change. C(0) checks once.
    type: int
    default: 300
  installed_only:
    description:
      - With O(state=held), hold only installed packages among O(names). C(false) holds every name dpkg
        lists in any state (a package a failed transaction left half-installed), as after a failed install.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Reads, and reports what it would change without changing it.
  diff_mode:
    support: full
    description: The held packages before and after.
notes:
  - The package_holds role and the driver_upgrade role's install step use this module.
author:
  - npuops maintainers (@npuops)
"""

EXAMPLES = r"""
- name: Release the driver's held packages for one apt transaction
  npuops.fleet.npu_package_holds:
    state: released
    patterns: ["nvidia-*", "libnvidia-*"]
    exclude: ["nvidia-container-toolkit*"]
  register: released

- name: Hold the driver's and the booted kernel's packages again
  npuops.fleet.npu_package_holds:
    state: held
    discover: true
    vendor: nvidia
    exclude: ["nvidia-container-toolkit*", "libnvidia-container*", "cuda-toolkit*"]

- name: Put back exactly what was released
  npuops.fleet.npu_package_holds:
    state: held
    names: "{{ released.changed_packages }}"
"""

RETURN = r"""
held:
  description: The held packages after the call (sorted; what dpkg says, read again after a change).
  returned: always
  type: list
  elements: str
  sample: [linux-image-5.15.0-119-generic, nvidia-driver-550]
held_before:
  description: The held packages before the call.
  returned: always
  type: list
  elements: str
wanted:
  description:
    - With O(state=held), the installed packages that must be held (whether or not they were); with
      O(state=released), the held packages to release. Empty with O(state=query).
  returned: always
  type: list
  elements: str
changed_packages:
  description: The packages whose selection this call changed (or would change, in check mode).
  returned: always
  type: list
  elements: str
  sample: [nvidia-driver-550]
"""

import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import (  # noqa: E402
    PROFILE_ARG_SPEC,
    ProfileError,
    resolve_profile,
)
from ansible_collections.npuops.fleet.plugins.module_utils.host import (  # noqa: E402
    apt_state,  # noqa: E402
    dpkg_lock,
    package_holds,
)

SET_ATTEMPTS = 5
SET_RETRY_DELAY = 3.0
DPKG_LOCKS = [dpkg_lock.FRONTEND_LOCK, dpkg_lock.DPKG_LOCK]


class HoldsManager:
    """One call: read, decide, change in one ``dpkg --set-selections``, read again, verify."""

    def __init__(self, module: AnsibleModule) -> None:
        self.m = module
        self.p = module.params

    def _run(self, args: list[str], data: str | None = None) -> tuple[int, str, str]:
        rc, out, err = self.m.run_command(args, data=data, environ_update={"LC_ALL": "C"}, binary_data=False)
        return rc, out or "", err or ""

    def selections(self) -> dict[str, dict[str, str]]:
        rc, out, err = self._run([self.m.get_bin_path("dpkg", required=True), "--get-selections"])
        if rc != 0:
            self.m.fail_json(msg="dpkg --get-selections failed (rc %s): %s" % (rc, err.strip() or out.strip()))
        return package_holds.parse_selections(out)

    def held(self) -> list[str]:
        return package_holds.held(self.selections())

    def installed(self) -> dict[str, dict[str, str]]:
        query = self.m.get_bin_path("dpkg-query", required=True)
        rc, out, err = self._run([query, "-W", apt_state.DPKG_QUERY_FORMAT])
        if rc != 0:
            self.m.fail_json(msg="dpkg-query -W failed (rc %s): %s" % (rc, err.strip() or out.strip()))
        return apt_state.parse_dpkg_query(out)

    def wanted(self, sel: dict[str, dict[str, str]]) -> list[str]:
        p = self.p
        if p["state"] == "released":
            return package_holds.release_set(package_holds.held(sel), p["names"], p["patterns"], p["exclude"])
        if p["state"] != "held":
            return []
        families: list[str] = []
        if p["discover"] and p["driver"]:
            try:
                profile = resolve_profile(p["vendor"], p["vendor_profile"], p["vendor_profiles"])
            except ProfileError as e:
                self.m.fail_json(msg=str(e))
            families = list(profile.get("package_families") or [])
        discover = bool(p["discover"])
        installed: dict[str, object] = dict(self.installed())
        if not p["installed_only"]:
            installed.update({n.split(":", 1)[0]: {} for n in p["names"] if n.split(":", 1)[0] in sel})
        return package_holds.hold_candidates(
            installed,
            running_kernel=self._running_kernel() if discover and p["kernel"] else "",
            families=families,
            names=p["names"],
            patterns=p["patterns"],
            kernel=discover and p["kernel"],
            kernel_meta=discover and p["kernel_meta"],
            exclude=p["exclude"],
        )

    def _running_kernel(self) -> str:
        rc, out, _err = self._run(["uname", "-r"])
        return out.strip() if rc == 0 else ""

    def set_selections(self, sel: dict[str, dict[str, str]], packages: list[str], selection: str) -> None:
        stdin = package_holds.selections_input(sel, packages, selection)
        dpkg = self.m.get_bin_path("dpkg", required=True)
        last = ""
        for attempt in range(SET_ATTEMPTS):
            lock = dpkg_lock.wait_for_locks(DPKG_LOCKS, self.p["lock_timeout"], 1.0)
            if not lock["free"]:
                self.m.fail_json(
                    msg=dpkg_lock.timeout_message(lock["holders"], lock["waited"], self.p["lock_timeout"]),
                    held=self.held(),
                    changed_packages=[],
                )
            rc, out, err = self._run([dpkg, "--set-selections"], data=stdin)
            if rc == 0:
                return
            last = (err.strip() or out.strip()) + " (rc %s)" % rc
            if attempt + 1 < SET_ATTEMPTS:
                time.sleep(SET_RETRY_DELAY)
        self.m.fail_json(
            msg="dpkg --set-selections (%s) failed %d times: %s" % (selection, SET_ATTEMPTS, last),
            held=self.held(),
            changed_packages=[],
        )

    def run(self) -> None:
        p = self.p
        sel = self.selections()
        before = package_holds.held(sel)
        wanted = self.wanted(sel)
        if p["state"] == "held":
            # every instance held, a Multi-Arch package's second one included
            change = sorted(set(package_holds.not_as_asked(sel, wanted, "hold")) | (set(wanted) - set(sel)))
            selection = "hold"
        elif p["state"] == "released":
            change = list(wanted)
            selection = "install"
        else:
            change, selection = [], ""
        after = before
        if change and not self.m.check_mode:
            self.set_selections(sel, change, selection)
            sel_after = self.selections()
            after = package_holds.held(sel_after)
            wrong = package_holds.not_as_asked(sel_after, change, selection)
            if wrong:
                self.m.fail_json(
                    msg="dpkg --set-selections (%s) left %s %s"
                    % (selection, ", ".join(wrong), "not held" if selection == "hold" else "held"),
                    held=after,
                    held_before=before,
                    wanted=wanted,
                    changed_packages=sorted(set(change) - set(wrong)),
                    changed=True,
                )
        elif change:
            after = sorted(set(before) | set(change)) if selection == "hold" else sorted(set(before) - set(change))
        result = dict(changed=bool(change), held=after, held_before=before, wanted=wanted, changed_packages=change)
        if self.m._diff:
            result["diff"] = {"before": "\n".join(before) + "\n", "after": "\n".join(after) + "\n"}
        self.m.exit_json(**result)


def main() -> None:
    spec = dict(
        state=dict(type="str", choices=["held", "released", "query"], default="query"),
        names=dict(type="list", elements="str", default=[]),
        patterns=dict(type="list", elements="str", default=[]),
        discover=dict(type="bool", default=False),
        driver=dict(type="bool", default=True),
        kernel=dict(type="bool", default=True),
        kernel_meta=dict(type="bool", default=True),
        exclude=dict(type="list", elements="str", default=[]),
        lock_timeout=dict(type="int", default=300),
        installed_only=dict(type="bool", default=True),
    )
    spec.update(PROFILE_ARG_SPEC)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    if module.params["lock_timeout"] < 0:
        module.fail_json(msg="lock_timeout must be 0 or more seconds, got %s" % module.params["lock_timeout"])
    HoldsManager(module).run()


if __name__ == "__main__":
    main()
