# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""What apt and dpkg print when a driver install goes wrong: pure parsers (no I/O).

* :func:`unmet_dependencies` - the ``The following packages have unmet dependencies:`` block
  (``pkg : Depends: dep (>= V) but W is to be installed``, continuation lines without the package);
* :func:`apt_errors` - ``E:`` lines, also inside a message that quotes apt (Ansible's ``failed: E: ...``);
* :func:`kept_back` - names under ``The following packages have been kept back:``;
* :func:`failure_lines` - the lines of apt's output that explain a failure, for quoting in a message;
* :func:`blocking_kernels` / :func:`unsatisfied` - what the unmet lines mean (per-kernel precompiled
  module packages pinning ``nvidia-kernel-common-*``, a dependency left at an older version);
* :func:`parse_dpkg_l`, :func:`interrupted_state` - ``dpkg -l`` rows and states other than ``ii``;
* :func:`dpkg_failed_packages` - packages dpkg could not configure;
* :func:`parse_apt_list`, :func:`parse_dpkg_actions`, :func:`branch_drift` - transitional packages: the
  branch in a package name is not its version;
* :func:`parse_print_uris`, :func:`fetch_failures` - what a transaction would download, and what apt could
  not (``--print-uris``, ``E: Failed to fetch``).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional, TypedDict

from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import normalize_version
from ansible_collections.npuops.fleet.plugins.module_utils.host import dkms

UNMET_HEADER = "The following packages have unmet dependencies:"
KEPT_BACK_HEADER = "The following packages have been kept back:"
HELD_BROKEN = "Unable to correct problems, you have held broken packages."
INTERRUPTED = "interrupted package operation, run dpkg --configure -a"

# Relations that stop an install (Recommends / Suggests lines are printed too, but only inform).
BLOCKING_KINDS = ("Depends", "PreDepends", "Conflicts", "Breaks")

_PKG = r"[a-z0-9][a-z0-9.+-]*(?::[a-z0-9]+)?"
_UNMET_RE = re.compile(
    r"^\s*(?:(?P<pkg>" + _PKG + r")\s?:\s+)?"
    r"(?P<kind>Pre-?Depends|Depends|Recommends|Suggests|Conflicts|Breaks):\s+"
    r"(?P<dep>" + _PKG + r")(?:\s+\((?P<rel><<|>>|<=|>=|=|<|>)\s*(?P<ver>[^)\s]+)\))?"
    r"(?P<rest>.*)$"
)


def _name(pkg: str) -> str:
    """Package name without its architecture qualifier (``libfoo:i386`` -> ``libfoo``)."""
    return pkg.split(":", 1)[0]


def unmet_dependencies(text: str) -> list[dict[str, Any]]:
    """Every dependency line of apt's unmet-dependency output, in order.

    Each entry: ``package`` (the package that has the dependency; continuation lines take the one
    above), ``kind`` (``Depends``, ``PreDepends``, ``Recommends``, ...), ``dependency`` (name, arch
    dropped), ``relation`` / ``version`` (the constraint, None without one), ``to_install`` (the
    version apt would install instead, from ``but V is to be installed``), ``reason`` (the rest of a
    ``but ...`` clause, e.g. ``it is not going to be installed``), ``blocking`` (kind stops the
    install) and ``line`` (stripped, for quoting).
    """
    res: list[dict[str, Any]] = []
    current: Optional[str] = None
    for raw in (text or "").splitlines():
        m = _UNMET_RE.match(raw)
        if not m:
            if raw.strip() and not raw.startswith(" "):
                current = None
            continue
        if m.group("pkg"):
            current = _name(m.group("pkg"))
        if current is None:
            continue
        rest = m.group("rest").strip()
        but = re.match(r"^\|?\s*(?:\S.*?\s)?but\s+(.*)$", rest)
        reason = but.group(1).strip() if but else None
        to_install = None
        if reason:
            inst = re.match(r"^(\S+) is to be installed$", reason)
            if inst:
                to_install = inst.group(1)
        kind = m.group("kind").replace("Pre-Depends", "PreDepends")
        res.append(
            {
                "package": current,
                "kind": kind,
                "dependency": _name(m.group("dep")),
                "relation": m.group("rel"),
                "version": m.group("ver"),
                "to_install": to_install,
                "reason": reason,
                "blocking": kind in BLOCKING_KINDS,
                "line": raw.strip(),
            }
        )
    return res


def apt_errors(text: str) -> list[str]:
    """apt's ``E:`` messages, each from ``E:`` to the end of its line (also when quoted mid-line)."""
    res = []
    for line in (text or "").splitlines():
        m = re.search(r"(?:^|\s)(E: .+?)\s*$", line)
        if m:
            res.append(m.group(1))
    return res


def held_broken(text: str) -> bool:
    """apt refused because packages it would have to move are held (or cannot be installed)."""
    return HELD_BROKEN in (text or "")


def package_list_block(text: str, header: str) -> list[str]:
    """Package names listed (indented, space separated) under one of apt's ``The following ...:`` headers."""
    names: list[str] = []
    inside = False
    for line in (text or "").splitlines():
        if line.strip() == header:
            inside = True
            continue
        if inside:
            if not line.startswith(" ") or not line.strip():
                inside = False
                continue
            names.extend(_name(n) for n in line.split())
    return names


def kept_back(text: str) -> list[str]:
    """Packages apt kept back: the run exits 0, but these did not move."""
    return package_list_block(text, KEPT_BACK_HEADER)


def failure_lines(text: str) -> list[str]:
    """The lines that explain an apt failure, in apt's order: the unmet-dependency and kept-back
    headers with their lines (Recommends left out), ``E:`` lines, dpkg's ``error processing`` lines."""
    unmet = {e["line"] for e in unmet_dependencies(text) if e["blocking"]}
    headers = (UNMET_HEADER, KEPT_BACK_HEADER)
    res: list[str] = []
    in_kept = False
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            in_kept = False
            continue
        if line in headers:
            res.append(line)
            in_kept = line == KEPT_BACK_HEADER
            continue
        if in_kept and raw.startswith(" "):
            res.append(line)
            continue
        in_kept = False
        err = re.search(r"(?:^|\s)(E: .+)$", line)
        if line in unmet:
            res.append(line)
        elif err:
            res.append(err.group(1))
        elif line.startswith("dpkg: error processing") or line.startswith("Error! "):
            res.append(line)
    out: list[str] = []
    for line in res:
        if line not in out:
            out.append(line)
    return out


def unsatisfied(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Blocking dependencies apt would leave at another version: ``[{"package": dependency,
    "needs": "(>= 530.41.03)", "to_install": "530.30.02-0ubuntu1", "required_by": [...]}]``."""
    res: dict[str, dict[str, Any]] = {}
    for e in entries:
        if not e["blocking"] or not e["to_install"]:
            continue
        key = "%s %s %s" % (e["dependency"], e["relation"], e["version"])
        cur = res.setdefault(
            key,
            {
                "package": e["dependency"],
                "needs": "%s %s" % (e["relation"], e["version"]) if e["relation"] else None,
                "to_install": e["to_install"],
                "required_by": [],
            },
        )
        if e["package"] not in cur["required_by"]:
            cur["required_by"].append(e["package"])
    return list(res.values())


_PRECOMPILED_RE = re.compile(r"^linux-modules-nvidia-(?P<branch>\d+)(?:-server)?(?:-open)?-(?P<kernel>\d.*)$")


def blocking_kernels(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Installed kernels whose precompiled nvidia module package pins the driver's kernel-common
    package at another version (Ubuntu's ``linux-modules-nvidia-<branch>-<kernel>``).

    ``[{"kernel", "package", "allows", "to_install", "message"}]``; message e.g.
    ``kernel 5.11.0-25-generic: precompiled nvidia modules only for 470.57.02``.
    """
    res = []
    for e in entries:
        m = _PRECOMPILED_RE.match(e["package"])
        if not m or not e["blocking"] or not e["version"]:
            continue
        allows = normalize_version(e["version"])
        res.append(
            {
                "kernel": m.group("kernel"),
                "package": e["package"],
                "allows": allows,
                "to_install": normalize_version(e["to_install"]),
                "message": "kernel %s: precompiled nvidia modules only for %s" % (m.group("kernel"), allows),
            }
        )
    return res


# ---------------------------------------------------------------- dpkg states
_DPKG_L_RE = re.compile(r"^(?P<state>[uihrp][ncHUFWti][ R]?)\s+(?P<name>\S+)\s+(?P<version>\S+)(?:\s+(?P<arch>\S+))?")


def interrupted_state(abbrev: str) -> bool:
    """A ``dpkg -l`` / ``${db:Status-Abbrev}`` state left by an interrupted or failed operation:
    unpacked (``U``), half-configured (``F``), half-installed (``H``), triggers awaited or pending
    (``W``/``t``), or the reinstall-required flag ``R``. ``ii``, ``rc`` and ``un`` are settled."""
    s = (abbrev or "").rstrip()
    if len(s) < 2:
        return False
    return s[1] in "UFHWt" or (len(s) > 2 and s[2] == "R")


def parse_dpkg_l(text: str) -> list[dict[str, Any]]:
    """``dpkg -l`` rows (header lines skipped): ``[{"state", "name", "version", "arch", "interrupted"}]``."""
    res = []
    for line in (text or "").splitlines():
        m = _DPKG_L_RE.match(line)
        if not m:
            continue
        res.append(
            {
                "state": m.group("state").strip(),
                "name": _name(m.group("name")),
                "version": m.group("version"),
                "arch": m.group("arch"),
                "interrupted": interrupted_state(m.group("state")),
            }
        )
    return res


def dpkg_failed_packages(text: str) -> list[str]:
    """Packages dpkg could not configure: ``dpkg: error processing package X (--configure):`` and
    ``dpkg: dependency problems prevent configuration of X:``, in order."""
    res: list[str] = []
    for line in (text or "").splitlines():
        m = re.match(
            r"^dpkg: (?:error processing package|dependency problems prevent configuration of) (\S+?):?(?:\s|$)", line
        )
        if m and _name(m.group(1)) not in res:
            res.append(_name(m.group(1)))
    return res


# ---------------------------------------------------------------- branches and transitional packages
def branch_of_name(name: str) -> Optional[str]:
    """The branch a package name carries: the first all-digit, at least 3-digit, dash-separated part
    (``libnvidia-compute-470`` -> ``470``, ``nvidia-driver-550-server-open`` -> ``550``,
    ``libnvidia-fbc1-455`` -> ``455``); None for branchless names (``nvidia-driver``)."""
    for part in _name(name or "").split("-"):
        if len(part) >= 3 and part.isdigit():
            return part
    return None


def branch_of_version(version: Optional[str]) -> Optional[str]:
    """The branch of a package or driver version: its first numeric field (``1:510.54-1`` -> ``510``)."""
    v = normalize_version(version)
    if not v:
        return None
    m = re.match(r"^(\d+)", v)
    return m.group(1) if m else None


def branch_drift(name: str, version: Optional[str]) -> Optional[str]:
    """None when the branch in the name agrees with the version (or the name has none); otherwise
    e.g. ``libnvidia-compute-470 is at 510.54 (transitional)``."""
    named, actual = branch_of_name(name), branch_of_version(version)
    if not named or not actual or named == actual:
        return None
    return "%s is at %s (transitional)" % (_name(name), normalize_version(version))


_APT_LIST_RE = re.compile(
    r"^(?P<name>" + _PKG + r")/(?P<suites>\S+)\s+(?P<version>\S+)\s+(?P<arch>\S+)"
    r"(?:\s+\[(?P<flags>[^\]]*)\])?\s*$"
)


def parse_apt_list(text: str) -> list[dict[str, Any]]:
    """``apt list`` / ``apt search`` rows: ``name/suite[,suite] version arch [flags]`` with the indented
    description line apt search prints under each.

    Entry: name, suites, version, arch, upgradable_from (``[upgradable from: V]``), installed (flags
    say so), description, transitional_for (``Transitional package for X``).
    """
    res: list[dict[str, Any]] = []
    for line in (text or "").splitlines():
        m = _APT_LIST_RE.match(line)
        if m:
            flags = m.group("flags") or ""
            up = re.search(r"upgradable from:\s*(\S+)", flags)
            res.append(
                {
                    "name": _name(m.group("name")),
                    "suites": m.group("suites").split(","),
                    "version": m.group("version"),
                    "arch": m.group("arch"),
                    "upgradable_from": up.group(1) if up else None,
                    "installed": "installed" in flags,
                    "description": None,
                    "transitional_for": None,
                }
            )
            continue
        if res and line.startswith("  ") and line.strip() and res[-1]["description"] is None:
            desc = line.strip()
            res[-1]["description"] = desc
            t = re.match(r"^Transitional (?:dummy )?package for (\S+)", desc, re.IGNORECASE)
            if t:
                res[-1]["transitional_for"] = t.group(1)
    return res


_DPKG_ACTION_RE = re.compile(
    r"^(?P<action>Removing|Purging|Unpacking|Setting up|Selecting previously unselected package)\s+"
    r"(?P<name>" + _PKG + r")\.?(?:\s+\((?P<version>[^)]+)\))?(?:\s+over\s+\((?P<old>[^)]+)\))?"
)


def parse_dpkg_actions(text: str) -> list[dict[str, Any]]:
    """dpkg's progress lines in apt output (``Removing X (V) ...``, ``Unpacking X (V) over (W) ...``,
    ``Setting up X (V) ...``): ``[{"action", "name", "version", "old_version"}]``; action lower case."""
    res = []
    for line in (text or "").splitlines():
        m = _DPKG_ACTION_RE.match(line.strip())
        if m:
            res.append(
                {
                    "action": m.group("action").lower().replace("selecting previously unselected package", "select"),
                    "name": _name(m.group("name")),
                    "version": m.group("version"),
                    "old_version": m.group("old"),
                }
            )
    return res


# ---------------------------------------------------------------- one install transaction, judged
def install_outcome(
    rc: int, stdout: str, stderr: str, targets: Mapping[str, str], installed: Mapping[str, Optional[str]]
) -> dict[str, Any]:
    """Judge an ``apt-get install name=version ...`` run: apt's exit code is not enough.

    ``targets``: {package: version wanted}; ``installed``: {package: version dpkg has after the run,
    None when not installed}. Returns ``{"ok", "msg", "not_at_target", "kept_back", "unmet",
    "dkms_build_failures", "dpkg_failed", "lines"}``: a target not at its version (kept back,
    left behind) fails even when apt exited 0, and the message quotes apt's own lines.
    """
    text = "%s\n%s" % (stdout or "", stderr or "")
    lines = failure_lines(text)
    kept = kept_back(text)
    wrong = {n: installed.get(n) for n, v in sorted(targets.items()) if installed.get(n) != v}
    builds = dkms.build_failures(text)
    res: dict[str, Any] = {
        "ok": rc == 0 and not wrong and not builds,
        "not_at_target": wrong,
        "kept_back": kept,
        "unmet": [e["line"] for e in unmet_dependencies(text) if e["blocking"]],
        "dkms_build_failures": builds,
        "dpkg_failed": dpkg_failed_packages(text),
        "lines": lines,
        "msg": None,
    }
    if res["ok"]:
        return res
    parts = []
    if rc != 0:
        parts.append("apt-get exited %s" % rc)
    else:
        parts.append("apt-get exited 0 but the driver did not move")
    if wrong:
        parts.append(
            "not at the target version: "
            + ", ".join("%s %s (wanted %s)" % (n, v or "not installed", targets[n]) for n, v in wrong.items())
        )
    parts.extend(b["message"] for b in builds)
    if lines:
        parts.append("apt said: " + " | ".join(lines))
    elif rc != 0:
        tail = [x.strip() for x in (stderr or stdout or "").splitlines() if x.strip()][-3:]
        if tail:
            parts.append("apt said: " + " | ".join(tail))
    res["msg"] = "; ".join(parts)
    return res


_SIM_INST_RE = re.compile(r"^Inst (?P<name>\S+)(?: \[(?P<old>[^\]]+)\])? \((?P<new>\S+)")
_SIM_REMV_RE = re.compile(r"^(?:Remv|Purg) (?P<name>\S+)(?: \[(?P<old>[^\]]+)\])?")


# the functional form: "from" is a keyword
SimulatedInstall = TypedDict("SimulatedInstall", {"name": str, "from": Optional[str], "to": str})


class SimulatedRemoval(TypedDict):
    name: str
    version: Optional[str]


class SimulatedTransaction(TypedDict):
    install: list[SimulatedInstall]
    remove: list[SimulatedRemoval]


def simulated_transaction(text: str) -> SimulatedTransaction:
    """What ``apt-get --simulate install ...`` says it would do, from its ``Inst`` / ``Remv`` lines.

    ``Inst name [old] (new release [arch])`` is an upgrade or downgrade from ``old`` (no ``[old]``: a
    new package); ``Remv name [old]`` (``Purg`` with --purge) a removal. Returns ``{"install": [{"name",
    "from", "to"}...], "remove": [{"name", "version"}...]}`` in apt's order; ``Conf`` lines repeat the
    installs and are ignored."""
    out: SimulatedTransaction = {"install": [], "remove": []}
    for line in (text or "").splitlines():
        m = _SIM_INST_RE.match(line)
        if m:
            out["install"].append({"name": m.group("name"), "from": m.group("old"), "to": m.group("new")})
            continue
        m = _SIM_REMV_RE.match(line)
        if m:
            out["remove"].append({"name": m.group("name"), "version": m.group("old")})
    return out


def release_holds_in_status(status_text: str, names: Iterable[str]) -> str:
    """A copy of dpkg's status file in which the packages ``names`` are no longer on hold
    (``Status: hold ok installed`` -> ``install ok installed``): apt simulating against it sees the
    holds as the install step leaves them after releasing the driver family."""
    wanted = {n.split(":", 1)[0] for n in names}
    out = []
    current = None
    for line in status_text.splitlines(keepends=True):
        if line.startswith("Package: "):
            current = line[len("Package: "):].strip()
        elif not line.strip():
            current = None
        elif current in wanted and line.startswith("Status: hold "):
            line = "Status: install " + line[len("Status: hold "):]
        out.append(line)
    return "".join(out)


_MADISON_RE = re.compile(r"^\s*(?P<name>\S+)\s*\|\s*(?P<version>\S+)\s*\|")


def parse_madison(text: str) -> dict[str, list[str]]:
    """``apt-cache madison NAME...`` -> {name: [versions apt can install, in apt's order, once each]}.
    ``name | version | source`` lines; a name apt does not know prints nothing (or ``N: Unable to
    locate package``) and is absent. Each version once, though several sources may offer it."""
    res: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        m = _MADISON_RE.match(line)
        if m:
            seen = res.setdefault(m.group("name"), [])
            if m.group("version") not in seen:
                seen.append(m.group("version"))
    return res


def offered_at(versions: Iterable[str], upstream: str) -> Optional[str]:
    """The first of ``versions`` (Debian versions, as madison lists them) whose upstream part is exactly
    ``upstream``: ``[epoch:]upstream[-revision]`` - ``550.90.07-0ubuntu1`` and ``1:550.90.07-1`` are at
    550.90.07, ``550.90.07.1-1`` and ``550.90.070-1`` are not. None when none is."""
    rx = re.compile(r"^([0-9]+:)?" + re.escape(upstream) + r"(-[^-]+)?$")
    return next((v for v in versions if rx.match(v)), None)


# apt-get install --print-uris: one quoted URI, the file name in apt's cache, its size in bytes and
# its hash, per .deb the transaction needs that apt's cache does not hold yet
_PRINT_URI_RE = re.compile(r"^'(?P<uri>[^']+)' (?P<file>\S+) (?P<size>\d+) (?P<hash>\S+)\s*$")
# E: Failed to fetch URI  STATUS TEXT [IP: ...] - what apt-get prints per .deb it could not download
_FETCH_FAILED_RE = re.compile(r"^E: Failed to fetch (?P<uri>\S+)\s+(?P<why>.*?)\s*$")


def deb_name_version(file_name: str) -> tuple[str, str]:
    """``(name, version)`` of a .deb as apt names it in its cache: ``NAME_VERSION_ARCH.deb`` with the
    epoch's colon written ``%3a`` (``bsdutils_1%3a2.38.1-5_amd64.deb`` -> ``("bsdutils", "1:2.38.1-5")``)."""
    base = file_name.rsplit("/", 1)[-1]
    parts = base[:-4].split("_") if base.endswith(".deb") else [base]
    return parts[0], (parts[1].replace("%3a", ":").replace("%3A", ":") if len(parts) > 1 else "")


def parse_print_uris(text: str) -> list[dict[str, Any]]:
    """The .debs ``apt-get install --print-uris`` says it would fetch, in its order:
    ``[{"uri", "file", "size" (bytes, int), "hash" ("SHA256:..." or "MD5Sum:..."), "name", "version"}]``.
    Other lines (apt's own chatter without ``-qq``) are ignored."""
    out = []
    for line in text.splitlines():
        m = _PRINT_URI_RE.match(line.strip())
        if m:
            name, version = deb_name_version(m.group("file"))
            out.append(dict(uri=m.group("uri"), file=m.group("file"), size=int(m.group("size")),
                            hash=m.group("hash"), name=name, version=version))
    return out


def fetch_failures(text: str) -> list[dict[str, str]]:
    """The .debs (or lists) apt-get could not download: ``E: Failed to fetch URI  404  Not Found
    [IP: ...]`` -> ``[{"uri", "why" ("404  Not Found [IP: ...]"), "name", "version"}]`` (name and
    version from a .deb's file name; empty for an index file)."""
    out = []
    for line in text.splitlines():
        m = _FETCH_FAILED_RE.match(line.strip())
        if m:
            uri = m.group("uri")
            name, version = deb_name_version(uri) if uri.endswith(".deb") else ("", "")
            out.append(dict(uri=uri, why=" ".join(m.group("why").split()), name=name, version=version))
    return out


_DEP_NAME_RE = re.compile(
    r"^\s*(?P<name>[a-z0-9][a-z0-9+.-]*)(?::[a-z0-9-]+)?\s*(?:\((?P<rel>[<>=]+)\s*(?P<ver>[^)]+)\))?"
)


class DependsAlternative(TypedDict):
    """One alternative of a relation in :func:`parse_show_depends`."""

    name: str
    rel: Optional[str]
    version: Optional[str]


def parse_show_depends(
    text: str, fields: Iterable[str] = ("Pre-Depends", "Depends", "Recommends")
) -> dict[tuple[str, str], list[list[DependsAlternative]]]:
    """``apt-cache show name=version ...`` -> ``{(name, version): [alternatives...]}``: each stanza's
    ``fields`` (apt-get installs a new package's Recommends too), one list per comma-separated relation,
    each alternative (``|``) as ``{"name", "rel", "version"}`` (``rel`` ``>=``, ``=``... or None), the
    architecture qualifier dropped::

        Package: cuda-drivers / Version: 590.48.01-1 / Depends: nvidia-driver-open (>= 590.48.01) | nvidia-driver
        -> {("cuda-drivers", "590.48.01-1"): [[{"name": "nvidia-driver-open", "rel": ">=", "version": "590.48.01"},
                                               {"name": "nvidia-driver", "rel": None, "version": None}]]}
    """
    res: dict[tuple[str, str], list[list[DependsAlternative]]] = {}
    wanted = list(fields)
    for stanza in re.split(r"\n\s*\n", text or ""):
        stanza_fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and key:
                stanza_fields[key] += " " + line.strip()
            elif ":" in line:
                key, _sep, value = line.partition(":")
                stanza_fields[key.strip()] = value.strip()
        if not stanza_fields.get("Package") or not stanza_fields.get("Version"):
            continue
        rels = []
        for field in wanted:
            for relation in filter(None, (r.strip() for r in stanza_fields.get(field, "").split(","))):
                alts: list[DependsAlternative] = []
                for alt in relation.split("|"):
                    m = _DEP_NAME_RE.match(alt)
                    if m:
                        alts.append({"name": m.group("name"), "rel": m.group("rel"),
                                     "version": (m.group("ver") or "").strip() or None})
                if alts:
                    rels.append(alts)
        res[(stanza_fields["Package"], stanza_fields["Version"])] = rels
    return res
