#!/usr/bin/env python3
"""Host image with the REAL dkms, linux-headers and the "before" NVIDIA driver built by real DKMS.

  image.py             build (or reuse) localhost/npuops-realpkg-host:<key>; prints ref and times
  image.py --ref       print the image reference only (builds it if missing)

Starts from the lab's host image (tests/lab/hosts/hostctl.py build_image(), cached by its own input
hash) and, in a build container without network (the local mirror of mirror.py is the only apt
source, mounted read-only at /srv/npuops-realpkg-mirror):
  * removes what collides with the real packages: the simulated /usr/sbin/dkms, the lab's
    /etc/kernel/postinst.d/dkms hook (the real dkms package ships that conffile), and the dpkg
    diversions of modinfo and depmod (real dkms runs them on real .ko files). modprobe, insmod,
    rmmod and lsmod stay simulated (kmodsim.py): nothing in a container loads a real module;
  * makes the simulated booted kernel the headers' release: /boot/vmlinuz-<release> (a text
    placeholder: boot.sh boots the newest /boot/vmlinuz-*) and /run/npuops-lab/kernel-release for
    the uname shim during the build, so Debian's DKMS postinst builds for `uname -r`;
  * installs base + before from pins.txt (a preference pins the driver source's version) with
    --no-install-recommends, and requires `dkms status` to say "installed" for that kernel.
The container is committed as the image (CMD /sbin/init, like the lab's). Key: sha256 of the lab
image tag, the mirror key, pins.txt and this script. The build log and timing are kept beside the
mirror: $NPUOPS_LAB_CACHE/realpkg/image-<key>.log and .json.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hosts"))
import hostctl  # noqa: E402  (sets CONTAINERS_CONF for podman, as the lab does)
import mirror  # noqa: E402

IMAGE = "localhost/npuops-realpkg-host"
BUILD_CTR = "npuops-realpkg-build"
MIRROR_MNT = "/srv/npuops-realpkg-mirror"
SOURCES = "deb [trusted=yes] file:%s ./\n" % MIRROR_MNT


def kernel_release(pins: mirror.Pins) -> str:
    """The release of the pinned linux-headers-<release> package (the simulated booted kernel)."""
    for name, _ in pins.pkgs.get("base", []):
        if name.startswith("linux-headers-"):
            return name[len("linux-headers-"):]
    raise SystemExit("pins.txt: no linux-headers-<release> in the base set")


def build_script(pins: mirror.Pins) -> str:
    """The shell script run in the build container."""
    krel = kernel_release(pins)
    return """set -e
exec 2>&1
rm -f /usr/sbin/dkms /etc/kernel/postinst.d/dkms /etc/apt/sources.list.d/npuops-lab.list
for t in /sbin/modinfo /sbin/depmod; do
  rm -f $t
  dpkg-divert --local --rename --remove $t
done
printf '%(src)s' > /etc/apt/sources.list.d/npuops-realpkg.list
mkdir -p /run/npuops-lab
echo %(krel)s > /run/npuops-lab/kernel-release
printf 'npuops lab: simulated kernel image %(krel)s (headers and modules are real)\\n' > /boot/vmlinuz-%(krel)s
echo "uname -r: $(uname -r)"
printf '%(prefs)s' > /etc/apt/preferences.d/npuops-realpkg-build
apt-get update -q
t0=$(date +%%s)
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends %(args)s
echo "npuops-realpkg: apt-get install took $(( $(date +%%s) - t0 ))s"
rm -f /etc/apt/preferences.d/npuops-realpkg-build /run/npuops-lab/kernel-release
echo "--- dkms status"
dkms status
dkms status | grep -q ", %(krel)s, x86_64: installed"
""" % {"src": SOURCES, "krel": krel, "prefs": pins.preferences("before").replace("\n", "\\n"),
       "args": " ".join("'%s'" % a for a in pins.install_args("before"))}


def image_key(base_ref: str, pins: mirror.Pins) -> str:
    """Input hash: lab image tag, mirror key, build script (from pins.txt) and this file."""
    h = hashlib.sha256((base_ref + mirror.mirror_key() + build_script(pins)).encode())
    with open(os.path.abspath(__file__), "rb") as f:
        h.update(f.read())
    return h.hexdigest()[:16]


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run podman with the lab's containers.conf; output captured."""
    r = subprocess.run(["podman", *args], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if check and r.returncode != 0:
        raise RuntimeError("podman %s failed (%d): %s" % (" ".join(args), r.returncode, r.stdout[-3000:]))
    return r


def build() -> Dict[str, object]:
    """Build the image unless cached; return its info (ref, times, dkms status)."""
    t0 = time.time()
    pins = mirror.Pins()
    mdir = mirror.build()
    t_mirror = time.time() - t0
    base = hostctl.build_image()
    t_base = time.time() - t0 - t_mirror
    key = image_key(base, pins)
    ref = "%s:%s" % (IMAGE, key)
    meta = os.path.join(mirror.CACHE, "image-%s.json" % key)
    if podman("image", "exists", ref, check=False).returncode == 0 and os.path.isfile(meta):
        with open(meta) as f:
            info = json.load(f)
        info["this_run_seconds"] = round(time.time() - t0, 1)
        return info
    mirror.log("building %s from %s (real DKMS compile, several minutes)" % (ref, base))
    podman("rm", "-f", BUILD_CTR, check=False)
    t1 = time.time()
    r = podman("run", "--name", BUILD_CTR, "--network=none", "-v", "%s:%s:ro" % (mdir, MIRROR_MNT),
               base, "/bin/sh", "-c", build_script(pins), check=False)
    build_s = time.time() - t1
    with open(os.path.join(mirror.CACHE, "image-%s.log" % key), "w") as f:
        f.write(r.stdout)
    if r.returncode != 0:
        podman("rm", "-f", BUILD_CTR, check=False)
        raise RuntimeError("image build failed (%d), log: %s\n%s" % (
            r.returncode, os.path.join(mirror.CACHE, "image-%s.log" % key), r.stdout[-3000:]))
    podman("commit", "-q", "--change", "CMD=/sbin/init", "--change", "STOPSIGNAL=SIGRTMIN+3", BUILD_CTR, ref)
    podman("rm", "-f", BUILD_CTR, check=False)
    status = r.stdout.split("--- dkms status\n", 1)[-1].strip()
    info = {"ref": ref, "base": base, "mirror": mdir, "kernel": kernel_release(pins),
            "built": time.strftime("%Y-%m-%dT%H:%M:%S"), "mirror_seconds": round(t_mirror, 1),
            "base_image_seconds": round(t_base, 1), "build_seconds": round(build_s, 1),
            "total_seconds": round(time.time() - t0, 1), "dkms_status": status}
    with open(meta, "w") as f:
        json.dump(info, f, indent=1)
    info["this_run_seconds"] = info["total_seconds"]
    mirror.log("image %s built in %.0fs (mirror %.0fs, lab image %.0fs)" % (ref, build_s, t_mirror, t_base))
    return info


def main(argv: List[str]) -> int:
    """CLI: build or reuse the image and report it."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref", action="store_true", help="print the image reference only")
    a = ap.parse_args(argv)
    info = build()
    if a.ref:
        print(info["ref"])
        return 0
    print("image %(ref)s (kernel %(kernel)s)\n  cold: mirror %(mirror_seconds)ss, lab image %(base_image_seconds)ss, "
          "build+DKMS %(build_seconds)ss, total %(total_seconds)ss (%(built)s)\n  this run: %(this_run_seconds)ss\n"
          "  dkms status: %(dkms_status)s" % info)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
