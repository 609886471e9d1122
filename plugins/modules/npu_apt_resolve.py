#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_apt_resolve
short_description: Find in the host's apt sources the exact package versions of a driver version, before any cordon
version_added: 0.4.0
description:
  - Runs on the host. With O(update_cache) it first refreshes apt's package lists (C(apt-get update)),
    then waits for dpkg's and apt's locks (as M(npuops.fleet.npu_dpkg_lock), naming the holder on
    timeout), then asks C(apt-cache madison) once for every name of O(packages) and O(optional).
  - Each name gets the first version apt offers whose upstream part is exactly O(version) -
    C([epoch:]VERSION[-revision]), so C(550.90.07-0ubuntu1) and C(1:550.90.07-1) are at C(550.90.07),
    C(550.90.07.1-1) is not.
  - A name of O(packages) apt does not offer at O(version) fails the task, naming every such name and
    what apt offers instead. A name of O(optional) joins RV(resolved) only when apt offers it at
    O(version) (a Tesla branch's firmware, the old branch's other packages under their new names).
  - Nothing else changes on the host; the refresh is skipped in check mode (a plan reads the lists as
    they are, RV(lists_mtime) says from when).
options:
  version:
    description:
      - The driver version every package must be at (upstream version, e.g. C(550.90.07)).
    type: str
    required: true
  packages:
    description: Names that must be offered at O(version).
    type: list
    elements: str
    required: true
  optional:
    description: Names that join RV(resolved) when offered at O(version).
    type: list
    elements: str
    default: []
  any_version:
    description:
      - Names that must be offered at some version, resolved to the first version C(apt-cache madison) lists
        (the newest) - packages whose name, not their version, carries the target, such as NVIDIA's pinning
        package C(nvidia-driver-pinning-590.48.01). A name apt does not offer fails the task like O(packages).
    type: list
    elements: str
    default: []
  closure:
    description:
      - fnmatch patterns of the driver's package names (the vendor profile's C(package_families)). Each resolved
        package's C(Pre-Depends), C(Depends) and C(Recommends) (apt-get installs a new package's) at its resolved
        version (C(apt-cache show name=version)) are
        followed until nothing is new. A dependency on a name of these families that is its relation's only
        alternative joins RV(resolved) where apt offers it at O(version); a choice among alternatives stays apt's.
      - Without it apt would take its candidate for such a dependency - the newest branch, where NVIDIA's CUDA
        repository (590 on) names its packages without the branch and no pinning package is active yet. A
        dependency not offered at O(version) is left to apt (M(npuops.fleet.npu_apt_install) with
        O(npuops.fleet.npu_apt_install#module:driver_version) refuses it). Empty follows nothing.
    type: list
    elements: str
    default: []
  update_cache:
    description:
      - Refresh apt's package lists first (not in check mode).
    type: bool
    default: false
  lock_timeout:
    description:
      - Seconds to wait for dpkg's and apt's locks (before the refresh and before madison). C(0) checks once.
    type: int
    default: 300
  subject:
    description:
      - What is looked for, for the failure message (e.g. C(preflight - nvidia driver 550.90.07)).
    type: str
  host:
    description:
      - The host's name in the failure message (the inventory name). Default the host's own name.
    type: str
attributes:
  check_mode:
    support: full
    description: Read-only but for the refresh, which check mode skips.
  diff_mode:
    support: none
    description: Nothing is changed.
author:
  - npuops maintainers (@npuops)
"""

EXAMPLES = r"""
- name: Resolve the exact package versions of 550.90.07
  npuops.fleet.npu_apt_resolve:
    version: 550.90.07
    packages: [nvidia-driver-550-server-open, nvidia-utils-550-server]
    optional: [nvidia-fabricmanager-550]
    update_cache: true
  register: apt

- name: Install exactly those
  npuops.fleet.npu_apt_install:
    packages: "{{ apt.resolved }}"
"""

RETURN = r"""
resolved:
  description:
    - Name to the version apt offers at O(version), for O(packages) and the offered O(optional).
  returned: success
  type: dict
  sample: {nvidia-driver-550-server-open: 550.90.07-0ubuntu1}
offers:
  description:
    - Name to every version apt offers (madison's order), for every name asked.
  returned: always
  type: dict
missing:
  description: The names of O(packages) apt does not offer at O(version), and of O(any_version) it does not offer.
  returned: always
  type: list
  elements: str
closure:
  description: With O(closure) - the dependencies that joined RV(resolved), in the order they were found.
  returned: with O(closure)
  type: list
  elements: str
  sample: [nvidia-modprobe, libnvidia-gl]
lists_mtime:
  description:
    - When apt's package lists were last written (epoch seconds of C(/var/lib/apt/lists)); null when unknown.
  returned: always
  type: float
"""

import os  # noqa: E402
import re  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.npuops.fleet.plugins.module_utils.host import (  # noqa: E402
    apt_output,
    apt_state,  # noqa: E402
    dpkg_lock,
)

LISTS = "/var/lib/apt/lists"
RETRY_DELAY = 2.0
FETCH_RETRIES = 2
FETCH_FAILED = re.compile(r"Failed to fetch|Some index files failed to download")


CLOSURE_ROUNDS = 8


def follow_closure(module: AnsibleModule, p: dict[str, Any], env: dict[str, str], res: dict[str, Any],
                   resolved: dict[str, str]) -> None:
    """O(closure): add to ``resolved`` (in place) the family dependencies apt offers at the target version,
    round by round (one C(apt-cache show) and one C(apt-cache madison) call each), at most CLOSURE_ROUNDS;
    ``res["closure"]`` lists what joined, in order."""
    cache = module.get_bin_path("apt-cache", required=True)
    res["closure"] = []
    shown: set[str] = set()
    for _round in range(CLOSURE_ROUNDS):
        todo = [n for n in resolved if n not in shown]
        if not todo:
            return
        shown.update(todo)
        _rc, out, _err = module.run_command([cache, "show"] + ["%s=%s" % (n, resolved[n]) for n in todo],
                                            environ_update=env)
        wanted = []
        for rels in apt_output.parse_show_depends(out).values():
            for alts in rels:
                names = [a["name"] for a in alts]
                if len(names) != 1 or names[0] in resolved or names[0] in wanted:
                    continue  # a choice among alternatives stays apt's (the off-target check judges it)
                if apt_state.match_families([names[0]], p["closure"]):
                    wanted.append(names[0])
        if not wanted:
            return
        if _round == CLOSURE_ROUNDS - 1:
            module.warn("npu_apt_resolve: the dependencies of the target set were followed %d levels deep and %s still "
                        "joined; deeper ones are left to apt" % (CLOSURE_ROUNDS, ", ".join(wanted)))
        _rc, out, _err = module.run_command([cache, "madison"] + wanted, environ_update=env)
        offers = apt_output.parse_madison(out)
        for name in wanted:
            res["offers"][name] = offers.get(name, [])
            at = apt_output.offered_at(res["offers"][name], p["version"])
            if at:
                resolved[name] = at
                res["closure"].append(name)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            version=dict(type="str", required=True),
            packages=dict(type="list", elements="str", required=True),
            optional=dict(type="list", elements="str", default=[]),
            any_version=dict(type="list", elements="str", default=[]),
            closure=dict(type="list", elements="str", default=[]),
            update_cache=dict(type="bool", default=False),
            lock_timeout=dict(type="int", default=300),
            subject=dict(type="str"),
            host=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    res: dict[str, Any] = dict(changed=False, offers={}, missing=[], lists_mtime=None)
    env = {"LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}

    def wait_locks() -> None:
        lock = dpkg_lock.wait_for_locks(dpkg_lock.DEFAULT_LOCKS, p["lock_timeout"], 1.0)
        if not lock["free"]:
            module.fail_json(msg=dpkg_lock.timeout_message(lock["holders"], lock["waited"], p["lock_timeout"]), **res)

    if p["update_cache"] and not module.check_mode:
        apt_get = module.get_bin_path("apt-get", required=True)
        deadline = time.monotonic() + p["lock_timeout"]
        fetch_retries = 0
        while True:
            wait_locks()
            rc, out, err = module.run_command([apt_get, "update", "-q"], environ_update=env)
            if rc == 0:
                break
            text = (out or "") + "\n" + (err or "")
            # another apt took the lists lock between the wait and the update: wait again, within the bound
            if dpkg_lock.parse_lock_messages(text) and time.monotonic() < deadline:
                time.sleep(RETRY_DELAY)
                continue
            # a mirror that failed once: twice more, as ansible.builtin.apt's update_cache retries
            if FETCH_FAILED.search(text) and fetch_retries < FETCH_RETRIES:
                fetch_retries += 1
                time.sleep(RETRY_DELAY * fetch_retries)
                continue
            lines = apt_output.failure_lines(text) or [(err or out or "").strip()]
            module.fail_json(msg="apt-get update failed (rc %s): %s" % (rc, " / ".join(lines)), **res)
    try:
        res["lists_mtime"] = os.stat(LISTS).st_mtime
    except OSError:
        pass
    wait_locks()
    names = list(dict.fromkeys(p["packages"] + p["optional"] + p["any_version"]))
    offers: dict[str, list[str]] = {}
    if names:
        cache = module.get_bin_path("apt-cache", required=True)
        rc, out, err = module.run_command([cache, "madison"] + names, environ_update=env)
        offers = apt_output.parse_madison(out)
    res["offers"] = {n: offers.get(n.split(":", 1)[0], []) for n in names}
    resolved: dict[str, str] = {}
    for name in names:
        if name in p["any_version"]:
            at = (res["offers"][name] or [None])[0]
        else:
            at = apt_output.offered_at(res["offers"][name], p["version"])
        if at:
            resolved[name] = at
        elif name in p["packages"] or name in p["any_version"]:
            res["missing"].append(name)
    if not res["missing"] and p["closure"]:
        follow_closure(module, p, env, res, resolved)
    if res["missing"]:
        offered = ", ".join("%s=%s" % (n, v) for n in p["packages"] + p["any_version"]
                            for v in res["offers"][n]) or "nothing"
        module.fail_json(
            msg="%s is not available in the apt sources of %s: no installable version for %s (apt offers: %s)"
            % (
                p["subject"] or "version %s" % p["version"],
                p["host"] or socket.gethostname(),
                ", ".join(res["missing"]),
                offered,
            ),
            **res,
        )
    module.exit_json(resolved=resolved, **res)


if __name__ == "__main__":
    main()
