#!/usr/bin/env python3
"""Build the lab's local apt repository (simulated kernels and accelerator drivers) with dpkg-deb.

Usage: build_repo.py OUTDIR

Layout: OUTDIR/pool/*.deb, OUTDIR/dists/{jammy,noble}/main/binary-amd64/Packages(.gz),
OUTDIR/dists/<suite>/Release (Origin/Label NpuopsLab). Hosts use
`deb [trusted=yes] file:/srv/npuops-lab-repo <codename> main`.
Both suites carry every driver and every kernel image; the kernel meta packages follow Ubuntu:
jammy: linux-generic -> 5.15 and linux-generic-hwe-22.04 -> 6.8; noble: linux-generic -> 6.8.
"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = os.path.join(HERE, "files")

NVIDIA = ["535.183.06", "550.90.07", "580.126.09", "580.159.03"]
# NVIDIA's CUDA repository from branch 590: branchless names, a pinning package per version and branch
CUDA_BRANCHLESS = ["590.48.01", "610.43.02"]
RBLN = ["2.4.0", "3.0.0"]
KERNELS = {  # release -> suite whose linux-generic follows it
    "5.15.0-107-generic": "jammy", "5.15.0-119-generic": "jammy",
    "5.15.0-177-generic": "jammy", "5.15.0-179-generic": "jammy",
    "6.8.0-45-generic": "noble", "6.8.0-52-generic": "noble", "6.8.0-60-generic": "noble",
    "6.8.0-90-generic": "noble",
}
# kernels published without their linux-headers package (a mirror that lacks them): DKMS could not
# build a module for them, so a kernel patch to one is refused in the preflight
NO_HEADERS_KERNELS = {"6.8.0-60-generic"}
# kernels whose post-install does NOT refresh the module index (ships a stale modules.dep.bin):
# reproduces the kube-proxy/ip_vs incident (cases C7)
STALE_INDEX_KERNELS = {"5.15.0-179-generic"}

# simulated in-tree modules: relpath -> depends
KMODS = {
    "kernel/lib/libcrc32c.ko": "",
    "kernel/net/ipv4/netfilter/nf_defrag_ipv4.ko": "",
    "kernel/net/ipv6/netfilter/nf_defrag_ipv6.ko": "",
    "kernel/net/netfilter/nf_conntrack.ko": "nf_defrag_ipv6,nf_defrag_ipv4,libcrc32c",
    "kernel/net/netfilter/nf_nat.ko": "nf_conntrack,libcrc32c",
    "kernel/net/netfilter/ipvs/ip_vs.ko": "nf_conntrack,nf_defrag_ipv6,libcrc32c",
    "kernel/net/netfilter/ipvs/ip_vs_rr.ko": "ip_vs",
    "kernel/net/netfilter/ipvs/ip_vs_wrr.ko": "ip_vs",
    "kernel/net/netfilter/ipvs/ip_vs_sh.ko": "ip_vs",
    "kernel/net/802/stp.ko": "llc",
    "kernel/net/802/llc.ko": "",
    "kernel/net/bridge/bridge.ko": "stp,llc",
    "kernel/net/bridge/br_netfilter.ko": "bridge",
    "kernel/fs/overlayfs/overlay.ko": "",
    "kernel/drivers/net/vxlan/vxlan.ko": "",
}
# modules still in the stale index of STALE_INDEX_KERNELS (the netfilter/ipvs entries are missing)
STALE_KEEP = {"libcrc32c", "llc", "stp", "bridge", "br_netfilter", "overlay", "vxlan"}


def kver(rel):
    base, abi, _flavour = rel.split("-")
    return "%s-%s.%d" % (base, abi, int(abi) + 10)


def meta_ver(rel):
    base, abi, _flavour = rel.split("-")
    return "%s.%s.%d" % (base, abi, int(abi) - 16)


class Deb:
    def __init__(self, name, version, arch="amd64", depends="", provides="", conflicts="",
                 replaces="", section="misc", description="", priority="optional"):
        self.ctl = {"Package": name, "Version": version, "Architecture": arch,
                    "Maintainer": "npuops lab <lab@npuops.invalid>", "Section": section,
                    "Priority": priority}
        for k, v in (("Depends", depends), ("Provides", provides), ("Conflicts", conflicts),
                     ("Replaces", replaces)):
            if v:
                self.ctl[k] = v
        self.ctl["Description"] = (description or name) + "\n npuops lab simulated package."
        self.files = {}   # path -> (content, mode)
        self.links = {}   # path -> target
        self.scripts = {}

    def add(self, path, content, mode=0o644):
        self.files[path] = (content, mode)

    def build(self, pool):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "DEBIAN"))
            for path, (content, mode) in self.files.items():
                full = os.path.join(d, path.lstrip("/"))
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "w") as f:
                    f.write(content)
                os.chmod(full, mode)
            for path, target in self.links.items():
                full = os.path.join(d, path.lstrip("/"))
                os.makedirs(os.path.dirname(full), exist_ok=True)
                os.symlink(target, full)
            with open(os.path.join(d, "DEBIAN", "control"), "w") as f:
                for k, v in self.ctl.items():
                    f.write("%s: %s\n" % (k, v))
            for name, body in self.scripts.items():
                p = os.path.join(d, "DEBIAN", name)
                with open(p, "w") as f:
                    f.write("#!/bin/sh\nset -e\n" + body)
                os.chmod(p, 0o755)
            out = os.path.join(pool, "%s_%s_%s.deb" % (self.ctl["Package"],
                                                       self.ctl["Version"].split(":")[-1],
                                                       self.ctl["Architecture"]))
            subprocess.check_call(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build",
                                   d, out], stdout=subprocess.DEVNULL)
            return out


def modfile(name, version, rel, depends, desc):
    return ("name=%s\nversion=%s\nvermagic=%s SMP mod_unload modversions\ndepends=%s\n"
            "license=GPL\ndescription=%s\n" % (name, version, rel, depends, desc))


def meta_debs(rel, suffix=""):
    # as Ubuntu's: linux-generic pulls the image and the headers metas, so DKMS can build for a kernel
    # an unattended upgrade brings in (a kernel published without headers gets no headers meta)
    v, mv = kver(rel), meta_ver(rel)
    debs = [Deb("linux-image-generic" + suffix, mv, depends="linux-image-%s (= %s)" % (rel, v),
                section="kernel", description="Generic Linux kernel image")]
    depends = "linux-image-generic%s (= %s)" % (suffix, mv)
    if rel not in NO_HEADERS_KERNELS:
        debs.append(Deb("linux-headers-generic" + suffix, mv, depends="linux-headers-%s (= %s)" % (rel, v),
                        section="kernel", description="Generic Linux kernel headers"))
        depends += ", linux-headers-generic%s (= %s)" % (suffix, mv)
    debs.append(Deb("linux-generic" + suffix, mv, depends=depends,
                    section="kernel", description="Complete Generic Linux kernel and headers"))
    return debs


def kernel_debs(rel):
    v = kver(rel)
    debs = []
    mods = Deb("linux-modules-" + rel, v, section="kernel",
               description="Linux kernel extra modules for version %s" % rel)
    names = {}
    for relpath, deps in KMODS.items():
        n = os.path.basename(relpath)[:-3]
        names[n] = relpath
        mods.add("/lib/modules/%s/%s" % (rel, relpath), modfile(n, "", rel, deps, n))
    mods.add("/lib/modules/%s/modules.order" % rel, "".join(p + "\n" for p in KMODS))
    mods.add("/lib/modules/%s/modules.builtin" % rel, "kernel/drivers/block/loop.ko\n")
    if rel in STALE_INDEX_KERNELS:
        # modules.dep is complete, modules.dep.bin is left over from an older index (no netfilter)
        def closure(n, seen):
            out = []
            for d in filter(None, KMODS[names[n]].split(",")):
                if d not in seen:
                    seen.add(d)
                    out.append(names[d])
                    out += closure(d, seen)
            return out
        dep_lines, index = [], {}
        for n, p in names.items():
            deps = closure(n, set())
            dep_lines.append("%s:%s\n" % (p, "".join(" " + x for x in deps)))
            if n in STALE_KEEP:
                index[n] = {"path": p, "deps": deps}
        mods.add("/lib/modules/%s/modules.dep" % rel, "".join(sorted(dep_lines)))
        mods.add("/lib/modules/%s/modules.dep.bin" % rel, json.dumps(
            {"format": "npuops-lab simulated modules.dep.bin", "release": rel, "modules": index},
            sort_keys=True))
    debs.append(mods)

    if rel not in NO_HEADERS_KERNELS:
        hdr = Deb("linux-headers-" + rel, v, section="devel",
                  description="Linux kernel headers for version %s" % rel)
        hdr.add("/usr/src/linux-headers-%s/Makefile" % rel, "# npuops lab simulated kernel headers %s\n" % rel)
        # as Ubuntu's: the build link DKMS looks for, and the hooks that build DKMS modules for it
        hdr.links["/lib/modules/%s/build" % rel] = "/usr/src/linux-headers-%s" % rel
        hdr.scripts["postinst"] = (
            'if [ "$1" = configure ] && [ -d /etc/kernel/header_postinst.d ]; then\n'
            "  run-parts --report --exit-on-error --arg=%s /etc/kernel/header_postinst.d\nfi\n" % rel)
        debs.append(hdr)

    img = Deb("linux-image-" + rel, v, depends="linux-modules-%s (= %s)" % (rel, v),
              section="kernel", description="Signed kernel image generic")
    img.add("/boot/vmlinuz-" + rel, "npuops lab simulated kernel %s\n" % rel, 0o600)
    img.add("/boot/config-" + rel, "CONFIG_IP_VS=m\nCONFIG_MODULES=y\n")
    img.add("/boot/System.map-" + rel, "ffffffff81000000 T _stext\n", 0o600)
    if rel in STALE_INDEX_KERNELS:
        index_step = ("# (this kernel's post-install does not refresh the module index: "
                      "modules.dep.bin stays stale until `depmod -a %s`)\n" % rel)
    else:
        index_step = "depmod -a -F /boot/System.map-%s %s\n" % (rel, rel)
    img.scripts["postinst"] = (
        'if [ "$1" = configure ]; then\n' + index_step +
        "  run-parts --report --exit-on-error --arg=%s --arg=/boot/vmlinuz-%s "
        "/etc/kernel/postinst.d\nfi\n" % (rel, rel))
    img.scripts["postrm"] = (
        'if [ "$1" = remove ] || [ "$1" = purge ]; then\n'
        "  [ -d /etc/kernel/postrm.d ] && run-parts --report --arg=%s --arg=/boot/vmlinuz-%s "
        "/etc/kernel/postrm.d || true\nfi\n"
        'if [ "$1" = purge ]; then rm -rf /lib/modules/%s; fi\n' % (rel, rel, rel))
    debs.append(img)
    return debs


def dkms_scripts(deb, mod, version):
    # as Ubuntu's dkms common.postinst: a kernel without headers is skipped with a note, a failed build
    # fails the package's configuration (dpkg: "... returned error exit status 10")
    deb.scripts["postinst"] = (
        'if [ "$1" = configure ]; then\n'
        "  dkms add -m %(m)s -v %(v)s >/dev/null\n"
        "  for k in $(ls /boot | sed -n 's/^vmlinuz-//p'); do\n"
        "    [ -d /lib/modules/$k ] || continue\n"
        "    if [ ! -e /lib/modules/$k/build ]; then\n"
        "      echo \"Module build for kernel $k was skipped since the kernel headers for this kernel do not"
        " seem to be installed.\"\n"
        "      continue\n"
        "    fi\n"
        "    echo \"Building initial module for $k\"\n"
        "    dkms install -m %(m)s -v %(v)s -k $k || exit 10\n"
        "  done\n"
        "  DPKG_MAINTSCRIPT_PACKAGE=%(p)s /usr/share/update-notifier/notify-reboot-required\n"
        "fi\n" % {"m": mod, "v": version, "p": deb.ctl["Package"]})
    deb.scripts["prerm"] = (
        'case "$1" in remove|upgrade|deconfigure)\n'
        "  dkms remove -m %s -v %s --all || true ;;\nesac\n" % (mod, version))


# the simulated payloads of NVIDIA's driver packages, shared by the Ubuntu-archive and the CUDA-repository
# flavours (the lab's nvidia-smi, loader and dkms read them; the module DKMS builds is nvidia* in both)
def compute_payload(deb, version):
    for lib in ("libnvidia-ml", "libcuda", "libnvidia-ptxjitcompiler"):
        deb.add("/usr/lib/x86_64-linux-gnu/%s.so.%s" % (lib, version),
                "simulated %s %s\n" % (lib, version))
        deb.links["/usr/lib/x86_64-linux-gnu/%s.so.1" % lib] = "%s.so.%s" % (lib, version)


def utils_payload(deb):
    deb.add("/usr/bin/nvidia-smi", open(os.path.join(FILES, "nvidia-smi")).read(), 0o755)


def compute_utils_payload(deb, version):
    deb.add("/usr/bin/nvidia-persistenced",
            open(os.path.join(FILES, "nvidia-persistenced")).read().replace("@VERSION@", version), 0o755)
    deb.add("/lib/systemd/system/nvidia-persistenced.service",
            "[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\n\n"
            "[Service]\nType=forking\nPIDFile=/var/run/nvidia-persistenced/nvidia-persistenced.pid\n"
            "Restart=no\nExecStart=/usr/bin/nvidia-persistenced --user root\n"
            "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n"
            "[Install]\nWantedBy=multi-user.target\n")
    deb.scripts["prerm"] = ('[ "$1" = remove ] && systemctl stop nvidia-persistenced.service '
                            '>/dev/null 2>&1 || true\n')


def dkms_payload(deb, version, flavour="open "):
    deb.add("/usr/src/nvidia-%s/dkms.conf" % version,
            'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="%s"\nAUTOINSTALL="yes"\nLICENSE="Dual MIT/GPL"\n'
            'DESCRIPTION="NVIDIA %skernel module %s"\n'
            'MODULES="nvidia nvidia_modeset:nvidia nvidia_drm:nvidia_modeset nvidia_uvm:nvidia"\n'
            % (version, flavour, version))
    dkms_scripts(deb, "nvidia", version)


# The driver's table of the GPUs it supports, shaped as NVIDIA's supported-gpus.json from branch 560 on
# (ids and names as NVIDIA publishes them; features per its rule: Pascal/Volta proprietary only,
# Ampere/Hopper both, Blackwell open only, Kepler left to the 470 legacy branch), in the nvidia-driver-*
# package as Ubuntu ships it. A lab host's GPU is hw.conf's GPU_PCI_DEVICE.
SUPPORTED_GPUS = {"chips": [
    {"devid": "0x102D", "name": "Tesla K80", "legacybranch": "470.xx", "features": []},
    {"devid": "0x1BB3", "name": "Tesla P4", "features": []},
    {"devid": "0x1DB1", "name": "Tesla V100-SXM2-16GB", "features": []},
    {"devid": "0x20B2", "subdevid": "0x1463", "subvendorid": "0x10DE", "name": "NVIDIA A100-SXM4-80GB",
     "features": ["kernelopen", "gsp_proprietary_supported", "gsp_proprietary_default"]},
    {"devid": "0x2330", "subdevid": "0x16C1", "subvendorid": "0x10DE", "name": "NVIDIA H100 80GB HBM3",
     "features": ["kernelopen", "gsp_proprietary_supported", "gsp_proprietary_default"]},
    {"devid": "0x2901", "subdevid": "0x1999", "subvendorid": "0x10DE", "name": "NVIDIA B200",
     "features": ["kernelopen"]},
]}


def add_supported_gpus(deb):
    deb.add("/usr/share/doc/%s/supported-gpus.json" % deb.ctl["Package"], json.dumps(SUPPORTED_GPUS, indent=1) + "\n")


def nvidia_debs(version):
    branch = version.split(".")[0]
    full = version + "-0ubuntu1"
    sfx = "%s-server" % branch
    debs = []

    def virt(kind):
        return dict(provides="nvidia-sim-" + kind, conflicts="nvidia-sim-" + kind,
                    replaces="nvidia-sim-" + kind)

    common = Deb("libnvidia-common-" + sfx, full, arch="all", section="libs",
                 description="Shared files used by the NVIDIA libraries", **virt("common"))
    common.add("/usr/share/nvidia/nvidia-application-profiles-%s-rc" % version, "{}\n")
    debs.append(common)

    compute = Deb("libnvidia-compute-" + sfx, full, section="libs",
                  depends="libnvidia-common-%s (= %s)" % (sfx, full),
                  description="NVIDIA libcompute package", **virt("compute"))
    compute_payload(compute, version)
    debs.append(compute)

    utils = Deb("nvidia-utils-" + sfx, full, section="utils",
                depends="libnvidia-compute-%s" % sfx,
                description="NVIDIA driver support binaries", **virt("utils"))
    utils_payload(utils)
    debs.append(utils)

    # the persistence daemon and its unit, as Ubuntu ships them; enabled per host by the lab (hostctl
    # spec "services"), so a window meets a vendor service that holds the device open
    cu = Deb("nvidia-compute-utils-" + sfx, full, section="utils",
             depends="libnvidia-compute-%s" % sfx,
             description="NVIDIA compute utilities (nvidia-persistenced)", **virt("compute-utils"))
    compute_utils_payload(cu, version)
    debs.append(cu)

    dk = Deb("nvidia-dkms-%s-open" % sfx, full, section="kernel",
             description="NVIDIA DKMS package (open kernel module)", **virt("dkms"))
    dkms_payload(dk, version)
    debs.append(dk)

    drv = Deb("nvidia-driver-%s-open" % sfx, full, section="restricted/misc",
              depends=", ".join("%s (= %s)" % (p, full) for p in (
                  "libnvidia-common-" + sfx, "libnvidia-compute-" + sfx, "nvidia-utils-" + sfx,
                  "nvidia-compute-utils-" + sfx, "nvidia-dkms-%s-open" % sfx)),
              description="NVIDIA driver (open kernel module) metapackage",
              provides="nvidia-driver-binary", conflicts="nvidia-driver-binary",
              replaces="nvidia-driver-binary")
    add_supported_gpus(drv)
    debs.append(drv)
    return debs


def precompiled_debs(version, index):
    """Ubuntu's precompiled flavour of ``version``: nvidia-kernel-common-<branch>-server and, per kernel,
    linux-modules-nvidia-<branch>-server-open-<kernel> (linux-restricted-modules) with the relationships of
    the real ones: the kernel's version plus a rebuild counter (+1, +2 as the branch moves), Depends on
    the kernel image and on nvidia-kernel-common of exactly that driver (a >= and a <= bound)."""
    branch = version.split(".")[0]
    full = version + "-0ubuntu1"
    sfx = "%s-server" % branch
    kc = Deb("nvidia-kernel-common-" + sfx, full, section="kernel",
             description="Shared files used with the kernel module", provides="nvidia-kernel-common",
             conflicts="nvidia-kernel-common", replaces="nvidia-kernel-common")
    kc.add("/lib/firmware/nvidia/%s/gsp_ga10x.bin" % version, "simulated GSP firmware %s\n" % version)
    debs = [kc]
    for rel in KERNELS:
        d = Deb("linux-modules-nvidia-%s-open-%s" % (sfx, rel), "%s+%d" % (kver(rel), index), section="kernel",
                depends="linux-image-%s, nvidia-kernel-common-%s (<= %s-1), nvidia-kernel-common-%s (>= %s)"
                % (rel, sfx, version, sfx, version),
                description="Linux kernel nvidia modules for version %s (signed)" % rel)
        for name, deps in (("nvidia", ""), ("nvidia-modeset", "nvidia"), ("nvidia-drm", "nvidia-modeset"),
                           ("nvidia-uvm", "nvidia")):
            d.add("/lib/modules/%s/kernel/nvidia-%ssrv/%s.ko" % (rel, branch, name),
                  modfile(name.replace("-", "_"), version, rel, deps.replace("-", "_"), name))
        d.scripts["postinst"] = (
            'if [ "$1" = configure ] && [ -d /lib/modules/%s/kernel ]; then depmod -a %s; fi\n' % (rel, rel))
        d.scripts["postrm"] = (
            'if [ "$1" = remove ] && [ -d /lib/modules/%s/kernel ]; then depmod -a %s || true; fi\n' % (rel, rel))
        debs.append(d)
    return debs


def cuda_repo_debs(version):
    """NVIDIA's CUDA repository flavour of ``version`` (developer.download.nvidia.com/compute/cuda/repos/
    ubuntu2204/x86_64; README "CUDA repository packages"): NVIDIA's meta packages ``cuda-drivers-<branch>``
    and ``nvidia-open-<branch>`` at ``V-1`` over NVIDIA's rebuild of Ubuntu's packaging, branch-named without
    ``-server``, at ``V-0ubuntu1``. The metas depend with ``>=`` (apt takes its newest), the driver metas
    exactly (``=``, the DKMS and kernel-common packages within ``>= V``, ``<= V-1``). The Ubuntu-named
    packages share the archive packages' virtual names (here the lab's ``nvidia-sim-*``; Ubuntu's
    ``libnvidia-compute``, ``nvidia-utils``, ``nvidia-dkms-kernel``...), so one replaces the other."""
    branch = version.split(".")[0]
    full, meta = version + "-0ubuntu1", version + "-1"
    debs = []

    def virt(kind):  # the archive packages' (nvidia_debs) virtual names: the two flavours conflict
        return dict(provides="nvidia-sim-" + kind, conflicts="nvidia-sim-" + kind,
                    replaces="nvidia-sim-" + kind)

    def within(name):  # Ubuntu's packaging: any Debian revision of exactly this driver version
        return "%s (<= %s-1), %s (>= %s)" % (name, version, name, version)

    kc = Deb("nvidia-kernel-common-" + branch, full, section="kernel",
             description="Shared files used with the kernel module", provides="nvidia-kernel-common",
             conflicts="nvidia-kernel-common", replaces="nvidia-kernel-common")
    kc.add("/lib/firmware/nvidia/%s/gsp_ga10x.bin" % version, "simulated GSP firmware %s\n" % version)
    debs.append(kc)

    compute = Deb("libnvidia-compute-" + branch, full, section="libs",
                  description="NVIDIA libcompute package", **virt("compute"))
    compute_payload(compute, version)
    debs.append(compute)

    utils = Deb("nvidia-utils-" + branch, full, section="utils",
                description="NVIDIA driver support binaries", **virt("utils"))
    utils_payload(utils)
    debs.append(utils)

    cu = Deb("nvidia-compute-utils-" + branch, full, section="utils",
             depends="libnvidia-compute-" + branch,
             description="NVIDIA compute utilities (nvidia-persistenced)", **virt("compute-utils"))
    compute_utils_payload(cu, version)
    debs.append(cu)

    for sfx, what in (("", ""), ("-open", "open ")):
        dk = Deb("nvidia-dkms-%s%s" % (branch, sfx), full, section="kernel",
                 depends=within("nvidia-kernel-common-" + branch),
                 description="NVIDIA DKMS package" + (" (open kernel module)" if sfx else ""), **virt("dkms"))
        dkms_payload(dk, version, what)
        debs.append(dk)
        drv = Deb(
            "nvidia-driver-%s%s" % (branch, sfx), full, section="non-free/libs",
            depends=", ".join([within("nvidia-dkms-%s%s" % (branch, sfx)), within("nvidia-kernel-common-" + branch)]
                              + ["%s-%s (= %s)" % (p, branch, full)
                                 for p in ("libnvidia-compute", "nvidia-compute-utils", "nvidia-utils")]),
            description="NVIDIA driver%s metapackage" % (" (open kernel)" if sfx else ""),
            provides="nvidia-driver-binary", conflicts="nvidia-driver-binary", replaces="nvidia-driver-binary")
        add_supported_gpus(drv)
        debs.append(drv)

    debs.append(Deb("cuda-drivers-" + branch, meta, section="devel",
                    depends=" | ".join("nvidia-driver-%s%s (>= %s)" % (branch, f, version)
                                       for f in ("", "-open", "-server", "-server-open")),
                    description="CUDA Driver meta-package, branch-specific"))
    debs.append(Deb("nvidia-open-" + branch, meta, section="devel",
                    depends="nvidia-driver-%s-open (>= %s)" % (branch, version),
                    description="NVIDIA open kernel module driver meta-package, branch-specific"))
    return debs


def cuda_branchless_debs(version):
    """NVIDIA's CUDA repository from branch 590 (README "CUDA repository 590+"): the same packaging as
    :func:`cuda_repo_debs` under names without the branch (``nvidia-driver-open``, ``nvidia-dkms-open``,
    ``nvidia-kernel-common``, ``libnvidia-compute``, ``nvidia-utils``, ``nvidia-compute-utils``; metas
    ``cuda-drivers`` and ``nvidia-open`` at ``V-1``, which depend with ``>=``, so every branch's build
    satisfies them and apt takes the newest), ``nvidia-modprobe`` (its own source, ``V-1``) which the metas
    need at ``>= V``, and the pinning packages ``nvidia-driver-pinning-V`` / ``-B``: an apt preferences
    file that makes the driver's packages at that version (branch) apt's candidate. The 590 ``cuda-drivers``
    also needs ``nvidia-settings (>= V)``, offered only at the newest branch (610): a dependency the
    repository lacks at the target, which apt can only take from another branch."""
    branch = version.split(".")[0]
    full, meta = version + "-0ubuntu1", version + "-1"
    debs = []

    def virt(kind):
        return dict(provides="nvidia-sim-" + kind, conflicts="nvidia-sim-" + kind,
                    replaces="nvidia-sim-" + kind)

    def within(name):
        return "%s (<= %s-1), %s (>= %s)" % (name, version, name, version)

    kc = Deb("nvidia-kernel-common", full, section="kernel", description="Shared files used with the kernel module",
             replaces="nvidia-kernel-common-590, nvidia-kernel-common-580, nvidia-kernel-common-550")
    kc.add("/lib/firmware/nvidia/%s/gsp_ga10x.bin" % version, "simulated GSP firmware %s\n" % version)
    debs.append(kc)
    compute = Deb("libnvidia-compute", full, section="libs", description="NVIDIA libcompute package",
                  **virt("compute"))
    compute_payload(compute, version)
    debs.append(compute)
    utils = Deb("nvidia-utils", full, section="utils", description="NVIDIA driver support binaries", **virt("utils"))
    utils_payload(utils)
    debs.append(utils)
    cu = Deb("nvidia-compute-utils", full, section="utils", depends="libnvidia-compute (= %s)" % full,
             description="NVIDIA compute utilities (nvidia-persistenced)", **virt("compute-utils"))
    compute_utils_payload(cu, version)
    debs.append(cu)
    for sfx, what in (("", ""), ("-open", "open ")):
        dk = Deb("nvidia-dkms" + sfx, full, section="kernel", depends=within("nvidia-kernel-common"),
                 description="NVIDIA DKMS package" + (" (open kernel module)" if sfx else ""), **virt("dkms"))
        dkms_payload(dk, version, what)
        debs.append(dk)
        drv = Deb(
            "nvidia-driver" + sfx, full, section="non-free/libs",
            depends=", ".join([within("nvidia-dkms" + sfx), within("nvidia-kernel-common")]
                              + ["%s (= %s)" % (p, full) for p in ("libnvidia-compute", "nvidia-compute-utils",
                                                                   "nvidia-utils")]),
            description="NVIDIA driver%s metapackage" % (" (open kernel)" if sfx else ""),
            provides="nvidia-driver-binary", conflicts="nvidia-driver-binary", replaces="nvidia-driver-binary")
        add_supported_gpus(drv)
        debs.append(drv)
    debs.append(Deb("nvidia-modprobe", meta, section="utils",
                    description="Load the NVIDIA kernel driver and create device files"))
    if branch == "590":
        settings = ", nvidia-settings (>= %s)" % version
    else:
        settings = ""
        debs.append(Deb("nvidia-settings", meta, section="utils", description="Tool for configuring the NVIDIA driver"))
    debs.append(Deb("cuda-drivers", meta, section="devel",
                    depends="nvidia-driver (>= %s) | nvidia-driver-open (>= %s), nvidia-modprobe (>= %s)%s"
                    % (version, version, version, settings),
                    description="CUDA Driver meta-package"))
    debs.append(Deb("nvidia-open", meta, section="devel",
                    depends="nvidia-driver-open (>= %s), nvidia-modprobe (>= %s)" % (version, version),
                    description="NVIDIA open kernel module driver meta-package"))
    for pin, match in ((version, version + "-*"), (branch, branch + ".*")):
        d = Deb("nvidia-driver-pinning-" + pin, meta if pin == version else branch + "-1ubuntu1", arch="all",
                section="misc", description="Pin the NVIDIA driver to %s" % pin, provides="nvidia-driver-pinning",
                conflicts="nvidia-driver-pinning", replaces="nvidia-driver-pinning")
        d.add("/etc/apt/preferences.d/nvidia-driver-pinning-%s.pref" % pin,
              "\n".join("Package: %s\nPin: version %s\nPin-Priority: 1000\n" % (pat, match)
                        for pat in ("nvidia-*", "libnvidia-*", "cuda-drivers")))
        debs.append(d)
    return debs


def rbln_debs(version):
    d = Deb("rbln-driver", version + "-1", section="kernel",
            description="Rebellions NPU driver (kernel module via DKMS, rbln-smi, UMD)")
    d.add("/usr/bin/rbln-smi", open(os.path.join(FILES, "rbln-smi")).read(), 0o755)
    d.add("/usr/lib/x86_64-linux-gnu/librbln-umd.so.%s" % version, "simulated UMD %s\n" % version)
    d.add("/usr/src/rebellions-%s/dkms.conf" % version,
          'PACKAGE_NAME="rebellions"\nPACKAGE_VERSION="%s"\nAUTOINSTALL="yes"\nLICENSE="GPL"\n'
          'DESCRIPTION="Rebellions NPU kernel driver %s"\nMODULES="rebellions"\n'
          % (version, version))
    dkms_scripts(d, "rebellions", version)
    return [d]


def main(out):
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    pool = os.path.join(tmp, "pool")
    os.makedirs(pool)
    suites = {"jammy": [], "noble": []}
    common = []
    for v in NVIDIA:
        common += [d.build(pool) for d in nvidia_debs(v)]
        same_branch = [x for x in NVIDIA if x.split(".")[0] == v.split(".")[0]]
        common += [d.build(pool) for d in precompiled_debs(v, same_branch.index(v) + 1)]
        common += [d.build(pool) for d in cuda_repo_debs(v)]
    for v in CUDA_BRANCHLESS:
        common += [d.build(pool) for d in cuda_branchless_debs(v)]
    for v in RBLN:
        common += [d.build(pool) for d in rbln_debs(v)]
    for rel, suite in KERNELS.items():
        common += [d.build(pool) for d in kernel_debs(rel)]
        suites[suite] += [d.build(pool) for d in meta_debs(rel)]
        if suite == "noble":
            suites["jammy"] += [d.build(pool) for d in meta_debs(rel, "-hwe-22.04")]
    for suite, debs in suites.items():
        bdir = os.path.join(tmp, "dists", suite, "main", "binary-amd64")
        os.makedirs(bdir)
        listing = os.path.join(tmp, "list-" + suite)
        with open(listing, "w") as f:
            for p in sorted(common + debs):
                f.write(os.path.relpath(p, tmp) + "\n")
        pk = subprocess.check_output(["apt-ftparchive", "packages", "pool"], cwd=tmp,
                                     stderr=subprocess.DEVNULL).decode()
        # keep only this suite's packages
        keep = set(open(listing).read().split())
        stanzas = [s for s in pk.strip().split("\n\n")
                   if any(ln.startswith("Filename: ") and ln[10:] in keep for ln in s.splitlines())]
        text = "\n\n".join(stanzas) + "\n"
        with open(os.path.join(bdir, "Packages"), "w") as f:
            f.write(text)
        with gzip.open(os.path.join(bdir, "Packages.gz"), "wt") as f:
            f.write(text)
        os.unlink(listing)
        rel = subprocess.check_output([
            "apt-ftparchive",
            "-o", "APT::FTPArchive::Release::Origin=NpuopsLab",
            "-o", "APT::FTPArchive::Release::Label=NpuopsLab",
            "-o", "APT::FTPArchive::Release::Suite=%s" % suite,
            "-o", "APT::FTPArchive::Release::Codename=%s" % suite,
            "-o", "APT::FTPArchive::Release::Architectures=amd64",
            "-o", "APT::FTPArchive::Release::Components=main",
            "-o", "APT::FTPArchive::Release::Description=npuops lab simulated drivers and kernels",
            "release", "."], cwd=os.path.join(tmp, "dists", suite)).decode()
        with open(os.path.join(tmp, "dists", suite, "Release"), "w") as f:
            f.write(rel)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]))
