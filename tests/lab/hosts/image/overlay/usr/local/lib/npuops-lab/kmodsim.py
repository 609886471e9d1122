#!/usr/bin/python3
"""Simulated kmod tools for the npuops lab hosts (modprobe, insmod, rmmod, lsmod, modinfo, depmod).

The kmod binaries are dpkg-diverted to *.kmod-real; these shims act on the simulated kernel:
  * module files under /lib/modules/<release>/ are text files (key=value: name, version,
    vermagic, depends, license, description) installed by the lab's kernel and driver packages;
  * modules.dep is the real text format, modules.dep.bin is a JSON index (the real one is a
    binary trie); like libkmod, modprobe resolves names through modules.dep.bin only, so a stale
    or missing .bin makes a module "not found" although the .ko and the modules.dep line exist;
  * on the real-packaging hosts (tests/lab/realpkg) the module files are REAL ELF objects built by
    the real dkms and indexed by the real depmod: their fields come from the ELF .modinfo section
    (the name the kernel gives the module is its "name=" field: Debian's nvidia-current.ko loads
    as "nvidia"), the index from the real text modules.dep (the real .bin is a trie), device
    aliases ("pci:v000010DEd...", what udev asks for) from modules.alias. A headers-only kernel
    has no in-tree modules on disk, so a "depends" entry with no file (drm, video) is taken as part
    of the simulated kernel, as its linux-image package would provide it;
  * the loaded-module state lives in /sys/module/<name>/{version,refcnt,initstate,holders/}
    (a per-host directory bind-mounted over /sys/module and cleared at every boot);
  * "in use": rmmod refuses while refcnt > 0 (dependent modules loaded) or while a process holds
    one of the module's device files open (found by scanning /proc/*/fd);
  * nvidia.ko's init checks the lab's GPUs (/run/npuops-lab/pci/devices) against the installed
    supported-gpus.json as nv.c does (the open module refuses a GPU without kernelopen, the proprietary
    one a GPU that needs the open modules), writes the kernel's lines to /run/npuops-lab/kmsg, and
    fails with "No such device" when it refused every GPU.
"""
import fnmatch
import glob
import json
import os
import re
import struct
import sys

SYSMOD = os.environ.get("NPUOPS_SYSMODULE", "/sys/module")
MODROOT = "/lib/modules"
# device files that keep a module busy while open
MODULE_DEVICES = {
    "nvidia": r"^/dev/nvidia(\d+|ctl)$",
    "nvidia_uvm": r"^/dev/nvidia-uvm(-tools)?$",
    "nvidia_modeset": r"^/dev/nvidia-modeset$",
    "rebellions": r"^/dev/rbln\d+$",
}


def release():
    return os.uname().release


def norm(name):
    return name.replace("-", "_")


def elf_modinfo(path):
    """The key=value strings of a real module's .modinfo section (ELF64, little endian), or None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def section(i):
        name, _typ, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, off, size

    _n, stroff, _s = section(shstrndx)
    info = {}
    for i in range(shnum):
        name, off, size = section(i)
        end = data.index(b"\0", stroff + name)
        if data[stroff + name:end] != b".modinfo":
            continue
        for item in data[off:off + size].split(b"\0"):
            if b"=" in item:
                k, v = item.decode("utf-8", "replace").split("=", 1)
                info.setdefault(k, v)
    return info


def read_modfile(path):
    try:
        with open(path, "rb") as f:
            if f.read(4) == b"\x7fELF":
                return elf_modinfo(path)
    except OSError:
        return None
    info = {}
    try:
        with open(path) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    info[k.strip()] = v.strip()
    except OSError:
        return None
    return info


def scan_modules(rel):
    """All *.ko files under /lib/modules/<rel> -> {name: relpath}."""
    base = os.path.join(MODROOT, rel)
    found = {}
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for fn in sorted(filenames):
            if fn.endswith(".ko") or fn.endswith(".ko.zst") or fn.endswith(".ko.xz"):
                full = os.path.join(dirpath, fn)
                relpath = os.path.relpath(full, base)
                name = norm(fn.split(".ko")[0])
                # updates/ overrides kernel/ (depmod search order: updates first)
                if name in found and not relpath.startswith("updates/"):
                    continue
                found[name] = relpath
    return found


def load_index(rel):
    path = os.path.join(MODROOT, rel, "modules.dep.bin")
    try:
        with open(path) as f:
            return json.load(f).get("modules", {})
    except ValueError:
        return real_index(rel)
    except OSError:
        return None


def real_index(rel):
    """The real depmod's text modules.dep as the simulated index ({name: {"path", "deps"}})."""
    modules = {}
    try:
        with open(os.path.join(MODROOT, rel, "modules.dep")) as f:
            for line in f:
                path, _, deps = line.partition(":")
                name = norm(os.path.basename(path.strip()).split(".ko")[0])
                modules.setdefault(name, {"path": path.strip(), "deps": deps.split()})
    except OSError:
        return None
    return modules


def alias_targets(rel, alias):
    """The modules a device alias (modules.alias, fnmatch patterns) resolves to: modprobe loads them all."""
    res = []
    try:
        with open(os.path.join(MODROOT, rel, "modules.alias")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == "alias" and fnmatch.fnmatchcase(alias, parts[1]):
                    if norm(parts[2]) not in res:
                        res.append(norm(parts[2]))
    except OSError:
        pass
    return res


def write_index(rel, modules, only=None):
    """modules: {name: {"path": relpath, "deps": [relpaths]}} -> modules.dep + modules.dep.bin.

    With `only` (a set of names) the text modules.dep keeps its other lines as they are."""
    base = os.path.join(MODROOT, rel)
    lines = []
    if only is not None:
        try:
            with open(os.path.join(base, "modules.dep")) as f:
                for line in f:
                    p = line.split(":", 1)[0]
                    if norm(os.path.basename(p).split(".ko")[0]) not in only:
                        lines.append(line)
        except OSError:
            pass
        names = [n for n in modules if n in only]
    else:
        names = list(modules)
    for name in sorted(names, key=lambda n: modules[n]["path"]):
        m = modules[name]
        lines.append("%s:%s\n" % (m["path"], "".join(" " + d for d in m["deps"])))
    tmp = os.path.join(base, ".modules.dep.tmp")
    with open(tmp, "w") as f:
        f.writelines(lines)
    os.replace(tmp, os.path.join(base, "modules.dep"))
    with open(tmp, "w") as f:
        json.dump({"format": "npuops-lab simulated modules.dep.bin", "release": rel,
                   "modules": modules}, f, indent=0, sort_keys=True)
    os.replace(tmp, os.path.join(base, "modules.dep.bin"))


def build_index(rel, only=None):
    """depmod: index every module of <rel>; with `only`, refresh just those entries (dkms)."""
    base = os.path.join(MODROOT, rel)
    found = scan_modules(rel)
    infos = {n: read_modfile(os.path.join(base, p)) or {} for n, p in found.items()}

    def closure(name):
        order, seen = [], set()

        def walk(n):
            for d in infos.get(n, {}).get("depends", "").split(","):
                d = norm(d.strip())
                if d and d in found and d not in seen:
                    seen.add(d)
                    order.append(found[d])
                    walk(d)
        walk(name)
        return order

    new = {n: {"path": p, "deps": closure(n)} for n, p in found.items()}
    if only is None:
        modules = new
    else:
        modules = load_index(rel) or {}
        for n in only:
            if n in new:
                modules[n] = new[n]
            else:
                modules.pop(n, None)
    write_index(rel, modules, only)


# ---------------------------------------------------------------- /sys/module state
def loaded(name):
    return os.path.isfile(os.path.join(SYSMOD, name, "initstate"))


def readf(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def writef(path, text):
    with open(path, "w") as f:
        f.write(text)


def holders(name):
    try:
        return sorted(os.listdir(os.path.join(SYSMOD, name, "holders")))
    except OSError:
        return []


def refcnt(name):
    try:
        return int(readf(os.path.join(SYSMOD, name, "refcnt"), "0"))
    except ValueError:
        return 0


def device_users(name):
    pat = MODULE_DEVICES.get(name)
    if not pat:
        return []
    rx = re.compile(pat)
    users = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        fddir = "/proc/%s/fd" % pid
        try:
            for fd in os.listdir(fddir):
                try:
                    target = os.readlink(os.path.join(fddir, fd))
                except OSError:
                    continue
                if rx.match(target):
                    users.append(int(pid))
                    break
        except OSError:
            continue
    return users


def do_insert(name, info):
    d = os.path.join(SYSMOD, name)
    os.makedirs(os.path.join(d, "holders"), exist_ok=True)
    if info.get("version"):
        writef(os.path.join(d, "version"), info["version"] + "\n")
    writef(os.path.join(d, "refcnt"), "0\n")
    writef(os.path.join(d, "srcversion"), info.get("srcversion", "0" * 23) + "\n")
    writef(os.path.join(d, "initstate"), "live\n")
    writef(os.path.join(d, ".vermagic"), info.get("vermagic", "") + "\n")
    for dep in [x for x in info.get("depends", "").split(",") if x]:
        dep = norm(dep)
        # a dependency of the simulated kernel itself (no file, see above) gets its /sys/module entry here
        os.makedirs(os.path.join(SYSMOD, dep, "holders"), exist_ok=True)
        writef(os.path.join(SYSMOD, dep, "refcnt"), "%d\n" % (refcnt(dep) + 1))
        writef(os.path.join(SYSMOD, dep, "holders", name), "")


def do_remove(name):
    d = os.path.join(SYSMOD, name)
    deps = []
    for dep in os.listdir(SYSMOD):
        if os.path.exists(os.path.join(SYSMOD, dep, "holders", name)):
            os.unlink(os.path.join(SYSMOD, dep, "holders", name))
            writef(os.path.join(SYSMOD, dep, "refcnt"), "%d\n" % max(0, refcnt(dep) - 1))
            deps.append(dep)
    for root, dirs, files in os.walk(d, topdown=False):
        for f in files:
            os.unlink(os.path.join(root, f))
        for x in dirs:
            os.rmdir(os.path.join(root, x))
    os.rmdir(d)
    return deps


def busy_reason(name):
    """None if removable, else (kind, detail)."""
    h = holders(name)
    if h:
        return ("holders", h)
    users = device_users(name)
    if users:
        return ("device", users)
    if refcnt(name) > 0:
        return ("refcnt", [])
    return None


# ------------------------------------------------------- the GPUs the driver refuses
PCI_DEVICES = "/run/npuops-lab/pci/devices"
KMSG = "/run/npuops-lab/kmsg"   # the simulated kernel log (npuops_fleet_kernel_log_file)


def kmsg(lines):
    """Append to the simulated kernel log in dmesg's form: [seconds since boot] text."""
    try:
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
    except (OSError, ValueError):
        up = 0.0
    os.makedirs(os.path.dirname(KMSG), exist_ok=True)
    with open(KMSG, "a") as f:
        for line in lines:
            f.write(("[%12.6f] %s\n" % (up, line)) if not line.startswith(" ") else line + "\n")


def refused_gpus(info):
    """The lab's GPUs (PCI_DEVICES) that this nvidia module refuses, as nv.c does: the open module a GPU
    the installed supported-gpus.json gives no kernelopen, the proprietary one a GPU marked kernelopen
    without gsp_proprietary_supported (in a table that marks any). -> [(address, pci id, lines)]."""
    tables = sorted(glob.glob("/usr/share/doc/*/supported-gpus.json"))
    try:
        chips = json.load(open(tables[0]))["chips"] if tables else []
    except (OSError, ValueError, KeyError):
        chips = []
    marked = any("gsp_proprietary_supported" in (c.get("features") or []) for c in chips)
    # the lab's open modules say so in their description (dkms.conf's, or the precompiled package's name)
    is_open = "open" in (info.get("description") or "").lower()
    out = []
    for addr in sorted(os.listdir(PCI_DEVICES)) if os.path.isdir(PCI_DEVICES) else []:
        dev = readf(os.path.join(PCI_DEVICES, addr, "device")).strip().lower()
        chip = next((c for c in chips if c.get("devid", "").lower() == dev), None)
        if chip is None:
            continue
        feats = chip.get("features") or []
        pci = "10de:%s" % dev[2:]
        if is_open and "kernelopen" not in feats:
            out.append((addr, pci, ["NVRM: The NVIDIA GPU %s (PCI ID: %s)" % (addr, pci),
                                    "               NVRM: installed in this system is not supported by open",
                                    "               NVRM: nvidia.ko because it does not include the required GPU",
                                    "               NVRM: System Processor (GSP).",
                                    "nvidia: probe of %s failed with error -1" % addr]))
        elif not is_open and marked and "kernelopen" in feats and "gsp_proprietary_supported" not in feats:
            out.append((addr, pci, ["NVRM: The NVIDIA GPU %s (PCI ID: %s)" % (addr, pci),
                                    "               NVRM: installed in this system requires use of the NVIDIA "
                                    "open kernel modules.",
                                    "NVRM: GPU %s: RmInitAdapter failed! (0x22:0x56:884)" % addr]))
    return out


REFUSED = "/run/npuops-lab/refused-gpus"  # the GPUs the loaded driver does not drive (the lab's nvidia-smi skips them)


def driver_init(mname, info):
    """nvidia.ko's init on the lab's GPUs: the kernel log it writes. The open module refuses a GPU without
    GSP at its probe: False (-ENODEV) when that left no GPU, as the real one then does not stay loaded.
    The proprietary module refuses a GPU that needs the open modules at the device's first open
    (RmInitAdapter): it stays loaded and that GPU is not seen (REFUSED)."""
    if mname != "nvidia" or not os.path.isdir(PCI_DEVICES):
        return True
    gpus = os.listdir(PCI_DEVICES)
    refused = refused_gpus(info)
    at_probe = [r for r in refused if "probe of" in r[2][-1]]
    lines = ["nvidia-nvlink: Nvlink Core is being initialized, major device number 511"]
    for _addr, _pci, msg in at_probe:
        lines += msg
    if at_probe:
        lines.append("NVRM: The NVIDIA probe routine failed for %d device(s)." % len(at_probe))
    if at_probe and len(at_probe) == len(gpus):
        lines += ["NVRM: None of the NVIDIA devices were initialized.",
                  "nvidia-nvlink: Unregistered Nvlink Core, major device number 511"]
        kmsg(lines)
        return False
    lines.append("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  %s  (npuops lab)" % info.get("version", ""))
    for _addr, _pci, msg in refused:
        if msg not in [m for _a, _p, m in at_probe]:
            lines += msg
    kmsg(lines)
    writef(REFUSED, "".join(addr + "\n" for addr, _pci, _msg in refused))
    return True


# ---------------------------------------------------------------- tools
def err(prog, msg):
    sys.stderr.write("%s: %s\n" % (prog, msg))


def modprobe(argv):
    prog = "modprobe"
    dry = quiet = remove = use_all = first_time = verbose = False
    rel = None
    names = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            names.extend(argv[i + 1:])
            break
        if a in ("-n", "--dry-run", "--show"):
            dry = True
        elif a in ("-q", "--quiet"):
            quiet = True
        elif a in ("-r", "--remove"):
            remove = True
        elif a in ("-a", "--all"):
            use_all = True
        elif a in ("-v", "--verbose"):
            verbose = True
        elif a == "--first-time":
            first_time = True
        elif a in ("-S", "--set-version"):
            i += 1
            rel = argv[i]
        elif a.startswith("--set-version="):
            rel = a.split("=", 1)[1]
        elif a in ("-b", "--use-blacklist", "-s", "--syslog", "-i", "--ignore-install",
                   "--ignore-remove", "-f", "--force"):
            pass
        elif a.startswith("-") and len(names) == 0:
            pass
        else:
            names.append(a)
        i += 1
    if not names:
        err(prog, "ERROR: missing parameters. See -h.")
        return 1
    if not (use_all or remove):
        names = names[:1]  # the rest are module parameters
    rel = rel or release()
    rc = 0
    for raw in names:
        name = norm(raw)
        if remove:
            rc |= modprobe_remove(name, dry, quiet, first_time)
        else:
            rc |= modprobe_insert(name, rel, dry, quiet, first_time, verbose)
    return rc


def modprobe_insert(name, rel, dry, quiet, first_time, verbose):
    prog = "modprobe"
    moddir = os.path.join(MODROOT, rel)
    index = load_index(rel)
    targets = alias_targets(rel, name) if ":" in name else []
    if targets:
        rc = 0
        for target in reversed(targets):  # depmod lists the users first
            rc |= modprobe_insert(target, rel, dry, quiet, False, verbose)
        return rc
    if index is None or name not in index:
        if not quiet:
            err(prog, "FATAL: Module %s not found in directory %s" % (name, moddir))
        return 1
    entry = index[name]
    chain = list(reversed(entry.get("deps", []))) + [entry["path"]]
    for relpath in chain:
        full = os.path.join(moddir, relpath)
        info = read_modfile(full)
        fname = norm(os.path.basename(relpath).split(".ko")[0])
        if info is None:
            if not quiet:
                err(prog, "FATAL: could not load %s: No such file or directory" % full)
            return 1
        mname = norm(info.get("name") or fname)
        if loaded(mname):
            if fname == name and first_time:
                if not quiet:
                    err(prog, "ERROR: could not insert '%s': Module already in kernel" % name)
                return 1
            continue
        if verbose or dry:
            print("insmod %s " % full)
        if dry:
            continue
        vm = info.get("vermagic", "").split()
        if not vm or vm[0] != release():
            if not quiet:
                err(prog, "ERROR: could not insert '%s': Exec format error" % mname)
            return 1
        if not driver_init(mname, info):
            if not quiet:
                err(prog, "ERROR: could not insert '%s': No such device" % mname)
            return 1
        do_insert(mname, info)
    return 0


def modprobe_remove(name, dry, quiet, first_time):
    prog = "modprobe"
    if not loaded(name):
        if first_time:
            if not quiet:
                err(prog, "FATAL: Module %s is not in kernel." % name)
            return 1
        return 0
    why = busy_reason(name)
    if why:
        if not quiet:
            err(prog, "FATAL: Module %s is in use." % name)
        return 1
    if dry:
        print("rmmod %s" % name)
        return 0
    for dep in do_remove(name):
        if loaded(dep) and busy_reason(dep) is None:
            modprobe_remove(dep, dry, True, False)
    return 0


def rmmod(argv):
    prog = "rmmod"
    names = [norm(os.path.basename(a).split(".ko")[0]) for a in argv if not a.startswith("-")]
    if not names:
        err(prog, "ERROR: missing module name.")
        return 1
    rc = 0
    for name in names:
        if not loaded(name):
            err(prog, "ERROR: Module %s is not currently loaded" % name)
            rc = 1
            continue
        why = busy_reason(name)
        if why:
            if why[0] == "holders":
                err(prog, "ERROR: Module %s is in use by: %s" % (name, " ".join(why[1])))
            else:
                err(prog, "ERROR: Module %s is in use" % name)
            rc = 1
            continue
        do_remove(name)
    return rc


def insmod(argv):
    prog = "insmod"
    files = [a for a in argv if not a.startswith("-")]
    if not files:
        err(prog, "ERROR: missing filename.")
        return 1
    path = files[0]
    info = read_modfile(path)
    if info is None:
        err(prog, "ERROR: could not load module %s: No such file or directory" % path)
        return 1
    name = norm(info.get("name") or os.path.basename(path).split(".ko")[0])
    if loaded(name):
        err(prog, "ERROR: could not insert module %s: File exists" % path)
        return 1
    vm = info.get("vermagic", "").split()
    if not vm or vm[0] != release():
        err(prog, "ERROR: could not insert module %s: Invalid module format" % path)
        return 1
    for dep in [norm(x) for x in info.get("depends", "").split(",") if x]:
        if not loaded(dep):
            err(prog, "ERROR: could not insert module %s: Unknown symbol in module" % path)
            return 1
    if not driver_init(name, info):
        err(prog, "ERROR: could not insert module %s: No such device" % path)
        return 1
    do_insert(name, info)
    return 0


def lsmod(argv):
    print("Module                  Size  Used by")
    try:
        names = sorted(os.listdir(SYSMOD))
    except OSError:
        names = []
    for name in names:
        if not loaded(name):
            continue
        h = holders(name)
        print("%-19s %8d  %d %s" % (name, 16384, refcnt(name), ",".join(h)))
    return 0


def modinfo(argv):
    prog = "modinfo"
    rel = None
    field = None
    names = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-k", "--set-version"):
            i += 1
            rel = argv[i]
        elif a.startswith("--set-version="):
            rel = a.split("=", 1)[1]
        elif a in ("-F", "--field"):
            i += 1
            field = argv[i]
        elif a.startswith("--field="):
            field = a.split("=", 1)[1]
        elif a in ("-n", "--filename"):
            field = "filename"
        elif a.startswith("-"):
            pass
        else:
            names.append(a)
        i += 1
    rel = rel or release()
    if not names:
        err(prog, "ERROR: missing module or filename.")
        return 1
    rc = 0
    for raw in names:
        if "/" in raw:
            path = raw
        else:
            index = load_index(rel) or {}
            ent = index.get(norm(raw))
            path = os.path.join(MODROOT, rel, ent["path"]) if ent else None
        info = read_modfile(path) if path else None
        if info is None:
            err(prog, "ERROR: Module %s not found." % raw)
            rc = 1
            continue
        fields = [("filename", path)]
        for k in ("version", "license", "description", "author", "srcversion"):
            if info.get(k):
                fields.append((k, info[k]))
        fields.append(("depends", info.get("depends", "")))
        fields.append(("retpoline", "Y"))
        fields.append(("name", info.get("name", norm(raw))))
        fields.append(("vermagic", info.get("vermagic", "")))
        if field:
            for k, v in fields:
                if k == field:
                    print(v)
        else:
            for k, v in fields:
                print("%-16s%s" % (k + ":", v))
    return rc


def depmod(argv):
    prog = "depmod"
    rels = []
    quick = False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-b", "--basedir", "-F", "--filesyms", "-E", "--symvers", "-C", "--config"):
            i += 1
        elif a in ("-A", "--quick"):
            quick = True
        elif a.startswith("-"):
            pass
        elif re.match(r"^\d+\.\d+", a):
            rels.append(a)
        i += 1
    if not rels:
        rels = [release()]
    for rel in rels[:1]:
        if not os.path.isdir(os.path.join(MODROOT, rel)):
            err(prog, "ERROR: could not open directory %s: No such file or directory"
                % os.path.join(MODROOT, rel))
            err(prog, "FATAL: could not search modules: No such file or directory")
            return 1
        if quick and load_index(rel) is not None:
            dep = os.path.join(MODROOT, rel, "modules.dep")
            newest = max([os.path.getmtime(os.path.join(MODROOT, rel, p))
                          for p in scan_modules(rel).values()] or [0])
            if os.path.getmtime(dep) >= newest:
                continue
        build_index(rel)
    return 0


TOOLS = {"modprobe": modprobe, "rmmod": rmmod, "insmod": insmod, "lsmod": lsmod,
         "modinfo": modinfo, "depmod": depmod}


def main():
    prog = os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    if prog in ("kmod", "kmodsim.py", "kmodsim"):
        if args and args[0] == "index-add":
            # used by the simulated dkms: refresh the index entries of the named modules only
            build_index(args[1], only={norm(n) for n in args[2:]})
            return 0
        if not args or args[0] not in TOOLS:
            sys.stderr.write("kmod (npuops-lab simulation): use modprobe/rmmod/insmod/lsmod/"
                             "modinfo/depmod\n")
            return 1
        prog, args = args[0], args[1:]
    return TOOLS[prog](args)


if __name__ == "__main__":
    sys.exit(main())
