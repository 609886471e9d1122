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
  - Finds the host's own NVIDIA specs in O(dirs) - C(*.yaml) and C(*.json) files (the runtimes read no
    other) whose C(kind) has the vendor C(nvidia.com) and whose name has no infix (C(nvidia.yaml), not the
    C(nvidia.coherent.yaml) written beside it) - and every path of O(specs) (the specs before the upgrade;
    one that is gone now, a C(/var/run/cdi) file after a reboot, is made again). Specs of other NVIDIA
    vendors (the GPU Operator toolkit's C(management.nvidia.com), the device plugin's and the DRA driver's)
    belong to the components that write them and are only listed (RV(others)). A host without a spec of
    its own does not use CDI - nothing is done and the task reports C(changed=false).
  - Regenerates each the way the host does it - the spec the toolkit's refresh unit writes
    (C(/var/run/cdi/nvidia.yaml)) by restarting O(refresh_unit) when the host has it (the unit reads its own
    settings from C(/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env)); any other by
    C(nvidia-ctk cdi generate --output=<the same path>) (C(--format=json) for a C(.json) file) with
    O(generate_args). Each command is bounded by O(timeout) seconds.
  - The refresh unit must end with C(Result=success) and have rewritten the file (a unit its own conditions
    skip returns success and writes nothing); its output path is read from the unit's environment and
    C(/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env).
  - Then checks each spec - every C(hostPath) of its mounts and device nodes and every hook's C(path) exists
    on the host, the driver version before the upgrade (O(old_version)) appears nowhere in it, and it still
    gives every device node it gave before (a control node such as C(/dev/nvidia-uvm) that did not exist at
    generation time is left out silently by nvidia-ctk; MIG capability nodes are not compared). Anything else
    fails the task naming the spec and the first problem, so the caller keeps the node cordoned.
options:
  specs:
    description:
      - The host's own spec files before the upgrade (RV(npuops.fleet.npu_driver_facts#module:cdi.specs) of the
        preflight). Each is regenerated even when it is gone now.
    type: list
    elements: path
    default: []
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
    lost_device_nodes:
      description: Device nodes (container paths) it gave before the regeneration and no longer gives.
      type: list
      elements: str
  sample:
    - path: /etc/cdi/nvidia.yaml
      kind: nvidia.com/gpu
      how: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml
      missing: []
      old_version_found: false
      lost_device_nodes: []
others:
  description: NVIDIA specs of other components (path -> kind), never rewritten here.
  returned: always
  type: dict
  sample: {/var/run/cdi/management.nvidia.com-gpu.yaml: management.nvidia.com/gpu}
"""

import os  # noqa: E402
import shlex  # noqa: E402
from typing import Optional  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import same_driver_version  # noqa: E402
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
        self.systemctl = module.get_bin_path("systemctl") or ""

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        bounded = ["timeout", "--kill-after=5", str(self.p["timeout"])] + argv
        return self.m.run_command(bounded, check_rc=False, environ_update={"LC_ALL": "C"})

    def show(self, prop: str) -> str:
        rc, out, _err = self.m.run_command([self.systemctl, "show", "-p", prop, "--value", self.p["refresh_unit"]],
                                           check_rc=False)
        return out.strip() if rc == 0 else ""

    def unit_output(self) -> Optional[str]:
        """The file the refresh unit writes, when the host has the unit; None otherwise."""
        if not self.p["refresh_unit"] or not self.systemctl or self.show("LoadState") in ("", "not-found"):
            return None
        env = dict(w.split("=", 1) for w in shlex.split(self.show("Environment")) if "=" in w)
        try:
            env.update(cdi.parse_env_file(_read(cdi.REFRESH_ENV)))
        except OSError:
            pass
        return env.get("NVIDIA_CTK_CDI_OUTPUT_FILE_PATH") or cdi.REFRESH_OUTPUT

    def regenerate(self, path: str, fmt: str, unit_out: Optional[str], ctk: str) -> tuple[str, Optional[str]]:
        """(how, problem or None)."""
        if unit_out and os.path.realpath(path) == os.path.realpath(unit_out):
            unit = self.p["refresh_unit"]
            how = "systemctl restart %s" % unit
            if self.m.check_mode:
                return how, None
            mtime = _mtime(path)
            self.run([self.systemctl, "reset-failed", unit])
            rc, out, err = self.run([self.systemctl, "restart", unit])
            result = self.show("Result")
            if rc != 0 or result != "success":
                return how, "CDI spec %s: %s failed (rc %s, Result=%s): %s" % (
                    path, how, rc, result or "?", " ".join((err or out).split())[-300:] or "no output")
            if _mtime(path) is None or _mtime(path) == mtime:
                return how, ("CDI spec %s: %s succeeded and did not write it (its conditions skip it: see "
                             "systemctl status %s)" % (path, how, unit))
            return how, None
        argv = [ctk or self.p["nvidia_ctk"], "cdi", "generate", "--output=" + path] + (
            ["--format=json"] if fmt == "json" else []) + list(self.p["generate_args"])
        how = " ".join([os.path.basename(argv[0])] + argv[1:])
        if not ctk:
            return how, ("CDI spec %s cannot be regenerated: %s not found on the host (install the NVIDIA Container "
                         "Toolkit, or give its path)" % (path, self.p["nvidia_ctk"]))
        if self.m.check_mode:
            return how, None
        rc, out, err = self.run(argv)
        if rc != 0:
            why = "timed out after %s s" % self.p["timeout"] if rc in (124, 137) else "rc %s" % rc
            said = " ".join((err or out).split())[-400:] or "no output"
            return how, "CDI spec %s: %s failed (%s): %s" % (path, how, why, said)
        return how, None

    def main(self) -> None:
        found = cdi.find_specs(self.p["dirs"], _read)
        own = [f for f in found if f["owned"]]
        others = {f["path"]: f["kind"] for f in found if not f["owned"]}
        known = {os.path.realpath(f["path"]) for f in own}
        for path in self.p["specs"]:
            if os.path.realpath(path) not in known and os.path.basename(path).endswith((".yaml", ".json")):
                known.add(os.path.realpath(path))
                own.append({"path": path, "kind": None, "format": "json" if path.endswith(".json") else "yaml",
                            "device_nodes": [], "error": None})
        if not own:
            self.m.exit_json(changed=False, specs=[], others=others)
        ctk = self.p["nvidia_ctk"] if "/" in self.p["nvidia_ctk"] else (self.m.get_bin_path(self.p["nvidia_ctk"]) or "")
        if ctk and not os.access(ctk, os.X_OK):
            ctk = ""
        unit_out = self.unit_output()
        results, problems = [], []
        for spec in own:
            how, problem = self.regenerate(spec["path"], spec["format"], unit_out, ctk)
            row = {"path": spec["path"], "kind": spec["kind"], "how": how, "missing": [], "old_version_found": False,
                   "lost_device_nodes": []}
            results.append(row)
            if problem:
                problems.append(problem)
            try:
                text = _read(spec["path"])
                now = cdi.load(spec["path"], text)
            except (OSError, cdi.SpecError) as e:
                if not self.m.check_mode:
                    problems.append("CDI spec %s after %s: %s" % (spec["path"], how, e))
                continue
            row.update(kind=now["kind"], lost_device_nodes=cdi.lost_nodes(spec["device_nodes"], now["device_nodes"]),
                       **cdi.stale(text, now["host_paths"], self.old))
            if self.m.check_mode or problem:
                continue
            if row["missing"]:
                problems.append("CDI spec %s does not follow the driver after %s: %s is missing (%d path(s) missing)"
                                % (spec["path"], how, row["missing"][0], len(row["missing"])))
            elif row["old_version_found"]:
                problems.append("CDI spec %s still names the driver before the upgrade, %s, after %s"
                                % (spec["path"], self.old, how))
            elif row["lost_device_nodes"]:
                problems.append("CDI spec %s no longer gives %s after %s (the device node did not exist when it was "
                                "made: load its module, e.g. nvidia-ctk system create-device-nodes --control-devices)"
                                % (spec["path"], ", ".join(row["lost_device_nodes"]), how))
        if problems:
            self.m.fail_json(msg="; ".join(problems), changed=not self.m.check_mode, specs=results, others=others)
        self.m.exit_json(changed=True, specs=results, others=others)


def _mtime(path: str) -> Optional[float]:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            specs=dict(type="list", elements="path", default=[]),
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
