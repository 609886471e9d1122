# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""APT / dpkg / unattended-upgrades state: pure parsers (no I/O).

* ``apt-config dump`` -> scalars and lists (``Unattended-Upgrade::Package-Blacklist``);
* ``dpkg --get-selections`` -> held packages; ``dpkg-query -W`` -> installed packages;
* ``/var/log/apt/history.log`` -> entries, and the last one touching driver/kernel packages;
* blacklist coverage: which package families an unattended-upgrades blacklist leaves open
  (u-u matches each blacklist entry as a Python regular expression from the start of the name).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Iterable, Optional

BLACKLIST_KEY = "Unattended-Upgrade::Package-Blacklist"

# Families that must never move under unattended-upgrades on a driver host (case C4), as fnmatch
# patterns; the vendor profile's package_families are added to these.
KERNEL_FAMILIES = (
    "linux-image-*",
    "linux-headers-*",
    "linux-modules-*",
    "linux-generic*",
    "linux-virtual*",
)


def parse_apt_config_dump(text: str) -> dict[str, Any]:
    """``apt-config dump`` output -> {key: value} for scalars and {key: [values]} for lists.

    A list shows as ``Key "";`` followed by ``Key:: "item";`` lines.
    """
    res: dict[str, Any] = {}
    for line in (text or "").splitlines():
        m = re.match(r'^\s*(\S+?)\s+"(.*)";\s*$', line)
        if not m:
            continue
        key, value = m.group(1), m.group(2).replace('\\"', '"')
        if key.endswith("::"):
            base = key[:-2]
            cur = res.get(base)
            if not isinstance(cur, list):
                cur = [] if cur in (None, "") else [cur]
            cur.append(value)
            res[base] = cur
        else:
            if key in res and isinstance(res[key], list):
                continue
            res[key] = value
    return res


def apt_list(config: dict[str, Any], key: str) -> list[str]:
    value = config.get(key)
    if value is None or value == "":
        return []
    return list(value) if isinstance(value, list) else [value]


def periodic_enabled(value: Optional[str]) -> Optional[bool]:
    """``APT::Periodic::Unattended-Upgrade`` value -> enabled? (None when unset = apt's default off)."""
    if value is None:
        return None
    v = str(value).strip().lower()
    if v in ("", "0", "false", "no", "off"):
        return False
    if v.endswith("d") and v[:-1].isdigit():  # "7d" style intervals
        return v[:-1] != "0"
    return True


def parse_dpkg_selections(text: str) -> dict[str, str]:
    """``dpkg --get-selections`` -> {package (arch suffix dropped): selection}."""
    res = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            res[parts[0].split(":", 1)[0]] = parts[1]
    return res


def held_packages(text: str) -> list[str]:
    """Packages whose dpkg selection is ``hold``, sorted."""
    return sorted(p for p, sel in parse_dpkg_selections(text).items() if sel == "hold")


# ``dpkg-query -W`` format whose output :func:`parse_dpkg_query` reads
DPKG_QUERY_FORMAT = "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n"


def parse_dpkg_query(text: str) -> dict[str, dict[str, str]]:
    """``dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'`` -> installed packages.

    Returns {name: {"version": ..., "status": ...}} for packages whose status is installed
    (``ii``/``hi``; ``rc`` = removed with config left is not installed).
    """
    res = {}
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[0]:
            continue
        name, version, status = parts[0].split(":", 1)[0], parts[1].strip(), parts[2].strip()
        if len(status) >= 2 and status[1] in ("i", "U", "F", "W", "t"):
            res[name] = {"version": version, "status": status}
    return res


def in_families(name: str, patterns: Iterable[str]) -> bool:
    """Whether package ``name`` (an architecture qualifier ``:amd64`` ignored) matches any fnmatch
    pattern (``nvidia-*``), case-sensitively over the whole name: the one rule of the collection's
    package family lists (also the Jinja test ``npuops.fleet.package_match``)."""
    base = name.split(":", 1)[0]
    return any(fnmatch.fnmatchcase(base, p) for p in patterns)


def match_families(names: Iterable[str], patterns: Iterable[str]) -> list[str]:
    """Names that match any fnmatch pattern (``nvidia-*``), sorted."""
    pats = list(patterns)
    return sorted({n for n in names if in_families(n, pats)})


def family_to_blacklist(pattern: str) -> str:
    """fnmatch family (``libnvidia-*``) -> u-u blacklist regex (``libnvidia-``), matched from the start."""
    out = []
    for ch in pattern:
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch in ".^$+{}[]()|\\":
            out.append("\\" + ch)
        else:
            out.append(ch)
    regex = "".join(out)
    while regex.endswith(".*"):
        regex = regex[:-2]
    return regex


def blacklisted(name: str, blacklist: Iterable[str]) -> bool:
    """Whether unattended-upgrades would skip ``name`` with this blacklist (re.match, as u-u does)."""
    for entry in blacklist:
        try:
            if re.match(entry, name):
                return True
        except re.error:
            if name.startswith(entry):
                return True
    return False


def uncovered_families(blacklist: Iterable[str], families: Iterable[str]) -> list[str]:
    """Families (fnmatch) not covered by the blacklist; tested with a representative name per family."""
    bl = list(blacklist)
    res = []
    for fam in families:
        sample = fam.replace("*", "zz9-sample").replace("?", "z")
        if not blacklisted(sample, bl):
            res.append(fam)
    return res


# ---------------------------------------------------------------- /var/log/apt/history.log
_PKG_RE = re.compile(r"([^\s,()]+?)(?::([a-z0-9-]+))? \(([^()]*)\)")
_ACTIONS = ("Install", "Upgrade", "Downgrade", "Remove", "Purge", "Reinstall")


def parse_apt_history(text: str) -> list[dict[str, Any]]:
    """Entries of /var/log/apt/history.log (blank-line separated), oldest first.

    Entry: start, end, commandline, requested_by, unattended (commandline runs unattended-upgrade),
    packages: [{action, name, arch, from, to, automatic}].
    """
    entries: list[dict[str, Any]] = []
    cur: Optional[dict[str, Any]] = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition(": ")
        if not sep:
            continue
        if key == "Start-Date":
            cur = {"start": _date(value), "end": None, "commandline": None, "requested_by": None, "packages": []}
            entries.append(cur)
            continue
        if cur is None:
            continue
        if key == "End-Date":
            cur["end"] = _date(value)
        elif key == "Commandline":
            cur["commandline"] = value.strip()
        elif key == "Requested-By":
            cur["requested_by"] = value.strip()
        elif key in _ACTIONS:
            for m in _PKG_RE.finditer(value):
                name, arch, inner = m.group(1), m.group(2), m.group(3)
                vers = [v.strip() for v in inner.split(",")]
                automatic = "automatic" in vers
                vers = [v for v in vers if v != "automatic"]
                pkg = {"action": key.lower(), "name": name, "arch": arch, "from": None, "to": None}
                pkg["automatic"] = automatic
                if key in ("Upgrade", "Downgrade") and len(vers) >= 2:
                    pkg["from"], pkg["to"] = vers[0], vers[1]
                elif key in ("Remove", "Purge"):
                    pkg["from"] = vers[0] if vers else None
                else:
                    pkg["to"] = vers[0] if vers else None
                cur["packages"].append(pkg)
    for e in entries:
        e["unattended"] = bool(e["commandline"] and "unattended-upgrade" in e["commandline"])
    return entries


def _date(value: str) -> str:
    return re.sub(r"\s+", " ", value.strip())


def last_entry_touching(entries: list[dict[str, Any]], families: Iterable[str]) -> Optional[dict[str, Any]]:
    """The newest history entry that changed a package of the given fnmatch families.

    The returned copy keeps only the matching packages (``packages``) and counts all (``total_packages``).
    """
    fams = list(families)
    for e in reversed(entries):
        hits = [p for p in e["packages"] if any(fnmatch.fnmatchcase(p["name"], f) for f in fams)]
        if hits:
            out = dict(e)
            out["total_packages"] = len(e["packages"])
            out["packages"] = hits
            return out
    return None


def parse_reboot_required_pkgs(text: str) -> list[str]:
    """/var/run/reboot-required.pkgs -> unique package names in order."""
    seen: list[str] = []
    for line in (text or "").splitlines():
        s = line.strip()
        if s and s not in seen:
            seen.append(s)
    return seen
