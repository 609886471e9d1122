#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_apt_install
short_description: Install a driver package set at exact versions in one apt transaction, and check it moved
version_added: 0.1.0
description:
  - Runs on the host. Installs every package of O(packages) at its version with one
    C(apt-get install name=version ...), non-interactive (C(DEBIAN_FRONTEND=noninteractive), needrestart
    in list mode so it neither prompts nor restarts services under the node), keeping existing
    configuration files.
  - apt's exit code is not the verdict. After the run C(dpkg-query) reads the installed version of
    every package; one that is not at its version (kept back, left behind by a held package, not
    installed) fails the task, also when apt exited 0.
  - A failure quotes apt's own lines - the unmet-dependency block, C(kept back) list, C(E:) lines,
    dpkg's C(error processing) lines and a DKMS build failure with its kernel and C(make.log) path.
  - Holds are not touched - release the packages apt must move first (role C(package_holds), entry
    point C(unhold)); a held package apt would have to move makes apt refuse, and the message says which.
options:
  packages:
    description:
      - Package name -> exact package version (with Debian revision) to install.
    type: dict
    required: true
  remove:
    description:
      - Packages to remove in the same transaction (apt's C(name-) form) - the old branch's or old
        flavour's packages a branch change leaves behind, per-kernel module packages included. A name
        that is not installed is ignored; every installed architecture's copy goes (C(libfoo:i386) too).
        After the run every one of them must be gone, else the task fails.
      - The transaction is simulated first (C(apt-get --simulate)); when apt would remove a package not
        named here (it resolves a broken dependency by removing its user - the old branch's meta
        package, the other module flavour through Conflicts), the task fails before anything is
        installed, naming them (RV(unasked_removals)).
    type: list
    elements: str
    default: []
  allow_downgrade:
    description:
      - Pass C(--allow-downgrades).
    type: bool
    default: false
  lock_timeout:
    description:
      - Seconds apt waits for dpkg's lock (C(DPkg::Lock::Timeout)).
    type: int
    default: 60
  simulate_release:
    description:
      - Check mode only - held packages the real run would release before the transaction (the
        driver family, as role C(driver_upgrade) does). The simulation reads a copy of dpkg's status
        in which these are not held (C(-o Dir::State::status=)), so it answers as the real
        transaction would; the host's holds are not touched.
    type: list
    elements: str
    default: []
  download:
    description:
      - Check mode only - after a simulation that passes, fetch the transaction's .debs into apt's cache
        (C(apt-get install --download-only), apt's own retries twice) and check that every one is there
        (in C(/var/cache/apt/archives) at its size, or, from a C(file:) source, at its path), after waiting up to
        O(lock_timeout) for apt's archives lock (an C(apt-daily) download), so that an
        exact version the archive dropped, or a mirror that answers 404, fails here - before any cordon -
        naming the package, its URL and apt's answer. The install then takes them from apt's cache.
      - Fills apt's cache only; dpkg's state and the holds are untouched (the task reports no change).
    type: bool
    default: false
  download_min_free:
    description:
      - With O(download) - percent of the filesystem of apt's cache that must stay free after the fetch; less
        fails the task before fetching anything. Default 15, the kubelet's default hard eviction threshold for
        C(imagefs.available) (its C(nodefs.available) is 10), since that filesystem often holds the container
        runtime's and the kubelet's data too.
    type: int
    default: 15
  host:
    description:
      - The host's name in the download failure's message (the inventory name). Default the host's own name.
    type: str
  driver_version:
    description:
      - The driver version of the transaction (C(590.48.01)). With O(driver_families), a transaction in which
        apt would install a package of those families at another driver version fails before anything is
        installed, naming each package and the version apt chose (RV(off_target)) - apt's candidate for a
        dependency the transaction does not name (a name in O(packages) is at the version asked and not judged).
        NVIDIA's CUDA repository from branch 590 names its packages without the branch, so the candidate is
        the newest branch unless a pinning package is already active (one installed in the same transaction
        is not yet). Versions that are not driver versions (C(13.3.1-1),
        a pinning package's C(610-2ubuntu1)) are not judged.
    type: str
  driver_families:
    description: fnmatch patterns of the driver's package names (the vendor profile's C(package_families)).
    type: list
    elements: str
    default: []
  gpu_support:
    description:
      - Check mode only - after a simulation that passes, check that the target's kernel modules can drive
        every GPU of the host, from the driver's own table of the GPUs it supports (NVIDIA's
        C(supported-gpus.json), read out of the target's packages in apt's cache, so after O(download)).
        A GPU the table gives only to the other module flavour (C(kernelopen) or not,
        C(gsp_proprietary_supported)) or to a legacy branch (C(legacybranch)) fails the task
        before any cordon, naming each GPU (PCI address, PCI ID, name), what would drive it and where the
        table came from (RV(gpu_support)).
      - No GPU, or no table in the target's packages (a warning), is reported, not refused; nor is a GPU the
        table does not list (C(unlisted); NVIDIA's own tools take an unknown id for a GPU newer than the table).
        A table that marks no chip C(gsp_proprietary_supported) (before branch 560) gives every C(kernelopen)
        chip to both flavours. Each package is read through C(dpkg-deb --fsys-tarfile) within 120 seconds.
    type: dict
    suboptions:
      module_flavour:
        description: The kernel modules the target installs (the flavour's C(module_flavour)).
        type: str
        choices: [open, proprietary]
        required: true
      gpus:
        description:
          - The host's GPUs, as M(npuops.fleet.npu_driver_facts) returns them
            (RV(npuops.fleet.npu_driver_facts#module:pci_gpus)).
        type: list
        elements: dict
        default: []
      files:
        description: Globs of the table's path inside the packages, without the leading C(./).
        type: list
        elements: str
        default: []
      flavour:
        description: The packaging flavour's name, for the message.
        type: str
      other_flavours:
        description: The flavours with the other kernel modules, named in the message as the way out.
        type: list
        elements: str
        default: []
      packages:
        description:
          - fnmatch patterns of the package names searched for the table (the small packages that carry it,
            so that the libraries are never read); empty searches every target package.
        type: list
        elements: str
        default: []
      remedy:
        description: What the caller can set instead, appended to the refusal.
        type: str
attributes:
  check_mode:
    support: full
    description:
      - Runs C(apt-get --simulate); the version check is skipped, apt's refusal still fails. Lists what the
        transaction would download (C(--print-uris)); with O(download), fetches it into apt's cache.
  diff_mode:
    support: none
    description: No diff.
author:
  - npuops maintainers (@npuops)
"""

EXAMPLES = r"""
- name: Install the driver set of 550.90.07
  npuops.fleet.npu_apt_install:
    packages:
      nvidia-driver-550-server-open: 550.90.07-0ubuntu1
      nvidia-dkms-550-server-open: 550.90.07-0ubuntu1
      libnvidia-compute-550-server: 550.90.07-0ubuntu1
"""

RETURN = r"""
unasked_removals:
  description:
    - Packages the simulated transaction would have removed that O(remove) does not name; the task
      failed before installing anything.
  returned: failure
  type: list
  elements: str
installed:
  description: Package -> version dpkg has after the run (null when not installed), for O(packages).
  returned: always
  type: dict
before:
  description: Package -> version before the run (null when not installed), for O(packages).
  returned: always
  type: dict
not_at_target:
  description: The packages of O(packages) not at their version after the run -> their version.
  returned: always
  type: dict
still_installed:
  description: The packages of O(remove) still installed after the run -> their version (empty in check mode).
  returned: always
  type: dict
kept_back:
  description: Packages apt listed under C(The following packages have been kept back).
  returned: always
  type: list
  elements: str
unmet:
  description: apt's blocking unmet-dependency lines (Depends, PreDepends, Conflicts, Breaks).
  returned: always
  type: list
  elements: str
dkms_build_failures:
  description: Failed DKMS builds - C(kernel), C(arch), C(log) (the C(make.log) path), C(message).
  returned: always
  type: list
  elements: dict
dpkg_failed:
  description: Packages dpkg could not configure.
  returned: always
  type: list
  elements: str
lines:
  description: apt's lines that explain the failure, as quoted in the message.
  returned: always
  type: list
  elements: str
rc:
  description: apt-get's exit code.
  returned: always
  type: int
transaction:
  description:
    - Check mode - what apt would do, from its C(Inst) / C(Remv) lines - C(install) (each C(name),
      C(from) = the installed version or null for a new package, C(to)) and C(remove) (each C(name),
      C(version)), in apt's order.
  returned: in check mode
  type: dict
  sample: {install: [{name: nvidia-utils-550-server, from: null, to: 550.90.07-0ubuntu1}],
           remove: [{name: nvidia-utils-535-server, version: 535.183.06-0ubuntu1}]}
downloads:
  description:
    - Check mode - the .debs the transaction needs that apt's cache does not hold yet, in apt's order,
      each C(name), C(version), C(uri), C(file) (its name in apt's cache), C(size) (bytes) and C(hash).
  returned: in check mode
  type: list
  elements: dict
download_bytes:
  description: Check mode - the sum of RV(downloads)' sizes, bytes.
  returned: in check mode
  type: int
off_target:
  description:
    - With O(driver_version) - the packages of O(driver_families) apt would install at another driver version,
      each C(name) and C(to) (apt's version); the task failed when not empty.
  returned: failure
  type: list
  elements: dict
  sample: [{name: nvidia-modprobe, to: 610.43.02-1}]
fetch_failures:
  description:
    - With O(download) - what apt could not fetch, each C(name), C(version), C(uri) and C(why) (apt's
      answer, such as C(404  Not Found) and the address it asked); the task failed.
  returned: failure
  type: list
  elements: dict
gpu_support:
  description:
    - With O(gpu_support) - C(checked) (false when the host has no GPU or the packages carry no table,
      C(why) says which), C(source) (C(<deb>:<member>)), C(gpus) (how many were checked), C(unsupported)
      (each C(address), C(device_id), C(name), C(works_with), C(why); the task failed when not empty) and
      C(unlisted) (each C(address), C(device_id); not in the table, not judged).
  returned: in check mode, with O(gpu_support)
  type: dict
  sample: {checked: true, gpus: 8, unsupported: [], unlisted: [],
           source: "/var/cache/apt/archives/nvidia-driver-550-server_550.90.07-0ubuntu1_amd64.deb:\
             usr/share/doc/nvidia-driver-550-server/supported-gpus.json"}
stdout:
  description: apt-get's standard output.
  returned: always
  type: str
stderr:
  description: apt-get's standard error.
  returned: always
  type: str
"""

import fnmatch  # noqa: E402
import glob  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import tempfile  # noqa: E402
from urllib.parse import unquote  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.npuops.fleet.plugins.module_utils.host import (  # noqa: E402
    apt_output,
    dpkg_lock,
    gpu_support,
    packaging,
)

ENV = {
    "DEBIAN_FRONTEND": "noninteractive",
    "NEEDRESTART_MODE": "l",
    "NEEDRESTART_SUSPEND": "1",
    "LC_ALL": "C",
}
ARCHIVES = "/var/cache/apt/archives"
FETCH_RETRIES = 2


def missing_downloads(downloads, archives=None):
    """The entries of ``downloads`` (:func:`apt_output.parse_print_uris`) apt's cache does not hold:
    a fetched .deb is ``archives/<file>`` at its size; a ``file:`` source's is used where it lies."""
    missing = []
    for d in downloads:
        if d["uri"].startswith("file:"):
            present = os.path.isfile(unquote(d["uri"][len("file:"):]))
        else:
            path = os.path.join(archives or ARCHIVES, d["file"])
            present = os.path.isfile(path) and os.path.getsize(path) == d["size"]
        if not present:
            missing.append(d)
    return missing


def free_after(path, size):
    """``(free bytes after ``size`` more, the filesystem's size)`` for the filesystem holding ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize - size, st.f_blocks * st.f_frsize


def download(module, argv, host):
    """Fetch what the transaction ``argv`` (an ``apt-get ... install`` line) needs into apt's cache and
    check it is all there; fails the module naming each package, URL and apt's answer. Returns
    ``{"downloads", "download_bytes"}``."""
    at = argv.index("install")
    rc, out, err = module.run_command(argv[:at] + ["-qq", "--print-uris"] + argv[at:], environ_update=ENV)
    if rc != 0:
        module.fail_json(msg="apt-get --print-uris failed on %s (rc %s): %s"
                         % (host, rc, " / ".join(apt_output.failure_lines(out + "\n" + err)) or err.strip()),
                         changed=False, rc=rc, stdout=out, stderr=err)
    downloads = apt_output.parse_print_uris(out)
    result = dict(downloads=downloads, download_bytes=sum(d["size"] for d in downloads))
    if not module.params["download"] or not downloads:
        return result
    # /var usually holds the container runtime's and the kubelet's data too: a fetch that leaves less
    # than this free would get the node's pods evicted (kubelet's DiskPressure) before any cordon
    left, total = free_after(ARCHIVES if os.path.isdir(ARCHIVES) else "/", result["download_bytes"])
    floor = total * module.params["download_min_free"] / 100.0
    if left < floor:
        module.fail_json(
            msg="not fetching the target packages on %s: %d MiB would leave %d MiB free on the filesystem of %s, "
            "under download_min_free=%d%% of it (%d MiB; the kubelet evicts pods when its filesystems run low): "
            "free space there first" % (host, result["download_bytes"] >> 20, max(left, 0) >> 20, ARCHIVES,
                                        module.params["download_min_free"], int(floor) >> 20),
            changed=False, **result,
        )
    # apt-daily's download holds apt's archives lock, which DPkg::Lock::Timeout does not wait for
    lock = dpkg_lock.wait_for_locks([dpkg_lock.ARCHIVES_LOCK], module.params["lock_timeout"], 1.0)
    if not lock["free"]:
        module.fail_json(msg=dpkg_lock.timeout_message(lock["holders"], lock["waited"], module.params["lock_timeout"]),
                         changed=False, **result)
    rc, out, err = module.run_command(
        argv[:at] + ["--download-only", "-o", "Acquire::Retries=%d" % FETCH_RETRIES] + argv[at:], environ_update=ENV
    )
    parsed = apt_output.fetch_failures(out + "\n" + err)
    missing = missing_downloads(downloads)
    if rc != 0 or parsed or missing:
        failed_uris = {unquote(f["uri"]) for f in parsed}
        absent = [dict(uri=d["uri"], why="not in apt's cache after the download", name=d["name"],
                       version=d["version"]) for d in missing if unquote(d["uri"]) not in failed_uris]
        failures = parsed + absent
        if parsed:
            what = "; ".join("%s %s from %s: %s" % (f["name"] or "?", f["version"], f["uri"], f["why"])
                             for f in failures)
        else:  # apt stopped before fetching (a lock, a full disk, its own error): its words first
            words = " / ".join(apt_output.failure_lines(out + "\n" + err))
            gone = ", ".join("%s %s" % (f["name"], f["version"]) for f in absent)
            what = "; ".join(w for w in (words, gone and gone + " not in apt's cache after the download") if w)
            what = what or "apt-get exited %s" % rc
        lost = any(f["why"].startswith("404") for f in failures)
        module.fail_json(
            msg="cannot download the target packages from the apt sources of %s before any cordon: %s%s"
            % (host, what, " (the archive dropped that version since the host's lists were written, or the mirror "
               "lost the file: refresh the lists, check the mirror, then rerun)" if lost else ""),
            changed=False, fetch_failures=failures, rc=rc, stdout=out, stderr=err, **result,
        )
    return result


def cached_debs(targets, downloads, archives=None, packages=None):
    """The .debs of the transaction apt's cache holds: those just fetched, and the target versions fetched
    before (apt names them ``<name>_<version, ':' as %3a>_<arch>.deb``); with ``packages`` (fnmatch
    patterns of package names), only those packages'."""
    archives = archives or ARCHIVES
    want = [(n, v) for n, v in targets.items()
            if not packages or any(fnmatch.fnmatchcase(n.split(":", 1)[0], pat) for pat in packages)]
    names = {n.split(":", 1)[0] for n, _v in want}
    paths = set()
    for d in downloads:
        if d["name"].split(":", 1)[0] not in names:
            continue
        path = unquote(d["uri"][len("file:"):]) if d["uri"].startswith("file:") else os.path.join(archives, d["file"])
        if os.path.isfile(path):
            paths.add(path)
    for name, version in want:
        paths.update(glob.glob(os.path.join(archives, "%s_%s_*.deb" % (glob.escape(name.split(":", 1)[0]),
                                                                       glob.escape(version.replace(":", "%3a"))))))
    return sorted(paths)


def check_gpus(module, targets, downloads, host):
    """O(gpu_support): fail naming each GPU the target's modules cannot drive; else the result's
    ``gpu_support`` (a warning when no table could be read)."""
    g = module.params["gpu_support"]
    gpus = g["gpus"] or []
    if not gpus:
        return dict(checked=False, why="no GPU of the vendor on the PCI bus", gpus=0, unsupported=[], unlisted=[])
    try:
        found = gpu_support.table_from_debs(cached_debs(targets, downloads, packages=g["packages"] or None),
                                            g["files"], module.get_bin_path("dpkg-deb", required=True))
    except OSError as e:
        module.fail_json(msg="cannot read the target's packages on %s for their supported-gpus.json: %s" % (host, e),
                         changed=False)
    if not found:
        where = " or ".join(g["packages"] or ["the target's packages"])
        why = ("not checked: the target's packages are not in apt's cache (not fetched: a plan, or a run without "
               "download; the window with download fetches them, then checks)" if not module.params["download"] else
               "none of %s in the transaction has %s" % (where, " or ".join(g["files"] or ["-"])))
        if module.params["download"]:
            module.warn("the GPUs of %s were not checked against the target driver's supported-gpus.json: %s"
                        % (host, why))
        return dict(checked=False, gpus=len(gpus), unsupported=[], unlisted=[], why=why)
    text, deb, member = found
    source = "%s:%s" % (deb, member)
    try:
        chips = gpu_support.parse_supported_gpus(text)
    except ValueError as e:
        module.fail_json(msg="the target's GPU table %s on %s cannot be read: %s" % (source, host, e), changed=False)
    judged = gpu_support.judge(gpus, chips, g["module_flavour"])
    bad = judged["unsupported"]
    res = dict(checked=True, source=source, gpus=len(gpus), **judged)
    if bad:
        ways = {tuple(b["works_with"]) for b in bad}
        other = [w for w in gpu_support.MODULE_FLAVOURS if w != g["module_flavour"]][0]
        if ways == {(other,)}:
            way = "the %s kernel modules drive %s: choose a flavour with them (%s)" % (
                other, "it" if len(bad) == 1 else "them", ", ".join(g["other_flavours"]) or "none in the profile")
        elif all(w == (other,) or w[0].startswith("legacy") for w in ways):
            way = "a GPU left to a legacy branch needs that branch, not this target"
        else:
            way = "no one flavour of this driver drives them all"
        module.fail_json(
            msg="preflight: the target's %s kernel modules%s cannot drive %d of the %d GPU(s) of %s, nothing was "
            "changed: %s; %s%s (NVIDIA's table %s)"
            % (g["module_flavour"], " (packaging %s)" % g["flavour"] if g.get("flavour") else "", len(bad), len(gpus),
               host, gpu_support.describe(bad), way, "; " + g["remedy"] if g.get("remedy") else "", source),
            changed=False, gpu_support=res,
        )
    return res


def installed(module, names):
    """The installed instances of ``names`` (dpkg state ``ii``/``hi``): ``[(name, version)]``, the name as
    dpkg's ``${binary:Package}`` gives it: ``libfoo:i386`` for a foreign architecture's copy, ``libfoo``
    or ``libfoo:amd64`` for the native one. ``libfoo-`` alone removes only the native copy, and a 32-bit
    copy left behind fails the transaction after it ran."""
    dpkg_query = module.get_bin_path("dpkg-query", required=True)
    _rc, out, _err = module.run_command(
        [dpkg_query, "-W", "-f=${binary:Package}\t${Version}\t${db:Status-Abbrev}\n"] + list(names),
        environ_update={"LC_ALL": "C"},
    )
    wanted = set(names)
    rows = []
    for line in (out or "").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0].split(":", 1)[0] in wanted and parts[2][1:2] == "i":
            rows.append((parts[0], parts[1]))
    return rows


def versions(module, names):
    """{name: installed version or None} from dpkg-query (a package in state ``ii``/``hi`` only)."""
    res = {n: None for n in names}
    for pkg, ver in installed(module, names):
        res[pkg.split(":", 1)[0]] = ver
    return res


def released_status(module, names, status="/var/lib/dpkg/status"):
    """Path of a copy of dpkg's status with ``names`` no longer held, alone in a private temporary
    folder (apt takes its lock files beside the status it is given; the caller removes the folder)."""
    try:
        with open(status) as f:
            text = f.read()
    except OSError as exc:
        module.fail_json(msg="cannot read %s for the simulation: %s" % (status, exc))
    path = os.path.join(tempfile.mkdtemp(prefix="npuops-dpkg-status."), "status")
    with open(path, "w") as f:
        f.write(apt_output.release_holds_in_status(text, names))
    return path


def main():
    module = AnsibleModule(
        argument_spec=dict(
            packages=dict(type="dict", required=True),
            allow_downgrade=dict(type="bool", default=False),
            lock_timeout=dict(type="int", default=60),
            simulate_release=dict(type="list", elements="str", default=[]),
            remove=dict(type="list", elements="str", default=[]),
            download=dict(type="bool", default=False),
            download_min_free=dict(type="int", default=15),
            host=dict(type="str"),
            driver_version=dict(type="str"),
            driver_families=dict(type="list", elements="str", default=[]),
            gpu_support=dict(type="dict", options=dict(
                module_flavour=dict(type="str", choices=list(gpu_support.MODULE_FLAVOURS), required=True),
                gpus=dict(type="list", elements="dict", default=[]),
                files=dict(type="list", elements="str", default=[]),
                flavour=dict(type="str"),
                other_flavours=dict(type="list", elements="str", default=[]),
                packages=dict(type="list", elements="str", default=[]),
                remedy=dict(type="str"),
            )),
        ),
        supports_check_mode=True,
    )
    p = module.params
    targets = {str(k): str(v) for k, v in p["packages"].items()}
    if not targets:
        module.fail_json(msg="packages must name at least one package")
    both = sorted(set(targets) & set(p["remove"]))
    if both:
        module.fail_json(msg="packages to install and to remove overlap: %s" % ", ".join(both))
    apt_get = module.get_bin_path("apt-get", required=True)
    before = versions(module, targets)
    gone = installed(module, p["remove"]) if p["remove"] else []
    removing = {pkg.split(":", 1)[0]: ver for pkg, ver in gone}
    argv = [
        apt_get,
        "-y",
        "-q",
        "-o",
        "Dpkg::Options::=--force-confdef",
        "-o",
        "Dpkg::Options::=--force-confold",
        "-o",
        "DPkg::Lock::Timeout=%d" % p["lock_timeout"],
    ]
    if p["allow_downgrade"]:
        argv.append("--allow-downgrades")
    status_copy = None
    if module.check_mode:
        argv.append("--simulate")
        if p["simulate_release"]:
            status_copy = released_status(module, p["simulate_release"])
            argv += ["-o", "Dir::State::status=%s" % status_copy]
    argv += ["install"] + ["%s=%s" % (n, v) for n, v in sorted(targets.items())]
    argv += ["%s-" % pkg for pkg in sorted({pkg for pkg, _ver in gone})]
    # apt resolves a broken dependency by removing its user (a meta package of the old branch, the
    # other module flavour through Conflicts) and -y accepts that: simulate first, and refuse a
    # transaction that removes anything it does not name, before dpkg touches the host
    fetched = {}
    try:
        if module.check_mode:
            rc, out, err = module.run_command(argv, environ_update=ENV)
            sim_out = out
        else:
            _sim_rc, sim_out, _sim_err = module.run_command(argv[:1] + ["--simulate"] + argv[1:], environ_update=ENV)
        simulated = apt_output.simulated_transaction(sim_out)
        unasked = sorted(
            {r["name"].split(":", 1)[0] for r in simulated["remove"]}
            - set(removing)
            - set(p["remove"])
        )
        off = []
        if p["driver_version"] and p["driver_families"]:
            # what the transaction names at an exact version is not apt's candidate (a pinning package's own)
            rows = [r for r in simulated["install"] if r["name"].split(":", 1)[0] not in targets]
            off = packaging.off_target(rows, p["driver_families"], p["driver_version"])
        if module.check_mode and rc == 0 and not unasked and not off:
            # the same transaction, against the same (released) status copy, without --simulate
            fetched = download(module, [a for a in argv if a != "--simulate"], p["host"] or socket.gethostname())
            if p["gpu_support"]:
                fetched["gpu_support"] = check_gpus(module, targets, fetched.get("downloads") or [],
                                                    p["host"] or socket.gethostname())
    finally:
        if status_copy:
            shutil.rmtree(os.path.dirname(status_copy), ignore_errors=True)
    if unasked:
        module.fail_json(
            msg="apt would also remove %s, which this transaction does not name (a dependency of the old "
            "set breaks): nothing was installed; name them in remove or install what keeps them" % ", ".join(unasked),
            unasked_removals=unasked,
            transaction=simulated,
            changed=False,
        )
    if off:
        module.fail_json(
            msg="%s, target %s, on %s: apt takes its candidate for a package the transaction does not name, and no "
            "pinning package active yet holds it at the target (one installed by this transaction is not); nothing "
            "was installed: install the target's pinning package first, or name the package in the target set"
            % ("; ".join("candidate for %s is %s" % (o["name"], o["to"]) for o in off), p["driver_version"],
               p["host"] or socket.gethostname()),
            off_target=off,
            transaction=simulated,
            changed=False,
        )
    if not module.check_mode:
        rc, out, err = module.run_command(argv, environ_update=ENV)
    after = before if module.check_mode else versions(module, targets)
    judged = apt_output.install_outcome(rc, out, err, targets, targets if module.check_mode else after)
    left = {} if module.check_mode or not removing else {n: v for n, v in versions(module, removing).items() if v}
    if left and judged["ok"]:
        judged["ok"] = False
        judged["msg"] = "apt exited %d but left installed what the transaction removes: %s" % (
            rc,
            ", ".join("%s %s" % nv for nv in sorted(left.items())),
        )
    changed = (
        (rc == 0 and (any(before[n] != targets[n] for n in targets) or bool(removing)))
        if module.check_mode
        else (after != before or bool(removing))
    )
    result = dict(
        changed=changed,
        installed=after,
        before=before,
        not_at_target=judged["not_at_target"],
        still_installed=left,
        kept_back=judged["kept_back"],
        unmet=judged["unmet"],
        dkms_build_failures=judged["dkms_build_failures"],
        dpkg_failed=judged["dpkg_failed"],
        lines=judged["lines"],
        rc=rc,
        stdout=out,
        stderr=err,
    )
    if module.check_mode:
        result["transaction"] = simulated  # check mode: out is the simulation
        result.update(fetched)
    if not judged["ok"]:
        module.fail_json(msg=judged["msg"], **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
