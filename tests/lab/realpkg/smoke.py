#!/usr/bin/env python3
"""Smoke check of the real-packaging host image: real DKMS state before and after an in-branch upgrade.

  smoke.py [--report PATH] [--keep]

Builds or reuses the mirror (mirror.py) and the image (image.py), boots a systemd container
`npuops-realpkg-smoke` from it (no network; the mirror is the only apt source), and records what
the real packaging shows: `dkms status`, the built .ko files and their `modinfo` fields, how
modprobe maps `nvidia` to Debian's file names, then what an apt upgrade to the "after" set does
(first simulated with the whole driver family held and only the pinned names unheld, then for
real): rc, time, dkms status, .ko files, the packages apt moved. Writes a Markdown report (default
$NPUOPS_LAB_CACHE/realpkg/smoke-<image key>.md, plus a .json of the same facts) and exits 1 when a
check fails: before = "installed" at the before version, upgrade rc 0, after = "installed" at the
after version only, a second install of the after set changes nothing. The container is removed
at the end unless --keep.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import image  # noqa: E402  (imports hostctl: CONTAINERS_CONF for podman)
import mirror  # noqa: E402

CTR = "npuops-realpkg-smoke"
STATE = os.path.join(os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab") + "-realpkg", "smoke")
FAMILY = "'nvidia-*' 'libnvidia-*' 'firmware-nvidia-*' 'libcuda*' 'xserver-xorg-video-nvidia*'"
# installed packages of the family (dpkg-query also lists known-but-absent names as "un")
INSTALLED = "dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n' %s 2>/dev/null | grep -v '^un'" % FAMILY
# kmod's real modprobe is diverted to modprobe.kmod-real, a name kmod does not answer to: a link named
# modprobe in a scratch folder runs it (dry runs and --showconfig only: nothing is ever loaded)
REAL_MODPROBE = "mkdir -p /tmp/kmod && ln -sf /bin/kmod /tmp/kmod/modprobe && M=/tmp/kmod/modprobe; "
# package fields that matter for the packaging design (apt-cache show)
FIELDS = ("Package", "Version", "Source", "Architecture", "Pre-Depends", "Depends", "Recommends", "Provides",
          "Conflicts", "Breaks", "Replaces", "Installed-Size")


class Recorder:
    """Runs commands in the container and keeps (title, command, rc, seconds, output) for the report."""

    def __init__(self) -> None:
        self.steps: List[Dict[str, object]] = []

    def sh(self, title: str, script: str, keep: Optional[int] = 60) -> Dict[str, object]:
        """Run script in the container with bash; keep the last `keep` lines of its output."""
        t0 = time.time()
        r = subprocess.run(["podman", "exec", CTR, "/bin/bash", "-c", script], text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        lines = [ln for ln in r.stdout.rstrip("\n").split("\n") if not ln.startswith("(Reading database ... ")
                 or ln.endswith("installed.)")] if r.stdout.strip() else []
        cut = len(lines) - keep if keep and len(lines) > keep else 0
        step = {"title": title, "cmd": script, "rc": r.returncode, "seconds": round(time.time() - t0, 1),
                "output": ("[... %d lines cut]\n" % cut if cut else "") + "\n".join(lines[cut:]),
                "full": r.stdout}
        self.steps.append(step)
        mirror.log("%s: rc %d in %.1fs" % (title, r.returncode, step["seconds"]))
        return step


def start_container(ref: str, mdir: str) -> None:
    """Boot a systemd container of the image like a lab host (no network, hw.conf: 2 GPUs)."""
    subprocess.run(["podman", "rm", "-f", "-v", CTR], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    shutil.rmtree(STATE, ignore_errors=True)
    os.makedirs(os.path.join(STATE, "sysmodule"))
    with open(os.path.join(STATE, "hw.conf"), "w") as f:
        f.write("ACCEL=nvidia\nDEVICES=2\n")
    image.podman("run", "-d", "--name", CTR, "--hostname", "realpkg-smoke", "--systemd=always", "--network=none",
                 "-v", "%s:/var/lib/npuops-lab/host" % STATE, "-v", "%s:/sys/module" % os.path.join(STATE, "sysmodule"),
                 "-v", "%s:%s:ro" % (mdir, image.MIRROR_MNT), ref, "/sbin/init")
    t0 = time.time()
    while not os.path.exists(os.path.join(STATE, "ready")):
        if time.time() - t0 > 90:
            raise RuntimeError("%s did not boot in 90s" % CTR)
        time.sleep(0.5)
    subprocess.run(["podman", "exec", CTR, "systemctl", "is-system-running", "--wait"], stdout=subprocess.DEVNULL,
                   check=False)


def module_facts(rec: Recorder, krel: str, when: str) -> None:
    """dkms status, the .ko files, modinfo of each, modprobe's mapping of `nvidia`."""
    d = "/lib/modules/%s/updates/dkms" % krel
    rec.sh("%s: dkms status" % when, "dkms status")
    rec.sh("%s: built module files" % when, "ls -l %s; ls /var/lib/dkms; ls /var/lib/dkms/*/" % d)
    rec.sh("%s: modinfo (all fields but alias/parm, which are counted)" % when,
           "for k in %s/*.ko*; do echo \"== $k\"; modinfo \"$k\" | grep -v -E '^(alias|parm):'; "
           "echo \"alias lines: $(modinfo -F alias \"$k\" | wc -l), parm lines: $(modinfo -F parm \"$k\" | wc -l)\"; "
           "done" % d, keep=None)
    rec.sh("%s: modinfo -F name/version per file" % when,
           "for k in %s/*.ko*; do printf '%%s name=%%s version=%%s\\n' \"$(basename $k)\" "
           "\"$(modinfo -F name $k)\" \"$(modinfo -F version $k)\"; done" % d)


def report_packages(mdir: str) -> str:
    """Markdown: apt-cache show fields of the driver-related packages, names + versions of the rest."""
    recs = []
    with open(os.path.join(mdir, "Packages")) as f:
        for block in f.read().strip().split("\n\n"):
            rec = {}
            for line in block.split("\n"):
                if line and not line[0].isspace() and ":" in line:
                    k, v = line.split(":", 1)
                    rec[k] = v.strip()
            recs.append(rec)
    keyw = ("nvidia", "glx", "dkms", "firmware")
    main, rest = [], []
    for r in sorted(recs, key=lambda r: (r["Package"], r["Version"])):
        src = r.get("Source", r["Package"]).split()[0]
        if src == "linux" or any(k in r["Package"] or k in src for k in keyw):
            main.append("\n".join("%s: %s" % (k, r[k]) for k in FIELDS if k in r))
        else:
            rest.append("%s=%s" % (r["Package"], r["Version"]))
    return ("### Driver, DKMS and kernel packages in the mirror (apt-cache show fields)\n\n```\n%s\n```\n\n"
            "### The rest of the closure (toolchain, libraries; %d)\n\n```\n%s\n```\n" % (
                "\n\n".join(main), len(rest), "\n".join(rest)))


def write_report(path: str, info: Dict[str, object], rec: Recorder, checks: Dict[str, bool], mdir: str) -> None:
    """The Markdown report + a JSON twin."""
    with open(os.path.join(mdir, "mirror.json")) as f:
        minfo = json.load(f)
    out = ["# realpkg smoke report (generated by tests/lab/realpkg/smoke.py)\n",
           "Image %s (kernel %s), built %s: cold mirror %ss, lab image %ss, build + DKMS %ss.\n" % (
               info["ref"], info["kernel"], info["built"], info["mirror_seconds"], info["base_image_seconds"],
               info["build_seconds"]),
           "Mirror %s: %d .debs, %.0f MiB; closure per set: %s.\n" % (
               mdir, minfo["debs"], minfo["bytes"] / 2**20,
               ", ".join("%s %d packages" % (k, len(v)) for k, v in minfo["sets"].items())),
           "Checks: %s\n" % ", ".join("%s=%s" % kv for kv in checks.items())]
    for s in rec.steps:
        out.append("## %s\n\n`%s` -> rc %s in %ss\n\n```\n%s\n```\n" % (s["title"], s["cmd"], s["rc"], s["seconds"],
                                                                      s["output"]))
    out.append("## Packages\n\n" + report_packages(mdir))
    with open(path, "w") as f:
        f.write("\n".join(out))
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump({"image": info, "checks": checks, "steps": [{k: v for k, v in s.items() if k != "full"}
                                                              for s in rec.steps]}, f, indent=1)


def main(argv: List[str]) -> int:
    """CLI: run the smoke check, write the report."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--report", help="Markdown report path")
    ap.add_argument("--keep", action="store_true", help="leave the container running")
    a = ap.parse_args(argv)
    pins = mirror.Pins()
    info = image.build()
    mdir = str(info["mirror"])
    krel = str(info["kernel"])
    ver = {s: dict(pins.srcs[s])["nvidia-graphics-drivers"].split("-")[0] for s in ("before", "after")}
    report = a.report or os.path.join(mirror.CACHE, "smoke-%s.md" % str(info["ref"]).rsplit(":", 1)[1])
    rec = Recorder()
    start_container(str(info["ref"]), mdir)
    checks: Dict[str, bool] = {}
    try:
        rec.sh("booted (simulated) kernel, lab boot state", "uname -r; cat /var/lib/npuops-lab/host/kernel-release; "
               "ls /boot; ls /sys/module; systemctl is-active nvidia-persistenced; "
               "systemctl status nvidia-persistenced --no-pager -n 5 | tail -n 6")
        module_facts(rec, krel, "before")
        st = rec.steps[1]
        checks["before_installed"] = ("nvidia-current/%s, %s, x86_64: installed" % (ver["before"], krel)) in st["full"]
        rec.sh("how `nvidia` maps to Debian's module files (modprobe config, alternatives)",
               "ls -l /etc/modprobe.d /etc/nvidia /etc/alternatives/nvidia* 2>&1; "
               "grep -rn . /etc/modprobe.d/ /lib/modprobe.d/ /usr/lib/modprobe.d/ 2>/dev/null | grep -i nvidia; "
               "update-alternatives --display nvidia | head -40; "
               "echo '--- real modprobe, dry runs (-n -v: resolve only)'; " + REAL_MODPROBE +
               "for m in nvidia nvidia-current nvidia-uvm nvidia-current-uvm nvidia-drm nvidia-current-drm "
               "nvidia-peermem nvidia-current-peermem; do echo \"\\$ modprobe -n -v $m\"; $M -n -v $m; "
               "echo \"rc=$?\"; done; echo '--- modprobe -c (no pci:/symbol: aliases)'; "
               "$M -c | grep -v -E 'pci:|symbol:' | grep nvidia", keep=None)
        rec.sh("dkms.conf of the installed source", "cat /usr/src/nvidia-current-%s/dkms.conf" % ver["before"],
               keep=None)
        rec.sh("dpkg status of the driver family before", INSTALLED + " | sort -k2; dpkg -l dkms 'linux-*' | "
               "grep '^ii'")
        rec.sh("apt policy in the host (mirror only)", "apt-get update -q >/dev/null; apt-cache policy "
               "nvidia-kernel-dkms nvidia-smi nvidia-kernel-support libnvidia-cfg1")
        after = [a for a in pins.install_args("after") if not a.startswith(("dkms=", "linux-"))]
        names = " ".join("'%s'" % a for a in after)
        unhold = " ".join(a.split("=")[0] for a in after)
        rec.sh("held family, only the pinned names unheld: apt-get -s install <after set>",
               "apt-mark hold $(%s | awk '{print $2}') >/dev/null; "
               "apt-mark unhold %s >/dev/null; echo \"held: $(apt-mark showhold | xargs)\"; "
               "apt-get install -s --no-install-recommends %s; rc=$?; "
               "apt-mark unhold $(apt-mark showhold) >/dev/null; exit $rc" % (
                   INSTALLED, unhold, names), keep=None)
        rec.sh("upgrade plan without holds: apt-get -s install <after set>",
               "apt-get install -s --no-install-recommends %s | grep -v '^Conf '" % names, keep=None)
        up = rec.sh("UPGRADE: apt-get install -y <after set>",
                    "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends %s" % names,
                    keep=None)
        checks["upgrade_rc0"] = up["rc"] == 0
        module_facts(rec, krel, "after")
        st = [s for s in rec.steps if s["title"] == "after: dkms status"][0]
        checks["after_installed"] = ("nvidia-current/%s, %s, x86_64: installed" % (ver["after"], krel)) in st["full"]
        checks["before_gone"] = ver["before"] not in st["full"]
        rec.sh("dpkg status of the driver family after", INSTALLED + " | sort -k2; apt-get -s upgrade | tail -1")
        again = rec.sh("rerun: apt-get install <after set> again", "apt-get install -y -q --no-install-recommends "
                       "%s | tail -2" % names)
        checks["rerun_no_change"] = again["rc"] == 0 and "0 upgraded, 0 newly installed" in str(again["full"])
    finally:
        write_report(report, info, rec, checks, mdir)
        if not a.keep:
            subprocess.run(["podman", "rm", "-f", "-v", CTR], stdout=subprocess.DEVNULL, check=False)
    print("report: %s\nchecks: %s" % (report, checks))
    return 0 if checks and all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
