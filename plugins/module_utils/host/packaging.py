# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Packaging flavours: which packages carry a vendor's driver on a host, and whether it can be built.

A flavour is data in the vendor profile's ``packaging`` list (pure; no I/O here)::

    {"name": "ubuntu-server-open",           # what driver_upgrade_packaging names
     "build": "dkms" | "precompiled",        # DKMS builds the module on the host, or a package ships it
     "packages": ["nvidia-driver-{branch}-server-open", ...],   # the target set; {branch} = 550,
                                             # {version} = 550.90.07, {kernel} = the kernel that runs it
     "detect": ["nvidia-dkms-*-server-open"],  # fnmatch patterns of installed packages that mark it
     "optional": ["firmware-nvidia-tesla-{branch}-gsp"]}  # joins the target set where apt offers it
                                             # at the target version (a virtual name on older branches)

Detection takes the first flavour in list order with an installed package matching ``detect``, so
markers that co-exist with another flavour's packages come first (NVIDIA's CUDA repository installs
Ubuntu-named packages under ``cuda-drivers-<branch>``). A host with none gets ``packaging_default``.
A profile's explicit ``packages`` list (a custom vendor, or an override) is one more flavour,
``packages`` (built with DKMS), chosen whenever nothing is requested: the user said what to install.

Package names follow the real archives: Ubuntu's ``nvidia-driver-<branch>-server[-open]`` (DKMS) and
``linux-modules-nvidia-<branch>-server[-open]-<kernel>`` (precompiled, signed by Canonical); Debian's
``nvidia-kernel-dkms`` / ``nvidia-open-kernel-dkms`` / ``nvidia-tesla-<branch>-kernel-dkms`` (apt-cache
of bookworm and trixie, tests/lab/realpkg/FINDINGS.md); NVIDIA's CUDA repository ``cuda-drivers-<branch>``
and ``nvidia-open-<branch>``.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver import vendor_profiles
from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.host.apt_state import match_families

# a flavour's ``build`` values: defined in vendor_profiles, which validates them (and imports nothing here)
BUILDS = vendor_profiles.BUILDS

# Where DKMS finds its signing key (dkms >= 3 generates /var/lib/dkms/mok.*; Ubuntu's shim-signed
# update-secureboot-policy makes /var/lib/shim-signed/mok/MOK.*): the public half, DER.
MOK_KEYS = ("/var/lib/dkms/mok.pub", "/var/lib/shim-signed/mok/MOK.der")


class PackagingError(ValueError, FleetError):
    """A requested flavour that is not in the profile (the message lists the known ones)."""


def flavours(profile: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The profile's flavours in detection order (an explicit ``packages`` list first, as ``packages``).
    The profile is one ``vendor_profiles.resolve_profile`` validated (names, builds, packages)."""
    out: list[dict[str, Any]] = []
    if profile.get("packages"):
        pk = list(profile["packages"])
        out.append(
            {"name": "packages", "build": "dkms", "packages": pk, "detect": [_wild(p) for p in pk], "optional": [],
             "module_flavour": None}
        )
    for fl in profile.get("packaging") or []:
        out.append(
            {
                "name": str(fl["name"]),
                "build": fl["build"],
                "packages": [str(p) for p in fl["packages"]],
                "detect": [str(p) for p in (fl.get("detect") or [_wild(p) for p in fl["packages"]])],
                "optional": [str(p) for p in fl.get("optional") or []],
                "module_flavour": fl.get("module_flavour"),
            }
        )
        out[-1].update({k: fl[k] for k in ("branchless_from", "pinning") if fl.get(k)})
    return out


def branchless(flavour: Mapping[str, Any], version: str) -> bool:
    """Whether ``flavour``'s packages for driver ``version`` carry no branch in their names: from the
    flavour's ``branchless_from`` branch on (NVIDIA's CUDA repository from 590: ``nvidia-dkms-open``,
    ``libnvidia-compute``, ``cuda-drivers``, where 580 had ``nvidia-dkms-580-open``...). The branch is
    read from the version, never from a name."""
    return _branch_from(version, flavour.get("branchless_from"))


def pinning_package(flavour: Mapping[str, Any], version: str) -> Optional[str]:
    """The package that keeps apt on driver ``version`` (an apt preferences file; NVIDIA's
    ``nvidia-driver-pinning-<version>``) where the flavour's names are branchless for it, else None:
    without it the repository's newest branch is every branchless name's candidate."""
    tmpl = flavour.get("pinning")
    return _fill(str(tmpl), version) if tmpl and branchless(flavour, version) else None


def leaving_pins(flavour: Mapping[str, Any], installed: Iterable[str], version: str) -> list[str]:
    """Installed pinning packages of the flavour (its ``pinning`` template, any version or branch) other
    than the target's (:func:`pinning_package`): they conflict with each other (one preferences file at a
    time; NVIDIA's Provide and Conflict ``nvidia-driver-pinning``), so they leave in the transaction that
    installs the target's. Where the target has none (below ``branchless_from``) installed pins stay: the
    exact versions the window names win over them. Sorted."""
    tmpl, mine = flavour.get("pinning"), pinning_package(flavour, version)
    if not tmpl or not mine:
        return []
    return [name for name in match_families(installed, [_wild(str(tmpl))]) if name != mine]


def companions(
    profile: Mapping[str, Any], installed: Iterable[str], version: str, branchless_names: bool = False
) -> list[dict[str, Any]]:
    """Vendor packages that must move in lock-step with the driver where the host has them (profile key
    ``companion_packages``: ``[{"detect": [patterns], "packages": [templates]}]``): NVIDIA's fabric manager
    and its NSCQ library must be exactly the driver's version on NVSwitch systems, else
    ``nvidia-fabricmanager`` refuses to start. -> ``[{"packages": [names at version], "templates",
    "evidence": [installed names, sorted]}]`` for each group with an installed ``detect`` package
    (matched as ``apt_state.match_families``), in profile order. With ``branchless_names`` (the
    flavour's :func:`branchless` for ``version``) the templates lose their branch (``cuda-drivers-{branch}``
    -> ``cuda-drivers``); a group whose names another group already gave is left out, and so is a group
    with a ``since_branch`` unless ``branchless_names`` and ``version``'s branch is at least that (the CUDA
    repository's branchless metas, never on another flavour)."""
    names = set(installed)
    res = []
    seen: set[str] = set()
    for group in profile.get("companion_packages") or []:
        since = group.get("since_branch")
        if since and not (branchless_names and _branch_from(version, since)):
            continue
        hits = match_families(names, group.get("detect") or [])
        if hits:
            tmpls = [str(t) for t in group.get("packages") or []]
            pkgs = [_fill(t, version, drop_branch=branchless_names) for t in tmpls]
            if set(pkgs) <= seen:
                continue
            seen.update(pkgs)
            res.append({"packages": pkgs, "templates": tmpls, "evidence": hits})
    return res


def _branch(version: str) -> str:
    """``"550.90.07"`` -> ``"550"`` (everything before the first dot)."""
    return str(version).split(".", maxsplit=1)[0]


def _branch_from(version: str, since: Any) -> bool:
    """Whether ``version``'s branch is ``since`` (a branch number) or later; False when either is unset."""
    branch = _branch(version)
    return bool(since) and branch.isdigit() and int(branch) >= int(since)


def _fill(template: str, version: str, kernel: Optional[str] = None, drop_branch: bool = False) -> str:
    """A package name template filled in: ``{branch}`` (``550``) and ``{version}`` (``550.90.07``) from
    ``version``, ``{kernel}`` from ``kernel`` (left as it is when None); with ``drop_branch`` a ``-{branch}``
    word is dropped (``nvidia-dkms-{branch}-open`` -> ``nvidia-dkms-open``)::

        _fill("linux-modules-nvidia-{branch}-server-{kernel}", "550.90.07", "6.8.0-45-generic")
        -> "linux-modules-nvidia-550-server-6.8.0-45-generic"
    """
    if drop_branch:
        template = template.replace("-{branch}", "")
    name = template.replace("{branch}", _branch(version)).replace("{version}", str(version))
    return name if kernel is None else name.replace("{kernel}", kernel)


def _wild(template: str) -> str:
    """The template as an fnmatch pattern: every placeholder ``*`` (``_branch("*")`` is ``"*"``)."""
    return _fill(template, "*", "*")


def installed_flavours(profile: Mapping[str, Any], installed: Iterable[str]) -> list[dict[str, Any]]:
    """Every flavour with an installed marker: ``[{"name", "evidence": [package names, sorted]}]``, in
    detection order; ``detect`` patterns are matched as ``apt_state.match_families`` does."""
    names = set(installed)
    res: list[dict[str, Any]] = []
    for fl in flavours(profile):
        hits = match_families(names, fl["detect"])
        if hits:
            res.append({"name": fl["name"], "evidence": hits})
    return res


def choose(profile: Mapping[str, Any], installed: Iterable[str], requested: Optional[str] = "auto") -> dict[str, Any]:
    """The flavour for this host: ``{"name", "build", "packages", "detect", "source", "evidence",
    "installed_flavours"}``. ``source`` is ``requested`` (``requested`` names it), ``profile`` (the
    profile's explicit ``packages``), ``detected`` (first installed flavour) or ``default`` (none
    installed: ``packaging_default``, else the first flavour).

    Raises PackagingError for a requested name the profile does not have (the known names listed)."""
    fls = flavours(profile)
    if not fls:
        raise PackagingError("vendor profile %r has neither packaging flavours nor packages" % profile.get("name"))
    by_name = {f["name"]: f for f in fls}
    found = installed_flavours(profile, installed)
    evidence: list[str]
    if requested and requested != "auto":
        if requested not in by_name:
            raise PackagingError(
                "packaging flavour %r is not in vendor profile %r; known: auto, %s"
                % (requested, profile.get("name"), ", ".join(by_name))
            )
        pick, source = by_name[requested], "requested"
        evidence = next((f["evidence"] for f in found if f["name"] == requested), [])
    elif "packages" in by_name:
        pick, source = by_name["packages"], "profile"
        evidence = next((f["evidence"] for f in found if f["name"] == "packages"), [])
    elif found:
        pick, source, evidence = by_name[found[0]["name"]], "detected", found[0]["evidence"]
    else:
        default = profile.get("packaging_default")
        named = by_name.get(default) if default else None
        pick, source, evidence = named or fls[0], "default", []
    return dict(pick, source=source, evidence=evidence, installed_flavours=found)


def other_module_flavours(profile: Mapping[str, Any], flavour: Mapping[str, Any]) -> list[str]:
    """The names of the profile's flavours that install the other kernel modules than ``flavour``
    (``module_flavour`` open / proprietary): its twin first (``ubuntu-server`` for
    ``ubuntu-server-open`` and back), then those with ``flavour``'s build, in the profile's order; of
    the same archive (``debian-*``, ``ubuntu-*``) or NVIDIA's CUDA repository (``cuda-*``), which serves
    both; a flavour with the same package templates as an earlier one is left out; ``[]`` when ``flavour``
    does not say which modules it installs."""
    mine = flavour.get("module_flavour")
    if not mine:
        return []
    name = str(flavour.get("name") or "")
    twin = name[: -len("-open")] if name.endswith("-open") else name + "-open"
    # a Debian host is not offered Ubuntu's archive flavours nor the reverse; NVIDIA's CUDA repository
    # serves both (flavour names start with their archive: debian-, ubuntu-, cuda-)
    family = name.split("-", 1)[0]
    others, sets = [], set()
    for f in flavours(profile):
        # a flavour with the package templates of an earlier one (Ubuntu's own non-server names, which
        # are the CUDA repository's up to 580) is the same way out: named once
        key = frozenset(f["packages"])
        if key in sets:
            continue
        sets.add(key)
        if f.get("module_flavour") and f["module_flavour"] != mine and (
                family == "cuda" or f["name"].split("-", 1)[0] in (family, "cuda")):
            others.append(f)
    return [f["name"] for f in sorted(others, key=lambda f: (f["name"] != twin, f["build"] != flavour.get("build")))]


def target_packages(flavour: Mapping[str, Any], version: str, kernel: str) -> list[str]:
    """The flavour's package names for driver ``version`` on ``kernel`` (templates filled in, without the
    branch where :func:`branchless`), in order."""
    bl = branchless(flavour, version)
    return [_fill(p, version, kernel, drop_branch=bl) for p in flavour["packages"]]


def optional_packages(flavour: Mapping[str, Any], version: str, kernel: str) -> list[str]:
    """The flavour's ``optional`` names for ``version`` on ``kernel``: in the target set only where apt
    offers them at that version (the caller asks apt), e.g. Tesla 535's firmware-nvidia-tesla-535-gsp,
    which Tesla 470 has only as a name its kernel-support package provides."""
    bl = branchless(flavour, version)
    return [_fill(p, version, kernel, drop_branch=bl) for p in flavour.get("optional") or []]


@functools.cache
def _template_re(template: str) -> "re.Pattern[str]":
    """A template as an anchored regex over installed names; ``{branch}``'s first occurrence is the
    named group ``branch`` (compiled once per template)."""
    rx = re.escape(template)
    # a kernel release starts with a digit: "-server-{kernel}" must match neither "-server-open-5.15..."
    # nor the "-generic" meta package
    for key, part in (("branch", r"(?P<branch>[0-9]+)"), ("version", r"[^=]+"), ("kernel", r"[0-9][^=]*")):
        rx = rx.replace(re.escape("{%s}" % key), part, 1).replace(re.escape("{%s}" % key), r"[^=]+")
    return re.compile("^%s$" % rx)


def leaving_packages(
    old: Optional[Mapping[str, Any]],
    new: Mapping[str, Any],
    installed: Iterable[str],
    target: Iterable[str],
    version: str,
) -> list[str]:
    """Installed packages of the host's old flavour that the target set replaces, removed in the same
    transaction: on a branch change (535 -> 550) those of another branch, per-kernel module packages
    (``linux-modules-nvidia-535-server-open-<kernel>``) of every kernel too; on a flavour change (Debian
    tesla-535 -> current) all of the old flavour's. ``old`` is the host's installed flavour (None: none).
    The same flavour and branch removes nothing (per-kernel packages of other kernels stay). Sorted."""
    if not old:
        return []
    return _replaced(_own_templates(old), installed, target, version, any_branch=old["name"] != new["name"])


def leaving_companions(
    groups: Iterable[Mapping[str, Any]], installed: Iterable[str], target: Iterable[str], version: str
) -> list[str]:
    """Installed companion packages of another branch that the target's companions replace, removed in
    the same transaction (``nvidia-fabricmanager-535``, ``libnvidia-nscq-535`` on a move to 550).
    ``groups`` is :func:`companions`'s result for ``version`` (each group's ``templates`` are matched);
    ``target`` the whole target set (driver and companion packages: nothing in it leaves). Branchless
    templates (the CUDA repository's ``nvidia-fabricmanager``) remove nothing. Sorted, unique."""
    templates = [t for group in groups for t in group["templates"]]
    return _replaced(templates, installed, target, version, any_branch=False)


def _own_templates(flavour: Mapping[str, Any]) -> list[str]:
    """A flavour's package templates, its optional ones included."""
    return list(flavour["packages"]) + list(flavour.get("optional") or [])


def rule_templates(profile: Mapping[str, Any]) -> list[str]:
    """Templates whose packages have rules of their own on a branch change: every flavour's packages
    (per-kernel module packages among them) and the profile's companion packages."""
    own = [t for fl in flavours(profile) for t in _own_templates(fl)]
    comp = [str(t) for g in profile.get("companion_packages") or [] for t in g.get("packages") or []]
    return own + comp


def branch_counterparts(
    old: Optional[Mapping[str, Any]],
    new: Mapping[str, Any],
    families: Iterable[str],
    installed: Iterable[str],
    target: Iterable[str],
    version: str,
    skip_templates: Iterable[str] = (),
) -> dict[str, str]:
    """On a branch change within one flavour, the old branch's other installed packages and their names in
    the target branch: ``{old name: new name}``. Debian's Tesla branches do not conflict with each other,
    so a 470 -> 535 move that names only the profile's packages leaves ``nvidia-tesla-470-alternative``,
    ``nvidia-tesla-470-kernel-support`` and ``libnvidia-tesla-470-cfg1`` installed beside 535, and
    nvidia-persistenced on the old library. The caller asks apt: a new name it offers at the target
    version joins the transaction and its old name leaves; any other stays as apt decides.

    ``old`` is the host's installed flavour and ``new`` the target's; a flavour change has none (its old
    packages leave by :func:`leaving_packages`). The old flavour's templates with ``{branch}`` give the
    installed branches that are not ``version``'s. A candidate is an installed name in ``families``
    (fnmatch) that carries such a branch as a dash-separated word (``-470-`` or a trailing ``-470``); its
    counterpart replaces that word with the target branch, or drops it where the target's names are
    :func:`branchless` (``libnvidia-gl-580`` -> ``libnvidia-gl``). Names in ``target``, names whose counterpart
    is in ``target``, and names matching ``skip_templates`` (every flavour's package templates,
    companions: they have rules of their own) are left out. A flavour without ``{branch}`` (Debian's
    current branch) has no counterparts."""
    if not old or old["name"] != new.get("name"):
        return {}
    branch = _branch(version)
    names = set(installed)
    branches = set()
    for name in names:
        for tmpl in old["packages"]:
            m = _template_re(tmpl).match(name)
            if m and "branch" in m.groupdict() and m.group("branch") != branch:
                branches.add(m.group("branch"))
    if not branches:
        return {}
    keep = set(target)
    skip = [_template_re(t) for t in skip_templates]
    words = re.compile(r"-(%s)(?=-|$)" % "|".join(re.escape(b) for b in sorted(branches)))
    # a move onto the branchless names (CUDA repository 580 -> 590): the word is dropped
    into = "" if branchless(new, version) else "-" + branch
    res = {}
    for name in match_families(names - keep, families):
        if not words.search(name) or any(rx.match(name) for rx in skip):
            continue
        if not into and re.search(r"-\d+\.\d+", name):
            continue  # a name that also carries the version (nvidia-firmware-580-580.126.09): no known new name
        new_name = words.sub(into, name, count=1)
        if new_name not in keep:
            res[name] = new_name
    return res


_DRIVER_VERSION_RE = re.compile(r"^(?:\d+:)?(?P<up>\d{3,}\.\d+(?:\.\d+)?)(?:[-~+]|$)")


def driver_versioned(version: Optional[str]) -> Optional[str]:
    """The driver version a package version carries (``590.44.01-1ubuntu1`` -> ``590.44.01``,
    ``1:590.44.01-1`` too), None when it is not one (``13.3.1-1``, a pinning package's ``610-2ubuntu1``)."""
    m = _DRIVER_VERSION_RE.match(str(version or ""))
    return m.group("up") if m else None


def branchless_others(
    new: Mapping[str, Any], families: Iterable[str], installed: Mapping[str, str], exclude: Iterable[str], version: str
) -> list[str]:
    """Where the target's names are :func:`branchless`, the host's other installed packages of the driver's
    ``families`` under branchless names that carry another driver version (``libnvidia-gl`` at 590.44.01 on
    a move to 590.48.01, ``nvidia-modprobe``): each moves to the target in the same transaction where apt
    offers it there (the caller asks apt; they join the target's optional names) - left alone, apt would
    take the newest branch for any of them the transaction drags. ``installed`` is ``{name: version}``;
    names in ``exclude`` (the target set, what leaves) and names that carry a branch are left out. Sorted."""
    if not branchless(new, version):
        return []
    skip = set(exclude)
    res = []
    for name in match_families(set(installed) - skip, families):
        at = driver_versioned(installed[name])
        if at and at != str(version) and not re.search(r"-\d{3,}(?:-|$)", name):
            res.append(name)
    return res


def off_target(transaction: Iterable[Mapping[str, Any]], families: Iterable[str], version: str) -> list[dict[str, str]]:
    """Packages of the driver's ``families`` that an apt transaction (``apt_output.simulated_transaction``'s
    ``install`` rows: ``name``, ``to``) would install at another driver version than ``version``: apt's
    candidate for a dependency the transaction does not name (the newest branch, where the repository's
    names carry none and no pinning package is active yet). ``[{"name", "to"}]`` in apt's order."""
    pats = list(families)
    res = []
    for row in transaction:
        name = str(row.get("name") or "").split(":", 1)[0]
        at = driver_versioned(row.get("to"))
        if at and at != str(version) and match_families([name], pats):
            res.append({"name": name, "to": str(row.get("to"))})
    return res


def _replaced(
    templates: Iterable[str], installed: Iterable[str], target: Iterable[str], version: str, any_branch: bool
) -> list[str]:
    """Installed names outside ``target`` that one of ``templates`` matches: every match when
    ``any_branch``, else only those whose ``{branch}`` is not ``version``'s. Sorted, unique."""
    tmpls = list(templates)
    branch = _branch(version)
    keep = set(target)
    res = []
    for name in sorted(set(installed) - keep):
        for tmpl in tmpls:
            m = _template_re(tmpl).match(name)
            if m and (any_branch or ("branch" in m.groupdict() and m.group("branch") != branch)):
                res.append(name)
                break
    return res


def buildability(
    flavour: Mapping[str, Any],
    kernels: Iterable[str],
    build_dirs: Mapping[str, bool],
    installed: Iterable[str],
    secure_boot_state: Optional[str],
    mok: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """Whether the driver module can be had for each of ``kernels`` (running and boot), before any cordon.

    DKMS flavours need the kernel's build tree (``/lib/modules/<k>/build``, which ``linux-headers-<k>``
    ships; ``build_dirs`` says whether it resolves) and, with Secure Boot ``enabled``, a DKMS signing key
    (``mok``: ``{"key": path or None, "enrolled": True, False, "pending" or None}``) that is enrolled:
    the kernel refuses an unsigned or unknown-key module ("Key was rejected by service"). Precompiled
    flavours need their per-kernel package offered by apt, which the caller checks with the target set
    (their modules are signed by the distribution). Returns ``{"kernels": {k: {"build_dir", "headers_package",
    "headers_installed"}}, "signing": {...} or None, "kernel_problems": {k: [str]}, "signing_problems":
    [str], "problems": [str]}`` (problems: all); each names the kernel and the package or key.
    """
    names = set(installed)
    res: dict[str, Any] = {
        "kernels": {},
        "signing": None,
        "problems": [],
        "kernel_problems": {},
        "signing_problems": [],
    }
    dkms = flavour.get("build") == "dkms"
    for k in dict.fromkeys(kernels):
        pkg = "linux-headers-%s" % k
        res["kernels"][k] = {
            "build_dir": bool(build_dirs.get(k)),
            "headers_package": pkg,
            "headers_installed": pkg in names,
        }
        res["kernel_problems"][k] = []
        if dkms and not build_dirs.get(k):
            res["kernel_problems"][k].append(
                "kernel %s has no build tree for DKMS (/lib/modules/%s/build): install %s%s"
                % (k, k, pkg, "" if pkg not in names else " again (it is installed but the build link is missing)")
            )
        res["problems"] += res["kernel_problems"][k]
    if dkms and secure_boot_state == "enabled":
        mok = dict(mok or {})
        res["signing"] = {"key": mok.get("key"), "enrolled": mok.get("enrolled")}
        if not mok.get("key"):
            res["signing_problems"].append(
                "Secure Boot is enabled and DKMS has no signing key (%s): the module it builds would be"
                " unsigned and the kernel would refuse to load it" % ", ".join(MOK_KEYS)
            )
        elif mok.get("enrolled") == "pending":
            res["signing_problems"].append(
                "Secure Boot is enabled and DKMS's signing key %s is only queued for enrolment (mokutil"
                " --list-new): confirm it in MokManager at the console first; until then the kernel refuses"
                " the module it builds" % mok["key"]
            )
        elif mok.get("enrolled") is False:
            res["signing_problems"].append(
                "Secure Boot is enabled and DKMS's signing key %s is not enrolled (mokutil --test-key):"
                " the kernel would refuse the module it builds" % mok["key"]
            )
    res["problems"] += res["signing_problems"]
    return res


def _fingerprint_in(fingerprint: str, text: Optional[str]) -> bool:
    want = fingerprint.replace(":", "").lower()
    return want in re.sub(r"[^0-9a-f]", "", (text or "").lower().replace("sha1 fingerprint", ""))


def mok_enrolment(
    fingerprint: Optional[str], enrolled: Optional[str], new: Optional[str], test_key: Optional[str]
) -> Any:
    """Whether DKMS's key (``fingerprint``: SHA-1 of its DER, hex) will be accepted: True (in
    ``mokutil --list-enrolled``), ``"pending"`` (only in ``mokutil --list-new``: imported, not yet
    confirmed in MokManager - ``--test-key`` calls that "already enrolled" too), False (a MOK list that
    was read and lacks it, or ``--test-key`` says ``is not enrolled``), None when mokutil told nothing.
    Texts are the commands' outputs, None when not run."""
    if fingerprint and enrolled and _fingerprint_in(fingerprint, enrolled):
        return True
    if fingerprint and new and _fingerprint_in(fingerprint, new):
        return "pending"
    listed = (enrolled or "").lower()
    if fingerprint and ("sha1 fingerprint" in listed or "is empty" in listed):
        # the MOK list was read and the key is not in it; --test-key's "already enrolled" can also
        # mean db, dbx or MokListX on older mokutil, which does not make DKMS's key trusted
        return False
    return parse_mokutil_test_key(test_key)


def parse_mokutil_test_key(text: Optional[str]) -> Optional[bool]:
    """``mokutil --test-key <der>`` output -> True (``is already enrolled``), False (``is not enrolled``),
    None when it says neither."""
    s = (text or "").lower()
    if "is already enrolled" in s:
        return True
    if "is not enrolled" in s:
        return False
    return None
