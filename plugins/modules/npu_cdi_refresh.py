#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_cdi_refresh
short_description: Regenerate the host's NVIDIA CDI specs after a driver change and check that they follow the driver
version_added: 0.1.0
description:
  - Runs on the host. With the NVIDIA Container Toolkit in CDI mode the container runtime reads a Container
    Device Interface spec that names every driver file by its versioned path; after a driver upgrade a stale
    spec makes GPU containers fail to start (C(error stat'ing file .../libcuda.so.<old version>)).
  - Finds the NVIDIA specs in O(dirs) - C(*.yaml), C(*.yml), C(*.json) files whose C(kind) is
    C(nvidia.com/<class>) or C(<name>.nvidia.com/<class>). A host without one does not use CDI - nothing
    is done and the task reports C(changed=false).
  - Regenerates each the way the host does it - the spec the toolkit's refresh unit writes
    (C(/var/run/cdi/nvidia.yaml)) by restarting O(refresh_unit) when the host has it (the unit reads its own
    settings from C(/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env)); any other by
    C(nvidia-ctk cdi generate --output=<the same path>) (C(--format=json) for a C(.json) file) with
    O(generate_args). Each command is bounded by O(timeout) seconds.
  - Then checks each spec - every C(hostPath) of its mounts and device nodes exists on the host, and the
    driver version before the upgrade (O(old_version)) appears nowhere in it. Anything else fails the task
    naming the spec, the first missing path and how many are missing, so the caller keeps the node cordoned.
options:
  dirs:
    description:
      - The CDI spec directories, as the container runtimes read them.
    type: list
    elements: path
    default: [/etc/cdi, /var/run/cdi]
  old_version:
    description:
      - The driver version before the upgrade (C(535.183.06)). A spec that still names it is stale. Empty,
        or the same version as O(target_version) (a flavour change at one version), skips that check.
    type: str
    default: ""
  target_version:
    description:
      - The driver version now; only compared with O(old_version).
    type: str
    default: ""
  nvidia_ctk:
    description:
      - The toolkit's CLI, a name looked up in C(PATH) or a full path.
    type: str
    default: nvidia-ctk
  generate_args:
    description:
      - Extra arguments of C(nvidia-ctk cdi generate), as the host's spec was made (for example
        C(--mode=management), C(--device-name-strategy=uuid), C(--driver-root=/run/nvidia/driver)).
    type: list
    elements: str
    default: []
  refresh_unit:
    description:
      - The toolkit's systemd unit that regenerates C(/var/run/cdi/nvidia.yaml) (toolkit 1.18 and later).
        Used for that file when the host has the unit; C("") never uses it.
    type: str
    default: nvidia-cdi-refresh.service
  timeout:
    description:
      - Seconds each regeneration may take (C(timeout)(1) around it).
    type: int
    default: 120
attributes:
  check_mode:
    support: full
    description: Regenerates nothing; reports which specs would be regenerated and how stale they are now.
  diff_mode:
    support: none
    description: The regenerated specs are returned by path, not as a diff.
notes:
  - Run it after the new driver is loaded and its MIG devices are back (the spec lists MIG devices), before
    the uncordon - M(npuops.fleet.npu_host_window) with O(npuops.fleet.npu_host_window#module:state=absent)
    makes the MIG layout again.
author:
  - npuops maintainers (@npuops)
"""

EXAMPLES = r"""
- name: Regenerate the CDI specs for the new driver and check them
  npuops.fleet.npu_cdi_refresh:
    old_version: 535.183.06
    target_version: 550.90.07
"""

RETURN = r"""
specs:
  description: Each NVIDIA spec found, after its regeneration (before it, in check mode).
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The spec file.
      type: str
    kind:
      description: Its C(kind), for example C(nvidia.com/gpu); null when it does not parse.
      type: str
    how:
      description: The command that regenerates it (would, in check mode).
      type: str
    missing:
      description: Host paths it names that do not exist.
      type: list
      elements: str
    old_version_found:
      description: O(old_version) appears in it.
      type: bool
  sample:
    - path: /etc/cdi/nvidia.yaml
      kind: nvidia.com/gpu
      how: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml
      missing: []
      old_version_found: false
"""

import os  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.npuops.fleet.plugins.module_utils.driver_version import same_driver_version  # noqa: E402
from ansible_collections.npuops.fleet.plugins.module_utils.host import cdi  # noqa: E402


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


class CdiRefresh:
    def __init__(self, module: AnsibleModule) -> None:
        self.m = module
        self.p = module.params
        old, new = self.p["old_version"].strip(), self.p["target_version"].strip()
        self.old = old if old and not (new and same_driver_version(old, new)) else ""

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        bounded = ["timeout", "--kill-after=5", str(self.p["timeout"])] + argv
        return self.m.run_command(bounded, check_rc=False, environ_update={"LC_ALL": "C"})

    def unit_exists(self) -> bool:
        unit = self.p["refresh_unit"]
        systemctl = self.m.get_bin_path("systemctl")
        if not unit or not systemctl:
            return False
        rc, out, _err = self.m.run_command([systemctl, "show", "-p", "LoadState", "--value", unit], check_rc=False)
        return rc == 0 and out.strip() not in ("", "not-found")

    def how(self, spec: dict[str, Any], unit: bool, ctk: str) -> list[str]:
        if unit and os.path.realpath(spec["path"]) == os.path.realpath(cdi.REFRESH_OUTPUT):
            return [self.m.get_bin_path("systemctl") or "systemctl", "restart", self.p["refresh_unit"]]
        return ([ctk, "cdi", "generate", "--output=" + spec["path"]]
                + (["--format=json"] if spec["format"] == "json" else []) + list(self.p["generate_args"]))

    def check(self, spec: dict[str, Any]) -> dict[str, Any]:
        try:
            text = _read(spec["path"])
            loaded = cdi.load(spec["path"], text)
        except (OSError, cdi.SpecError) as e:
            return {"missing": [], "old_version_found": False, "error": str(e)}
        return dict(cdi.stale(text, loaded["host_paths"], self.old), error=None, kind=loaded["kind"])

    def main(self) -> None:
        specs = cdi.find_specs(self.p["dirs"], _read)
        if not specs:
            self.m.exit_json(changed=False, specs=[])
        ctk = self.p["nvidia_ctk"] if "/" in self.p["nvidia_ctk"] else (self.m.get_bin_path(self.p["nvidia_ctk"]) or "")
        unit = self.unit_exists()
        results, problems = [], []
        for spec in specs:
            argv = self.how(spec, unit, ctk or self.p["nvidia_ctk"])
            row = {"path": spec["path"], "kind": spec["kind"], "how": " ".join([os.path.basename(argv[0])] + argv[1:])}
            if argv[1:2] == ["cdi"] and not ctk:
                problems.append("CDI spec %s cannot be regenerated: %s not found on the host (install the NVIDIA "
                                "Container Toolkit, or set nvidia_ctk)" % (spec["path"], self.p["nvidia_ctk"]))
                results.append(dict(row, missing=[], old_version_found=False))
                continue
            if not self.m.check_mode:
                rc, out, err = self.run(argv)
                if rc != 0:
                    said = " ".join((err or out).split())[-400:]
                    problems.append("CDI spec %s: %s failed (%s): %s" % (
                        spec["path"], row["how"], "timed out after %s s" % self.p["timeout"] if rc in (124, 137)
                        else "rc %s" % rc, said or "no output"))
            state = self.check(spec)
            row.update(kind=state.get("kind") or spec["kind"], missing=state["missing"],
                       old_version_found=state["old_version_found"])
            results.append(row)
            if self.m.check_mode:
                continue
            if state["error"]:
                problems.append(state["error"])
            elif state["missing"]:
                problems.append("CDI spec %s does not follow the driver after %s: %s is missing (%d path(s) missing)"
                                % (spec["path"], row["how"], state["missing"][0], len(state["missing"])))
            elif state["old_version_found"]:
                problems.append("CDI spec %s still names the driver before the upgrade, %s, after %s"
                                % (spec["path"], self.old, row["how"]))
        if problems:
            self.m.fail_json(msg="; ".join(problems), changed=not self.m.check_mode, specs=results)
        self.m.exit_json(changed=True, specs=results)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            dirs=dict(type="list", elements="path", default=list(cdi.DEFAULT_DIRS)),
            old_version=dict(type="str", default=""),
            target_version=dict(type="str", default=""),
            nvidia_ctk=dict(type="str", default="nvidia-ctk"),
            generate_args=dict(type="list", elements="str", default=[]),
            refresh_unit=dict(type="str", default="nvidia-cdi-refresh.service"),
            timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    if module.params["timeout"] < 1:
        module.fail_json(msg="timeout must be 1 or more seconds, got %s" % module.params["timeout"])
    CdiRefresh(module).main()


if __name__ == "__main__":
    main()
