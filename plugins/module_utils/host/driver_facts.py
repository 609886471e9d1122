# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Host-side driver facts: the one gathering behind ``npuops.fleet.npu_driver_facts`` and the drift check
that ``roles/driver_drift_monitor`` runs on the host between windows.

:func:`gather` reads the three driver versions (loaded module, module on disk per kernel, userspace),
the smi tool, packages, holds, DKMS, Secure Boot, fabric manager, the OS-update state and the machine
identity, and returns the facts dict the module returns (its RETURN documents every key), with the
verdict from ``driver_verdict.py``. It needs nothing beyond the Python standard library and the
collection's pure module_utils, so plain ``python3`` on the host can run it without Ansible.

``runner`` is any object with:

* ``run(args: list[str]) -> (rc: int, stdout: str, stderr: str)`` - runs a command with ``LC_ALL=C``
  (the parsers read the C locale's words); never raises for a non-zero exit;
* ``bin(name: str) -> str | None`` - the command's path, None when the host lacks it.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import socket
from typing import Any, Mapping, Optional, Protocol

from ansible_collections.npuops.fleet.plugins.module_utils.driver.verdict import driver_verdict
from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import normalize_version, same_driver_version
from ansible_collections.npuops.fleet.plugins.module_utils.host import (
    apt_output,
    apt_state,
    cdi,
    dkms,
    dpkg_lock,
    fabricmanager,
    gpu_support,
    kernel_log,
    kmod_holders,
    kmod_versions,
    mig,
    packaging,
    secure_boot,
    smi_parsers,
)


class Runner(Protocol):
    """What :func:`gather` runs commands through (see the module docstring)."""

    def run(self, args: list[str]) -> tuple[int, str, str]: ...

    def bin(self, name: str) -> Optional[str]: ...


class ModuleRunner:
    """:class:`Runner` on an AnsibleModule (``run_command`` with LC_ALL=C, ``get_bin_path``); the host
    modules that gather facts use it (the drift check has its own, on subprocess)."""

    def __init__(self, module: Any) -> None:
        self.m = module

    def run(self, args: list[str]) -> tuple[int, str, str]:
        rc, out, err = self.m.run_command(args, environ_update={"LC_ALL": "C"})
        return rc, out or "", err or ""

    def bin(self, name: str) -> Optional[str]:
        return self.m.get_bin_path(name)


# gather()'s params and their defaults (the module's argspec defaults; the drift check passes only some)
DEFAULT_PARAMS: dict[str, Any] = {
    "vendor": "nvidia",
    "expected_version": None,
    "boot_kernel": None,
    "kernel_release": None,
    "module_name": None,
    "userspace_packages": None,
    "smi_query_fields": list(smi_parsers.NVIDIA_SMI_DEFAULT_FIELDS),
    "history_log": "/var/log/apt/history.log",
    "proc_version_file": None,
    "boot_id_file": "/proc/sys/kernel/random/boot_id",
    "pci_devices_dir": "/sys/bus/pci/devices",
    "kernel_log_file": None,
    "device_holders": False,
    "packaging": "auto",
}

NVIDIA_USERSPACE_PACKAGES = ["nvidia-utils-*", "nvidia-utils", "nvidia-smi", "nvidia-tesla-*-smi", "nvidia-driver-*"]
NVIDIA_PROC_VERSION = "/proc/driver/nvidia/version"


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _read_log(path):
    text = _read(path) or ""
    rotated = path + ".1.gz"
    if os.path.exists(rotated):
        import gzip

        try:
            with gzip.open(rotated, "rt", errors="replace") as f:
                text = f.read() + "\n\n" + text
        except OSError:
            pass
    return text


def smi_reported_versions(smi: Mapping[str, Any]) -> list[Optional[str]]:
    """Driver versions the smi tool reported, one per source: ``[kmd_version]`` for rbln-smi, else each
    nvidia-smi device's ``driver_version`` (None where a device gave none); ``[]`` when it reported none.

    ``smi`` is :meth:`Facts.smi`'s dict (``kmd_version``, ``devices``).
    """
    if smi.get("kmd_version"):
        return [smi["kmd_version"]]
    return [d.get("driver_version") for d in smi.get("devices") or []]


def target_match(
    expected: Optional[str],
    loaded: Optional[str],
    userspace: Optional[str],
    on_disk_boot: Optional[str],
    smi_versions: list[Optional[str]],
) -> Optional[dict[str, bool]]:
    """``{"loaded", "userspace", "on_disk_boot", "smi", "all"}`` (bools) against ``expected``; None without it.
    ``all``: loaded, on-disk and smi match, and the userspace too when its version is known.

    ``smi`` needs at least one reported version and every one of them to match: one device on another
    driver, or one that could not say, is not "at the target".
    """
    if not normalize_version(expected):
        return None
    res = {
        "loaded": same_driver_version(loaded, expected),
        "userspace": same_driver_version(userspace, expected),
        "on_disk_boot": same_driver_version(on_disk_boot, expected),
        "smi": bool(smi_versions) and all(same_driver_version(v, expected) for v in smi_versions),
    }
    # A host whose userspace version cannot be read (no package, smi says nothing more) is judged on
    # the module and the smi, as expected_match does; a known userspace must match.
    res["all"] = res["loaded"] and res["on_disk_boot"] and res["smi"] and (
        res["userspace"] or not normalize_version(userspace)
    )
    return res


class Facts:
    """The host reads of :func:`gather`: files under /proc, /sys, /boot, /var and commands run through
    ``runner``. Every read that fails is ``None`` (or empty), never an exception."""

    def __init__(self, runner: Runner, profile: Mapping[str, Any]):
        self.runner = runner
        self.p = profile
        self._dep_files: dict = {}
        self._modinfo_names: dict = {}
        self.module_file_conflicts: dict = {}

    def run(self, args, check=False):
        rc, out, err = self.runner.run(list(args))
        return rc, out or "", err or ""

    def bin(self, name):
        return self.runner.bin(name)

    # kernels
    def running_kernel(self):
        rc, out, _err = self.run(["uname", "-r"])
        return out.strip() if rc == 0 and out.strip() else os.uname().release

    def installed_kernels(self):
        try:
            return kmod_versions.kernels_from_boot_listing(os.listdir("/boot"))
        except OSError:
            return []

    def on_disk_version(self, modinfo, release, module_name):
        if not modinfo:
            return None
        name = self.module_files(modinfo, release, [module_name]).get(module_name, module_name)
        rc, out, _err = self.run([modinfo, "-k", release, "-F", "version", name])
        return kmod_versions.parse_modinfo_version(out) if rc == 0 else None

    def module_files(self, modinfo, release, modules):
        """{module: the name modprobe and modinfo find its file by} for kernel ``release``: the module's
        own name when a file carries it, else the file whose ``modinfo -F name`` is the module (Debian's
        DKMS packages install nvidia.ko as nvidia-current.ko, and no modprobe.d line maps the name on a
        headless host). A module with no file on that kernel is left out, and so is one that two files
        of other names carry (a stale build beside the new one): modprobe by the module's own name then
        fails loudly instead of loading a file chosen by chance; ``module_file_conflicts`` names them."""
        if release not in self._dep_files:  # read once per kernel: gather asks for the running one twice
            self._dep_files[release] = kmod_versions.module_dep_files(
                _read("/lib/modules/%s/modules.dep" % release) or ""
            )
        files = self._dep_files[release]
        res = {}
        for module in modules:
            norm = module.replace("-", "_")
            if norm in files:
                res[module] = module
                continue
            hits = []
            for path in kmod_versions.module_file_candidates(files, norm) if modinfo else []:
                full = path if path.startswith("/") else "/lib/modules/%s/%s" % (release, path)
                if full not in self._modinfo_names:
                    rc, out, _err = self.run([modinfo, "-F", "name", full])
                    self._modinfo_names[full] = out.strip().replace("-", "_") if rc == 0 else None
                if self._modinfo_names[full] == norm:
                    hits.append(path)
            if len(hits) == 1:
                res[module] = hits[0].rsplit("/", 1)[-1].split(".ko", 1)[0]
            elif hits:
                self.module_file_conflicts.setdefault(release, {})[module] = hits
        return res

    def loaded_version(self, module_name, proc_file):
        text = _read("/sys/module/%s/version" % module_name)
        if text is not None and text.strip():
            return kmod_versions.parse_sys_module_version(text), "sys_module"
        if proc_file:
            text = _read(proc_file)
            if text:
                v = smi_parsers.parse_proc_driver_nvidia_version(text)
                if v:
                    return v, "proc_driver"
        if os.path.isdir("/sys/module/%s" % module_name):
            return None, "loaded_without_version"
        return None, None

    # kernel modules: {name: {"holders": [...], "refcnt": int or None}} of every loaded module; built-in
    # ones (no holders directory) are left out: they cannot be unloaded
    def sys_modules(self, root="/sys/module"):
        res: dict[str, dict[str, Any]] = {}
        try:
            names = os.listdir(root)
        except OSError:
            return res
        for name in names:
            holders_dir = os.path.join(root, name, "holders")
            try:
                holders = sorted(os.listdir(holders_dir))
            except OSError:
                continue
            refcnt = _read(os.path.join(root, name, "refcnt"))
            try:
                count = int(refcnt.strip()) if refcnt else None
            except ValueError:
                count = None
            res[name] = {"holders": holders, "refcnt": count}
        return res

    # processes that hold a device file open: [(pid, target)] of /proc/<pid>/fd links under prefix
    def fd_links(self, prefix, proc="/proc"):
        res = []
        for fd in glob.glob(os.path.join(proc, "[0-9]*", "fd", "*")):
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith(prefix):
                res.append((int(fd[len(proc) + 1 :].split("/", 1)[0]), target))
        return res

    # DKMS, Secure Boot, fabric manager: a missing command is "unknown", never a failure
    def dkms_status(self):
        path = self.bin("dkms")
        if not path:
            return None, None
        rc, out, err = self.run([path, "status"])
        return out + ("\n" + err if err else ""), rc

    def secure_boot(self):
        efivar = _read_bytes(secure_boot.EFIVAR_PATH) if os.path.exists(secure_boot.EFIVAR_PATH) else None
        mokutil_text = None
        if secure_boot.parse_efivar(efivar) is None:
            mokutil = self.bin("mokutil")
            if mokutil:
                _rc, out, err = self.run([mokutil, "--sb-state"])
                mokutil_text = out + ("\n" + err if err else "")
        return secure_boot.secure_boot_state(efivar, mokutil_text)

    def mok_key(self):
        """DKMS's signing key and its enrolment: ``{"key": path or None, "enrolled": packaging.mok_enrolment()}``."""
        key = next((k for k in packaging.MOK_KEYS if os.path.exists(k)), None)
        enrolled = None
        mokutil = self.bin("mokutil") if key else None
        if mokutil:
            der = _read_bytes(key)
            fp = hashlib.sha1(der).hexdigest() if der else None  # noqa: S324 - mokutil lists SHA-1 fingerprints
            texts = []
            for args in (["--list-enrolled"], ["--list-new"], ["--test-key", key]):
                _rc, out, err = self.run([mokutil] + args)
                texts.append(out + "\n" + err)
            enrolled = packaging.mok_enrolment(fp, *texts)
        return {"key": key, "enrolled": enrolled}

    def fabricmanager_log(self):
        journalctl = self.bin("journalctl")
        if not journalctl:
            return None
        args = [journalctl, "-u", "nvidia-fabricmanager", "-b", "-n", "200", "--no-pager", "-o", "cat"]
        _rc, out, _err = self.run(args)
        return out

    def kernel_log(self, path=None):
        """This boot's kernel messages of the NVIDIA driver's last load (journald's, else the ring buffer):
        the NVRM lines and their continuations from the last ``Nvlink Core is being initialized`` line
        (nvidia.ko's init), else after the load line before the last (a refusal from an earlier load in
        the same boot is not this one's); None without either tool. ``path``: a file to read instead
        (where the kernel is simulated)."""
        out = None
        journalctl = self.bin("journalctl")
        if path:
            out = _read(path)
        elif journalctl:
            rc, text, _err = self.run([journalctl, "-k", "-b", "-q", "--no-pager", "-o", "cat"])
            out = text if rc == 0 and text.strip() else None
        dmesg = None if path or out is not None else self.bin("dmesg")
        if dmesg:
            rc, text, _err = self.run([dmesg])
            out = text if rc == 0 else None
        if out is None:
            return None
        keep, cont = [], False
        for line in out.splitlines():
            # a message's continuation lines carry no NVRM of their own in some formats: keep those too
            cont = "NVRM" in line or "nvidia-nvlink" in line or (cont and line[:1].isspace())
            if cont:
                keep.append(line)
        # nvidia.ko's init starts with the NVLink core's line; the probe's messages come before the
        # "loading NVIDIA UNIX" line and those of a device's first open after it, so that line bounds nothing
        starts = [i for i, x in enumerate(keep) if "Nvlink Core is being initialized" in x]
        if starts:
            return "\n".join(keep[starts[-1]:])
        loads = [i for i, x in enumerate(keep) if "loading NVIDIA UNIX" in x]
        return "\n".join(keep[loads[-2] + 1 if len(loads) > 1 else 0:])

    def identity(self, boot_id_file):
        """The machine's identity as the kubelet reads it (module_utils/fleet/identity.py)."""

        def first_line(*paths):
            for path in paths:
                text = (_read(path) or "").strip()
                if text:
                    return text.splitlines()[0].strip()
            return None

        return {
            "machine_id": first_line("/etc/machine-id", "/var/lib/dbus/machine-id"),
            "system_uuid": first_line("/sys/class/dmi/id/product_uuid"),
            "boot_id": first_line(boot_id_file),
            "hostname": (socket.gethostname() or "").strip().lower() or None,
        }

    # smi
    def smi(self, fields):
        cmd = self.p["smi_command"]
        path = self.bin(cmd) if "/" not in cmd else (cmd if os.access(cmd, os.X_OK) else None)
        res = {
            "command": cmd,
            "path": path,
            "available": bool(path),
            "rc": None,
            "status": "missing",
            "message": None,
            "library_version": None,
            "kmd_version": None,
            "driver_version": None,
            "devices": [],
        }
        if not path:
            res["message"] = "%s not found" % cmd
            return res
        if os.path.basename(cmd).startswith("nvidia-smi"):
            rc, out, err = self.run([path, "--query-gpu=%s" % ",".join(fields), "--format=csv,noheader"])
            text = out + ("\n" + err if err else "")
            res["rc"] = rc
            res.update(smi_parsers.classify_nvidia_smi(text, rc))
            if res["status"] == "ok":
                res["devices"] = smi_parsers.parse_nvidia_smi_query(out, fields)
                vers = [d.get("driver_version") for d in res["devices"] if d.get("driver_version")]
                res["driver_version"] = vers[0] if vers else None
        else:
            rc, out, err = self.run([path])
            res["rc"] = rc
            parsed = smi_parsers.parse_rbln_smi(out)
            res["kmd_version"] = parsed["kmd_version"]
            res["devices"] = parsed["devices"]
            if rc != 0:
                res["status"] = "error"
                res["message"] = (err or out).strip().splitlines()[0] if (err or out).strip() else "exit %s" % rc
            elif not parsed["devices"]:
                res["status"] = "no_devices"
                res["message"] = "no devices listed"
            else:
                res["status"] = "ok"
        return res


def gather(runner: Runner, profile: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The host's driver facts (dict; keys and shapes as the module's RETURN) for the resolved vendor
    ``profile`` (``vendor_profiles.resolve_profile``). ``params`` holds the module's options by name
    (missing ones take :data:`DEFAULT_PARAMS`); ``params["vendor"]`` is reported as ``vendor``.

    Read-only. A command the host lacks makes its part unknown (None / empty), never an error.
    """
    p = dict(DEFAULT_PARAMS)
    p.update({k: v for k, v in params.items() if v is not None or k not in DEFAULT_PARAMS})
    f = Facts(runner, profile)
    vendor = p["vendor"]
    is_nvidia = os.path.basename(profile["smi_command"]).startswith("nvidia-smi")
    module_name = p["module_name"] or profile.get("main_module") or profile["kernel_modules"][-1]
    families = list(profile.get("package_families") or [])

    # kernels and modules
    running = f.running_kernel()
    installed = f.installed_kernels()
    boot_kernel = p["boot_kernel"] or kmod_versions.next_boot_kernel(installed) or running
    modinfo = f.bin("modinfo") or (os.path.exists("/sbin/modinfo") and "/sbin/modinfo") or None
    on_disk = {}
    for rel in sorted(set(installed) | {running, boot_kernel}, key=kmod_versions.version_sort_key):
        on_disk[rel] = f.on_disk_version(modinfo, rel, module_name)
    proc_file = p["proc_version_file"] or (NVIDIA_PROC_VERSION if is_nvidia else None)
    loaded, loaded_source = f.loaded_version(module_name, proc_file)

    # loaded modules and the order to remove them (users first) and load them back
    sys_mods = f.sys_modules()
    known = list(profile.get("kernel_modules") or [])
    order = kmod_holders.unload_order({n: m["holders"] for n, m in sys_mods.items()}, module_name, known)
    loaded_modules = {n: [h for h in sys_mods[n]["holders"] if h in sys_mods] for n in order}
    refcnt = (sys_mods.get(module_name) or {}).get("refcnt")
    holders = []
    in_use = None
    if p["device_holders"]:
        prefix = re.split(r"[\[*?]", profile.get("device_glob") or "", maxsplit=1)[0]
        users = kmod_holders.device_users(f.fd_links(prefix), prefix) if prefix else {}
        holders = kmod_holders.describe_processes(users, {pid: dpkg_lock.read_cmdline(pid) for pid in users})
        if module_name in sys_mods:
            in_use = kmod_holders.in_use_reason(module_name, refcnt, loaded_modules.get(module_name) or [], holders)

    # smi
    smi = f.smi(p["smi_query_fields"])
    if not loaded and smi.get("kmd_version"):
        loaded, loaded_source = smi["kmd_version"], "smi_kmd"

    # packages
    dpkg_query = f.bin("dpkg-query")
    installed_pkgs = {}
    held = []
    if dpkg_query:
        _rc, out, _err = f.run([dpkg_query, "-W", apt_state.DPKG_QUERY_FORMAT])
        installed_pkgs = apt_state.parse_dpkg_query(out)
        dpkg = f.bin("dpkg")
        if dpkg:
            _rc, out, _err = f.run([dpkg, "--get-selections"])
            held = apt_state.held_packages(out)
    driver_pkg_names = apt_state.match_families(installed_pkgs, families)
    driver_pkgs = {n: installed_pkgs[n]["version"] for n in driver_pkg_names}
    kernel_pkgs = [n for n in kmod_versions.kernel_package_names(running) if n in installed_pkgs]
    meta_pkgs = apt_state.match_families(installed_pkgs, kmod_versions.KERNEL_META_PATTERNS)

    # userspace version: nvidia-smi query > package version > NVML mismatch line (major.minor only; it wins
    # over a package version it contradicts: the library that runs is what NVML reports, case C1)
    user_patterns = p["userspace_packages"] or (NVIDIA_USERSPACE_PACKAGES if is_nvidia else None) or [
        pat for fl in packaging.flavours(profile) for pat in fl["detect"]
    ]
    user_pkg = None
    for pat in user_patterns:
        names = apt_state.match_families(installed_pkgs, [pat])
        if names:
            user_pkg = {"name": names[-1], "version": installed_pkgs[names[-1]]["version"]}
            break
    if smi.get("driver_version"):
        userspace, user_source = smi["driver_version"], "smi"
    elif user_pkg and (
        not smi.get("library_version") or same_driver_version(user_pkg["version"], smi["library_version"])
    ):
        userspace, user_source = user_pkg["version"], "dpkg:%s" % user_pkg["name"]
    elif smi.get("library_version"):
        userspace, user_source = smi["library_version"], "nvml_mismatch"
    else:
        userspace, user_source = None, None

    device_nodes = sorted(glob.glob(profile["device_glob"])) if profile.get("device_glob") else []
    device_count = len(smi["devices"]) if smi["status"] in ("ok", "no_devices") else None
    pci_gpus = gpu_support.read_pci_gpus(p["pci_devices_dir"], profile["pci_vendor_id"]) \
        if profile.get("pci_vendor_id") else []
    v = driver_verdict(
        loaded,
        on_disk.get(boot_kernel),
        userspace,
        boot_kernel=boot_kernel,
        device_count=device_count,
        expected=p["expected_version"],
        smi_status=smi["status"],
    )

    smi_versions = smi_reported_versions(smi)
    smi_version = next((sv for sv in smi_versions if sv), None)
    matches = target_match(p["expected_version"], loaded, userspace, on_disk.get(boot_kernel), smi_versions)

    # DKMS for the boot kernel (the driver's DKMS names: dkms.DRIVER_DKMS_MODULES), Secure Boot, fabric manager
    dkms_text, dkms_rc = f.dkms_status()
    dkms_facts = dkms.kernel_facts(dkms_text, dkms_rc or 0, module_name, boot_kernel, p["expected_version"])
    # a failed build's log ("Consult /var/lib/dkms/<m>/<v>/build/make.log"); dkms 3.1's per-kernel
    # logs are kept for successful builds, so they are not quoted
    logs = []
    for name in dkms_facts["driver_modules"]:
        ver = normalize_version(p["expected_version"]) or "*"
        logs += sorted(glob.glob("/var/lib/dkms/%s/%s*/build/make.log" % (name, ver)))
    dkms_facts["build_logs"] = logs
    sb = f.secure_boot()

    # packaging flavour and whether the module can be built (or is shipped) for the running and boot kernel
    present = list(installed_pkgs)
    try:
        flavour = packaging.choose(profile, present, p["packaging"])
    except packaging.PackagingError as exc:
        flavour = {"name": None, "build": None, "packages": [], "source": None, "evidence": [],
                   "installed_flavours": packaging.installed_flavours(profile, present), "error": str(exc)}
    kernels = [running, boot_kernel]
    build = packaging.buildability(
        flavour, kernels, {k: os.path.exists("/lib/modules/%s/build" % k) for k in kernels}, present,
        sb["state"], f.mok_key() if flavour.get("build") == "dkms" and sb["state"] == "enabled" else None,
    )
    pack = dict(flavour, **build)
    pack.setdefault("error", None)
    pack["other_module_flavours"] = packaging.other_module_flavours(profile, pack) if pack["name"] else []
    # the target set for expected_version on the kernel that will run it, and what it replaces
    patch = kmod_versions.kernel_patch_check(installed, running, p["kernel_release"]) if p["kernel_release"] else None
    run_kernel = p["kernel_release"] if patch and patch.get("needed") else boot_kernel
    pack["kernel"] = run_kernel
    # a requested flavour the host does not have: the host moves to it even when its driver is at the target
    pack["moving"] = bool(
        pack["name"]
        and pack["source"] == "requested"
        and pack["installed_flavours"]
        and pack["name"] not in [x["name"] for x in pack["installed_flavours"]]
    )
    pack["target"], pack["target_kernel"], pack["leaving"], pack["companions"] = [], [], [], []
    # the flavour's pinning template gives way to the target's pinning package name (None: none)
    pin_flavour = dict(pack)
    pack["counterparts"], pack["target_optional"], pack["pinning"], pack["branchless"] = {}, [], None, False
    if p["expected_version"] and pack["name"]:
        names = packaging.target_packages(pack, p["expected_version"], run_kernel)
        per_kernel = [n for n, t in zip(names, pack["packages"]) if "{kernel}" in t]
        bl = packaging.branchless(pack, p["expected_version"])
        pack["branchless"] = bl
        pack["companions"] = packaging.companions(profile, present, p["expected_version"], branchless_names=bl)
        extra = [n for c in pack["companions"] for n in c["packages"] if n not in names]
        # the pinning package joins at whatever version apt offers (its name carries the target)
        pack["pinning"] = packaging.pinning_package(pin_flavour, p["expected_version"])
        pack["target"] = [n for n in names if n not in per_kernel] + extra
        pack["target_optional"] = [
            n for n in packaging.optional_packages(pack, p["expected_version"], run_kernel) if n not in names + extra
        ]
        # every name the target may hold: nothing in it leaves or gets a counterpart
        whole = names + extra + pack["target_optional"]
        pack["target_kernel"] = per_kernel
        # the host's flavour: the requested one where its packages are installed (Ubuntu's own non-server
        # names are also the CUDA repository's: the same packages, another way to name 590+), else the first
        have = [x["name"] for x in pack["installed_flavours"]]
        ordered = sorted(packaging.flavours(profile), key=lambda fl: fl["name"] != pack["name"])
        old = next((fl for fl in ordered if fl["name"] in have), None)
        pack["leaving"] = sorted(
            set(
                packaging.leaving_packages(old, pack, present, whole, p["expected_version"])
                + packaging.leaving_companions(pack["companions"], present, names + extra, p["expected_version"])
                + packaging.leaving_pins(pin_flavour, present, p["expected_version"])
            )
        )
        # the old branch's other packages: the role asks apt which target-branch names it offers
        pack["counterparts"] = packaging.branch_counterparts(
            old, pack, profile.get("package_families") or [], present, whole, p["expected_version"],
            skip_templates=packaging.rule_templates(profile),
        )
        pack["target_optional"] += packaging.branchless_others(
            pack, families, driver_pkgs,
            whole + pack["leaving"] + list(pack["counterparts"]) + [pack["pinning"] or ""], p["expected_version"],
        )
    fm = None
    if is_nvidia:
        ref: Optional[str]
        ref_source: Optional[str]
        if user_pkg:
            ref, ref_source = user_pkg["version"], "dpkg:%s" % user_pkg["name"]
        elif userspace:
            ref, ref_source = userspace, user_source
        elif on_disk.get(boot_kernel):
            ref, ref_source = on_disk.get(boot_kernel), "on_disk_boot"
        else:
            ref, ref_source = loaded, loaded_source
        fm = fabricmanager.fabricmanager_facts(installed_pkgs, ref, ref_source)
        if fm["installed"]:
            fm = fabricmanager.fabricmanager_facts(installed_pkgs, ref, ref_source, f.fabricmanager_log())

    # OS update state
    reboot_required = os.path.exists("/var/run/reboot-required")
    reboot_pkgs = apt_state.parse_reboot_required_pkgs(_read("/var/run/reboot-required.pkgs") or "")
    config = {}
    apt_config = f.bin("apt-config")
    if apt_config:
        rc, out, _err = f.run([apt_config, "dump"])
        if rc == 0:
            config = apt_state.parse_apt_config_dump(out)
    blacklist = apt_state.apt_list(config, apt_state.BLACKLIST_KEY)
    periodic = config.get("APT::Periodic::Unattended-Upgrade")
    uu_installed = "unattended-upgrades" in installed_pkgs or bool(f.bin("unattended-upgrade"))
    timer_enabled = timer_active = None
    systemctl = f.bin("systemctl")
    if systemctl:
        _rc, out, _err = f.run([systemctl, "is-enabled", "apt-daily-upgrade.timer"])
        timer_enabled = out.strip() or None
        _rc, out, _err = f.run([systemctl, "is-active", "apt-daily-upgrade.timer"])
        timer_active = out.strip() or None
    watched = families + list(apt_state.KERNEL_FAMILIES)
    uu = {
        "installed": uu_installed,
        "periodic_value": periodic if isinstance(periodic, str) else None,
        "periodic_enabled": apt_state.periodic_enabled(periodic if isinstance(periodic, str) else None),
        "timer_enabled": timer_enabled,
        "timer_active": timer_active,
        "blacklist": blacklist,
        "automatic_reboot": config.get("Unattended-Upgrade::Automatic-Reboot"),
        "uncovered_families": apt_state.uncovered_families(blacklist, watched),
    }
    uu["enabled"] = bool(
        uu_installed and uu["periodic_enabled"] and (timer_enabled in (None, "enabled", "static", "alias"))
    )
    history = apt_state.parse_apt_history(_read_log(p["history_log"]))
    last_change = apt_state.last_entry_touching(history, watched)

    facts = {
        "vendor": vendor,
        "module": module_name,
        "running_kernel": running,
        "boot_kernel": boot_kernel,
        "boot_kernel_source": "param" if p["boot_kernel"] else "newest_installed",
        "installed_kernels": installed,
        "kernel_reboot_pending": boot_kernel != running,
        "kernel_patch": patch,
        "loaded_version": loaded,
        "loaded_source": loaded_source,
        "on_disk_versions": on_disk,
        "on_disk_boot_version": on_disk.get(boot_kernel),
        "module_present_for_boot_kernel": on_disk.get(boot_kernel) is not None,
        "userspace_version": normalize_version(userspace),
        "userspace_version_raw": userspace,
        "userspace_source": user_source,
        "userspace_package": user_pkg,
        "expected_version": normalize_version(p["expected_version"]),
        "smi": {
            k: smi[k] for k in ("command", "available", "rc", "status", "message", "library_version", "kmd_version")
        },
        "devices": smi["devices"],
        "device_count": device_count,
        "device_nodes": device_nodes,
        "verdict": v["verdict"],
        "verdict_reason": v["reason"],
        "healthy": v["healthy"],
        "expected_match": v["expected_match"],
        "target_match": matches,
        "smi_driver_version": smi_version,
        "reboot_required": reboot_required,
        "reboot_required_pkgs": reboot_pkgs,
        "held_packages": held,
        "installed_driver_packages": driver_pkgs,
        "interrupted_packages": {
            n: i["status"] for n, i in sorted(installed_pkgs.items()) if apt_output.interrupted_state(i["status"])
        },
        "loaded_modules": loaded_modules,
        "unload_order": order,
        "load_order": kmod_holders.load_order(order, fallback=known),
        "modprobe_names": f.module_files(modinfo, running, sorted(set(known) | set(order) | {module_name})),
        "module_file_conflicts": f.module_file_conflicts,
        "module_refcnt": refcnt,
        "device_holders": holders,
        "dkms": dkms_facts,
        "secure_boot": sb,
        "packaging": pack,
        "identity": f.identity(p["boot_id_file"]),
        "kernel_log": gpu_kernel_log(f, pci_gpus, device_count, smi["status"], loaded, p["kernel_log_file"]),
        # the vendor's GPUs on the PCI bus, what the target's supported-gpus.json is checked against
        "pci_gpus": pci_gpus,
        "fabricmanager": fm,
        # MIG mode and layout per GPU, and why it could not be put back after a reload (case E5)
        "mig": mig_facts(f, smi) if is_nvidia else None,
        # the container runtime's NVIDIA CDI specs, which name driver files by version (case E4)
        "cdi": cdi_facts(f) if is_nvidia else None,
        "in_use_reason": in_use,
        # kube-proxy's IPVS module loaded now (built in or a module): the upgrade loads it back after
        "ipvs_loaded": os.path.exists("/sys/module/ip_vs"),
        "booted_kernel_packages": kernel_pkgs,
        "kernel_meta_packages": meta_pkgs,
        "package_families": families,
        "unattended_upgrades": uu,
        "last_driver_package_change": last_change,
        "profile": profile,
    }
    return facts


def gpu_kernel_log(f: "Facts", pci_gpus: list, device_count: Optional[int], smi_status: Optional[str],
                   loaded: Optional[str], path: Optional[str] = None) -> Optional[dict[str, Any]]:
    """Why the driver sees fewer GPUs than the PCI bus has (none when no module is loaded), from this
    boot's kernel log since the driver's last load: ``{"reason", "devices", "lines"}`` - the driver
    refusing a GPU (kernel_log.FLAVOUR_UNSUPPORTED / RELEASE_UNSUPPORTED), else a GPU lost from the bus
    (kernel_log.GPU_LOST), else a null reason; None while every GPU is seen (the log is not read then)."""
    # a driver that refused every GPU is not left loaded (its init ends -ENODEV): read the log then too
    seen = 0 if smi_status == "no_devices" or not loaded else device_count
    if seen is None or not pci_gpus or seen >= len(pci_gpus):
        return None
    text = f.kernel_log(path) or ""
    refused = kernel_log.module_flavour_unsupported(text)
    if refused["unsupported"]:
        return {"reason": refused["reason"], "devices": [d["address"] for d in refused["devices"]],
                "lines": refused["lines"]}
    lost = kernel_log.gpu_lost(text)
    return {"reason": lost["reason"], "devices": lost["devices"], "lines": lost["lines"]}


def cdi_facts(f: "Facts") -> dict[str, Any]:
    """``{"specs": [paths], "others": {path: kind}, "nvidia_ctk": bool}`` (host/cdi.py): the host's own NVIDIA
    CDI specs in the runtimes' directories, other components' NVIDIA specs, and whether the toolkit's CLI
    is in PATH to regenerate the host's."""
    found = cdi.find_specs(cdi.DEFAULT_DIRS, lambda p: _read(p) or "")
    specs = [s["path"] for s in found if s["owned"]]
    return {"specs": specs, "others": {s["path"]: s["kind"] for s in found if not s["owned"]},
            "nvidia_ctk": bool(f.bin("nvidia-ctk")) if specs else None}


def mig_facts(f: "Facts", smi: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """``{"layout", "enabled", "devices", "refusals", "error"}`` (host/mig.py) while nvidia-smi answers; None otherwise
    (no driver loaded: no GPU instance exists, nothing to record)."""
    if smi.get("status") != "ok":
        return None
    try:
        layout = mig.MigTool(f.run, smi["path"]).read()
    except mig.MigError as e:
        return {"layout": None, "enabled": None, "devices": [], "refusals": [], "error": str(e)}
    return {"layout": layout, "enabled": mig.enabled(layout), "devices": mig.describe(layout),
            "refusals": mig.restore_refusals(layout), "error": None}


def ipvs_modules_loadable(runner: Runner, kernel: str, modules: list[str]) -> dict[str, bool]:
    """Module name -> ``modprobe -n -S <kernel> <module>`` succeeds: the module resolves in that kernel's
    module index (a stale index fails here although the ``.ko`` exists). All False without modprobe."""
    modprobe = runner.bin("modprobe")
    res = {}
    for name in modules:
        if not modprobe:
            res[name] = False
            continue
        rc, _out, _err = runner.run([modprobe, "-n", "-S", kernel, name])
        res[name] = rc == 0
    return res
