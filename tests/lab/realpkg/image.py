#!/usr/bin/env python3
"""Host image with the REAL dkms, linux-headers and a pinned NVIDIA driver set built by real DKMS.

  image.py             build (or reuse) localhost/npuops-realpkg-host:<key>; prints ref and times
  image.py --ref       print the image reference only (builds it if missing)
  image.py --set S     the image of pins.txt's set S (default before; tesla470 for the Tesla tests)

Stage 1, localhost/npuops-realpkg-dkms:<image_key>: from the lab's host image (tests/lab/hosts/hostctl.py
build_image()) and, in a build container without network (the local mirror of mirror.py is the only apt
source, mounted read-only at /srv/npuops-realpkg-mirror):
  * removes what collides with the real packages: the simulated /usr/sbin/dkms, the lab's
    /etc/kernel/postinst.d/dkms and header_postinst.d/dkms hooks (the real dkms package ships those
    conffiles), and the dpkg diversions of modinfo and depmod (real dkms runs them on real .ko files).
    modprobe, insmod, rmmod and lsmod stay simulated (kmodsim.py): nothing in a container loads a
    real module;
  * makes the simulated booted kernel the headers' release: /boot/vmlinuz-<release> (a text
    placeholder: boot.sh boots the newest /boot/vmlinuz-*) and /run/npuops-lab/kernel-release for
    the uname shim during the build, so Debian's DKMS postinst builds for `uname -r`;
  * installs base + the set (before, or --set) from pins.txt (a preference pins the driver source's version) with
    --no-install-recommends, and requires `dkms status` to say "installed" for that kernel.
Its key leaves out the simulation files (SIM_FILES), which stage 2 lays over from the current tree:
localhost/npuops-realpkg-host:<sim_key> (seconds). Both are committed with CMD /sbin/init, like the
lab's. The build log and timing are kept beside the mirror: $NPUOPS_LAB_CACHE/realpkg/image-<key>.log
and .json.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hosts"))
import hostctl  # noqa: E402  (sets CONTAINERS_CONF for podman, as the lab does)
import mirror  # noqa: E402

IMAGE = "localhost/npuops-realpkg-host"
DKMS_IMAGE = "localhost/npuops-realpkg-dkms"
BUILD_CTR = "npuops-realpkg-build"
SIM_CTR = "npuops-realpkg-sim"
MIRROR_MNT = "/srv/npuops-realpkg-mirror"
SOURCES = "deb [trusted=yes] file:%s ./\n" % MIRROR_MNT


def kernel_release(pins: mirror.Pins) -> str:
    """The release of the pinned linux-headers-<release> package (the simulated booted kernel)."""
    for name, _ in pins.pkgs.get("base", []):
        if name.startswith("linux-headers-"):
            return name[len("linux-headers-"):]
    raise SystemExit("pins.txt: no linux-headers-<release> in the base set")


def build_script(pins: mirror.Pins, dset: str = "before") -> str:
    """The shell script run in the build container: base + dset installed, dset's driver DKMS-built."""
    if dset not in pins.sets():
        raise SystemExit("pins.txt: no set %r (sets: %s)" % (dset, ", ".join(pins.sets())))
    krel = kernel_release(pins)
    return """set -e
exec 2>&1
rm -f /usr/sbin/dkms /etc/kernel/postinst.d/dkms /etc/kernel/header_postinst.d/dkms /etc/apt/sources.list.d/npuops-lab.list
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
""" % {"src": SOURCES, "krel": krel, "prefs": pins.preferences(dset).replace("\n", "\\n"),  # noqa: E501
       "args": " ".join("'%s'" % a for a in pins.install_args(dset))}


# The lab's simulation files that SIM_SCRIPT lays over the built image from the current tree: the
# expensive DKMS image does not depend on them, so editing the simulation costs seconds, not a rebuild.
_LIB = os.path.join(hostctl.HERE, "image", "overlay", "usr", "local", "lib", "npuops-lab")
_FILES = os.path.join(hostctl.HERE, "repo", "files")
SIM_FILES = {
    "usr/local/lib/npuops-lab/kmodsim.py": os.path.join(_LIB, "kmodsim.py"),
    "usr/local/lib/npuops-lab/boot.sh": os.path.join(_LIB, "boot.sh"),
    "usr/local/lib/npuops-lab/nvidia-smi": os.path.join(_FILES, "nvidia-smi"),
    "usr/local/lib/npuops-lab/nvidia-persistenced": os.path.join(_FILES, "nvidia-persistenced"),
}
SIM_MNT = "/srv/npuops-realpkg-sim"


def image_key(pins: mirror.Pins, dset: str = "before") -> str:
    """Input hash of the DKMS-built image: the lab image's inputs except SIM_FILES (its debootstrap
    package list and chroot script, the overlay tree without the simulation files), the mirror key and
    the build script (from pins.txt)."""
    overlay = os.path.join(hostctl.HERE, "image")
    skip = {os.path.relpath(v, overlay) for v in SIM_FILES.values() if v.startswith(overlay)}
    h = hashlib.sha256((",".join(hostctl.BASE_PACKAGES) + hostctl.IMAGE_SCRIPT + mirror.mirror_key()
                        + build_script(pins, dset)).encode())
    for dirpath, dirnames, filenames in os.walk(overlay):
        dirnames.sort()
        for fn in sorted(filenames):
            rel = os.path.relpath(os.path.join(dirpath, fn), overlay)
            if rel not in skip:
                h.update(rel.encode())
                with open(os.path.join(dirpath, fn), "rb") as f:
                    h.update(f.read())
    return h.hexdigest()[:16]


def smi_dirs(pins: mirror.Pins) -> List[str]:
    """Where Debian's nvidia-smi packages of the pinned sets put the binary that /usr/bin/nvidia-smi
    (an alternative) points to: /usr/lib/nvidia/current (nvidia-smi), /usr/lib/nvidia/tesla-<branch>
    (nvidia-tesla-<branch>-smi). All are diverted before any is installed, so a branch change's new
    package lands beside the lab's tool too."""
    dirs = set()
    for pkgs in pins.pkgs.values():
        for name, _ in pkgs:
            m = re.match(r"nvidia-(tesla-[0-9]+)-smi$", name)
            if m or name == "nvidia-smi":
                dirs.add("/usr/lib/nvidia/%s" % (m.group(1) if m else "current"))
    return sorted(dirs)


def sim_script(pins: mirror.Pins) -> str:
    """Lays the current simulation over the DKMS-built image: kmodsim and the boot script, and the
    device tools that cannot run without a GPU (nvidia-smi, nvidia-persistenced) diverted with dpkg to
    the lab's, so package upgrades keep replacing the real files beside them (the lab's read the real
    libnvidia-ml / libnvidia-cfg package's library version)."""
    return """set -e
for f in %(files)s; do install -m 0755 %(mnt)s/$f /$f; done
# /usr/bin/nvidia-smi is Debian's alternative (nvidia--nvidia-smi) for these package files
for t in %(smi)s /usr/bin/nvidia-persistenced; do
  if [ "$(dpkg-divert --truename $t)" = "$t" ]; then
    dpkg-divert --local --rename --divert $t.distrib --add $t >/dev/null
  fi
  mkdir -p $(dirname $t)
  ln -sf /usr/local/lib/npuops-lab/$(basename $t) $t
done
""" % {"files": " ".join(sorted(SIM_FILES)), "mnt": SIM_MNT,
       "smi": " ".join(d + "/nvidia-smi" for d in smi_dirs(pins))}


def sim_key(base_key: str, pins: mirror.Pins) -> str:
    """Input hash of the image with the simulation laid over: the DKMS image's key, SIM_FILES, the script."""
    h = hashlib.sha256((base_key + sim_script(pins)).encode())
    for rel in sorted(SIM_FILES):
        h.update(rel.encode())
        with open(SIM_FILES[rel], "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run podman with the lab's containers.conf; output captured."""
    r = subprocess.run(["podman", *args], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if check and r.returncode != 0:
        raise RuntimeError("podman %s failed (%d): %s" % (" ".join(args), r.returncode, r.stdout[-3000:]))
    return r


def _commit(ctr: str, ref: str) -> None:
    podman("commit", "-q", "--change", "CMD=/sbin/init", "--change", "STOPSIGNAL=SIGRTMIN+3", ctr, ref)
    podman("rm", "-f", ctr, check=False)


def build_dkms_image(pins: mirror.Pins, mdir: str, dset: str = "before") -> Dict[str, object]:
    """The expensive stage: the lab image with the real dkms, headers and dset's driver built by
    real DKMS (localhost/npuops-realpkg-dkms:<image_key>); reused while its inputs are unchanged."""
    t0 = time.time()
    base = hostctl.build_image()
    t_base = time.time() - t0
    key = image_key(pins, dset)
    ref = "%s:%s" % (DKMS_IMAGE, key)
    meta = os.path.join(mirror.CACHE, "image-%s.json" % key)
    if podman("image", "exists", ref, check=False).returncode == 0 and os.path.isfile(meta):
        with open(meta) as f:
            return json.load(f)
    mirror.log("building %s from %s (real DKMS compile, several minutes)" % (ref, base))
    podman("rm", "-f", BUILD_CTR, check=False)
    t1 = time.time()
    r = podman("run", "--name", BUILD_CTR, "--network=none", "-v", "%s:%s:ro" % (mdir, MIRROR_MNT),
               base, "/bin/sh", "-c", build_script(pins, dset), check=False)
    build_s = time.time() - t1
    with open(os.path.join(mirror.CACHE, "image-%s.log" % key), "w") as f:
        f.write(r.stdout)
    if r.returncode != 0:
        podman("rm", "-f", BUILD_CTR, check=False)
        raise RuntimeError("image build failed (%d), log: %s\n%s" % (
            r.returncode, os.path.join(mirror.CACHE, "image-%s.log" % key), r.stdout[-3000:]))
    _commit(BUILD_CTR, ref)
    status = r.stdout.split("--- dkms status\n", 1)[-1].strip()
    info = {"ref": ref, "base": base, "mirror": mdir, "kernel": kernel_release(pins), "set": dset,
            "built": time.strftime("%Y-%m-%dT%H:%M:%S"), "base_image_seconds": round(t_base, 1),
            "build_seconds": round(build_s, 1), "dkms_status": status}
    with open(meta, "w") as f:
        json.dump(info, f, indent=1)
    mirror.log("image %s built in %.0fs (lab image %.0fs)" % (ref, build_s, t_base))
    return info


def build(dset: str = "before") -> Dict[str, object]:
    """Build the images of pins.txt's set dset unless cached; return the host image's info (ref, times,
    dkms status)."""
    t0 = time.time()
    pins = mirror.Pins()
    mdir = mirror.build()
    t_mirror = time.time() - t0
    info = dict(build_dkms_image(pins, mdir, dset))
    info["dkms_ref"] = info["ref"]
    info["mirror_seconds"] = round(t_mirror, 1)
    ref = "%s:%s" % (IMAGE, sim_key(info["ref"].rsplit(":", 1)[1], pins))
    if podman("image", "exists", ref, check=False).returncode != 0:
        podman("rm", "-f", SIM_CTR, check=False)
        mounts = []
        for rel, src in SIM_FILES.items():
            mounts += ["-v", "%s:%s/%s:ro" % (src, SIM_MNT, rel)]
        r = podman("run", "--name", SIM_CTR, "--network=none", *mounts, info["dkms_ref"], "/bin/sh", "-c",
                   sim_script(pins), check=False)
        if r.returncode != 0:
            podman("rm", "-f", SIM_CTR, check=False)
            raise RuntimeError("simulation layer failed (%d): %s" % (r.returncode, r.stdout[-3000:]))
        _commit(SIM_CTR, ref)
    info["ref"] = ref
    info["this_run_seconds"] = round(time.time() - t0, 1)
    info["total_seconds"] = round(t_mirror + info["base_image_seconds"] + info["build_seconds"], 1)
    return info


def cached(dset: str = "before") -> bool:
    """True when dset's host image (the simulation layer over the DKMS build) is in podman's store and
    its mirror on disk: a run can use it without building anything."""
    pins = mirror.Pins()
    if not os.path.isdir(mirror.mirror_dir()):
        return False
    ref = "%s:%s" % (IMAGE, sim_key(image_key(pins, dset), pins))
    return podman("image", "exists", ref, check=False).returncode == 0


def main(argv: List[str]) -> int:
    """CLI: build or reuse the image and report it."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref", action="store_true",
                    help="print only the image reference (it is built first when missing)")
    ap.add_argument("--set", default="before", help="the pins.txt set installed and DKMS-built (default before)")
    ap.add_argument("--cached", action="store_true",
                    help="build nothing: exit 0 when the set's image is cached, 1 when not")
    a = ap.parse_args(argv)
    if a.cached:
        ok = cached(a.set)
        print("%s: %s" % (a.set, "cached" if ok else "not cached"))
        return 0 if ok else 1
    info = build(a.set)
    if a.ref:
        print(info["ref"])
        return 0
    print("image %(ref)s (kernel %(kernel)s)\n  cold: mirror %(mirror_seconds)ss, lab image %(base_image_seconds)ss, "
          "build+DKMS %(build_seconds)ss, total %(total_seconds)ss (%(built)s)\n  this run: %(this_run_seconds)ss\n"
          "  dkms status: %(dkms_status)s" % info)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
