#!/usr/bin/python3
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only snapshot of a host's accelerator driver state, printed as one JSON object.

Used by the driver_upgrade role before and after the host work. Arguments (all strings):
  --module MAIN_MODULE      core kernel module (nvidia, rebellions)
  --packages GLOB[,GLOB]    dpkg name globs of the vendor's driver packages
  --userspace GLOB          dpkg name glob of the userspace package whose version is "userspace"
  --smi nvidia|rebellions   which smi tool / output format to read
  --device-glob GLOB        device files of the accelerator
  --ipvs MOD[,MOD]          modules to probe with `modprobe -n` for the running kernel (optional)
Nothing on the host is changed.
"""
import argparse
import glob
import json
import os
import re
import subprocess


def run(cmd):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        return p.returncode, p.stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)


def upstream(version):
    """Drop the epoch and the Debian revision: 1:550.90.07-0ubuntu1 -> 550.90.07."""
    if not version:
        return None
    version = version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def vkey(rel):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", rel)]


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--packages", default="")
    ap.add_argument("--userspace", default="")
    ap.add_argument("--smi", default="nvidia")
    ap.add_argument("--device-glob", default="")
    ap.add_argument("--ipvs", default="")
    a = ap.parse_args()

    running = os.uname().release
    kernels = sorted((p[len("/boot/vmlinuz-"):] for p in glob.glob("/boot/vmlinuz-*")), key=vkey)
    boot = kernels[-1] if kernels else running
    out = {"running_kernel": running, "boot_kernel": boot, "installed_kernels": kernels,
           "loaded_version": read("/sys/module/%s/version" % a.module), "ondisk": {}, "packages": {},
           "held": [], "userspace_version": None, "userspace_package": None,
           "reboot_required": os.path.exists("/var/run/reboot-required")}
    for rel in sorted({running, boot}):
        rc, txt = run(["modinfo", "-k", rel, "-F", "version", a.module])
        out["ondisk"][rel] = txt.splitlines()[0].strip() if rc == 0 and txt else None
    out["ondisk_boot_version"] = out["ondisk"].get(boot)
    out["modules_dep_present"] = os.path.exists("/lib/modules/%s/modules.dep" % running)

    globs = [g for g in a.packages.split(",") if g]
    if globs:
        rc, txt = run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\t${Status}\n"] + globs)
        for line in txt.splitlines():
            parts = line.split("\t")
            if len(parts) < 4 or not parts[2].startswith("ii") and not parts[2].startswith("hi"):
                continue
            out["packages"][parts[0]] = parts[1]
            if parts[3].startswith("hold "):
                out["held"].append(parts[0])
    if a.userspace:
        rx = re.compile("^" + re.escape(a.userspace).replace(r"\*", ".*") + "$")
        for name in sorted(out["packages"]):
            if rx.match(name):
                out["userspace_package"] = name
                out["userspace_version"] = upstream(out["packages"][name])
                break

    devices = sorted(glob.glob(a.device_glob)) if a.device_glob else []
    out["device_files"] = len(devices)
    if a.smi == "nvidia":
        rc, txt = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        lines = [line.strip() for line in txt.splitlines() if line.strip()]
        ok = rc == 0 and bool(lines) and all(re.match(r"^\d+(\.\d+)+$", v) for v in lines)
        out["smi_version"] = lines[0] if ok else None
        out["smi_devices"] = len(lines) if ok else 0
    else:
        rc, txt = run(["rbln-smi"])
        m = re.search(r"KMD ver:\s*(\S+)", txt)
        ok = rc == 0 and m is not None
        out["smi_version"] = m.group(1) if m else None
        out["smi_devices"] = len(re.findall(r"^\|\s*\d+\s*\|", txt, re.M)) if ok else 0
    out["smi_rc"] = rc
    out["smi_ok"] = ok
    out["smi_output"] = "" if ok else txt[-600:]

    ipvs = {}
    for mod in [m for m in a.ipvs.split(",") if m]:
        rc, txt = run(["modprobe", "-n", "-v", mod])
        ipvs[mod] = {"ok": rc == 0, "output": txt[-300:]}
    out["ipvs"] = ipvs

    lv, uv, dv = out["loaded_version"], out["userspace_version"], out["ondisk_boot_version"]
    if not lv and not uv:
        verdict = "no_driver"
    elif dv and uv and dv != uv:
        verdict = "rebuild_required"
    elif lv != uv:
        verdict = "reload_required"
    else:
        verdict = "ok"
    out["verdict"] = verdict
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
